"""`call_interceptors` on a real server: a configured interceptor runs on every binding
(gRPC, JSON-RPC, REST, streams included), after the built-in checks, and its refusal is
answered in each binding's own terms and written once to the access log; a spec that names
no interceptor stops startup, naming the setting."""

from __future__ import annotations

import logging

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.server import StartupError
from tests import interceptors
from tests.conftest import user_message
from tests.grpc_util import expect_error

V1 = {"A2A-Version": "1.0"}
SEND = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}


@pytest.fixture(autouse=True)
def _fresh_lists():
    interceptors.BEFORE.clear()
    interceptors.AFTER.clear()


@pytest.mark.parametrize("spec", ["tests.interceptors:Audit", "tests.interceptors:make_audit"])
async def test_a_configured_interceptor_runs_on_every_binding(start_service, caplog, spec):
    caplog.set_level(logging.INFO, logger="service.access")
    service = await start_service(http_port=0, store="memory:", call_interceptors=[spec])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        sent = await stub.SendMessage(pb.SendMessageRequest(message=user_message("hi")))
        events = [
            e
            async for e in stub.SendStreamingMessage(pb.SendMessageRequest(message=user_message()))
        ]
        refused = await expect_error(
            stub.CancelTask(pb.CancelTaskRequest(id=sent.task.id)),
            grpc.StatusCode.FAILED_PRECONDITION,
            "UNSUPPORTED_OPERATION",
        )
    assert events and "not cancelled here" in (refused.details() or "")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        rest = await http.post("/message:send", json=SEND, headers=V1)
        call = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": SEND}
        jsonrpc = await http.post("/", json=call, headers=V1)
        cancel = {"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": "t"}}
        jsonrpc_cancel = await http.post("/", json=cancel, headers=V1)
        rest_cancel = await http.post(f"/tasks/{sent.task.id}:cancel", headers=V1)
        wrong_version = await http.post("/message:send", json=SEND, headers={"A2A-Version": "9"})
    assert rest.status_code == jsonrpc.status_code == 200 and "error" not in jsonrpc.json()
    assert jsonrpc_cancel.json()["error"]["code"] == -32004
    assert "not cancelled here" in jsonrpc_cancel.json()["error"]["message"]
    assert rest_cancel.status_code == 400 and "not cancelled here" in rest_cancel.text
    assert wrong_version.status_code == 400  # refused by the built-in check, before ours

    sends = [a for a in interceptors.AFTER if a[1].startswith("Send")]
    assert sorted(sends) == [
        ("grpc", "SendMessage", "OK"),
        ("grpc", "SendStreamingMessage", "OK"),
        ("jsonrpc", "SendMessage", "OK"),
        ("rest", "SendMessage", "OK"),
    ]
    cancels = [b for b in interceptors.BEFORE if b[1] == "CancelTask"]
    assert sorted(cancels) == [
        ("grpc", "CancelTask"),
        ("jsonrpc", "CancelTask"),
        ("rest", "CancelTask"),
    ]
    assert not [a for a in interceptors.AFTER if a[1] == "CancelTask"]  # refused: no `after`
    assert len(interceptors.BEFORE) == 7  # the call with a wrong version never reached it

    lines = [r.fields for r in caplog.records if r.name.startswith("service.access")]
    refusals = [line for line in lines if line["outcome"] == "UNSUPPORTED_OPERATION"]
    assert sorted(line["binding"] for line in refusals) == ["grpc", "jsonrpc", "rest"]


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("tests.interceptors:NotOne", "expected an object with 'async def before"),
        ("tests.interceptors:Missing", "has no attribute 'Missing'"),
        ("no.such.module:Audit", "cannot import module 'no.such.module'"),
        ("tests.interceptors", "expected 'package.module:attr'"),
    ],
)
async def test_a_spec_that_names_no_interceptor_stops_startup(start_service, spec, why):
    with pytest.raises(StartupError, match="call_interceptors: call interceptor") as raised:
        await start_service(store="memory:", call_interceptors=[spec])
    assert why in str(raised.value)
