"""Per-principal limits on a real server, over gRPC, REST and JSON-RPC: the flooding
principal is refused with RESOURCE_EXHAUSTED + RetryInfo (gRPC) or 429 + Retry-After
(HTTP), never left hanging, while another principal, health and the agent card are
still served; slots come back when the work ends."""

from __future__ import annotations

import os

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import expect_error
from tests.push_util import eventually
from tests.security_util import TOKENS, bearer_settings

SCRIPTED = "tests.agents:ScriptedAgent"


def creds(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


def headers(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}", "A2A-Version": "1.0"}


async def refused(call, setting: str) -> float:
    """The call fails RESOURCE_EXHAUSTED naming `setting`; returns its RetryInfo delay."""
    err = await expect_error(call, grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED")
    details = {d.TypeName(): d for d in rpc_status.from_call(err).details}
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    details["google.rpc.ErrorInfo"].Unpack(info)
    details["google.rpc.RetryInfo"].Unpack(retry)
    assert info.metadata["setting"] == setting, info
    delay = retry.retry_delay.ToNanoseconds() / 1e9
    assert delay > 0
    return delay


def assert_429(response: httpx.Response, setting: str) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    body = response.json()
    error = body["error"]
    details = error["details"] if "details" in error else error["data"]
    info = next(d for d in details if d["@type"].endswith("ErrorInfo"))
    assert info["reason"] == "RESOURCE_EXHAUSTED" and info["metadata"]["setting"] == setting


def jsonrpc(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


def send_body(text: str, *, immediately: bool = False) -> dict:
    body: dict = {
        "message": {
            "messageId": os.urandom(6).hex(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }
    if immediately:
        body["configuration"] = {"returnImmediately": True}
    return body


@pytest.fixture
async def limited(start_service):
    async def start(**limits):
        service = await start_service(
            http_port=0, store="memory:", agent=SCRIPTED, **bearer_settings(), **limits
        )
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=20)
        opened.append((channel, http))
        return service, a2a_pb2_grpc.A2AServiceStub(channel), channel, http

    opened: list = []
    yield start
    for channel, http in opened:
        await http.aclose()
        await channel.close()


async def test_rate_limit_refuses_the_flooding_principal_on_every_binding(limited):
    # 0.01 tokens per second: once the burst of 2 is spent, nothing refills during the test.
    _, stub, channel, http = await limited(rate_limit_per_principal=0.01, rate_limit_burst=2)
    for _ in range(2):
        await stub.ListTasks(pb.ListTasksRequest(), metadata=creds("alice"))
    delay = await refused(
        stub.ListTasks(pb.ListTasksRequest(), metadata=creds("alice")), "rate_limit_per_principal"
    )
    assert delay > 10  # the wait until the next token, at 0.01 per second
    # One bucket per principal across the bindings: alice is refused on HTTP too.
    assert_429(await http.get("/tasks", headers=headers("alice")), "rate_limit_per_principal")
    assert_429(
        await http.post("/", json=jsonrpc("ListTasks"), headers=headers("alice")),
        "rate_limit_per_principal",
    )
    # Another principal, health and the card are not affected.
    assert (await stub.ListTasks(pb.ListTasksRequest(), metadata=creds("bob"))).total_size == 0
    assert (await http.get("/tasks", headers=headers("bob"))).status_code == 200
    assert (await http.get("/health")).status_code == 200
    assert (await http.get("/.well-known/agent-card.json")).status_code == 200
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_downloads_and_metrics_count_against_the_rate_limit(limited):
    """The authenticated routes that are no RPC: the file download and /metrics."""
    # A burst of 4 at 0.01 per second: the message takes one token, three downloads the
    # rest, and nothing refills during the test.
    _, stub, _, pooled = await limited(
        rate_limit_per_principal=0.01, rate_limit_burst=4, metrics_endpoint=True
    )
    reply = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("file report.txt kept")),
        metadata=creds("alice"),
    )
    url = reply.task.artifacts[0].parts[0].url
    # A connection per request: a refused connection is paused (back-pressure), a new one not.
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=pooled.base_url, limits=fresh, timeout=20) as http:
        burst = [await http.get(url, headers=headers("alice")) for _ in range(5)]
        assert [r.status_code for r in burst] == [200, 200, 200, 429, 429]
        assert burst[0].content == b"kept"
        for response in burst[3:]:
            assert_429(response, "rate_limit_per_principal")
        # HEAD is a download too; and alice is refused on the RPCs as well: one bucket.
        head = await http.head(url, headers=headers("alice"))
        assert head.status_code == 429 and int(head.headers["Retry-After"]) >= 1
        refused_rpc = await http.get("/tasks", headers=headers("alice"))
        assert_429(refused_rpc, "rate_limit_per_principal")
        assert_429(await http.get("/metrics", headers=headers("alice")), "rate_limit_per_principal")
        # Another principal has its own bucket: it gets the 404 of a task it cannot see.
        assert (await http.get(url, headers=headers("bob"))).status_code == 404
        assert (await http.get("/metrics", headers=headers("bob"))).status_code == 200


async def test_turns_per_principal_are_limited_and_come_back(limited):
    _, stub, _, http = await limited(max_concurrent_turns_per_principal=1)
    immediately = pb.SendMessageConfiguration(return_immediately=True)
    hanging = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("hang"), configuration=immediately),
        metadata=creds("alice"),
    )
    await refused(
        stub.SendMessage(
            pb.SendMessageRequest(message=user_message("echo x")), metadata=creds("alice")
        ),
        "max_concurrent_turns_per_principal",
    )
    assert_429(
        await http.post("/message:send", json=send_body("echo y"), headers=headers("alice")),
        "max_concurrent_turns_per_principal",
    )
    assert_429(
        await http.post(
            "/", json=jsonrpc("SendMessage", send_body("echo z")), headers=headers("alice")
        ),
        "max_concurrent_turns_per_principal",
    )
    # Bob has a slot of his own; reading tasks is not a turn.
    done = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("echo bob")), metadata=creds("bob")
    )
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    await stub.GetTask(pb.GetTaskRequest(id=hanging.task.id), metadata=creds("alice"))
    # The hanging turn ends: alice may run another.
    await stub.CancelTask(pb.CancelTaskRequest(id=hanging.task.id), metadata=creds("alice"))
    done = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("echo again")), metadata=creds("alice")
    )
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    # A turn paused in ctx.ask() waits for alice, not for the agent: it holds no slot.
    asked = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("ask name?")), metadata=creds("alice")
    )
    assert asked.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    done = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("echo meanwhile")), metadata=creds("alice")
    )
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    answer = user_message("Ada", task_id=asked.task.id)
    done = await stub.SendMessage(pb.SendMessageRequest(message=answer), metadata=creds("alice"))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    # A refused follow-up: alice's slot is taken by a new hanging turn.
    asked = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("ask again?")), metadata=creds("alice")
    )
    await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("hang"), configuration=immediately),
        metadata=creds("alice"),
    )
    await refused(
        stub.SendMessage(
            pb.SendMessageRequest(message=user_message("late", task_id=asked.task.id)),
            metadata=creds("alice"),
        ),
        "max_concurrent_turns_per_principal",
    )
    task = await stub.GetTask(pb.GetTaskRequest(id=asked.task.id), metadata=creds("alice"))
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED  # still waiting, not harmed


