"""Unknown JSON fields over the wire, on JSON-RPC and REST (httpx against a real server):
ignored by default — in the request itself (JSON-RPC `params`, a REST body), inside the
message, its parts, the configuration, a push config's authentication — and refused with
InvalidParams naming the field when `json_unknown_fields = "reject"`; nothing runs then.
(The walk itself: tests/unit/test_unknown_fields.py.)"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.integration.test_gateway_http import SSE, V1, reason, rpc, violations

# (where the unknown member is, the SendMessageRequest document carrying it)
PLACES = {
    "top level": ("futureField", lambda body: body | {"futureField": {"x": 1}}),
    "inside message": (
        "message.futureField",
        lambda body: body | {"message": body["message"] | {"futureField": True}},
    ),
    "inside a part": (
        "message.parts[0].futureField",
        lambda body: (
            body
            | {"message": body["message"] | {"parts": [{"text": "echo hi", "futureField": "x"}]}}
        ),
    ),
    "inside configuration": (
        "configuration.futureField",
        lambda body: body | {"configuration": {"historyLength": 5, "futureField": 1}},
    ),
}


def send_body() -> dict:
    return {
        "message": {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": "echo hi"}],
        }
    }


@pytest.fixture(params=["ignore", "reject"])
async def http(request, start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        json_unknown_fields=request.param,
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        client.strict = request.param == "reject"
        yield client


async def post(http: httpx.AsyncClient, binding: str, method: str, path: str, params: dict):
    """One call as JSON-RPC or REST; (ok, result or error body, field violations)."""
    if binding == "JSONRPC":
        body = (await http.post("/", json=rpc(method, params), headers=V1)).json()
        if "result" in body:
            return True, body["result"], []
        error = body["error"]
        assert error["code"] == -32602 and reason(error["data"]) == "INVALID_PARAMS", error
        return False, error, violations(error["data"])
    r = await http.post(path, json=params, headers=V1)
    if r.status_code == 200:
        return True, r.json(), []
    error = r.json()["error"]
    assert r.status_code == 400 and reason(error["details"]) == "INVALID_PARAMS", error
    return False, error, violations(error["details"])


async def nothing_stored(http: httpx.AsyncClient) -> bool:
    return (await http.get("/tasks", headers=V1)).json()["totalSize"] == 0


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("place", list(PLACES))
async def test_unknown_fields_in_a_send(http, binding, place):
    field, add = PLACES[place]
    ok, answer, fields = await post(http, binding, "SendMessage", "/message:send", add(send_body()))
    if http.strict:
        assert not ok and fields == [field]
        assert (
            "unknown field" in answer["message"] and "refuses unknown fields" in answer["message"]
        )
        assert await nothing_stored(http)
    else:
        assert ok, answer
        task = answer["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"][0]["text"] == "echo hi"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_unknown_fields_in_a_stream_a_cancel_and_a_push_config(http, binding):
    body = PLACES["inside a part"][1](send_body())
    if binding == "JSONRPC":
        opened = http.stream("POST", "/", json=rpc("SendStreamingMessage", body), headers=V1)
    else:
        opened = http.stream("POST", "/message:stream", json=body, headers=V1)
    async with opened as r:
        if http.strict:  # refused before the stream starts: a plain error response
            assert not r.headers["content-type"].startswith("text/event-stream")
            assert "message.parts[0].futureField" in (await r.aread()).decode()
        else:
            events = await SSE(r).events()
            final = events[-1][2].get("result", events[-1][2])
            assert final["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    if http.strict:
        assert await nothing_stored(http)
    # A working task to cancel and to hang a push config on (sent without unknown fields).
    hang = send_body()
    hang["message"]["parts"] = [{"text": "hang"}]
    hang["configuration"] = {"returnImmediately": True}
    ok, answer, _ = await post(http, binding, "SendMessage", "/message:send", hang)
    assert ok, answer
    task_id = answer["task"]["id"]
    config = {
        "taskId": task_id,
        "url": "https://example.com/hook",
        "authentication": {"scheme": "Bearer", "credentials": "tok", "futureField": 1},
    }
    ok, answer, fields = await post(
        http,
        binding,
        "CreateTaskPushNotificationConfig",
        f"/tasks/{task_id}/pushNotificationConfigs",
        config,
    )
    assert (ok, fields) == ((False, ["authentication.futureField"]) if http.strict else (True, []))
    cancel = {"id": task_id, "futureField": "x"}
    ok, answer, fields = await post(http, binding, "CancelTask", f"/tasks/{task_id}:cancel", cancel)
    if http.strict:
        assert (ok, fields) == (False, ["futureField"])
    else:
        assert ok and answer["status"]["state"] == "TASK_STATE_CANCELED"


async def test_an_unknown_enum_name_is_refused_even_when_unknown_fields_are_ignored(http):
    body = send_body()
    body["message"]["role"] = "ROLE_FROM_THE_FUTURE"
    ok, answer, _ = await post(http, "HTTP+JSON", "SendMessage", "/message:send", body)
    assert not ok and "ROLE_FROM_THE_FUTURE" in answer["message"]
    assert await nothing_stored(http)
