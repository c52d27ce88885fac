"""The edges of a process's life, on real child processes: one owner per data directory,
a drain under load that every client can recognise, and startup failures as one line."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time

import grpc
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as sdk
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.engine.registry import SHUTDOWN_MESSAGE
from tests.conftest import user_message
from tests.process import ServerProcess, free_port, run_serve, shows_traceback
from tests.push_util import Receiver, eventually

V1 = {"A2A-Version": "1.0"}
COUNT_TO_SIX = "sh -c 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.3; done'"


def parse_sse(text: str) -> list[tuple[str | None, str | None, dict]]:
    """(id, event, data) of every event in a finished SSE body."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                key, _, value = line.partition(":")
                fields[key] = value[1:] if value.startswith(" ") else value
        if "data" in fields:
            events.append((fields.get("id"), fields.get("event"), json.loads(fields["data"])))
    return events


async def stored_events(http_port: int, task_id: str) -> list[tuple[str | None, str | None, dict]]:
    """Every stored event of a task (SubscribeToTask resumed after event 0, without the
    current task it starts with)."""
    async with httpx.AsyncClient(timeout=20) as client:
        r = await client.get(
            f"http://127.0.0.1:{http_port}/tasks/{task_id}:subscribe",
            headers=V1 | {"Last-Event-ID": "0"},
        )
    assert r.status_code == 200, r.text
    current, *events = parse_sse(r.text)
    assert "task" in current[2] and current[0] == events[-1][0]  # numbered with the last event
    return events


def state_of(event: dict) -> str | None:
    if "statusUpdate" in event:
        return event["statusUpdate"]["status"]["state"]
    if "task" in event:
        return event["task"]["status"]["state"]
    return None


async def start_task(stub, text: str) -> pb.Task:
    """SendMessage with return_immediately: the task as it started."""
    config = pb.SendMessageConfiguration(return_immediately=True)
    request = pb.SendMessageRequest(message=user_message(text), configuration=config)
    return (await stub.SendMessage(request)).task


async def wait_for_state(stub, task_id: str, state: int, seconds: float = 30.0) -> pb.Task:
    deadline = time.monotonic() + seconds
    while True:
        task = await stub.GetTask(pb.GetTaskRequest(id=task_id))
        if task.status.state == state or time.monotonic() > deadline:
            return task
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------ one owner per data directory


@pytest.mark.parametrize("push", [False, True], ids=["no-push", "push"])
async def test_second_server_on_one_data_dir_refuses_and_touches_nothing(tmp_path, push):
    data = tmp_path / "data"
    extra = ["--push-notifications", "true"] if push else []
    http_port = free_port()
    first = ServerProcess(
        "--http-port",
        str(http_port),
        "--data-dir",
        str(data),
        "--agent",
        "command",
        "--command",
        COUNT_TO_SIX,
        *extra,
    ).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            task = await start_task(stub, "go")

            second = ServerProcess("--data-dir", str(data), *extra)
            with pytest.raises(RuntimeError, match="exited during startup"):
                second.start()
            assert second.proc is not None and second.proc.wait(10) == 2
            refusal = "".join(second.output)
            assert f"data directory {data.resolve()} is in use" in refusal
            assert f"pid {first.proc.pid}" in refusal  # type: ignore[union-attr]
            assert not shows_traceback(refusal) and "marked" not in refusal

            done = await wait_for_state(stub, task.id, pb.TASK_STATE_COMPLETED)
            assert done.status.state == pb.TASK_STATE_COMPLETED, done.status
        events = await stored_events(http_port, task.id)
    finally:
        assert first.stop() == 0
    ids = [int(e[0]) for e in events]
    assert ids == list(range(1, len(ids) + 1))  # every event, once, in order
    states = [state_of(e[2]) for e in events if state_of(e[2])]
    assert states[-1] == "TASK_STATE_COMPLETED" and states.count("TASK_STATE_COMPLETED") == 1
    assert "TASK_STATE_FAILED" not in states
    text = "".join(
        p["text"]
        for e in events
        if "artifactUpdate" in e[2]
        for p in e[2]["artifactUpdate"]["artifact"]["parts"]
    )
    assert text == "1\n2\n3\n4\n5\n6\n"
    log = first.rest_of_output()
    assert "commit failed" not in log and "UNIQUE" not in log


