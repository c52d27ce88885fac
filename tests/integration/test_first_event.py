"""The first event does not wait for the agent (`first_event_grace_ms`): a streaming or
returnImmediately send whose agent stays silent gets its task, so the caller has an id; an
agent that answers with a direct Message within the grace still can. The agent `later KEY`
says nothing until the test opens its gate; a grace of a minute stands for "the agent was
quick", so no assertion depends on timing."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.agents import GATES
from tests.conftest import user_message

V1 = {"A2A-Version": "1.0"}
LONG_GRACE = 60_000.0  # the quick agent always answers within it


def gate() -> str:
    """A new gate for one `later` agent; the test opens it with GATES[key].set()."""
    key = uuid.uuid4().hex
    GATES[key] = asyncio.Event()
    return key


async def serve(start_service, grace_ms: float):
    return await start_service(
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        http_port=0,
        first_event_grace_ms=grace_ms,
    )


def request(text: str, **config) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest(message=user_message(text))
    for key, value in config.items():
        setattr(req.configuration, key, value)
    return req


def body(text: str, **config) -> dict:
    sent = {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    }
    if config:
        sent["configuration"] = config
    return sent


async def sse_data(response: httpx.Response):
    """The JSON of each SSE event, as it arrives."""
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


@pytest.fixture
async def grpc_stub(start_service, request):
    service = await serve(start_service, request.param)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


@pytest.fixture
async def http(start_service, request):
    service = await serve(start_service, request.param)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        yield client


@pytest.mark.parametrize("grpc_stub", [50.0], indirect=True)
async def test_grpc_stream_of_a_silent_agent_starts_with_its_task(grpc_stub):
    key = gate()
    stream = aiter(grpc_stub.SendStreamingMessage(request(f"later {key}")))
    first = await anext(stream)
    assert first.WhichOneof("payload") == "task"
    assert first.task.id and first.task.status.state == pb.TASK_STATE_SUBMITTED
    got = await grpc_stub.GetTask(pb.GetTaskRequest(id=first.task.id))  # an id the caller can use
    assert got.id == first.task.id
    GATES[key].set()  # a direct reply after the grace completes the task
    rest = [event async for event in stream]
    assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert rest[-1].status_update.status.message.parts[0].text == f"later {key}"


@pytest.mark.parametrize("grpc_stub", [50.0], indirect=True)
async def test_grpc_silent_stream_can_be_canceled_by_its_task_id(grpc_stub):
    key = gate()
    stream = aiter(grpc_stub.SendStreamingMessage(request(f"later {key}")))
    first = await anext(stream)
    canceled = await grpc_stub.CancelTask(pb.CancelTaskRequest(id=first.task.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    rest = [event async for event in stream]
    assert rest[-1].status_update.status.state == pb.TASK_STATE_CANCELED


@pytest.mark.parametrize("grpc_stub", [LONG_GRACE], indirect=True)
async def test_grpc_quick_direct_reply_is_still_a_message(grpc_stub):
    events = [event async for event in grpc_stub.SendStreamingMessage(request("reply hi"))]
    assert [e.WhichOneof("payload") for e in events] == ["message"]
    assert events[0].message.parts[0].text == "hi"
    answer = await grpc_stub.SendMessage(request("reply yo", return_immediately=True))
    assert answer.WhichOneof("payload") == "message" and answer.message.parts[0].text == "yo"


@pytest.mark.parametrize("grpc_stub", [50.0], indirect=True)
async def test_grpc_return_immediately_of_a_silent_agent_is_its_task(grpc_stub):
    key = gate()
    answer = await grpc_stub.SendMessage(request(f"later {key}", return_immediately=True))
    assert answer.task.status.state == pb.TASK_STATE_SUBMITTED
    GATES[key].set()


@pytest.mark.parametrize("grpc_stub", [0.0], indirect=True)
async def test_grpc_no_grace_sends_the_task_at_once(grpc_stub):
    events = [event async for event in grpc_stub.SendStreamingMessage(request("reply hi"))]
    assert events[0].task.status.state == pb.TASK_STATE_SUBMITTED
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert events[-1].status_update.status.message.parts[0].text == "hi"


@pytest.mark.parametrize("http", [50.0], indirect=True)
async def test_rest_stream_of_a_silent_agent_starts_with_its_task(http):
    key = gate()
    async with http.stream("POST", "/message:stream", json=body(f"later {key}"), headers=V1) as r:
        events = sse_data(r)
        first = await anext(events)
        assert first["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        GATES[key].set()
        rest = [event async for event in events]
    assert rest[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rest[-1]["statusUpdate"]["taskId"] == first["task"]["id"]


@pytest.mark.parametrize("http", [50.0], indirect=True)
async def test_jsonrpc_stream_of_a_silent_agent_starts_with_its_task(http):
    key = gate()
    call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    call["params"] = body(f"later {key}")
    async with http.stream("POST", "/", json=call, headers=V1) as r:
        events = sse_data(r)
        first = await anext(events)
        assert first["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        GATES[key].set()
        rest = [event async for event in events]
    assert rest[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("http", [LONG_GRACE], indirect=True)
async def test_rest_quick_direct_reply_is_still_a_message(http):
    async with http.stream("POST", "/message:stream", json=body("reply hi"), headers=V1) as r:
        events = [event async for event in sse_data(r)]
    assert len(events) == 1 and events[0]["message"]["parts"][0]["text"] == "hi"
    sent = await http.post(
        "/message:send", json=body("reply yo", returnImmediately=True), headers=V1
    )
    assert sent.json()["message"]["parts"][0]["text"] == "yo"


@pytest.mark.parametrize("http", [50.0], indirect=True)
async def test_v03_message_stream_of_a_silent_agent_starts_with_its_task(http):
    key = gate()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": f"later {key}"}],
            }
        },
    }
    async with http.stream("POST", "/", json=call) as r:
        events = sse_data(r)
        first = await anext(events)
        assert first["result"]["kind"] == "task"
        assert first["result"]["status"]["state"] == "submitted"
        GATES[key].set()
        rest = [event async for event in events]
    assert rest[-1]["result"]["status"]["state"] == "completed"
