"""Push delivery across crashes: the server is kill -9'd mid-delivery and restarted on the
same data; every notification still arrives (at least once, in order per task). And the
window between a commit and its enqueue is closed by the cursors."""

from __future__ import annotations

import asyncio
import collections

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.config import Settings
from service.app.server import Service
from tests.conftest import make_settings, user_message
from tests.process import ServerProcess
from tests.push_util import Receiver, delete_prefix, eventually, redis_or_skip, unique_prefix

PUSH_ENV = {
    "A2A_PUSH_NOTIFICATIONS": "true",
    "A2A_PUSH_ALLOW_NETWORKS": "127.0.0.0/8",
    "A2A_PUSH_RETRY_BASE_SECONDS": "0.05",
    "A2A_PUSH_RETRY_MAX_SECONDS": "0.2",
    "A2A_LOG_LEVEL": "WARNING",
}


@pytest.fixture(params=["local-file", "redis-streams"])
async def queue_env(request):
    if request.param == "local-file":
        yield {"A2A_PUSH_QUEUE": "local-file"}
        return
    url = await redis_or_skip()
    prefix = unique_prefix()
    yield {
        "A2A_PUSH_QUEUE": "redis-streams",
        "A2A_PUSH_REDIS_PREFIX": prefix,
        "A2A_PUSH_REDIS_URL": url,
    }
    await delete_prefix(prefix)


def with_push(text: str, url: str) -> pb.SendMessageRequest:
    request = pb.SendMessageRequest(message=user_message(text))
    request.configuration.task_push_notification_config.url = url
    return request


def lanes(receiver: Receiver) -> dict[str, list[int]]:
    """Per task: the sequence numbers of every request, in arrival order."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for r in receiver.requests:
        task_id, seq, _ = r.headers["idempotency-key"].split("/")
        out[task_id].append(int(seq))
    return out


async def test_kill_9_mid_delivery_then_restart_delivers_everything(tmp_path, queue_env):
    receiver = await Receiver(delay=0.03).start()
    args = ("--data-dir", str(tmp_path / "data"), "--agent", "tests.agents:ScriptedAgent")
    env = {**PUSH_ENV, **queue_env}
    first = ServerProcess(*args, env=env).start()
    expected: dict[str, int] = {}
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            for _ in range(4):
                streamed = [
                    e async for e in stub.SendStreamingMessage(with_push("chunks 15", receiver.url))
                ]
                expected[streamed[0].task.id] = len(streamed)
        total = sum(expected.values())
        await eventually(lambda: len(receiver.requests) >= total // 3, what="some deliveries")
    finally:
        first.kill9()
    delivered_before = len(receiver.accepted())
    assert delivered_before < total, (
        "everything was delivered before the crash; the test proves nothing"
    )

    second = ServerProcess(*args, env=env).start()
    try:
        await eventually(
            lambda: len(receiver.accepted()) == total, seconds=30, what="every notification"
        )
        await asyncio.sleep(0.3)
    finally:
        assert second.stop() == 0
        await receiver.stop()
    got = lanes(receiver)
    assert set(got) == set(expected)
    for task_id, seqs in got.items():
        assert sorted(set(seqs)) == list(range(1, expected[task_id] + 1))
        assert replayed_once_in_order(seqs), seqs


def replayed_once_in_order(seqs: list[int]) -> bool:
    """A lane's deliveries across one crash: in order up to the crash (1..k), then in order
    again from the first job whose acknowledgement was not yet on disk (j..n, j <= k + 1).
    An acknowledgement's file removal is not awaited (the lane moves on at once), so under
    load more than the one job in flight can come twice — never out of order within a
    run, and never a replay from further back than the oldest unacknowledged job."""
    cut = next((i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1]), len(seqs))
    before, after = seqs[:cut], seqs[cut:]
    in_order = before == list(range(1, len(before) + 1))
    if not after:
        return in_order
    return (
        in_order
        and after == list(range(after[0], after[0] + len(after)))
        and after[0] <= len(before) + 1
    )


async def test_events_committed_but_never_enqueued_are_found_at_restart(tmp_path, queue_env):
    """The crash window between commit and enqueue: the dispatcher never ran for these
    commits, yet the restarted service finds them from the cursors and the store."""
    receiver = await Receiver().start()
    settings = {k[len("A2A_") :].lower(): v for k, v in queue_env.items()}
    base = make_settings(
        tmp_path,
        agent="tests.agents:ScriptedAgent",
        push_allow_networks=["127.0.0.0/8"],
        push_retry_base_seconds=0.05,
        push_retry_max_seconds=0.2,
        **settings,
    )
    service = Service(base)
    await service.start()
    service.push.dispatcher.poke = lambda *a, **k: (
        None
    )  # the process "dies" right after each commit
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            streamed = [
                e async for e in stub.SendStreamingMessage(with_push("chunks 5", receiver.url))
            ]
        await asyncio.sleep(0.3)
        assert receiver.requests == []
    finally:
        await service.stop()

    again = Service(Settings(**vars(base)))
    await again.start()
    try:
        await eventually(
            lambda: len(receiver.accepted()) == len(streamed), what="the missed events"
        )
    finally:
        await again.stop()
        await receiver.stop()
    assert [sorted(s) for s in lanes(receiver).values()] == [list(range(1, len(streamed) + 1))]
