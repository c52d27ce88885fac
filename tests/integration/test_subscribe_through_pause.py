"""SubscribeToTask lives through a pause (A2A 1.0.1 §3.1.6), on every binding, over a real
server: a subscription opened while the task is INPUT_REQUIRED / AUTH_REQUIRED — whether the
turn ended there or the agent waits in ctx.ask() — receives the follow-up's resumption and
ends only at the terminal state; SendStreamingMessage still ends at the pause; resuming with
Last-Event-ID across the pause has no gap and no duplicate; a drain ends a paused task's
subscription with the resumable UNAVAILABLE. (The engine rules: tests/unit/
test_engine_rules.py; the a2a-sdk client on all three bindings: tests/interop/
test_gateway_bindings.py.)"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.integration.test_gateway_http import SSE, V1, message, rpc
from tests.integration.test_lifecycle import state_of

WAIT = 20  # seconds: a stream that does not end fails the test instead of stalling it
PAUSES = [
    ("input more please", "TASK_STATE_INPUT_REQUIRED", "follow-up: the answer"),
    ("auth", "TASK_STATE_AUTH_REQUIRED", "follow-up: the answer"),
    ("ask what?", "TASK_STATE_INPUT_REQUIRED", "you said: the answer"),  # agent in ctx.ask()
]


@pytest.fixture
async def server(start_service):
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", drain_seconds=0.5
    )
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=WAIT) as http,
    ):
        yield service, a2a_pb2_grpc.A2AServiceStub(channel), http


def kinds(events: list[dict]) -> list[str]:
    """Each event as the state it sets, or its kind (`artifact`)."""
    return [state_of(e) or ("artifact" if "artifactUpdate" in e else "?") for e in events]


def answer_text(events: list[dict]) -> str:
    [art] = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    return "".join(p["text"] for p in art["parts"])


async def pause(stub, text: str) -> pb.Task:
    """A task paused by `text`, as SendMessage returned it."""
    task = (await stub.SendMessage(pb.SendMessageRequest(message=user_message(text)))).task
    assert task.status.state in (pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED)
    return task


async def answer(stub, task_id: str) -> pb.Task:
    follow = user_message("the answer", task_id=task_id)
    return (await stub.SendMessage(pb.SendMessageRequest(message=follow))).task


async def sse_subscribe(http: httpx.AsyncClient, binding: str, task_id: str, after: str | None):
    """The SubscribeToTask request of `binding` as an httpx stream context."""
    headers = V1 | ({"Last-Event-ID": after} if after is not None else {})
    if binding == "JSONRPC":
        body = rpc("SubscribeToTask", {"id": task_id})
        return http.stream("POST", "/", json=body, headers=headers)
    return http.stream("GET", f"/tasks/{task_id}:subscribe", headers=headers)


async def read_to_end(stream) -> list[pb.StreamResponse]:
    """The rest of a gRPC stream that was read with read() so far."""
    events = []
    while (event := await asyncio.wait_for(stream.read(), WAIT)) is not grpc.aio.EOF:
        events.append(event)
    return events


def sse_payloads(events: list[tuple]) -> list[dict]:
    """The StreamResponse of each SSE event (JSON-RPC wraps it in a response envelope)."""
    return [data.get("result", data) for _, _, data in events]


# ------------------------------------------------------------------------------------ gRPC


@pytest.mark.parametrize(("text", "paused_state", "reply"), PAUSES)
async def test_grpc_subscription_opened_while_paused_ends_only_at_the_terminal_state(
    server, text, paused_state, reply
):
    _, stub, _ = server
    paused = await pause(stub, text)
    stream = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=paused.id))
    first = await asyncio.wait_for(stream.read(), WAIT)
    assert first.task.id == paused.id
    assert pb.TaskState.Name(first.task.status.state) == paused_state
    done = await answer(stub, paused.id)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    rest = await read_to_end(stream)  # ends by itself, after the terminal state
    names = [
        pb.TaskState.Name(e.status_update.status.state)
        if e.HasField("status_update")
        else e.WhichOneof("payload")
        for e in rest
    ]
    assert names == ["TASK_STATE_WORKING", "artifact_update", "TASK_STATE_COMPLETED"]
    assert rest[1].artifact_update.artifact.parts[0].text == reply
    assert await stream.code() == grpc.StatusCode.OK


async def test_grpc_send_streaming_message_still_ends_at_the_pause(server):
    _, stub, _ = server
    request = pb.SendMessageRequest(message=user_message("input more please"))
    events = [e async for e in stub.SendStreamingMessage(request)]
    assert events[-1].status_update.status.state == pb.TASK_STATE_INPUT_REQUIRED
    follow = pb.SendMessageRequest(message=user_message("x", task_id=events[0].task.id))
    resumed = [e async for e in stub.SendStreamingMessage(follow)]
    assert resumed[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


# --------------------------------------------------------------------------- JSON-RPC, REST


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize(("text", "paused_state", "reply"), PAUSES)
async def test_sse_subscription_opened_while_paused_ends_only_at_the_terminal_state(
    server, binding, text, paused_state, reply
):
    _, stub, http = server
    paused = await pause(stub, text)
    async with await sse_subscribe(http, binding, paused.id, None) as r:
        assert r.status_code == 200
        sse = SSE(r)
        [snapshot] = sse_payloads(await asyncio.wait_for(sse.events(limit=1), WAIT))
        assert snapshot["task"]["status"]["state"] == paused_state
        done = await answer(stub, paused.id)
        assert done.status.state == pb.TASK_STATE_COMPLETED
        rest = await asyncio.wait_for(sse.events(), WAIT)  # until the server ends it
    payloads = sse_payloads(rest)
    assert kinds(payloads) == ["TASK_STATE_WORKING", "artifact", "TASK_STATE_COMPLETED"]
    assert answer_text(payloads) == reply
    assert all(event != "error" for _, event, _ in rest)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_sse_send_streaming_message_ends_at_the_pause_and_resume_crosses_it(server, binding):
    _, stub, http = server
    if binding == "JSONRPC":
        opened = http.stream(
            "POST", "/", json=rpc("SendStreamingMessage", message("input q")), headers=V1
        )
    else:
        opened = http.stream("POST", "/message:stream", json=message("input q"), headers=V1)
    async with opened as r:
        first_turn = await asyncio.wait_for(SSE(r).events(), WAIT)  # ends by itself
    assert kinds(sse_payloads(first_turn))[-1] == "TASK_STATE_INPUT_REQUIRED"
    task_id = sse_payloads(first_turn)[0]["task"]["id"]
    paused_at = first_turn[-1][0]

    async def resumed_from(after: str) -> list[tuple]:
        async with await sse_subscribe(http, binding, task_id, after) as r:
            assert r.status_code == 200
            return await asyncio.wait_for(SSE(r).events(), WAIT)

    # One resumes at the pause itself, one just before it; both are open before the answer
    # or replay what they missed, either way each event once.
    at_pause = asyncio.ensure_future(resumed_from(paused_at))
    before_pause = asyncio.ensure_future(resumed_from(str(int(paused_at) - 1)))
    await asyncio.sleep(0.2)
    assert not at_pause.done() and not before_pause.done()  # a pause does not end them
    done = await answer(stub, task_id)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    after, before = await at_pause, await before_pause
    # Each starts with the task as it was when it was opened (paused), numbered with the
    # last event it includes; then the events after the resume point.
    for resumed in (after, before):
        first = resumed.pop(0)
        assert first[0] == paused_at
        assert sse_payloads([first])[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    ids = [int(i) for i, _, _ in first_turn + after]
    assert ids == list(range(1, ids[-1] + 1)), ids  # no gap, no duplicate across the pause
    assert kinds(sse_payloads(after)) == ["TASK_STATE_WORKING", "artifact", "TASK_STATE_COMPLETED"]
    assert [i for i, _, _ in before] == [paused_at] + [i for i, _, _ in after]
    assert kinds(sse_payloads(before))[0] == "TASK_STATE_INPUT_REQUIRED"


# ---------------------------------------------------------------------------------- drain


async def test_drain_ends_a_paused_tasks_subscriptions_with_the_resumable_unavailable(server):
    service, stub, http = server
    paused = await pause(stub, "input more please")
    grpc_stream = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=paused.id))
    assert (await asyncio.wait_for(grpc_stream.read(), WAIT)).task.id == paused.id
    async with await sse_subscribe(http, "HTTP+JSON", paused.id, None) as r:
        sse = SSE(r)
        [(snapshot_id, _, _)] = await asyncio.wait_for(sse.events(limit=1), WAIT)
        stopping = asyncio.ensure_future(service.stop())
        ended = await asyncio.wait_for(sse.events(), WAIT)
    with pytest.raises(grpc.aio.AioRpcError) as cut:
        await asyncio.wait_for(grpc_stream.read(), WAIT)
    await asyncio.wait_for(stopping, WAIT)
    assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (cut.value.details() or "")
    [(_, event, data)] = ended
    assert event == "error" and data["error"]["status"] == "UNAVAILABLE"
    assert "Last-Event-ID" in data["error"]["message"]  # says how to pick the stream up again
    assert snapshot_id is not None
