"""Several server processes behaving as one: real `python -m service serve` processes on
loopback sharing a fresh PostgreSQL database (the machine's server) and a Redis server this
test starts on its own port, driven through different processes with the a2a-sdk client
(gRPC) and httpx (SSE with Last-Event-ID)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
import weakref

import grpc
import httpx
import pytest
import redis.asyncio
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as sdk
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.engine.registry import RESTART_MESSAGE
from tests.conftest import user_message
from tests.pg_util import create_database, cut_access, drop_database, restore_access
from tests.process import ServerProcess, children_of, free_port, is_ready_line, run_serve
from tests.redis_util import OwnRedis

V1 = {"A2A-Version": "1.0"}
LEASE_SECONDS = 2  # short, so a killed process's tasks are recovered quickly here


class Replica(ServerProcess):
    """A server process with its HTTP gateway on. Its output is read as it comes by the
    base class's one reader thread (a second reader of the same pipe would race it and
    could lose or split lines)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.http_port = free_port()
        super().__init__("--http-port", str(self.http_port), *args, env=env)
        self.base = f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 60.0) -> Replica:
        super().start(timeout)
        return self

    def output_so_far(self) -> str:
        return "".join(self.output)


@pytest.fixture
async def cluster(tmp_path):
    """Factory: `await cluster.start()` -> a new replica on the shared database and Redis."""
    url, name = await create_database()
    redis_server = OwnRedis(str(tmp_path / "redis")).start()
    replicas: list[Replica] = []

    class Cluster:
        database = name
        store_url = url
        redis = redis_server

        async def start(self, *extra: str) -> Replica:
            replica = Replica(
                *extra,
                "--store",
                url,
                "--bus",
                redis_server.url,
                "--agent",
                "tests.agents:ScriptedAgent",
                "--data-dir",
                str(tmp_path / f"replica-{len(replicas)}"),
                env={"A2A_LEASE_SECONDS": str(LEASE_SECONDS)},
            )
            replicas.append(replica)
            return await asyncio.to_thread(replica.start)

    try:
        yield Cluster()
    finally:
        for replica in replicas:
            await asyncio.to_thread(replica.stop)
        redis_server.stop()
        await drop_database(name)


class Sdk:
    """The a2a-sdk client of one replica, built from the card that replica serves."""

    def __init__(self, card: sdk.AgentCard, channels: list[grpc.aio.Channel]) -> None:
        def factory(url: str) -> grpc.aio.Channel:
            channels.append(grpc.aio.insecure_channel(url))
            return channels[-1]

        def make(streaming: bool):
            config = ClientConfig(
                streaming=streaming,
                supported_protocol_bindings=["GRPC"],
                grpc_channel_factory=factory,
            )
            return ClientFactory(config).create(card)

        self.unary = make(False)
        self.streaming = make(True)


@pytest.fixture
async def sdk_for():
    channels: list[grpc.aio.Channel] = []

    async def build(replica: Replica) -> Sdk:
        async with httpx.AsyncClient(base_url=replica.base) as http:
            doc = (await http.get("/.well-known/agent-card.json")).json()
        card = json_format.ParseDict(doc, sdk.AgentCard(), ignore_unknown_fields=True)
        return Sdk(card, channels)

    yield build
    for channel in channels:
        await channel.close()


def send(text: str, *, immediately: bool = False, task_id: str = "") -> sdk.SendMessageRequest:
    message = user_message(text)
    if task_id:
        message.task_id = task_id
    request = sdk.SendMessageRequest()
    request.message.ParseFromString(message.SerializeToString())
    if immediately:
        request.configuration.return_immediately = True
    return request


async def one(iterator):
    return [e async for e in iterator][-1]