async def test_turns_of_all_principals_together_are_limited(limited):
    _, stub, _, http = await limited(max_concurrent_turns=1)
    immediately = pb.SendMessageConfiguration(return_immediately=True)
    hanging = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("hang"), configuration=immediately),
        metadata=creds("alice"),
    )
    await refused(
        stub.SendMessage(
            pb.SendMessageRequest(message=user_message("echo")), metadata=creds("bob")
        ),
        "max_concurrent_turns",
    )
    assert_429(
        await http.post("/message:send", json=send_body("echo"), headers=headers("bob")),
        "max_concurrent_turns",
    )
    assert (await http.get("/tasks", headers=headers("bob"))).status_code == 200
    await stub.CancelTask(pb.CancelTaskRequest(id=hanging.task.id), metadata=creds("alice"))
    done = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("echo")), metadata=creds("bob")
    )
    assert done.task.status.state == pb.TASK_STATE_COMPLETED


async def test_open_streams_per_principal_are_limited_and_come_back(limited):
    _, stub, _, http = await limited(max_streams_per_principal=1)
    stream = stub.SendStreamingMessage(
        pb.SendMessageRequest(message=user_message("hang")), metadata=creds("alice")
    )
    first = await stream.read()
    task_id = first.task.id or first.status_update.task_id
    assert task_id
    await refused(
        stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=creds("alice")).read(),
        "max_streams_per_principal",
    )
    assert_429(
        await http.post(f"/tasks/{task_id}:subscribe", headers=headers("alice")),
        "max_streams_per_principal",
    )
    # A refused stream started nothing: no second task.
    listed = await stub.ListTasks(pb.ListTasksRequest(), metadata=creds("alice"))
    assert listed.total_size == 1
    # Bob streams as usual.
    bob = stub.SendStreamingMessage(
        pb.SendMessageRequest(message=user_message("echo hi")), metadata=creds("bob")
    )
    assert len([event async for event in bob]) >= 2
    # Alice closes her stream (the task goes on): her slot comes back.
    stream.cancel()

    async def subscribes() -> bool:
        again = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), metadata=creds("alice"))
        try:
            event = await again.read()
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            return False
        again.cancel()
        return event.task.id == task_id

    await eventually(subscribes, 15, "a stream slot given back")
    await stub.CancelTask(pb.CancelTaskRequest(id=task_id), metadata=creds("alice"))


async def test_a_proxy_passes_the_upstreams_refusal_on_with_its_retry_hint(start_service):
    upstream = await start_service(
        store="memory:",
        agent=SCRIPTED,
        rate_limit_per_principal=0.01,
        rate_limit_burst=1,
        **bearer_settings(),
    )
    proxy = await start_service(
        http_port=0, upstream=f"127.0.0.1:{upstream.grpc_port}", **bearer_settings()
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{proxy.http_port}", timeout=20
    ) as http:
        assert (await http.get("/tasks", headers=headers("alice"))).status_code == 200
        refused = await http.get("/tasks", headers=headers("alice"))
        assert_429(refused, "rate_limit_per_principal")
        assert int(refused.headers["Retry-After"]) > 10  # the upstream's hint, not a default
        assert (await http.get("/tasks", headers=headers("bob"))).status_code == 200
