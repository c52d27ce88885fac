"""JSON-RPC over Redis Streams (`redis_streams_url`, docs/transports.md): the shared scenario
set with a redis-py requester (XADD a request, XREAD the reply stream) against a real server,
on a redis-server this module starts on a port of its own with a password; the card's URL
without the password; malformed entries; the per-replica limit; and two replica processes
on the same stream, one killed with SIGKILL while it holds a request, the other answering it
once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
import uuid
from typing import Any

import grpc
import pytest
import redis
import redis.asyncio as aioredis

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.parts import StartupError
from service.net.redis_streams import public_url, url_secrets
from tests.conftest import missing_part
from tests.process import ServerProcess, free_port, shows_traceback
from tests.security_util import TOKENS
from tests.transport_scenarios import (
    ALICE,
    CONNECTION_SCENARIOS,
    SCENARIO_SETTINGS,
    V1,
    WAIT,
    FrameClient,
    drain_mid_stream,
    message,
    result,
)

PASSWORD = "s3cret-" + uuid.uuid4().hex[:12]
BINDING = "urn:a2a-service:binding:redis-streams"


def _redis_server(port: int, password: str) -> subprocess.Popen[bytes]:
    """A redis-server on `port` (no persistence, a password), answering when returned."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_part("redis-server NOT FOUND: Redis Streams transport tests NOT RUN")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--requirepass", password],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis.from_url(
        f"redis://:{password}@127.0.0.1:{port}/0", socket_connect_timeout=1
    )
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return proc
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise
                time.sleep(0.05)
    finally:
        client.close()


@pytest.fixture(scope="module")
def redis_url():
    """A redis-server of this module's own (free port, no persistence, a password), killed
    at the end."""
    port = free_port()
    proc = _redis_server(port, PASSWORD)
    try:
        yield f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(10)


def names() -> tuple[str, str]:
    """A request stream and group of one test's own."""
    tag = uuid.uuid4().hex[:10]
    return f"t{tag}:requests", f"g{tag}"


