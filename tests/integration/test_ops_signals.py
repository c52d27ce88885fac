"""What an operator reads of a running service, on real servers on loopback:

- readiness with a shared part down (a Redis of the test's own, stopped): `fail` makes the
  replica unready, `ignore` (the default) keeps it ready and names the part `degraded`;
  either way the calls that do not need Redis still succeed;
- startup warnings: a card that would advertise `localhost` behind `0.0.0.0`, per-process
  push keys on a shared store (and `--workers` refusing them);
- a line when the drain starts;
- the ready line in the log format (JSON record or the plain text line);
- `pid` (and `worker` under `--workers`) in every record;
- the access line's client address, status, response bytes and user agent on every binding.
"""

from __future__ import annotations

import asyncio
import json
import logging

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.pg_util import fresh_database
from tests.process import ServerProcess, is_ready_line, run_serve
from tests.push_util import eventually
from tests.redis_util import OwnRedis

V1 = {"A2A-Version": "1.0"}
SEND = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
READY_TEXT = "A2A service ready: grpc="


def _access(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.name.startswith("service.access")]


async def _health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        return reply.status


# ---------------------------------------------------------------- readiness


@pytest.mark.parametrize("policy", ["fail", "ignore"])
async def test_readiness_with_the_shared_redis_down(start_service, tmp_path, policy, caplog):
    caplog.set_level(logging.INFO, logger="service.readiness")
    redis = await asyncio.to_thread(OwnRedis(str(tmp_path / "redis")).start)
    try:
        service = await start_service(
            http_port=0,
            store="memory:",
            push_queue="redis-streams",
            push_redis_url=redis.url,
            push_redis_prefix=f"test-ops-{policy}",
            readiness_shared_dependencies=policy,
        )
        base = f"http://127.0.0.1:{service.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            assert (await http.get("/health/ready")).json() == {"status": "ready"}
            sent = await http.post("/message:send", json=SEND, headers=V1)
            assert sent.status_code == 200, sent.text
            task_id = sent.json()["task"]["id"]

            await asyncio.to_thread(redis.stop)

            async def noticed() -> bool:
                return "push_queue" in service.readiness.failing

            await eventually(noticed, 20, "the readiness loop to see Redis gone")
            ready = await http.get("/health/ready")
            if policy == "fail":
                assert ready.status_code == 503
                assert ready.json() == {"status": "unavailable", "unreachable": ["push_queue"]}
                assert (
                    await _health(service.grpc_port) == health_pb2.HealthCheckResponse.NOT_SERVING
                )
                assert "not ready: push_queue is unreachable" in caplog.text
            else:
                assert ready.status_code == 200
                assert ready.json() == {"status": "ready", "degraded": ["push_queue"]}
                assert await _health(service.grpc_port) == health_pb2.HealthCheckResponse.SERVING
                assert "degraded: push_queue is unreachable" in caplog.text
            assert (await http.get("/health/live")).status_code == 200
            # What does not need Redis is still answered, whatever readiness says.
            got = await http.get(f"/tasks/{task_id}", headers=V1)
            assert got.status_code == 200 and got.json()["id"] == task_id
            listed = await http.get("/tasks", headers=V1)
            assert listed.status_code == 200 and listed.json()["totalSize"] == 1
            second = {"message": SEND["message"] | {"messageId": "m2"}}
            again = await http.post("/message:send", json=second, headers=V1)  # no push config
            assert again.status_code == 200, again.text
            assert again.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                task = await stub.GetTask(pb.GetTaskRequest(id=task_id))
                assert task.id == task_id
    finally:
        await asyncio.to_thread(redis.stop)


def test_the_policy_is_checked():
    from service.app import config

    with pytest.raises(config.ConfigError, match="readiness_shared_dependencies: expected"):
        config.load(env={"A2A_READINESS_SHARED_DEPENDENCIES": "sometimes"})
    assert config.load().readiness_shared_dependencies == "ignore"


# ---------------------------------------------------------------- startup warnings


async def test_a_card_that_would_say_localhost_is_warned_about(start_service, caplog):
    caplog.set_level(logging.WARNING, logger="service")
    service = await start_service(host="0.0.0.0", http_port=0, store="memory:")
    warned = [r.getMessage() for r in caplog.records if "ADVERTISES localhost" in r.getMessage()]
    assert len(warned) == 1
    assert "public_url" in warned[0] and "grpc_public_address" in warned[0]
    async with httpx.AsyncClient(timeout=10) as http:
        card = (
            await http.get(f"http://127.0.0.1:{service.http_port}/.well-known/agent-card.json")
        ).json()
    assert all("localhost" in i["url"] for i in card["supportedInterfaces"])  # what it warned of


