"""New streams refused while the event loop lags (`stream_refusal_lag_ms`, docs/operations.md
"Event-loop lag"), on a real server: an agent blocks the loop on purpose (`block N`), and
then every binding refuses a new stream with the limits' refusal and its retry hint —
gRPC (1.0 and v0.3), JSON-RPC and REST over SSE (1.0 and v0.3), the unix socket — while
a stream already open goes on, unary calls are served, readiness stays ready and says why,
and the gauge shows the lag; once the lag has left the meter's window, streams are taken
again. No timings are asserted: the loop is blocked far past the limit, and the meter holds
the delay for its window (5 s), re-blocked before each group of checks."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc, a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import expect_error
from tests.integration.test_transport_unix import UnixClient
from tests.push_util import eventually

SCRIPTED = "tests.agents:ScriptedAgent"
LIMIT_MS = 400.0
BLOCK = "block 1.2"  # far past the limit, whatever the machine's own lag
SETTING = "stream_refusal_lag_ms"
V1 = {"A2A-Version": "1.0"}


@pytest.fixture
def socket_dir():
    path = tempfile.mkdtemp(prefix="a2a-lag-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def server(start_service, socket_dir):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent=SCRIPTED,
        stream_refusal_lag_ms=LIMIT_MS,
        metrics_endpoint=True,
        unix_socket=os.path.join(socket_dir, "a2a.sock"),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        yield service, channel


def new_http(service) -> httpx.AsyncClient:
    """A client of its own for each request: a connection answered 429 is paused (HTTP
    back-pressure), which is not what this test is about."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=20)


async def post(service, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    async with new_http(service) as http:
        return await http.post(path, json=body, headers=headers)


async def block_the_loop(service, stub) -> None:
    """A unary send whose agent blocks the loop; answered (a unary call is served) once the
    loop runs again, when the meter has seen the delay and holds it."""
    reply = await stub.SendMessage(pb.SendMessageRequest(message=user_message(BLOCK)))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert service.loop_lag.lag_ms() > LIMIT_MS


async def refused_grpc(call) -> None:
    err = await expect_error(call, grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED")
    details = {d.TypeName(): d for d in rpc_status.from_call(err).details}
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    details["google.rpc.ErrorInfo"].Unpack(info)
    details["google.rpc.RetryInfo"].Unpack(retry)
    assert info.metadata["setting"] == SETTING and info.metadata["limit"] == "400", info
    assert retry.retry_delay.ToNanoseconds() >= 1e9
    assert "event loop runs" in err.details()


def error_info(details: list[dict]) -> dict:
    return next(d for d in details if d["@type"].endswith("ErrorInfo"))


def refused_http(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    details = error["details"] if "details" in error else error["data"]
    info = error_info(details)
    assert info["reason"] == "RESOURCE_EXHAUSTED" and info["metadata"]["setting"] == SETTING


def jsonrpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def v1_message(text: str) -> dict:
    return {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    }


def v03_message(text: str) -> dict:
    return {
        "message": {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
    }


async def test_new_streams_are_refused_on_every_binding_while_the_loop_lags(server):
    service, channel = server
    stub = a2a_pb2_grpc.A2AServiceStub(channel)
    v03 = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
    # Before: a stream is taken, and stays open through everything below.
    ticking = stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("tick")))
    first = await ticking.read()
    task_id = first.task.id or first.status_update.task_id
    assert task_id

    # gRPC, 1.0 and v0.3: a new send and a new subscription.
    await block_the_loop(service, stub)
    await refused_grpc(
        stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("echo no"))).read()
    )
    await refused_grpc(stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id)).read())
    v03_send = a2a_v0_3_pb2.SendMessageRequest()
    v03_send.request.message_id = uuid.uuid4().hex
    v03_send.request.role = a2a_v0_3_pb2.ROLE_USER
    v03_send.request.content.add(text="echo no")
    await refused_grpc(
        v03.SendStreamingMessage(v03_send, metadata=(("a2a-version", "0.3"),)).read()
    )
    await refused_grpc(
        v03.TaskSubscription(
            a2a_v0_3_pb2.TaskSubscriptionRequest(name=f"tasks/{task_id}"),
            metadata=(("a2a-version", "0.3"),),
        ).read()
    )

    # HTTP: JSON-RPC and REST over SSE, 1.0 and v0.3.
    await block_the_loop(service, stub)
    refused_http(await post(service, "/", jsonrpc("SendStreamingMessage", v1_message("x")), V1))
    refused_http(await post(service, "/", jsonrpc("SubscribeToTask", {"id": task_id}), V1))
    refused_http(await post(service, "/message:stream", v1_message("x"), V1))
    refused_http(await post(service, f"/tasks/{task_id}:subscribe", {}, V1))
    refused_http(await post(service, "/", jsonrpc("message/stream", v03_message("x"))))
    refused_http(await post(service, "/", jsonrpc("tasks/resubscribe", {"id": task_id})))
    v03_rest = {"message": {"messageId": "m1", "role": "ROLE_USER", "content": [{"text": "x"}]}}
    refused_http(await post(service, "/v1/message:stream", v03_rest))

    # The unix socket: an error frame, the same refusal.
    await block_the_loop(service, stub)
    client = await UnixClient.open(service.settings.unix_socket)
    try:
        rid = await client.request("SendStreamingMessage", v1_message("x"), V1)
        [frame] = await client.frames(rid)
        info = error_info(frame["error"]["data"])
        assert info["metadata"]["setting"] == SETTING, frame
        # a unary call on the same connection is served
        rid = await client.request("GetTask", {"id": task_id}, V1)
        [frame] = await client.frames(rid)
        assert frame["result"]["id"] == task_id
    finally:
        await client.aclose()

    # Unary calls are served, the open stream goes on, readiness says why, the gauge shows it.
    await block_the_loop(service, stub)
    done = await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo yes")))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    async with new_http(service) as http:
        listed = await http.get("/tasks", headers=V1)
        assert listed.status_code == 200, listed.text
        ready = await http.get("/health/ready")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "ready" and body["newStreams"] == "refused"
        assert body["eventLoopLagMs"] > LIMIT_MS
        metrics = (await http.get("/metrics")).text
    [value] = re.findall(r"^a2a_event_loop_lag_milliseconds\S* (\S+)$", metrics, re.M)
    assert float(value) > LIMIT_MS
    event = await ticking.read()
    assert event.status_update.task_id == task_id

    # Once the delay has left the meter's window, streams are taken again, and readiness
    # says nothing more.
    async def streams_taken() -> bool:
        call = stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("echo ok")))
        try:
            events = [e async for e in call]
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            return False
        return bool(events)

    await eventually(streams_taken, 30, "new streams taken once the lag has passed")
    async with new_http(service) as http:
        async with http.stream(
            "POST", "/message:stream", json=v1_message("echo ok"), headers=V1
        ) as r:
            assert r.status_code == 200
            assert [line async for line in r.aiter_lines() if line.startswith("data:")]
        assert (await http.get("/health/ready")).json() == {"status": "ready"}
    ticking.cancel()
    await stub.CancelTask(pb.CancelTaskRequest(id=task_id))
    await asyncio.sleep(0)
