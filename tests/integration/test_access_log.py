"""The access log on a real server: one line per call on every binding, streams included
(written when the stream ends, with the task id seen in its events), refusals of
authentication with their outcome, and none at all with `access_log = false`."""

from __future__ import annotations

import logging

import grpc
import httpx

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.push_util import eventually
from tests.security_util import TOKENS, bearer_settings

V1 = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS['alice']}"}
STREAM = {"message": {"messageId": "s1", "role": "ROLE_USER", "parts": [{"text": "slow 2"}]}}


def _lines(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.name.startswith("service.access")]


async def test_one_line_per_call_streams_included(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", **bearer_settings()
    )
    metadata = (("authorization", f"Bearer {TOKENS['alice']}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = pb.SendMessageRequest(message=user_message("slow 2"))
        events = [e async for e in stub.SendStreamingMessage(request, metadata=metadata)]
    base = f"http://127.0.0.1:{service.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=20) as http:
        rest = await http.post("/message:stream", json=STREAM, headers=V1)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": STREAM}
        jsonrpc = await http.post("/", json=body, headers=V1)
        refused = await http.get("/tasks", headers={"A2A-Version": "1.0"})
        card = await http.get("/.well-known/agent-card.json")
        health = await http.get("/health/ready")
    assert rest.status_code == jsonrpc.status_code == 200 and refused.status_code == 401
    assert card.status_code == health.status_code == 200

    lines = _lines(caplog)
    streams = [line for line in lines if line["method"] == "SendStreamingMessage"]
    assert sorted(line["binding"] for line in streams) == ["grpc", "jsonrpc", "rest"]
    for line in streams:
        assert line["outcome"] == "OK" and line["principal"] == "bearer:alice"
        assert line["task_id"]  # from the stream's first event
    assert events[0].task.id in {line["task_id"] for line in streams}
    [refusal] = [line for line in lines if line["outcome"] == "UNAUTHENTICATED"]
    assert refusal["binding"] == "rest" and refusal["method"] == "-"
    assert len(lines) == 4  # the card and the probe are not calls


async def test_no_line_when_the_access_log_is_off(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(http_port=0, store="memory:", access_log=False)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await stub.SendMessage(pb.SendMessageRequest(message=user_message("hi")))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        assert (await http.get("/tasks", headers={"A2A-Version": "1.0"})).status_code == 200
    assert _lines(caplog) == []


async def test_refused_credentials_are_flood_limited(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(http_port=0, store="memory:", **bearer_settings())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        for i in range(30):
            guess = {"A2A-Version": "1.0", "Authorization": f"Bearer guess-{i:020d}"}
            assert (await http.get("/tasks", headers=guess)).status_code == 401
        assert (await http.get("/tasks", headers=V1)).status_code == 200
    lines = _lines(caplog)
    refusals = [line for line in lines if line["outcome"] == "UNAUTHENTICATED"]
    assert len(refusals) <= 10  # a few per minute get through (fewer if others came first)
    assert [line["outcome"] for line in lines if line["principal"]] == ["OK"]  # not limited


async def test_a_call_the_caller_abandons_is_cancelled(start_service, caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        stream = stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message("hang")))
        first = await stream.read()  # the task snapshot: the call is running
        stream.cancel()

        async def written() -> bool:
            return any(line["outcome"] == "CANCELLED" for line in _lines(caplog))

        await eventually(written, 10, "the access line of the abandoned stream")
    [line] = [line for line in _lines(caplog) if line["outcome"] == "CANCELLED"]
    assert line["method"] == "SendStreamingMessage" and line["task_id"] == first.task.id
