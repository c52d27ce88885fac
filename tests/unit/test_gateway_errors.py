"""Gateway error paths that a real servicer rarely takes: unexpected exceptions (sanitized,
with a correlation id) and errors in the middle of a stream (one `event: error`, then the
end), on both HTTP bindings. The app runs in-process over httpx's ASGI transport with a
stand-in invoker."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from gateway.app import build_app
from gen import a2a_pb2 as pb
from service.protocol.errors import TaskNotFoundError

SERVICE = pb.DESCRIPTOR.services_by_name["A2AService"]
V1 = {"A2A-Version": "1.0"}


class _Events:
    """A numbered stream: two events, then a failure."""

    def __init__(self, failure: Exception) -> None:
        self.seq = 6  # the engine's numbering: the next events are 7 and 8
        self._failure = failure
        self._left = [
            pb.StreamResponse(task=pb.Task(id="t1")),
            pb.StreamResponse(task=pb.Task(id="t1")),
        ]

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._left:
            raise self._failure
        self.seq += 1
        return self._left.pop(0)


class _Invoker:
    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    async def unary(self, name, request, call):
        raise self.failure

    async def stream(self, name, request, call):
        return _Events(self.failure)

    async def close(self):
        return None


def _client(failure: Exception) -> httpx.AsyncClient:
    app = build_app(
        invoker=_Invoker(failure),
        service=SERVICE,
        card=pb.AgentCard(name="x"),
        is_serving=lambda: True,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


def _events(text: str) -> list[dict]:
    out = []
    for block in text.replace("\r\n", "\n").strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
        out.append(fields)
    return out


async def test_unexpected_exceptions_are_sanitized_with_a_reference(caplog):
    async with _client(RuntimeError("db password hunter2 in /srv/app")) as client:
        with caplog.at_level(logging.ERROR):
            rest = await client.get("/tasks/t1", headers=V1)
            rpc = await client.post(
                "/",
                json={"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": "t1"}},
                headers=V1,
            )
    assert rest.status_code == 500 and rest.json()["error"]["status"] == "INTERNAL"
    assert (
        rpc.status_code == 200 and rpc.json()["error"]["code"] == -32603 and rpc.json()["id"] == 9
    )
    for body in (rest.text, rpc.text):
        assert "hunter2" not in body and "/srv" not in body and "ref" in body
    ref = rest.json()["error"]["details"][0]["metadata"]["ref"]
    assert any(ref in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.parametrize("binding", ["rest", "jsonrpc"])
async def test_an_error_mid_stream_is_one_error_event_then_the_end(binding):
    async with _client(TaskNotFoundError("Task t1 vanished.")) as client:
        if binding == "rest":
            r = await client.get("/tasks/t1:subscribe", headers=V1)
        else:
            r = await client.post(
                "/",
                json={
                    "jsonrpc": "2.0",
                    "id": "x",
                    "method": "SubscribeToTask",
                    "params": {"id": "t1"},
                },
                headers=V1,
            )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert [e.get("id") for e in events] == ["7", "8", None]
    assert events[-1]["event"] == "error"
    error = json.loads(events[-1]["data"])
    if binding == "rest":
        assert error["error"]["code"] == 404 and error["error"]["status"] == "NOT_FOUND"
        assert error["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    else:
        assert error["id"] == "x" and error["error"]["code"] == -32001
        assert json.loads(events[0]["data"])["id"] == "x"
