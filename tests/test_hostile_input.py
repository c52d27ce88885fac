"""Hostile input the JSON parser itself must stop, on the wire against a real server: unpaired
UTF-16 surrogate escapes and text that is not UTF-8 answer the binding's parse error (JSON-RPC
-32700 with HTTP 200 and id null, REST 400) before anything runs."""

from __future__ import annotations

import json

import httpx
import pytest

V1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
MESSAGE = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "echo hi"}]}


@pytest.fixture
async def gw(start_service):
    service = await start_service(http_port=0, store="memory:", agent="tests.agents:ScriptedAgent",
                                  push_notifications=False)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=10) as client:
        client.service = service
        yield client


def rpc_body(method: str, params: str, rid: str = "1") -> bytes:
    """A JSON-RPC request written by hand, so it can hold what json.dumps never writes."""
    return f'{{"jsonrpc":"2.0","id":{rid},"method":"{method}","params":{params}}}'.encode()


def reason(details: list[dict]) -> str:
    [info] = [d for d in details if d["@type"] == ERROR_INFO]
    return info["reason"]


def violations(details: list[dict]) -> list[str]:
    return [v["field"] for d in details if d["@type"] == BAD_REQUEST for v in d["fieldViolations"]]


def assert_jsonrpc_parse_error(response: httpx.Response) -> None:
    assert response.status_code == 200, (response.status_code, response.text[:300])
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"] is None and body["error"]["code"] == -32700, body
    assert reason(body["error"]["data"]) == "PARSE_ERROR"


def assert_rest_parse_error(response: httpx.Response) -> None:
    assert response.status_code == 400, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT", error
    assert reason(error["details"]) == "PARSE_ERROR"


async def assert_nothing_ran(gw: httpx.AsyncClient) -> None:
    for path in ("/tasks", "/acme/tasks"):
        listed = await gw.get(path, headers=V1)
        assert listed.status_code == 200 and listed.json()["totalSize"] == 0, listed.text


def _sends(params_tail: str) -> str:
    return '{"message":' + json.dumps(MESSAGE) + "," + params_tail + "}"


# Each is refused as it stands: the escape decodes to a lone surrogate, which no UTF-8 text
# (and so no response, no proto string) can hold.
SURROGATES = {
    "high alone in the JSON-RPC id": ("rpc", "SendMessage", json.dumps({"message": MESSAGE}), '"\\ud800"'),
    "low alone in the JSON-RPC id (stream)": ("rpc", "SendStreamingMessage", json.dumps({"message": MESSAGE}),
                                              '"\\uDFFF"'),
    "reversed pair in a metadata value": ("rpc", "SendMessage",
                                          _sends('"metadata":{"k":"\\udc00\\ud800"}'),
                                          "7"),
    "high at the end of a text (REST)": ("rest", "/message:send",
                                         '{"message":{"messageId":"m-2","role":"ROLE_USER",'
                                         '"parts":[{"text":"echo a\\udbff"}]}}', ""),
    "in a metadata value (REST stream)": ("rest", "/acme/message:stream",
                                          _sends('"metadata":{"k":"x\\ud800y"}'), ""),
    "in an object key (REST)": ("rest", "/message:send",
                                _sends('"metadata":{"\\ud800":1}'), ""),
    "in an unknown field name (REST)": ("rest", "/message:send",
                                        '{"message":{"messageId":"m-3","role":"ROLE_USER","\\ud800":1,'
                                        '"parts":[{"text":"echo x"}]}}', ""),
}


@pytest.mark.parametrize("case", SURROGATES.values(), ids=list(SURROGATES))
async def test_unpaired_surrogate_escapes_are_parse_errors_and_run_nothing(gw, case):
    binding, where, body, rid = case
    if binding == "rpc":
        response = await gw.post("/", content=rpc_body(where, body, rid), headers=V1)
        assert_jsonrpc_parse_error(response)
    else:
        response = await gw.post(where, content=body.encode(), headers=V1)
        assert_rest_parse_error(response)
    assert "surrogate" in response.text
    await assert_nothing_ran(gw)  # same client, same connection: it was not dropped


async def test_only_utf8_text_is_json_here(gw):
    # UTF-16 JSON was read before (json.loads guesses the encoding); the binding is UTF-8 only.
    body = json.dumps({"message": MESSAGE})
    for raw in (body.encode("utf-16"), body.encode("utf-16-le"), body.encode("utf-32"),
                body.encode().replace(b"echo", b"ech\xed\xa0\x80")):  # a surrogate in UTF-8 bytes
        assert_rest_parse_error(await gw.post("/message:send", content=raw, headers=V1))
        assert_jsonrpc_parse_error(await gw.post("/", content=raw, headers=V1))
    await assert_nothing_ran(gw)
    # A UTF-8 byte order mark is tolerated, as RFC 8259 allows.
    response = await gw.post("/message:send", content=b"\xef\xbb\xbf" + body.encode(), headers=V1)
    assert response.status_code == 200, response.text
    # An escaped emoji (a high-low pair) and a literal backslash before "ud800" are valid text.
    text = "echo \\ud83d\\ude00 \\\\ud800"
    body = '{"message":{"messageId":"m-ok","role":"ROLE_USER","parts":[{"text":"' + text + '"}]}}'
    response = await gw.post("/message:send", content=body.encode(), headers=V1)
    assert response.status_code == 200, response.text
    assert response.json()["task"]["artifacts"][0]["parts"][0]["text"].endswith("\U0001f600 \\ud800")
    response = await gw.post("/", content=rpc_body("GetTask", '{"id":"nope"}', '"\\ud83d\\ude00"'), headers=V1)
    assert response.status_code == 200 and response.json()["id"] == "\U0001f600"
    assert response.json()["error"]["code"] == -32001
