"""The a2a_service metadata extension over a real server: the card advertises
`urn:a2a-service:metadata:v1` (not required) on every binding's card, and a test agent's tool
progress and token usage arrive as WORKING status updates with `a2a_service.tool` /
`a2a_service.usage` — over gRPC (grpcio stub) and REST SSE (httpx) alike, with the input
summarised by shape and no secret or local path on the wire. (The sanitising rules: tests/
unit/test_agent_metadata.py.)"""

from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.agent_metadata import EXTENSION_URI
from tests.agents import tool_steps
from tests.conftest import user_message
from tests.integration.test_gateway_http import SSE, V1, message

SECRETS = ("/home/alice", "notes.txt", "sk-live-123", "abcdefghijklmnopqrst", '"abc"')


@pytest.fixture
async def server(start_service):
    service = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent")
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=20) as http,
    ):
        yield a2a_pb2_grpc.A2AServiceStub(channel), http


def ours(updates: list[dict]) -> list[dict]:
    """The a2a_service metadata of each status update that carries some."""
    return [u["metadata"]["a2a_service"] for u in updates if "a2a_service" in u.get("metadata", {})]


def check_extension_events(updates: list[dict], raw: str) -> None:
    """`updates`: the statusUpdate objects of one `tools` turn, in order, as ProtoJSON."""
    for leak in SECRETS:
        assert leak not in raw, leak
    meta = ours(updates)
    tools = [m["tool"] for m in meta if "tool" in m]
    use_id = tools[0]["toolUseId"]
    assert [(t["status"], t["name"], t["toolUseId"]) for t in tools] == tool_steps(use_id)
    assert tools[0]["inputSummary"] == {"path": "string(21)", "api_key": "redacted"}
    assert tools[1]["inputChars"] == 13
    assert tools[2]["inputSummary"] == {"path": "string(21)", "limit": "number"}
    assert tools[3]["result"] == {"text": "read [path]", "token": "[redacted]", "lines": 3}
    assert tools[5]["result"] == "[redacted]"
    assert [m["usage"] for m in meta if "usage" in m] == [
        {"inputTokens": 120, "outputTokens": 30, "totalTokens": 150}
    ]
    carrying = [u for u in updates if "a2a_service" in u.get("metadata", {})]
    assert {u["status"]["state"] for u in carrying} == {"TASK_STATE_WORKING"}
    assert updates[-1]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_tool_and_usage_metadata_over_grpc(server):
    stub, _ = server
    request = pb.SendMessageRequest(message=user_message("tools"))
    events = [e async for e in stub.SendStreamingMessage(request)]
    updates = [
        json_format.MessageToDict(e.status_update) for e in events if e.HasField("status_update")
    ]
    # On gRPC every event also carries its number (a2a_service.eventId, in order): set
    # beside the agent's own keys, then left out of what the agent's keys are checked for.
    every = [
        json_format.MessageToDict(getattr(e, e.WhichOneof("payload")).metadata) for e in events
    ]
    assert [m["a2a_service"]["eventId"] for m in every] == [
        str(n) for n in range(1, len(events) + 1)
    ]
    for update in updates:
        update["metadata"]["a2a_service"].pop("eventId")
    for update in updates:
        if update["metadata"]["a2a_service"] == {}:
            del update["metadata"]["a2a_service"]
        if update["metadata"] == {}:
            del update["metadata"]
    check_extension_events(updates, str(events))


async def test_tool_and_usage_metadata_over_rest_sse(server):
    _, http = server
    async with http.stream("POST", "/message:stream", json=message("tools"), headers=V1) as r:
        events = await SSE(r).events()
    updates = [data["statusUpdate"] for _, _, data in events if "statusUpdate" in data]
    check_extension_events(updates, str(events))


async def test_the_card_advertises_the_extension_not_required(server):
    stub, http = server
    card = (await http.get("/.well-known/agent-card.json")).json()
    [ext] = [e for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION_URI]
    assert ext["uri"] == "urn:a2a-service:metadata:v1"
    assert not ext.get("required", False)
    assert "a2a_service" in ext["description"] and "tool.status" in ext["description"]
    # Calling it without activating the extension is fine: it is optional.
    reply = await stub.SendMessage(pb.SendMessageRequest(message=user_message("tools")))
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