async def test_a_killed_owner_leaves_no_stale_lock(tmp_path):
    data = tmp_path / "data"
    first = ServerProcess("--data-dir", str(data)).start()
    first.kill9()
    again = ServerProcess("--data-dir", str(data)).start()  # the lock went with the process
    assert again.stop() == 0


# ------------------------------------------------------------------ drain


async def test_a_stuck_shutdown_step_ends_the_process_and_is_named(tmp_path):
    """An agent that swallows its cancellation cannot keep a stopping server up forever:
    past drain_seconds + STOP_OVERRUN_SECONDS the process exits 1, saying what was stuck."""
    server = ServerProcess(
        "--data-dir",
        str(tmp_path / "d"),
        "--agent",
        "tests.agents:ScriptedAgent",
        env={"A2A_DRAIN_SECONDS": "0.5"},
    ).start()
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = await start_task(stub, "stubborn")
        assert (await wait_for_state(stub, task.id, pb.TASK_STATE_WORKING)).status.state == (
            pb.TASK_STATE_WORKING
        )
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(server.proc.wait, 60) == 1
    log = server.rest_of_output()
    assert "shutdown: still stopping running turns" in log, log
    assert not shows_traceback(log)


def _sdk_config(
    binding: str, http: httpx.AsyncClient, channels: list, streaming: bool
) -> ClientConfig:
    def channel_factory(url: str) -> grpc.aio.Channel:
        channels.append(grpc.aio.insecure_channel(url))
        return channels[-1]

    return ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=[binding],
        use_client_preference=True,
        httpx_client=http,
        grpc_channel_factory=channel_factory,
    )


async def _stream_until_end(
    client, text: str, first_events: asyncio.Event, seen: list
) -> BaseException | None:
    """Send a streaming message with the a2a-sdk client; record events; return how it ended."""
    try:
        async for event in client.send_message(sdk.SendMessageRequest(message=user_message(text))):
            seen.append(event)
            if len(seen) >= 2:
                first_events.set()
    except Exception as exc:
        first_events.set()
        return exc
    first_events.set()
    return None


def _grpc_refusal(err: grpc.aio.AioRpcError) -> tuple[str, float]:
    status = rpc_status.from_call(err)
    assert status is not None
    reason, retry = "", -1.0
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            hint = error_details_pb2.RetryInfo()
            detail.Unpack(hint)
            retry = hint.retry_delay.ToNanoseconds() / 1e9
    return reason, retry