class StreamsClient(FrameClient):
    """A requester: XADD to the request stream, XREAD its own reply stream."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__()
        self.redis = aioredis.Redis.from_url(url)
        self.reading = aioredis.Redis.from_url(url, single_connection_client=True)
        self.stream = stream
        self.reply_stream = f"{stream}:reply:{uuid.uuid4().hex[:8]}"
        self.last: Any = "0-0"
        self.entries: list[dict[bytes, bytes]] = []
        self.correlations: set[bytes] = {b""}
        self.closing = False

    @classmethod
    async def open(cls, url: str, stream: str) -> StreamsClient:
        client = cls(url, stream)
        client.start()
        return client

    async def write(self, raw: bytes) -> None:
        correlation = uuid.uuid4().hex.encode()
        self.correlations.add(correlation)
        fields = {"correlation_id": correlation, "reply_stream": self.reply_stream, "payload": raw}
        await self.redis.xadd(self.stream, fields)  # type: ignore[arg-type]

    async def read(self) -> bytes | None:
        while not self.entries:
            if self.closing:
                return None
            got: Any = await self.reading.xread({self.reply_stream: self.last}, block=200)
            for _name, entries in got or []:
                for entry_id, fields in entries:
                    self.last = entry_id
                    self.entries.append(fields)
        fields = self.entries.pop(0)
        frame = json.loads(fields[b"payload"])
        assert fields[b"final"] == (b"1" if frame["final"] else b"0"), fields
        assert fields[b"correlation_id"] in self.correlations, fields
        assert fields[b"attempt"] == b"1", fields
        return fields[b"payload"]

    async def aclose(self) -> None:
        # Not cancelled in its blocking read (redis-py may swallow that): told to stop.
        self.closing = True
        await self.closed.wait()
        await super().aclose()
        for client in (self.reading, self.redis):
            with contextlib.suppress(Exception):
                await client.aclose()


@pytest.fixture
async def served(start_service, redis_url):
    stream, group = names()
    service = await start_service(
        store="memory:",
        redis_streams_url=redis_url,
        redis_streams_request_stream=stream,
        redis_streams_group=group,
        **SCENARIO_SETTINGS,
    )
    return service, stream


@pytest.mark.parametrize("scenario", CONNECTION_SCENARIOS, ids=lambda s: s.__name__)
async def test_scenario(served, redis_url, scenario):
    _, stream = served
    await scenario(lambda: StreamsClient.open(redis_url, stream))
    # every request answered: acknowledged and deleted, nothing left for anyone
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.xlen(stream) == 0
    finally:
        await client.aclose()


async def test_drain_mid_stream_ends_it_resumably(served, redis_url):
    service, stream = served
    stopping: list[asyncio.Task[None]] = []

    async def begin_drain() -> None:
        stopping.append(asyncio.create_task(service.stop()))

    await drain_mid_stream(lambda: StreamsClient.open(redis_url, stream), begin_drain)
    await stopping[0]
    client = aioredis.Redis.from_url(redis_url)
    try:  # the stream's closing error was its final answer: the request is done
        assert await client.xlen(stream) == 0
        groups = await client.xinfo_groups(stream)
        assert groups[0]["pending"] == 0 and groups[0]["consumers"] == 0  # it left the group
    finally:
        await client.aclose()


async def test_the_card_shows_the_url_without_the_password(start_service, redis_url, caplog):
    stream, group = names()
    with caplog.at_level("INFO"):
        service = await start_service(
            store="memory:",
            redis_streams_url=redis_url,
            redis_streams_request_stream=stream,
            redis_streams_group=group,
        )
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    card = service.cards.public_card()
    [entry] = [i for i in card.supported_interfaces if i.protocol_binding == BINDING]
    assert entry.url == f"redis://127.0.0.1:{port}/0" and entry.protocol_version == "1.0"
    assert PASSWORD not in str(card)
    assert "Redis Streams redis://127.0.0.1" in caplog.text and PASSWORD not in caplog.text


def test_public_url_and_secrets():
    assert public_url("redis://user:pw@h.example:6380/2") == "redis://h.example:6380/2"
    assert public_url("rediss://:pw@h.example/0?password=x&ssl_cert_reqs=none") == (
        "rediss://h.example/0"
    )
    assert public_url("unix://:pw@/run/redis.sock?db=3&password=pw") == (
        "unix:///run/redis.sock?db=3"
    )
    assert url_secrets("redis://u:pw@h/0?password=other") == ["pw", "other"]
    assert url_secrets("redis://h/0") == []


async def test_unreachable_redis_stops_startup_without_the_password(start_service):
    port = free_port()  # nobody listens there
    with pytest.raises(StartupError) as info:
        await start_service(
            store="memory:", redis_streams_url=f"redis://:hidden-pw@127.0.0.1:{port}/0"
        )
    text = str(info.value)
    assert text.startswith("redis_streams_url: ") and f"127.0.0.1:{port}" in text
    assert "hidden-pw" not in text


async def test_malformed_entries(served, redis_url):
    """No reply_stream: removed unanswered (logged); fields missing or a too long
    correlation_id: -32600 on the reply stream; the replica goes on serving."""
    _, stream = served
    client = await StreamsClient.open(redis_url, stream)
    try:
        await client.redis.xadd(stream, {"payload": b"{}"})  # nowhere to answer
        await client.redis.xadd(stream, {"reply_stream": client.reply_stream})
        missing = await client.next(None)
        assert missing["error"]["code"] == -32600 and missing["final"] is True
        assert "correlation_id, reply_stream and payload" in missing["error"]["message"]
        long = {"correlation_id": "c" * 2000, "reply_stream": client.reply_stream, "payload": "{}"}
        await client.redis.xadd(stream, long)  # type: ignore[arg-type]
        refused = await client.next(None)
        assert (
            refused["error"]["code"] == -32600 and "correlation_id" in refused["error"]["message"]
        )
        assert "result" in await client.call("ListTasks", {})
        assert await client.redis.xlen(stream) == 0  # all three gone, and the ListTasks
    finally:
        await client.aclose()


async def test_a_full_replica_reads_no_more(start_service, redis_url):
    """With redis_streams_max_in_flight 2 and two streams open, a third request stays in
    the stream, undelivered, until one of the two ends."""
    stream, group = names()
    service = await start_service(
        store="memory:",
        redis_streams_url=redis_url,
        redis_streams_request_stream=stream,
        redis_streams_group=group,
        redis_streams_max_in_flight=2,
        **SCENARIO_SETTINGS,
    )
    client = await StreamsClient.open(redis_url, stream)
    try:
        hanging = [
            await client.request("SendStreamingMessage", message("hang"), ALICE) for _ in range(2)
        ]
        firsts = [await client.next(rid) for rid in hanging]
        later = await client.request("ListTasks", {}, ALICE)
        await asyncio.sleep(1.5)  # more than one blocking read: it would have been read
        summary = await client.redis.xpending(stream, group)
        assert summary["pending"] == 2 and await client.redis.xlen(stream) == 3
        task_id = result(firsts[0])["task"]["id"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            await a2a_pb2_grpc.A2AServiceStub(channel).CancelTask(
                pb.CancelTaskRequest(id=task_id),
                metadata=(("authorization", f"Bearer {TOKENS['alice']}"), ("a2a-version", "1.0")),
            )
        [answer] = await client.frames(later)
        assert "result" in answer
    finally:
        await client.aclose()


def _replica(redis_url: str, stream: str, group: str, data_dir: str) -> ServerProcess:
    return ServerProcess(
        env={
            "A2A_STORE": "memory:",
            "A2A_DATA_DIR": data_dir,
            "A2A_AGENT": "tests.file_gate_agent:FileGateAgent",
            "A2A_REDIS_STREAMS_URL": redis_url,
            "A2A_REDIS_STREAMS_REQUEST_STREAM": stream,
            "A2A_REDIS_STREAMS_GROUP": group,
            "A2A_REDIS_STREAMS_RECLAIM_SECONDS": "1",
        }
    ).start()


async def _finals(client: aioredis.Redis, reply_stream: str) -> list[dict[bytes, bytes]]:
    entries = await client.xrange(reply_stream)
    return [fields for _id, fields in entries if fields[b"final"] == b"1"]


async def test_a_killed_replicas_request_is_answered_once_by_another(redis_url, tmp_path):
    """Two replicas on one stream; the one holding the request (its agent waits for a
    file) is killed with SIGKILL; the other takes the request over and answers it, once,
    with attempt 2."""
    stream, group = names()
    gate = tmp_path / "gate"
    gate.mkdir()
    replicas = [
        _replica(redis_url, stream, group, str(tmp_path / "a")),
        _replica(redis_url, stream, group, str(tmp_path / "b")),
    ]
    client = aioredis.Redis.from_url(redis_url)
    reply_stream = f"{stream}:reply"
    try:
        doc = {
            "jsonrpc": "2.0",
            "id": "gated",
            "method": "SendMessage",
            "params": message(f"gate {gate}"),
            "serviceParameters": V1,
        }
        fields = {"correlation_id": "c-1", "reply_stream": reply_stream, "payload": json.dumps(doc)}
        await client.xadd(stream, fields)  # type: ignore[arg-type]
        started = await _wait_for(lambda: sorted(gate.glob("started-*")))
        holder_pid = int(started[0].name.split("-")[1])
        [holder] = [r for r in replicas if r.proc is not None and r.proc.pid == holder_pid]
        [survivor] = [r for r in replicas if r is not holder]
        holder.kill9()
        (gate / "release").write_text("")
        finals = await _wait_for_async(lambda: _finals(client, reply_stream))
        assert survivor.proc is not None
        assert (gate / f"started-{survivor.proc.pid}").exists()
        [final] = finals
        assert final[b"correlation_id"] == b"c-1" and final[b"attempt"] == b"2"
        answer = json.loads(final[b"payload"])
        assert answer["id"] == "gated" and answer["final"] is True
        state = answer["result"]["task"]["status"]["state"]
        assert state == "TASK_STATE_COMPLETED", answer
        await asyncio.sleep(3)  # three reclaim times: nobody answers it again
        assert len(await _finals(client, reply_stream)) == 1
        assert await client.xlen(stream) == 0
        assert (await client.xpending(stream, group))["pending"] == 0
        assert survivor.stop() == 0
        output = survivor.rest_of_output()
        assert "took over request" in output and not shows_traceback(output)
        assert PASSWORD not in output
    finally:
        for replica in replicas:
            replica.stop()
        await client.delete(stream, reply_stream)
        await client.aclose()


async def _wait_for(probe: Any) -> Any:
    deadline = time.monotonic() + WAIT
    while not (found := probe()):
        assert time.monotonic() < deadline, "waited in vain"
        await asyncio.sleep(0.05)
    return found


async def _wait_for_async(probe: Any) -> Any:
    deadline = time.monotonic() + WAIT
    while not (found := await probe()):
        assert time.monotonic() < deadline, "waited in vain"
        await asyncio.sleep(0.05)
    return found


async def test_requests_left_by_a_dead_consumer_are_taken_over(start_service, redis_url):
    """Requests a consumer read and never answered (a replica gone) are taken over after
    redis_streams_reclaim_seconds and answered once with their attempt; one delivered too
    often already gets an error instead of another run."""
    stream, group = names()
    reply_stream = f"{stream}:reply"
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
        for n in (1, 2):
            doc = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": message("hi")}
            fields = {
                "correlation_id": f"c{n}",
                "reply_stream": reply_stream,
                "payload": json.dumps(doc),
            }
            await client.xadd(stream, fields)  # type: ignore[arg-type]
        read: Any = await client.xreadgroup(group, "gone", {stream: ">"}, count=2)
        second = read[0][1][1][0]
        # the second was taken up five times already by replicas that died
        await client.xclaim(stream, group, "gone", 0, [second], retrycount=5)
        await start_service(
            store="memory:",
            redis_streams_url=redis_url,
            redis_streams_request_stream=stream,
            redis_streams_group=group,
            redis_streams_reclaim_seconds=0.5,
        )
        answers: list[dict[bytes, bytes]] = []
        deadline = time.monotonic() + WAIT
        while len(answers) < 2 and time.monotonic() < deadline:
            got: Any = await client.xread({reply_stream: b"0-0"}, block=500)
            answers = [fields for _id, fields in got[0][1]] if got else []
        by_id = {a[b"correlation_id"]: a for a in answers}
        assert set(by_id) == {b"c1", b"c2"}, answers
        assert by_id[b"c1"][b"attempt"] == b"2" and by_id[b"c2"][b"attempt"] == b"6"
        done = json.loads(by_id[b"c1"][b"payload"])
        assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        refused = json.loads(by_id[b"c2"][b"payload"])["error"]
        assert refused["code"] == -32603 and "not tried again" in refused["message"]
        assert await client.xlen(stream) == 0
        assert (await client.xpending(stream, group))["pending"] == 0
    finally:
        await client.delete(stream, reply_stream)
        await client.aclose()


async def test_redis_away_and_back(start_service):
    """Redis restarts (empty: no persistence): the replica logs, makes its group again and
    answers the next request."""
    port = free_port()
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    proc = _redis_server(port, PASSWORD)
    try:
        stream, group = names()
        await start_service(
            store="memory:",
            redis_streams_url=url,
            redis_streams_request_stream=stream,
            redis_streams_group=group,
        )
        client = await StreamsClient.open(url, stream)
        try:
            assert "result" in await client.call("ListTasks", {}, V1)
        finally:
            await client.aclose()
        proc.kill()
        proc.wait(10)
        await asyncio.sleep(1.5)  # the replica's reads fail meanwhile
        proc = _redis_server(port, PASSWORD)
        client = await StreamsClient.open(url, stream)
        try:
            answer = await client.call("SendMessage", message("hello"), V1)
            assert result(answer)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        finally:
            await client.aclose()
    finally:
        proc.kill()
        proc.wait(10)
