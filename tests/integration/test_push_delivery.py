"""Push delivery end to end: a real service, a real HTTP receiver on loopback (allowed by
the operator allowlist), every task event POSTed in order with the right headers,
retries, dead letters and their replay through the CLI, capability off, secrets at rest."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time

import grpc
import pytest
from cryptography.fernet import Fernet
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.store import Scope
from tests.conftest import ROOT, user_message
from tests.grpc_util import expect_error
from tests.push_util import Receiver, delete_prefix, eventually, redis_or_skip, unique_prefix

FAST_RETRY = dict(push_retry_base_seconds=0.05, push_retry_max_seconds=0.2)


@pytest.fixture
async def receiver():
    r = await Receiver().start()
    yield r
    await r.stop()


@pytest.fixture(params=["local-file", "redis-streams"])
async def queue_settings(request):
    if request.param == "local-file":
        yield {"push_queue": "local-file"}
        return
    url = await redis_or_skip()
    prefix = unique_prefix()
    yield {"push_queue": "redis-streams", "push_redis_url": url, "push_redis_prefix": prefix}
    await delete_prefix(prefix)


def as_pushed(event) -> dict:
    """A gRPC stream event as its push notification's body: without the number the gRPC
    binding adds to each event (metadata a2a_service.eventId; push carries it in the
    Idempotency-Key instead)."""
    body = json_format.MessageToDict(event)
    for payload in body.values():
        meta = payload.get("metadata", {})
        meta.get("a2a_service", {}).pop("eventId", None)
        if meta.get("a2a_service") == {}:
            del meta["a2a_service"]
        if "metadata" in payload and not meta:
            del payload["metadata"]
    return body


async def serve(start_service, **overrides):
    settings = dict(
        agent="tests.agents:ScriptedAgent", push_allow_networks=["127.0.0.0/8"], **FAST_RETRY
    )
    settings.update(overrides)
    service = await start_service(**settings)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return service, channel, a2a_pb2_grpc.A2AServiceStub(channel)


def with_push(text: str, url: str, **config) -> pb.SendMessageRequest:
    request = pb.SendMessageRequest(message=user_message(text))
    request.configuration.task_push_notification_config.CopyFrom(
        pb.TaskPushNotificationConfig(url=url, **config)
    )
    return request


async def test_every_event_of_a_streaming_task_arrives_in_order_with_headers(
    start_service, receiver, queue_settings
):
    service, channel, stub = await serve(start_service, **queue_settings)
    async with channel:
        request = with_push(
            "chunks 4",
            receiver.url,
            id="cfg-1",
            token="notify-tok",
            authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
        )
        streamed = [e async for e in stub.SendStreamingMessage(request)]
        task_id = streamed[0].task.id
        await eventually(lambda: len(receiver.requests) >= len(streamed), what="all notifications")
        await asyncio.sleep(0.2)  # nothing more arrives
    assert [r.body for r in receiver.requests] == [as_pushed(e) for e in streamed]
    assert [next(iter(r.body)) for r in receiver.requests][:2] == ["task", "statusUpdate"]
    assert receiver.requests[-1].body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for seq, got in enumerate(receiver.requests, start=1):
        assert got.path == "/hook"
        assert got.headers["authorization"] == "Bearer s3cret"
        assert got.headers["x-a2a-notification-token"] == "notify-tok"
        assert got.headers["idempotency-key"] == f"{task_id}/{seq}/cfg-1"
        assert got.headers["content-type"] == "application/json"


async def test_503_for_a_while_then_everything_arrives_once(
    start_service, receiver, queue_settings
):
    answers = iter([503] * 6)
    receiver.respond = lambda r: (next(answers, 200), {})
    service, channel, stub = await serve(start_service, **queue_settings)
    async with channel:
        streamed = [
            e async for e in stub.SendStreamingMessage(with_push("slow 4", receiver.url, id="c"))
        ]
        await eventually(
            lambda: len(receiver.accepted()) == len(streamed), what="every event accepted"
        )
        await asyncio.sleep(0.3)
    assert [r.body for r in receiver.accepted()] == [as_pushed(e) for e in streamed]
    ok = collections.Counter(
        r.headers["idempotency-key"] for r in receiver.requests if r.status == 200
    )
    assert set(ok.values()) == {1}  # without a crash, no notification is accepted twice
    assert sum(r.status == 503 for r in receiver.requests) == 6
    # in order: every request for seq N+1 comes after the accepted request for seq N
    seqs = [int(r.headers["idempotency-key"].split("/")[1]) for r in receiver.requests]
    assert seqs == sorted(seqs)


async def test_retry_after_is_honoured(start_service, receiver):
    answers = iter([(429, {"Retry-After": "1"})])
    receiver.respond = lambda r: next(answers, (200, {}))
    service, channel, stub = await serve(start_service)
    async with channel:
        await stub.SendMessage(with_push("reply-less echo", receiver.url))
        await eventually(lambda: len(receiver.accepted()) >= 1, what="delivery after Retry-After")
    first, second = receiver.requests[:2]
    assert second.at - first.at >= 0.95


async def test_dead_letters_are_listed_and_replayed_with_the_cli(start_service, receiver, tmp_path):
    failing = True
    receiver.respond = lambda r: (500, {}) if failing else (200, {})
    service, channel, stub = await serve(start_service, push_max_attempts=3)
    async with channel:
        task = (await stub.SendMessage(with_push("echo hi", receiver.url, id="doomed"))).task
        events = await service.store.last_seq(Scope(), task.id)
        await eventually(lambda: dead_count(service, events), what="dead letters")
        dead = await dead_list(tmp_path)
        assert len(dead) == events
        assert {d["taskId"] for d in dead} == {task.id} and {d["configId"] for d in dead} == {
            "doomed"
        }
        assert all(d["attempts"] == 3 and "HTTP 500" in d["error"] for d in dead)
        assert len(receiver.requests) == 3 * events
        failing = False
        code, out = await cli(tmp_path, "replay", dead[0]["id"])
        assert code == 0 and "replayed 1" in out
        await eventually(lambda: len(receiver.accepted()) == 1, what="the replayed job")
        assert len(await dead_list(tmp_path)) == events - 1
        code, out = await cli(tmp_path, "replay", "--all")
        assert code == 0
        await eventually(lambda: len(receiver.accepted()) == events, what="every replayed job")
        assert await dead_list(tmp_path) == []
        assert (await cli(tmp_path, "replay", "nope"))[0] == 1
    assert sorted(
        int(r.headers["idempotency-key"].split("/")[1]) for r in receiver.accepted()
    ) == list(range(1, events + 1))


async def test_client_errors_and_redirects_are_dead_at_once(start_service, receiver, tmp_path):
    target = await Receiver().start()
    receiver.respond = lambda r: (
        (302, {"Location": target.url}) if r.path == "/redirect" else (404, {})
    )
    try:
        service, channel, stub = await serve(start_service)
        async with channel:
            one = (
                await stub.SendMessage(
                    with_push("echo", receiver.url.replace("/hook", "/redirect"), id="r")
                )
            ).task
            two = (await stub.SendMessage(with_push("echo", receiver.url, id="n"))).task
            events = sum([await service.store.last_seq(Scope(), t.id) for t in (one, two)])
            await eventually(lambda: dead_count(service, events), what="dead letters")
        dead = [d for d in await dead_list(tmp_path)]
        assert {d["attempts"] for d in dead} == {0}  # never retried
        assert all("redirects are not followed" in d["error"] for d in dead if d["configId"] == "r")
        assert all(d["error"] == "HTTP 404" for d in dead if d["configId"] == "n")
        assert len(receiver.requests) == events
        assert target.requests == []  # the redirect was not followed
    finally:
        await target.stop()


async def test_slow_receiver_never_delays_others(start_service, receiver):
    slow = await Receiver(delay=1.5, host="127.0.0.2").start()
    slow_url = slow.url
    try:
        service, channel, stub = await serve(
            start_service, push_timeout_seconds=5.0, push_concurrency=3, push_host_concurrency=2
        )
        async with channel:
            for _ in range(3):
                await stub.SendMessage(with_push("slow 3", slow_url))
            t0 = time.monotonic()
            fast = [e async for e in stub.SendStreamingMessage(with_push("chunks 3", receiver.url))]
            await eventually(
                lambda: len(receiver.requests) == len(fast), seconds=5, what="fast receiver"
            )
            took = time.monotonic() - t0
            assert took < 1.5, took  # not queued behind the slow receiver's deliveries
            assert len(slow.requests) < 3 * 5  # the slow receiver still has work
    finally:
        await slow.stop()


async def test_create_on_a_running_task_gets_later_events_and_delete_stops_them(
    start_service, receiver
):
    service, channel, stub = await serve(start_service)
    async with channel:
        request = pb.SendMessageRequest(message=user_message("input first"))
        task = (await stub.SendMessage(request)).task
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        before = await service.store.last_seq(Scope(), task.id)
        await stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(task_id=task.id, id="late", url=receiver.url)
        )
        await asyncio.sleep(0.2)
        assert receiver.requests == []  # nothing from before the config
        follow = pb.SendMessageRequest(message=user_message("answer", task_id=task.id))
        done = (await stub.SendMessage(follow)).task
        assert done.status.state == pb.TASK_STATE_COMPLETED
        last = await service.store.last_seq(Scope(), task.id)
        await eventually(
            lambda: len(receiver.requests) == last - before, what="the follow-up's events"
        )
        seqs = [int(r.headers["idempotency-key"].split("/")[1]) for r in receiver.requests]
        assert seqs == list(range(before + 1, last + 1))

        other = (
            await stub.SendMessage(pb.SendMessageRequest(message=user_message("input again")))
        ).task
        await stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(task_id=other.id, id="gone", url=receiver.url)
        )
        await stub.DeleteTaskPushNotificationConfig(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=other.id, id="gone")
        )
        await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("answer", task_id=other.id))
        )
        await asyncio.sleep(0.5)
        assert all(r.headers["idempotency-key"].split("/")[0] == task.id for r in receiver.requests)


async def test_capability_off_refuses_every_push_operation(start_service):
    service, channel, stub = await serve(start_service, push_notifications=False)
    assert service.push is None
    not_supported = (grpc.StatusCode.FAILED_PRECONDITION, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    async with channel:
        task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo hi")))).task
        url = "https://public.example.com/hook"
        await expect_error(
            stub.CreateTaskPushNotificationConfig(
                pb.TaskPushNotificationConfig(task_id=task.id, url=url)
            ),
            *not_supported,
        )
        await expect_error(
            stub.GetTaskPushNotificationConfig(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="x")
            ),
            *not_supported,
        )
        await expect_error(
            stub.ListTaskPushNotificationConfigs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
            ),
            *not_supported,
        )
        await expect_error(
            stub.DeleteTaskPushNotificationConfig(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="x")
            ),
            *not_supported,
        )
        await expect_error(
            stub.CreateTaskPushNotificationConfig(pb.TaskPushNotificationConfig()), *not_supported
        )
        await expect_error(stub.SendMessage(with_push("echo hi", url)), *not_supported)

        async def stream():
            return [e async for e in stub.SendStreamingMessage(with_push("echo hi", url))]

        await expect_error(stream(), *not_supported)
        assert (await stub.ListTasks(pb.ListTasksRequest())).total_size == 1  # nothing started


async def test_secrets_are_sealed_at_rest_and_keys_rotate(start_service, tmp_path):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    db = tmp_path / "push.db"
    service, channel, stub = await serve(
        start_service, store=f"sqlite:{db}", push_secret_keys=[old]
    )
    async with channel:
        task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo hi")))).task
        created = await stub.CreateTaskPushNotificationConfig(
            pb.TaskPushNotificationConfig(
                task_id=task.id,
                id="c",
                url="https://public.example.com/hook",
                token="TOKEN-PLAIN-123",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="CRED-PLAIN-456"),
            )
        )
        assert created.token == "TOKEN-PLAIN-123"
        got = await stub.GetTaskPushNotificationConfig(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c")
        )
        assert got.token == "TOKEN-PLAIN-123" and got.authentication.credentials == "CRED-PLAIN-456"
        listed = await stub.ListTaskPushNotificationConfigs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert listed.configs[0].token == "TOKEN-PLAIN-123"
        await expect_error(
            stub.GetTaskPushNotificationConfig(  # another tenant sees nothing
                pb.GetTaskPushNotificationConfigRequest(tenant="other", task_id=task.id, id="c")
            ),
            grpc.StatusCode.NOT_FOUND,
            "TASK_NOT_FOUND",
        )
    await service.stop()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("push.db*"))
    assert b"TOKEN-PLAIN-123" not in raw and b"CRED-PLAIN-456" not in raw
    assert b"fernet:" in raw

    rotated, channel, stub = await serve(
        start_service, store=f"sqlite:{db}", push_secret_keys=[new, old]
    )
    async with channel:
        got = await stub.GetTaskPushNotificationConfig(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c")
        )
        assert got.token == "TOKEN-PLAIN-123"
    await rotated.stop()

    lost, channel, stub = await serve(start_service, store=f"sqlite:{db}", push_secret_keys=[new])
    async with channel:
        await expect_error(
            stub.GetTaskPushNotificationConfig(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c")
            ),
            grpc.StatusCode.INTERNAL,
            "INTERNAL_ERROR",
        )


async def test_a_generated_key_file_is_used_when_no_key_is_configured(start_service, tmp_path):
    service, channel, _ = await serve(start_service)
    await channel.close()
    key_file = tmp_path / "data" / "push-secret.key"
    assert key_file.exists() and (key_file.stat().st_mode & 0o777) == 0o600


# ---------------------------------------------------------------------------- helpers


async def dead_count(service, n: int) -> bool:
    return len(await service.push.queue.list_dead(1000)) >= n


async def cli(tmp_path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        "push-dead",
        *args,
        "--data-dir",
        str(tmp_path / "data"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert not err or proc.returncode != 0, err.decode()
    return proc.returncode, out.decode() + err.decode()


async def dead_list(tmp_path) -> list[dict]:
    code, out = await cli(tmp_path, "list", "--json")
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines()]