async def test_no_localhost_warning_with_public_addresses(start_service, caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="service")
    await start_service(
        host="0.0.0.0",
        http_port=0,
        store="memory:",
        public_url="https://agent.example.com",
        grpc_public_address="agent.example.com:443",
    )
    await start_service(
        http_port=0, store="memory:", data_dir=str(tmp_path / "other")
    )  # loopback: nobody else is sent there
    assert "ADVERTISES localhost" not in caplog.text


async def test_per_process_push_keys_on_a_shared_store_are_warned_about(
    start_service, caplog, tmp_path
):
    caplog.set_level(logging.WARNING, logger="service")
    async with fresh_database() as (url, _):
        await start_service(store=url, push_notifications=True)
        assert caplog.text.count("PUSH SECRET KEYS ARE PER PROCESS") == 1
        caplog.clear()
        key = "q6AXhDqZNuHkBLSXiU8MjEJwHqVG9OsjsrBgZDIxbfc="
        await start_service(store=url, push_secret_keys=[key], data_dir=str(tmp_path / "keys"))
        await start_service(store=url, push_notifications=False, data_dir=str(tmp_path / "off"))
        assert "PUSH SECRET KEYS" not in caplog.text


def test_workers_refuse_per_process_push_keys():
    done = run_serve(
        "--workers",
        "2",
        "--grpc-port",
        "50999",
        "--http-port",
        "-1",
        "--store",
        "postgresql://nobody@127.0.0.1:1/none",
        "--bus",
        "redis://127.0.0.1:1/0",
        "--push-notifications",
        "true",
        env={"A2A_PUSH_QUEUE": "redis-streams"},
    )
    assert done.returncode == 2
    assert "push_secret_keys" in done.stderr and "configuration error" in done.stderr


# ---------------------------------------------------------------- drain, ready line, pid