async def test_drain_under_load_every_binding_gets_a_recognisable_end(tmp_path):
    receiver = await Receiver().start()
    http_port = free_port()
    data = tmp_path / "data"
    args = (
        "--http-port",
        str(http_port),
        "--data-dir",
        str(data),
        "--agent",
        "tests.agents:ScriptedAgent",
        "--push-notifications",
        "true",
    )
    env = {
        "A2A_DRAIN_SECONDS": "4",
        "A2A_DRAIN_GRACE_SECONDS": "0.3",
        "A2A_PUSH_ALLOW_NETWORKS": "127.0.0.1/32",
        "A2A_PUSH_RETRY_BASE_SECONDS": "0.2",
    }
    server = ServerProcess(*args, env=env).start()
    base = f"http://127.0.0.1:{http_port}"
    http = httpx.AsyncClient(timeout=30)
    channels: list[grpc.aio.Channel] = []
    bindings = ["GRPC", "JSONRPC", "HTTP+JSON"]
    try:
        streaming = {
            b: await create_client(base, _sdk_config(b, http, channels, True)) for b in bindings
        }
        unary = {
            b: await create_client(base, _sdk_config(b, http, channels, False)) for b in bindings
        }

        # Load: per binding a stream of a task that outlives the drain, one that ends within
        # it, and a blocking send that outlives it; plus a pushed task and a raw SSE stream.
        async def streams(text: str) -> tuple[dict, dict]:
            """One a2a-sdk stream per binding, each past its first events: (ends, events)."""
            seen: dict[str, list] = {b: [] for b in bindings}
            started = {b: asyncio.Event() for b in bindings}
            ends = {
                b: asyncio.create_task(_stream_until_end(streaming[b], text, started[b], seen[b]))
                for b in bindings
            }
            for event in started.values():
                await asyncio.wait_for(event.wait(), 20)
            return ends, seen

        hang_streams, hang_seen = await streams("hang")
        blocking = {
            b: asyncio.create_task(
                _collect(
                    unary[b].send_message(sdk.SendMessageRequest(message=user_message("hang")))
                )
            )
            for b in bindings
        }
        channel = grpc.aio.insecure_channel(server.address)
        channels.append(channel)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        push_config = pb.TaskPushNotificationConfig(id="hook", url=receiver.url)
        pushed = (
            await stub.SendMessage(
                pb.SendMessageRequest(
                    message=user_message("hang"),
                    configuration=pb.SendMessageConfiguration(
                        return_immediately=True, task_push_notification_config=push_config
                    ),
                )
            )
        ).task
        raw = http.stream(
            "POST",
            f"{base}/message:stream",
            headers=V1,
            json={
                "message": {"messageId": "raw-1", "role": "ROLE_USER", "parts": [{"text": "hang"}]}
            },
        )
        raw_response = await raw.__aenter__()
        raw_lines = raw_response.aiter_lines()
        raw_text = ""
        while raw_text.count("\n\n") < 2:  # the task snapshot and WORKING
            raw_text += await anext(raw_lines) + "\n"
        slow_streams, slow_seen = await streams("slow 10")

        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)

        # At once: both health checks say not serving; soon after, new calls are refused.
        health = health_pb2_grpc.HealthStub(channel)

        async def not_serving() -> bool:
            checks = [
                await health.Check(health_pb2.HealthCheckRequest(service=name))
                for name in ("", "lf.a2a.v1.A2AService")
            ]
            return all(c.status == health_pb2.HealthCheckResponse.NOT_SERVING for c in checks)

        await eventually(not_serving, 10, "gRPC health NOT_SERVING")
        for probe in ("/health", "/health/live", "/health/ready"):
            assert (await http.get(f"{base}{probe}")).status_code == 503, probe

        async def refused() -> bool:
            try:
                await stub.GetTask(pb.GetTaskRequest(id=pushed.id))
            except grpc.aio.AioRpcError as err:
                return err.code() == grpc.StatusCode.UNAVAILABLE
            return False

        await eventually(refused, 10, "new gRPC calls refused")
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await stub.GetTask(pb.GetTaskRequest(id=pushed.id))
        assert _grpc_refusal(refusal.value) == ("UNAVAILABLE", 1.0)
        assert "shutting down" in (refusal.value.details() or "")
        r = await http.get(f"{base}/tasks/{pushed.id}", headers=V1)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["status"] == "UNAVAILABLE"
        r = await http.post(
            f"{base}/",
            headers=V1,
            json={"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": pushed.id}},
        )
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert (
            r.json()["error"]["code"] == -32603 and "shutting down" in r.json()["error"]["message"]
        )

        # Streams of tasks that ended within the drain ended normally.
        for b in bindings:
            assert await asyncio.wait_for(slow_streams[b], 20) is None
            assert slow_seen[b][-1].status_update.status.state == sdk.TASK_STATE_COMPLETED
        # Streams still open at the deadline end with an error that says what happened.
        observed = {}
        for b in bindings:
            ended = await asyncio.wait_for(hang_streams[b], 20)
            assert ended is not None, f"{b}: the stream ended like a finished one"
            observed[b] = f"{type(ended).__name__}: {ended}"
            assert "shutting down" in str(ended) and "SubscribeToTask" in str(ended), observed[b]
        async for line in raw_lines:
            raw_text += line + "\n"
        await raw.__aexit__(None, None, None)
        raw_events = parse_sse(raw_text)
        assert (
            raw_events[-1][1] == "error" and raw_events[-1][2]["error"]["status"] == "UNAVAILABLE"
        )
        assert "Last-Event-ID" in raw_events[-1][2]["error"]["message"]
        raw_task_id, raw_last_id = raw_events[0][2]["task"]["id"], int(raw_events[-2][0])
        # Blocking sends in flight answer with the task settled by the shutdown, alike everywhere.
        for b in bindings:
            [answer] = await asyncio.wait_for(blocking[b], 20)
            assert answer.task.status.state == sdk.TASK_STATE_FAILED, (b, answer)
            assert answer.task.status.message.parts[0].text == SHUTDOWN_MESSAGE
        assert server.proc.wait(30) == 0
        log = server.rest_of_output()
        assert not shows_traceback(log)
        print("a2a-sdk observed at a drain:", json.dumps(observed, indent=1))
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
        await http.aclose()
        for ch in channels:
            await ch.close()

    # Nothing was left WORKING: the next start has nothing to recover, and every task the
    # drain stopped says so; the raw stream resumes where it stopped, without a gap.
    again = ServerProcess(*args, env=env).start()
    try:
        assert not any("marked" in line for line in again.output)
        async with grpc.aio.insecure_channel(again.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            listed = await stub.ListTasks(pb.ListTasksRequest(page_size=100))
            states = {t.id: t.status.state for t in listed.tasks}
            assert len(states) == 3 * 3 + 2
            assert (
                pb.TASK_STATE_WORKING not in states.values()
                and pb.TASK_STATE_SUBMITTED not in states.values()
            )
            for task in listed.tasks:
                if task.status.state == pb.TASK_STATE_FAILED:
                    assert task.status.message.parts[0].text == SHUTDOWN_MESSAGE
            assert sorted(states.values()).count(pb.TASK_STATE_COMPLETED) == 3
        async with httpx.AsyncClient(timeout=20) as client:
            r = await client.get(
                f"{base}/tasks/{raw_task_id}:subscribe",
                headers=V1 | {"Last-Event-ID": str(raw_last_id)},
            )
        resumed = parse_sse(r.text)
        # The task as it is now, then the one event after the resume point.
        assert [int(e[0]) for e in resumed] == [raw_last_id + 1, raw_last_id + 1]
        assert "task" in resumed[0][2] and "statusUpdate" in resumed[1][2]
        assert [state_of(e[2]) for e in resumed] == 2 * ["TASK_STATE_FAILED"]
        # Every event of the pushed task reaches its receiver, the FAILED one included.
        events = await stored_events(http_port, pushed.id)
        expected = {f"{pushed.id}/{e[0]}/hook" for e in events}

        def delivered() -> bool:
            return expected <= {r.headers["idempotency-key"] for r in receiver.accepted()}

        await eventually(delivered, 30, "every pushed event delivered")
    finally:
        assert again.stop() == 0
        await receiver.stop()


async def _collect(iterator) -> list:
    return [event async for event in iterator]


# ------------------------------------------------------------------ startup failures


FREE_PORTS = ("--grpc-port", "0", "--http-port", "0")  # any free ports: the failure is elsewhere


_serve = run_serve


def _one_line(result: subprocess.CompletedProcess, starts: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    # Informational log lines may come first; the failure is one line, and nothing else is.
    lines = [
        line
        for line in result.stderr.splitlines()
        if line.strip() and " INFO " not in line and '"level": "INFO"' not in line
    ]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"cannot start: {starts}"), lines[0]
    assert not shows_traceback(result.stderr + result.stdout)


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_grpc_port_in_use_is_one_line(tmp_path, taken_port):
    result = _serve(
        "--grpc-port", str(taken_port), "--http-port", "0", "--data-dir", str(tmp_path / "d")
    )
    _one_line(
        result, f"grpc_port: cannot listen on 127.0.0.1:{taken_port} (Address already in use)"
    )


def test_http_port_in_use_is_one_line(tmp_path, taken_port):
    result = _serve(
        "--grpc-port", "0", "--http-port", str(taken_port), "--data-dir", str(tmp_path / "d")
    )
    _one_line(result, "http_port: ")
    assert "Address already in use" in result.stderr


def test_unusable_data_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = _serve("--grpc-port", "0", "--http-port", "0", "--data-dir", str(blocker / "data"))
    _one_line(result, f"data_dir: cannot create or lock {blocker / 'data'}")


def test_unreadable_database_is_one_line(tmp_path):
    db = tmp_path / "tasks.db"
    db.write_bytes(b"this is not an sqlite database" * 100)
    result = _serve(
        *FREE_PORTS,
        "--data-dir",
        str(tmp_path / "d"),
        "--store",
        f"sqlite:{db}",
    )
    _one_line(result, "store: cannot open sqlite:")


def test_unknown_agent_is_one_line(tmp_path):
    result = _serve(
        *FREE_PORTS,
        "--data-dir",
        str(tmp_path / "d"),
        "--agent",
        "no_such_module:Agent",
    )
    _one_line(result, "agent: ")


def test_unreachable_redis_is_one_line(tmp_path):
    result = _serve(
        *FREE_PORTS,
        "--data-dir",
        str(tmp_path / "d"),
        "--push-notifications",
        "true",
        env={
            "A2A_PUSH_QUEUE": "redis-streams",
            "A2A_PUSH_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        },
    )
    _one_line(result, "push_redis_url: ")


def test_missing_tls_file_is_one_line(tmp_path):
    result = _serve(
        *FREE_PORTS,
        "--data-dir",
        str(tmp_path / "d"),
        env={
            "A2A_TLS_CERT_FILE": str(tmp_path / "none.pem"),
            "A2A_TLS_KEY_FILE": str(tmp_path / "none.key"),
        },
    )
    assert result.returncode == 2, result.stderr
    assert "tls_cert_file" in result.stderr and "Traceback" not in result.stderr


def test_debug_log_level_adds_the_traceback(tmp_path, taken_port):
    result = _serve(
        "--grpc-port",
        "0",
        "--http-port",
        str(taken_port),
        "--data-dir",
        str(tmp_path / "d"),
        "--log-level",
        "DEBUG",
    )
    assert result.returncode == 2
    assert shows_traceback(result.stderr) and "cannot start: http_port: " in result.stderr


def test_drain_seconds_must_not_be_negative(tmp_path):
    result = _serve("--data-dir", str(tmp_path / "d"), env={"A2A_DRAIN_SECONDS": "-1"})
    assert result.returncode == 2 and "drain_seconds" in result.stderr


# ------------------------------------------------------------------ reflection


async def test_reflection_is_served_as_v1_and_v1alpha(start_service):
    from grpc_reflection.v1alpha import reflection_pb2

    service = await start_service(store="memory:")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        for name in (
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ):
            call = channel.stream_stream(
                f"/{name}/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            responses = [
                r
                async for r in call(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")])
                )
            ]
            names = {s.name for s in responses[0].list_services_response.service}
            assert {"lf.a2a.v1.A2AService", "grpc.health.v1.Health", name} <= names, (name, names)


async def test_a_draining_proxy_ends_relayed_streams_recognisably(start_service, tmp_path):
    from service.app.server import Service
    from tests.conftest import make_settings

    upstream = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    proxy = Service(
        make_settings(
            tmp_path / "proxy",
            http_port=0,
            upstream=f"127.0.0.1:{upstream.grpc_port}",
            agent="tests.agents:ScriptedAgent",
            drain_seconds=0.3,
        )
    )
    await proxy.start()
    body = {"message": {"messageId": "p1", "role": "ROLE_USER", "parts": [{"text": "hang"}]}}
    async with httpx.AsyncClient(timeout=20) as client:
        async with client.stream(
            "POST", f"http://127.0.0.1:{proxy.http_port}/message:stream", headers=V1, json=body
        ) as response:
            lines = response.aiter_lines()
            text = ""
            while text.count("\n\n") < 2:  # the task, then WORKING
                text += await anext(lines) + "\n"
            stopping = asyncio.create_task(proxy.stop())
            async for line in lines:
                text += line + "\n"
        await asyncio.wait_for(stopping, 20)
    last = parse_sse(text)[-1]
    assert last[1] == "error" and last[2]["error"]["status"] == "UNAVAILABLE"
    assert "shutting down" in last[2]["error"]["message"]