_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def _sse(response: httpx.Response, limit: int | None = None) -> list[tuple[int, dict]]:
    """(id, data) of each SSE event, until `limit` or the end of the stream (one line
    iterator per response, so a stream can be read in parts)."""
    lines = _readers.setdefault(response, response.aiter_lines())
    out: list[tuple[int, dict]] = []
    fields: dict[str, str] = {}
    async for line in lines:
        if line.startswith(":"):
            continue
        if line == "":
            if fields:
                out.append((int(fields.get("id") or 0), json.loads(fields["data"])))
                fields = {}
                if limit is not None and len(out) >= limit:
                    break
            continue
        key, _, value = line.partition(":")
        fields[key] = value[1:] if value.startswith(" ") else value
    return out


def _message(text: str) -> dict:
    return {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    }


async def _wait_for(check, what: str, within: float = 60.0, detail=lambda: ""):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, f"timed out waiting for {what}\n{detail()}"
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------ tests


async def test_any_process_answers_any_request(cluster, sdk_for):
    a, b, c = [await cluster.start() for _ in range(3)]
    on_a, on_b, on_c = [await sdk_for(r) for r in (a, b, c)]
    done = (await one(on_a.unary.send_message(send("echo from a")))).task
    assert done.status.state == sdk.TASK_STATE_COMPLETED
    got = await on_b.unary.get_task(sdk.GetTaskRequest(id=done.id))
    assert got.artifacts[0].parts[0].text == "echo from a"
    other = (await one(on_c.unary.send_message(send("echo from c")))).task
    # ListTasks: the same answer everywhere, and a page token made by one replica works on
    # another (the token key is shared through the store).
    first = await on_b.unary.list_tasks(sdk.ListTasksRequest(page_size=1))
    assert first.total_size == 2 and first.next_page_token
    rest = await on_c.unary.list_tasks(
        sdk.ListTasksRequest(page_size=1, page_token=first.next_page_token)
    )
    assert [first.tasks[0].id, rest.tasks[0].id] == [other.id, done.id]  # newest first
    assert not rest.next_page_token
    # Push configs written through one replica are read through another.
    config = sdk.TaskPushNotificationConfig(task_id=done.id, id="cfg", url="https://example.com/h")
    # (push is off in these replicas: the call is refused the same way on every one)
    for client in (on_a, on_b):
        with pytest.raises(Exception) as info:
            await client.unary.create_task_push_notification_config(config)
        assert "push" in str(info.value).lower()


async def test_a_follow_up_while_working_is_refused_on_another_process(cluster, sdk_for):
    a, b = [await cluster.start() for _ in range(2)]
    on_a, on_b = await sdk_for(a), await sdk_for(b)
    running = await _hanging(on_a, on_b)
    with pytest.raises(Exception) as info:
        await one(on_b.unary.send_message(send("more", task_id=running.id)))
    assert "Task is already working." in str(info.value)
    # Cancel through the other process reaches the agent on A.
    canceled = await on_b.unary.cancel_task(sdk.CancelTaskRequest(id=running.id))
    assert canceled.status.state == sdk.TASK_STATE_CANCELED
    assert (await on_a.unary.get_task(sdk.GetTaskRequest(id=running.id))).status.state == (
        sdk.TASK_STATE_CANCELED
    )


async def _hanging(runner: Sdk, watcher: Sdk) -> sdk.Task:
    """A task that works until canceled, started through `runner`, seen working through
    `watcher`."""
    running = (await one(runner.unary.send_message(send("hang", immediately=True)))).task
    await _wait_for(
        lambda: _state_is(watcher, running.id, sdk.TASK_STATE_WORKING), "the task to be working"
    )
    return running


async def _state_is(client: Sdk, task_id: str, state: int) -> bool:
    return (await client.unary.get_task(sdk.GetTaskRequest(id=task_id))).status.state == state


