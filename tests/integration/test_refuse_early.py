"""A part too large for any media type is refused from the request's bytes, before the
message is decoded (service.inputs.early), with the same protocol error the full check
gives: INVALID_ARGUMENT / 400 / -32602, INVALID_PARAMS, the part's field named."""

from __future__ import annotations

import json
import uuid

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import error_details, expect_error

V1 = {"A2A-Version": "1.0"}
BIG = 10 * 1024 * 1024  # over every default part limit, under max_request_bytes (16 MiB)
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


@pytest.fixture
async def service(start_service):
    return await start_service(store="memory:", agent="tests.agents:HumanLoopAgent", http_port=0)


def big_data() -> list[dict]:
    """About BIG bytes of JSON as many small objects (the costly shape to decode)."""
    row = {"name": "item", "value": 12345}
    return [row] * (BIG // len(json.dumps(row)))


def http_message(data: object) -> dict:
    return {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": "look"}, {"data": data}],
    }


def reason_and_fields(details: list[dict]) -> tuple[str, list[str]]:
    [info] = [d for d in details if d["@type"] == ERROR_INFO]
    fields = [
        v["field"] for d in details if d["@type"] == BAD_REQUEST for v in d["fieldViolations"]
    ]
    return info["reason"], fields


async def test_grpc_refuses_a_10_mib_data_part(service):
    request = pb.SendMessageRequest(message=user_message("look"))
    part = request.message.parts.add()
    part.data.string_value = "x" * BIG
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for call in (stub.SendMessage, stub.SendStreamingMessage):
            rpc = call(request)
            coro = rpc if call is stub.SendMessage else rpc.read()
            err = await expect_error(coro, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS")
            _, violations = error_details(err)
            assert violations[0][0] == "message.parts[1].data"


async def test_rest_refuses_a_10_mib_data_part(service):
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=30
    ) as client:
        sent = {"message": http_message(big_data())}
        for path in ("/message:send", "/message:stream"):
            r = await client.post(path, json=sent, headers=V1)
            assert r.status_code == 400, r.text[:300]
            error = r.json()["error"]
            assert reason_and_fields(error["details"]) == (
                "INVALID_PARAMS",
                ["message.parts[1].data"],
            )


async def test_jsonrpc_refuses_a_10_mib_data_part(service):
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=30
    ) as client:
        for method in ("SendMessage", "SendStreamingMessage"):
            call = {
                "jsonrpc": "2.0",
                "id": "big-1",
                "method": method,
                "params": {"message": http_message({"blob": "y" * BIG})},
            }
            r = await client.post("/", json=call, headers=V1)
            body = r.json()
            assert body["id"] == "big-1" and body["error"]["code"] == -32602, r.text[:300]
            assert reason_and_fields(body["error"]["data"]) == (
                "INVALID_PARAMS",
                ["message.parts[1].data"],
            )


async def test_parts_within_the_limits_still_pass(service):
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=30
    ) as client:
        sent = {"message": http_message({"rows": [{"a": 1}] * 1000, "note": 'x [ { \\" y'})}
        r = await client.post("/message:send", json=sent, headers=V1)
        assert r.status_code == 200, r.text[:300]
        assert r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
