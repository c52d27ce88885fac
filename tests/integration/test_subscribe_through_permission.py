"""SubscribeToTask on a task paused for a permission decision, over a real server: the
subscription opened during the pause receives the acknowledgement (a WORKING update with
the permission_ack part and `a2a_service.inputReceived`), the tool's result and the
terminal state, and only then ends; on gRPC and both SSE bindings, and after a kill -9
during the pause (where the answer starts a new turn)."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.integration.test_gateway_http import SSE
from tests.integration.test_subscribe_through_pause import read_to_end, sse_payloads, sse_subscribe
from tests.permission_util import Client, answer, envelope_of, ours, text_message
from tests.process import ServerProcess, free_port

AGENT = "tests.permission_agents:PermissionAgent"
WAIT = 20


def check_resumption(events: list[pb.StreamResponse], paused: pb.Task, result: str) -> None:
    """The events after the pause: WORKING updates, the ack among them, then the tool's
    artifact, and COMPLETED last."""
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    acks = [
        (e.status_update, p.data.struct_value)
        for e in events
        if e.HasField("status_update") and e.status_update.status.HasField("message")
        for p in e.status_update.status.message.parts
        if p.WhichOneof("content") == "data"
    ]
    [(update, ack)] = acks
    assert update.status.state == pb.TASK_STATE_WORKING
    fields = json_format.MessageToDict(ack)
    env = envelope_of(paused)
    assert fields["kind"] == "permission_ack" and fields["accepted"] is True
    assert fields["inputId"] == env["inputId"] and fields["decision"] == "allow_once"
    assert ours(update.metadata)["inputReceived"]["inputId"] == env["inputId"]
    texts = [
        p.text
        for e in events
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    ]
    assert texts == [result]
    assert events.index(next(e for e in events if e.HasField("artifact_update"))) > events.index(
        next(e for e in events if e.HasField("status_update") and e.status_update is update)
    )


@pytest.fixture
async def server(start_service):
    service = await start_service(http_port=0, store="memory:", agent=AGENT)
    client = Client.of(service, "GRPC")
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=WAIT) as http,
    ):
        yield client, a2a_pb2_grpc.A2AServiceStub(channel), http
    await client.close()


async def test_grpc_subscription_during_a_permission_pause_gets_the_ack_and_the_rest(server):
    client, stub, _ = server
    paused = await client.send(text_message("tool shell /srv"))
    assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
    stream = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=paused.id))
    first = await asyncio.wait_for(stream.read(), WAIT)
    assert first.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    done = await client.send(answer(paused, "allow_once"))
    assert done.status.state == pb.TASK_STATE_COMPLETED
    check_resumption(await read_to_end(stream), paused, "ran shell on /srv")
    assert await stream.code() == grpc.StatusCode.OK


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_sse_subscription_during_a_permission_pause_gets_the_ack_and_the_rest(
    server, binding
):
    client, _, http = server
    paused = await client.send(text_message("tool shell /srv"))
    async with await sse_subscribe(http, binding, paused.id, None) as r:
        assert r.status_code == 200
        sse = SSE(r)
        [snapshot] = sse_payloads(await asyncio.wait_for(sse.events(limit=1), WAIT))
        assert snapshot["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        rest = await asyncio.wait_for(sse.events(), WAIT)  # until the server ends it
    assert all(event != "error" for _, event, _ in rest)
    events = [json_format.ParseDict(p, pb.StreamResponse()) for p in sse_payloads(rest)]
    check_resumption(events, paused, "ran shell on /srv")


async def test_a_subscription_after_a_kill9_during_the_pause_follows_the_new_turn(tmp_path):
    http_port = free_port()
    args = ("--data-dir", str(tmp_path / "data"), "--agent", AGENT, "--http-port", str(http_port))
    first = ServerProcess(*args).start()
    client = Client("GRPC", first.address, f"http://127.0.0.1:{http_port}")
    try:
        paused = await client.send(text_message("tool shell /srv"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
    finally:
        await client.close()
        first.kill9()

    second = ServerProcess(*args).start()
    client = Client("GRPC", second.address, f"http://127.0.0.1:{http_port}")
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stream = a2a_pb2_grpc.A2AServiceStub(channel).SubscribeToTask(
                pb.SubscribeToTaskRequest(id=paused.id)
            )
            first_event = await asyncio.wait_for(stream.read(), WAIT)
            assert first_event.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
            done = await client.send(answer(paused, "allow_once"))
            assert done.status.state == pb.TASK_STATE_COMPLETED
            check_resumption(await read_to_end(stream), paused, "ran shell on /srv (resumed)")
            assert await stream.code() == grpc.StatusCode.OK
    finally:
        await client.close()
        assert second.stop() == 0