async def test_the_owner_is_recorded_only_for_turns_that_outlive_their_first_commit(
    cluster, sdk_for
):
    a = await cluster.start()
    on_a = await sdk_for(a)
    client = redis.asyncio.Redis.from_url(cluster.redis.url)
    try:

        async def owner_keys() -> list[bytes]:
            return [k async for k in client.scan_iter(match="*:owner:*")]

        async def evals() -> int:
            return (await client.info("commandstats")).get("cmdstat_eval", {}).get("calls", 0)

        before = await evals()
        for i in range(5):  # over before their first commit: nobody could see them working
            done = (await one(on_a.unary.send_message(send(f"echo {i}")))).task
            assert done.status.state == sdk.TASK_STATE_COMPLETED
        assert await owner_keys() == [] and await evals() == before  # no claim, no release
        running = await _hanging(on_a, on_a)
        keys = await _wait_for(owner_keys, "the working task's owner key")
        assert len(keys) == 1 and running.id in keys[0].decode()
        canceled = await on_a.unary.cancel_task(sdk.CancelTaskRequest(id=running.id))
        assert canceled.status.state == sdk.TASK_STATE_CANCELED

        async def released() -> bool:
            return await owner_keys() == []

        await _wait_for(released, "the owner key to be released")
    finally:
        await client.aclose()