async def test_the_drain_is_said_when_it_starts(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service")
    service = await start_service(store="memory:", drain_seconds=2.0, drain_grace_seconds=0.5)
    await service.stop()
    [line] = [r for r in caplog.records if r.getMessage().startswith("draining:")]
    assert line.fields == {"grace_seconds": 0.5, "drain_seconds": 2.0}
    assert "0.5 s" in line.getMessage() and "2 s" in line.getMessage()
    said = [r.getMessage() for r in caplog.records if r.name == "service"]
    assert said.index(line.getMessage()) < said.index("stopped")


def test_json_log_the_ready_line_is_a_record_and_every_record_has_a_pid(tmp_path):
    server = ServerProcess(
        "--store", "memory:", "--data-dir", str(tmp_path), env={"A2A_LOG_FORMAT": "json"}
    ).start()
    assert server.stop() == 0
    lines = server.rest_of_output().splitlines()
    records = [json.loads(line) for line in lines]  # every line, the ready one too, is JSON
    [ready] = [r for r in records if is_ready_line(json.dumps(r))]
    assert ready["message"] == f"{READY_TEXT}{server.grpc_port}"
    assert ready["grpc_port"] == server.grpc_port and ready["logger"] == "service"
    assert ready["level"] == "INFO" and "http_port" not in ready
    assert {r["pid"] for r in records} == {server.proc.pid}
    assert all("worker" not in r for r in records)
    assert any(r["message"].startswith("draining:") for r in records)


def test_text_log_keeps_the_ready_line_as_it_was(tmp_path):
    server = ServerProcess(
        "--store", "memory:", "--data-dir", str(tmp_path), env={"A2A_LOG_FORMAT": "text"}
    ).start()
    assert server.stop() == 0
    lines = server.rest_of_output().splitlines()
    assert f"{READY_TEXT}{server.grpc_port}" in lines
    logged = [line for line in lines if " INFO " in line or " WARNING " in line]
    assert logged and all(f"[pid {server.proc.pid}] " in line for line in logged)


async def test_two_workers_name_themselves_in_every_record(tmp_path):
    redis = await asyncio.to_thread(OwnRedis(str(tmp_path / "redis")).start)
    try:
        async with fresh_database() as (url, _):
            server = ServerProcess(
                "--workers",
                "2",
                "--store",
                url,
                "--bus",
                redis.url,
                "--data-dir",
                str(tmp_path / "data"),
                env={"A2A_LOG_FORMAT": "json"},
            )
            await asyncio.to_thread(server.start)

            async def both_ready() -> bool:
                return sum(is_ready_line(line) for line in server.output) == 2

            await eventually(both_ready, 60, "both workers to be ready")
            assert await asyncio.to_thread(server.stop) == 0
            records = [json.loads(line) for line in server.rest_of_output().splitlines()]
    finally:
        await asyncio.to_thread(redis.stop)
    ready = [r for r in records if r["message"].startswith(READY_TEXT)]
    assert sorted(r["worker"] for r in ready) == [0, 1]
    pids = {r["worker"]: r["pid"] for r in ready}
    assert pids[0] != pids[1] and server.proc.pid not in pids.values()
    for record in records:  # a worker's lines carry its index; the parent's only its pid
        if "worker" in record:
            assert record["pid"] == pids[record["worker"]]
        else:
            assert record["pid"] == server.proc.pid
    assert {r["worker"] for r in records if r["message"].startswith("draining:")} == {0, 1}


# ---------------------------------------------------------------- the access line


async def test_access_line_has_client_status_bytes_and_user_agent(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent")
    base = f"http://127.0.0.1:{service.http_port}"
    # A forwarded-for header is not trusted, from loopback either: the line has the peer.
    agent = {"User-Agent": "ops-test/1.0 (+loopback)", "X-Forwarded-For": "203.0.113.9"}
    async with httpx.AsyncClient(base_url=base, timeout=20, headers=agent) as http:
        listed = await http.get("/tasks", headers=V1)
        missing = await http.get("/tasks/no-such-task", headers=V1)
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
        jsonrpc = await http.post("/", json=body, headers=V1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        reply = await stub.SendMessage(pb.SendMessageRequest(message=user_message("hello")))
        events = [
            e
            async for e in stub.SendStreamingMessage(
                pb.SendMessageRequest(message=user_message("slow 1"))
            )
        ]
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetTask(pb.GetTaskRequest(id="no-such-task"))

    lines = {(line["binding"], line["method"], line["outcome"]): line for line in _access(caplog)}
    for line in lines.values():
        assert line["client_address"] == "127.0.0.1", line
        assert line["response_bytes"] > 0 or line["grpc_status"] != "OK", line
    rest_ok = lines[("rest", "ListTasks", "OK")]
    assert rest_ok["http_status"] == 200 and rest_ok["response_bytes"] == len(listed.content)
    assert rest_ok["user_agent"] == "ops-test/1.0 (+loopback)" and "grpc_status" not in rest_ok
    rest_missing = lines[("rest", "GetTask", "TASK_NOT_FOUND")]
    assert rest_missing["http_status"] == missing.status_code == 404
    assert rest_missing["response_bytes"] == len(missing.content)
    rpc = lines[("jsonrpc", "GetTask", "TASK_NOT_FOUND")]
    assert rpc["http_status"] == 200 and rpc["response_bytes"] == len(jsonrpc.content)

    unary = lines[("grpc", "SendMessage", "OK")]
    assert unary["grpc_status"] == "OK" and "http_status" not in unary
    assert unary["response_bytes"] == reply.ByteSize()
    assert unary["user_agent"].startswith("grpc-python")
    stream = lines[("grpc", "SendStreamingMessage", "OK")]
    assert stream["grpc_status"] == "OK"
    assert stream["response_bytes"] == sum(e.ByteSize() for e in events)
    refused = lines[("grpc", "GetTask", "TASK_NOT_FOUND")]
    assert refused["grpc_status"] == "NOT_FOUND" and refused["response_bytes"] == 0  # no message


async def test_a_hostile_user_agent_is_cut_and_cleaned(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(http_port=0, store="memory:")
    hostile = "evil\tagent Bearer abcdefgh12345678 " + "x" * 400
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(
            f"http://127.0.0.1:{service.http_port}/tasks", headers={**V1, "User-Agent": hostile}
        )
    assert r.status_code == 200
    [line] = _access(caplog)
    agent = line["user_agent"]
    assert agent.startswith("evil?agent Bearer [redacted] x") and "abcdefgh12345678" not in agent
    assert len(agent) <= 256