async def test_a_paused_turn_is_resumed_where_it_waits(cluster, sdk_for):
    a, b = [await cluster.start() for _ in range(2)]
    on_a, on_b = await sdk_for(a), await sdk_for(b)
    paused = (await one(on_a.unary.send_message(send("ask your name?")))).task
    assert paused.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    # The answer arrives at B; the agent coroutine paused in ctx.ask() on A continues
    # (a new turn would answer "follow-up: ..." instead).
    done = (await one(on_b.unary.send_message(send("Ada", task_id=paused.id)))).task
    assert done.status.state == sdk.TASK_STATE_COMPLETED
    assert done.artifacts[-1].parts[0].text == "you said: Ada"
    # The same through a stream on B.
    again = (await one(on_a.unary.send_message(send("ask colour?")))).task
    events = [e async for e in on_b.streaming.send_message(send("blue", task_id=again.id))]
    assert events[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED
    texts = [
        e.artifact_update.artifact.parts[0].text for e in events if e.HasField("artifact_update")
    ]
    assert texts == ["you said: blue"]


async def test_a_subscription_on_another_process_lives_through_a_pause(cluster):
    """SubscribeToTask on B of a task paused on A (both kinds of pause) hears the follow-up
    that A (or C) resumes, and ends only at the terminal state, ids contiguous."""
    a, b, c = [await cluster.start() for _ in range(3)]
    async with (
        httpx.AsyncClient(base_url=a.base, timeout=60) as on_a,
        httpx.AsyncClient(base_url=b.base, timeout=60) as on_b,
        httpx.AsyncClient(base_url=c.base, timeout=60) as on_c,
    ):
        for text, answer_via in (("input more please", on_a), ("ask your name?", on_c)):
            sent = await on_a.post("/message:send", json=_message(text), headers=V1)
            task = sent.json()["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
            async with on_b.stream("POST", f"/tasks/{task['id']}:subscribe", headers=V1) as stream:
                first = await _sse(stream, limit=1)
                assert first[0][1]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
                follow = _message("Ada")
                follow["message"]["taskId"] = task["id"]
                answered = await answer_via.post("/message:send", json=follow, headers=V1)
                assert answered.status_code == 200, answered.text
                rest = await _sse(stream)
            states = [d["statusUpdate"]["status"]["state"] for _, d in rest if "statusUpdate" in d]
            assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"
            ids = [first[0][0]] + [i for i, _ in rest]
            assert ids == list(range(ids[0], ids[0] + len(ids))), ids  # no gap, no repeat


async def test_events_and_resume_across_three_processes(cluster):
    a, b, c = [await cluster.start() for _ in range(3)]
    async with httpx.AsyncClient(base_url=a.base, timeout=60) as on_a:
        async with on_a.stream(
            "POST", "/message:stream", json=_message("slow 30"), headers=V1
        ) as r:
            head = await _sse(r, limit=2)
            task_id = head[0][1]["task"]["id"]
            # B follows the task A runs, from the last event seen on A; C takes over from B.
            async with httpx.AsyncClient(base_url=b.base, timeout=60) as on_b:
                async with on_b.stream(
                    "GET",
                    f"/tasks/{task_id}:subscribe",
                    headers=V1 | {"Last-Event-ID": str(head[-1][0])},
                ) as rb:
                    b_now, *middle = await _sse(rb, limit=6)
            async with httpx.AsyncClient(base_url=c.base, timeout=60) as on_c:
                async with on_c.stream(
                    "GET",
                    f"/tasks/{task_id}:subscribe",
                    headers=V1 | {"Last-Event-ID": str(middle[-1][0])},
                ) as rc:
                    c_now, *tail = await _sse(rc)
            rest_on_a = await _sse(r)
    # Each resumed stream starts with the task as it is, numbered with the last event it
    # includes: never before the resume point.
    for (now_id, now), after in ((b_now, head[-1][0]), (c_now, middle[-1][0])):
        assert now["task"]["id"] == task_id and now_id >= after
    on_a_all = head + rest_on_a
    elsewhere = head + middle + tail
    # The same events, in the same order, with the same ids; no gap, no duplicate.
    assert [i for i, _ in elsewhere] == list(range(1, len(elsewhere) + 1))
    assert elsewhere == on_a_all
    assert tail[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _event_id(event: pb.StreamResponse) -> int:
    """The number a gRPC event carries (`a2a_service.eventId` in its payload's metadata)."""
    payload = getattr(event, event.WhichOneof("payload"))
    return int(payload.metadata.fields["a2a_service"].struct_value.fields["eventId"].string_value)


async def test_grpc_resume_with_last_event_id_on_another_process(cluster):
    """A gRPC stream broken off on A resumes on B (metadata last-event-id): the task as it
    is now first, then every event after the resume point from the shared store and bus,
    with no gap and no duplicate; once more on C after the task finished."""
    a, b, c = [await cluster.start() for _ in range(3)]
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{a.grpc_port}") as to_a,
        grpc.aio.insecure_channel(f"127.0.0.1:{b.grpc_port}") as to_b,
        grpc.aio.insecure_channel(f"127.0.0.1:{c.grpc_port}") as to_c,
    ):
        on_a = a2a_pb2_grpc.A2AServiceStub(to_a)
        streamed = on_a.SendStreamingMessage(pb.SendMessageRequest(message=user_message("slow 20")))
        head = [await asyncio.wait_for(streamed.read(), 30) for _ in range(3)]
        streamed.cancel()  # the client loses A
        task_id = head[0].task.id
        last_seen = _event_id(head[-1])
        request = pb.SubscribeToTaskRequest(id=task_id)
        resumed = a2a_pb2_grpc.A2AServiceStub(to_b).SubscribeToTask(
            request, metadata=(("last-event-id", str(last_seen)),)
        )
        now, *rest = await asyncio.wait_for(_all(resumed), 60)
        assert now.task.id == task_id and _event_id(now) >= last_seen
        ids = [_event_id(e) for e in head + rest]
        assert ids == list(range(1, ids[-1] + 1)), ids  # no gap, no duplicate
        assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
        # Finished: C replays the same events from the store after the final task.
        again = a2a_pb2_grpc.A2AServiceStub(to_c).SubscribeToTask(
            request, metadata=(("last-event-id", str(last_seen)),)
        )
        final, *replayed = await asyncio.wait_for(_all(again), 60)
        assert final.task.status.state == pb.TASK_STATE_COMPLETED and _event_id(final) == ids[-1]
        assert replayed == rest


async def _all(call) -> list:
    return [event async for event in call]


async def test_a_killed_process_s_tasks_are_recovered_by_a_survivor(cluster, sdk_for):
    a, b = [await cluster.start() for _ in range(2)]
    on_a, on_b = await sdk_for(a), await sdk_for(b)
    running = await _hanging(on_a, on_b)
    a.kill9()
    # Within about 1.25 leases (polled, not timed): FAILED with the restart message.
    task = await _wait_for(
        lambda: _failed(on_b, running.id), "the survivor to recover the task", within=60
    )
    assert task.status.message.parts[0].text == RESTART_MESSAGE
    # And the task takes a follow-up on the survivor like any failed one: refused.
    with pytest.raises(Exception, match="accepts no more messages"):
        await one(on_b.unary.send_message(send("again", task_id=running.id)))


async def _failed(client: Sdk, task_id: str) -> sdk.Task | None:
    task = await client.unary.get_task(sdk.GetTaskRequest(id=task_id))
    return task if task.status.state == sdk.TASK_STATE_FAILED else None


async def test_a_redis_restart_mid_stream_loses_nothing(cluster):
    a, b = [await cluster.start() for _ in range(2)]
    async with httpx.AsyncClient(base_url=a.base, timeout=60) as on_a:
        r = await on_a.post(
            "/message:send",
            json=_message("slow 60") | {"configuration": {"returnImmediately": True}},
            headers=V1,
        )
        task_id = r.json()["task"]["id"]
    async with httpx.AsyncClient(base_url=b.base, timeout=90) as on_b:
        async with on_b.stream(
            "GET", f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": "1"}
        ) as rb:
            now, *got = await _sse(rb, limit=4)
            assert now[1]["task"]["id"] == task_id  # the task as it is, then events after 1
            await asyncio.to_thread(cluster.redis.stop)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(cluster.redis.start)  # the same port
            got += await _sse(rb)
    assert [i for i, _ in got] == list(range(2, 2 + len(got))), [i for i, _ in got]
    assert got[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_postgresql_outage_is_unavailable_then_heals(cluster, sdk_for):
    a = await cluster.start()
    on_a = await sdk_for(a)
    done = (await one(on_a.unary.send_message(send("echo before")))).task
    await cut_access(cluster.database)
    try:
        with pytest.raises(Exception) as info:
            await on_a.unary.get_task(sdk.GetTaskRequest(id=done.id))
        assert "UNAVAILABLE" in repr(info.value) or "unreachable" in str(info.value)
        assert "PostgreSQL" in str(info.value)
        with pytest.raises(Exception) as info:
            await one(on_a.unary.send_message(send("echo during")))
        assert "unreachable" in str(info.value) or "UNAVAILABLE" in repr(info.value)
    finally:
        await restore_access(cluster.database)

    async def healed():
        try:
            return await on_a.unary.get_task(sdk.GetTaskRequest(id=done.id))
        except Exception:
            return None

    assert (await _wait_for(healed, "the store to come back")).id == done.id
    after = (await one(on_a.unary.send_message(send("echo after")))).task
    assert after.status.state == sdk.TASK_STATE_COMPLETED


# ------------------------------------------------------------------ --workers


def test_workers_on_the_embedded_defaults_are_refused_saying_what_to_set(tmp_path):
    result = run_serve("--workers", "2", "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert "workers:" in result.stderr
    assert 'store = "postgresql://' in result.stderr and 'bus = "redis://' in result.stderr
    assert "Traceback" not in result.stderr


async def test_unreachable_bus_is_one_startup_line(tmp_path):
    url, name = await create_database()
    try:
        result = await asyncio.to_thread(
            run_serve,
            "--grpc-port",
            "0",
            "--http-port",
            "-1",
            "--data-dir",
            str(tmp_path / "d"),
            "--store",
            url,
            "--bus",
            f"redis://127.0.0.1:{free_port()}/0",
        )
    finally:
        await drop_database(name)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert len(lines) == 1 and lines[0].startswith("cannot start: bus: cannot reach redis://"), (
        lines
    )


async def test_two_workers_share_the_ports_and_behave_as_one(cluster):
    workers = await cluster.start("--workers", "2")  # ready when the first one is

    async def both_ready() -> bool:
        return sum(is_ready_line(line) for line in workers.output) == 2

    await _wait_for(both_ready, "both workers to be ready", detail=workers.output_so_far)
    for i in range(20):  # new connections each time: the kernel spreads them over the workers
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            r = await fresh.post("/message:send", json=_message(f"echo {i}"), headers=V1)
        assert r.status_code == 200, r.text
    async with httpx.AsyncClient(base_url=workers.base, timeout=30) as http:
        listed = (await http.get("/tasks", headers=V1, params={"pageSize": 100})).json()
    assert listed["totalSize"] == 20
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


async def test_any_worker_serves_a_file_another_worker_stored(cluster):
    workers = await cluster.start("--workers", "2")

    async def both_ready() -> bool:
        return sum(is_ready_line(line) for line in workers.output) == 2

    await _wait_for(both_ready, "both workers to be ready", detail=workers.output_so_far)
    async with httpx.AsyncClient(base_url=workers.base, timeout=30) as http:
        r = await http.post("/message:send", json=_message("file note.txt hello"), headers=V1)
    assert r.status_code == 200, r.text
    url = r.json()["task"]["artifacts"][0]["parts"][0]["url"]
    path = "/" + url.split("://", 1)[1].split("/", 1)[1]
    statuses = []
    for _ in range(30):  # fresh connections: the kernel spreads them over both workers
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            got = await fresh.get(path)
        statuses.append(got.status_code)
        assert got.status_code != 200 or got.content == b"hello"
    assert statuses == [200] * 30, statuses
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


async def test_a_worker_that_dies_is_started_again(cluster):
    workers = await cluster.start("--workers", "2")

    def ready_lines() -> int:
        return sum(is_ready_line(line) for line in workers.output)

    async def ready(count: int):
        async def check() -> bool:
            return ready_lines() >= count

        await _wait_for(check, f"{count} ready lines", detail=workers.output_so_far)

    await ready(2)
    assert workers.proc is not None
    children = children_of(workers.proc.pid)
    assert len(children) == 2, children
    os.kill(children[0], signal.SIGKILL)
    await ready(3)  # the parent started it again
    assert "worker" in workers.output_so_far() and "signal 9" in workers.output_so_far()
    for i in range(10):  # both workers answer again, on fresh connections
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            r = await fresh.post("/message:send", json=_message(f"echo {i}"), headers=V1)
        assert r.status_code == 200, r.text
    after = children_of(workers.proc.pid)
    assert len(after) == 2 and children[0] not in after, after
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


async def test_a_restarted_worker_that_meets_an_outage_is_tried_again(cluster):
    """The first start proved the settings and ports: a worker started again while Redis is
    away exits 2 (bus unreachable) and is tried again; the other worker and the parent go
    on (before, the parent stopped every worker and exited 2)."""
    workers = await cluster.start("--workers", "2")

    def count(text: str) -> int:
        return sum(text in line for line in workers.output)

    async def seen(check, what: str) -> None:
        async def done() -> bool:
            return check()

        await _wait_for(done, what, detail=workers.output_so_far)

    await seen(lambda: sum(is_ready_line(line) for line in workers.output) >= 2, "2 ready")
    assert workers.proc is not None
    children = children_of(workers.proc.pid)
    redis = cluster.redis
    assert redis.proc is not None
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait(10)
    redis.proc = None
    os.kill(children[0], signal.SIGKILL)
    await seen(lambda: count("exit status 2") >= 1, "a restart that could not start")
    assert workers.proc.poll() is None, workers.output_so_far()  # the parent goes on
    assert children[1] in children_of(workers.proc.pid)  # and so does the other worker
    await asyncio.to_thread(redis.start)
    await seen(lambda: sum(is_ready_line(line) for line in workers.output) >= 3, "3rd ready")
    assert count("stopping the other workers") == 0
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


async def test_readiness_names_what_is_down(cluster, start_service):
    # In process, on the cluster's database and Redis: what a readiness probe can report.
    service = await start_service(
        store=cluster.store_url, bus=cluster.redis.url, agent="tests.agents:ScriptedAgent"
    )
    assert await service.dependency_problems() == {}
    await cut_access(cluster.database)
    try:
        problems = await service.dependency_problems()
        assert problems == {"store": "PostgreSQL unreachable"}
    finally:
        await restore_access(cluster.database)
    await asyncio.to_thread(cluster.redis.stop)
    problems = await service.dependency_problems()
    assert set(problems) >= {"bus"} and problems["bus"].startswith("Redis")
    await asyncio.to_thread(cluster.redis.start)


def _requests_total(text: str) -> tuple[float, set[str]]:
    """The HTTP requests counted over every worker in one scrape, and the workers seen."""
    from prometheus_client.parser import text_string_to_metric_families

    total, seen = 0.0, set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "http_server_request_duration_seconds_count":
                total += sample.value
                seen.add(sample.labels.get("worker", ""))
    return total, seen


async def _both_workers_ready(workers: Replica) -> None:
    async def both_ready() -> bool:
        return sum(is_ready_line(line) for line in workers.output) == 2

    await _wait_for(both_ready, "both workers to be ready", detail=workers.output_so_far)


async def test_metrics_under_workers_report_the_whole_service(cluster, monkeypatch):
    monkeypatch.setenv("A2A_METRICS_ENDPOINT", "true")
    workers = await cluster.start("--workers", "2")
    await _both_workers_ready(workers)
    last, everyone = -1.0, set()
    for i in range(20):  # fresh connections: requests and scrapes land on either worker
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            r = await fresh.post("/message:send", json=_message(f"echo {i}"), headers=V1)
            assert r.status_code == 200, r.text
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            scraped = await fresh.get("/metrics")
        assert scraped.status_code == 200, scraped.text
        total, seen = _requests_total(scraped.text)
        assert total >= last + 1, (i, total, last)  # never the count of one worker alone
        last, everyone = total, everyone | seen
    assert everyone == {"0", "1"}, everyone
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


async def test_metrics_port_under_workers_is_one_listener_in_the_parent(cluster, monkeypatch):
    port = free_port()
    monkeypatch.setenv("A2A_METRICS_ENDPOINT", "true")
    monkeypatch.setenv("A2A_METRICS_PORT", str(port))
    workers = await cluster.start("--workers", "2")
    await _both_workers_ready(workers)
    for i in range(10):
        async with httpx.AsyncClient(base_url=workers.base, timeout=30) as fresh:
            r = await fresh.post("/message:send", json=_message(f"echo {i}"), headers=V1)
            assert r.status_code == 200, r.text
    async with httpx.AsyncClient(timeout=30) as http:
        scraped = await http.get(f"http://127.0.0.1:{port}/metrics")
        assert scraped.status_code == 200
        total, seen = _requests_total(scraped.text)
        assert total >= 10 and seen <= {"0", "1"}, (total, seen)
        gone = await http.get(f"{workers.base}/metrics")  # not on the gateway then
        assert gone.status_code != 200 or "http_server_request" not in gone.text
    assert "metrics_port" not in workers.output_so_far()  # no worker fought for the port
    assert await asyncio.to_thread(workers.stop) == 0, workers.rest_of_output()


def test_workers_exit_when_the_metrics_port_is_taken(tmp_path, monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve(
            "--workers",
            "2",
            "--store",
            "postgresql://nobody@127.0.0.1:1/none",
            "--bus",
            "redis://127.0.0.1:1/0",
            "--grpc-port",
            str(free_port()),
            "--http-port",
            str(free_port()),
            "--data-dir",
            str(tmp_path / "d"),
            env={"A2A_METRICS_ENDPOINT": "true", "A2A_METRICS_PORT": str(port)},
        )
    assert result.returncode == 2, result.stderr
    assert "metrics_port" in result.stderr, result.stderr
