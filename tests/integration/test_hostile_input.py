"""Hostile input the JSON parser itself must stop, on the wire against a real server: unpaired
UTF-16 surrogate escapes, text that is not UTF-8, numbers beyond a double and NaN/Infinity
answer the binding's parse error (JSON-RPC -32700 with HTTP 200 and id null, REST 400) before
anything runs; deep nesting is a 400-class error at any depth. Tenants follow the id rules on
every binding."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.protocol.errors import InvalidParamsError
from service.protocol.validation import check_tenant
from tests.conftest import user_message
from tests.grpc_util import expect_error

V1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
MESSAGE = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "echo hi"}]}
HUGE = "9" * 5000  # past Python's 4300-digit int-string limit


@pytest.fixture
async def gw(start_service):
    service = await start_service(
        http_port=0, store="memory:", agent="tests.agents:ScriptedAgent", push_notifications=False
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
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
    "high alone in the JSON-RPC id": (
        "rpc",
        "SendMessage",
        json.dumps({"message": MESSAGE}),
        '"\\ud800"',
    ),
    "low alone in the JSON-RPC id (stream)": (
        "rpc",
        "SendStreamingMessage",
        json.dumps({"message": MESSAGE}),
        '"\\uDFFF"',
    ),
    "reversed pair in a metadata value": (
        "rpc",
        "SendMessage",
        _sends('"metadata":{"k":"\\udc00\\ud800"}'),
        "7",
    ),
    "high at the end of a text (REST)": (
        "rest",
        "/message:send",
        '{"message":{"messageId":"m-2","role":"ROLE_USER","parts":[{"text":"echo a\\udbff"}]}}',
        "",
    ),
    "in a metadata value (REST stream)": (
        "rest",
        "/acme/message:stream",
        _sends('"metadata":{"k":"x\\ud800y"}'),
        "",
    ),
    "in an object key (REST)": ("rest", "/message:send", _sends('"metadata":{"\\ud800":1}'), ""),
    "in an unknown field name (REST)": (
        "rest",
        "/message:send",
        '{"message":{"messageId":"m-3","role":"ROLE_USER","\\ud800":1,'
        '"parts":[{"text":"echo x"}]}}',
        "",
    ),
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


# Out of the range of a 64-bit float (or not JSON at all): a parse error, whichever field.
OUT_OF_RANGE = [
    ("rpc", "ListTasks", '{"pageSize":' + HUGE + "}", "1"),
    ("rpc", "ListTasks", '{"pageSize":-' + HUGE + "}", "1"),
    ("rpc", "ListTasks", "{}", HUGE),  # the id itself
    ("rpc", "ListTasks", '{"pageSize":1e400}', "1"),
    ("rpc", "ListTasks", '{"pageSize":NaN}', "1"),
    ("rpc", "SendMessage", _sends('"metadata":{"n":' + "9" * 400 + "}"), "1"),
    ("rpc", "SendMessage", _sends('"metadata":{"n":-1e400}'), "1"),
    ("rpc", "SendMessage", _sends('"metadata":{"n":Infinity}'), "1"),
    ("rpc", "SendStreamingMessage", _sends('"metadata":{"n":[-Infinity]}'), "1"),
    ("rest", "/message:send", _sends('"configuration":{"historyLength":' + HUGE + "}"), ""),
    ("rest", "/message:send", _sends('"metadata":{"n":1' + "0" * 309 + "}"), ""),
    ("rest", "/message:stream", _sends('"metadata":{"n":1E+999999999999}'), ""),
    ("rest", "/message:send", _sends('"metadata":{"n":NaN}'), ""),
]


async def test_numbers_beyond_a_double_nan_and_deep_nesting_are_400_class_and_run_nothing(gw):
    for binding, where, body, rid in OUT_OF_RANGE:
        if binding == "rpc":
            response = await gw.post("/", content=rpc_body(where, body, rid), headers=V1)
            assert_jsonrpc_parse_error(response)
        else:
            response = await gw.post(where, content=body.encode(), headers=V1)
            assert_rest_parse_error(response)
        assert len(response.content) < 2000, "the number is not echoed whole"
    # Deep nesting: json.loads raises RecursionError past ~1000 levels (a parse error);
    # below that json_format refuses messages deeper than 100 (InvalidParams); an unknown
    # envelope member is ignored. Never a 500, and nothing runs.
    for depth in (50, 99, 100, 101, 400, 900, 990, 1000, 1100, 5000, 100_000):
        nest = "[" * depth + "1" + "]" * depth
        obj = '{"a":' * depth + "1" + "}" * depth
        cases = [
            ("rpc", rpc_body("SendMessage", _sends(f'"metadata":{{"n":{nest}}}'))),
            ("rpc", rpc_body("SendStreamingMessage", _sends(f'"metadata":{obj}'))),
            ("rpc", rpc_body("ListTasks", "{}", nest)),
            ("rest", _sends(f'"metadata":{{"n":{nest}}}').encode()),
            (
                "rest",
                f'{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":{obj}}}]}}}}'.encode(),
            ),
            ("rest", nest.encode()),
        ]
        for binding, body in cases:
            if binding == "rpc":
                response = await gw.post("/", content=body, headers=V1)
                assert response.status_code == 200, (depth, response.status_code)
                code = response.json()["error"]["code"]
                assert code in (-32700, -32600, -32602), (depth, response.text[:300])
            else:
                response = await gw.post("/message:send", content=body, headers=V1)
                assert response.status_code == 400, (
                    depth,
                    response.status_code,
                    response.text[:300],
                )
    await assert_nothing_ran(gw)
    # A deep but ignored envelope member does not stop the call.
    ignored = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","x":' + b"[" * 900 + b"]" * 900 + b"}"
    assert "result" in (await gw.post("/", content=ignored, headers=V1)).json()


async def test_numbers_a_double_holds_but_the_field_does_not_name_the_field(gw):
    # Within a double's range: the field decides (InvalidParams naming it) -- or takes it.
    for value in ("1e12", "99999999999999999999", "-1" + "0" * 300, "1.5"):
        response = await gw.post(
            "/", content=rpc_body("ListTasks", '{"pageSize":' + value + "}"), headers=V1
        )
        error = response.json()["error"]
        assert error["code"] == -32602 and violations(error["data"]) == ["pageSize"], (value, error)
    # Query parameters are strings: any size is InvalidParams naming the parameter, briefly.
    for query in (f"pageSize={HUGE}", "pageSize=1e400", "pageSize=NaN", f"historyLength=-{HUGE}"):
        response = await gw.get(f"/tasks?{query}", headers=V1)
        assert response.status_code == 400, (query, response.text[:300])
        error = response.json()["error"]
        assert violations(error["details"]) == [query.split("=")[0]]
        assert len(response.content) < 2000, "the value is not echoed whole"
    response = await gw.get(f"/tasks/t-1?historyLength={HUGE}", headers=V1)
    assert response.status_code == 400 and violations(response.json()["error"]["details"]) == [
        "historyLength"
    ]
    assert len(response.content) < 2000
    # The largest doubles are accepted where a double goes (a Struct value).
    body = _sends('"metadata":{"max":1.7976931348623157e308,"big":1' + "0" * 308 + "}")
    response = await gw.post("/message:send", content=body.encode(), headers=V1)
    assert response.status_code == 200, response.text[:300]


async def test_only_utf8_text_is_json_here(gw):
    # UTF-16 JSON was read before (json.loads guesses the encoding); the binding is UTF-8 only.
    body = json.dumps({"message": MESSAGE})
    for raw in (
        body.encode("utf-16"),
        body.encode("utf-16-le"),
        body.encode("utf-32"),
        body.encode().replace(b"echo", b"ech\xed\xa0\x80"),
    ):  # a surrogate in UTF-8 bytes
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
    assert response.json()["task"]["artifacts"][0]["parts"][0]["text"].endswith(
        "\U0001f600 \\ud800"
    )
    response = await gw.post(
        "/", content=rpc_body("GetTask", '{"id":"nope"}', '"\\ud83d\\ude00"'), headers=V1
    )
    assert response.status_code == 200 and response.json()["id"] == "\U0001f600"
    assert response.json()["error"]["code"] == -32001


# ------------------------------------------------------------------------------ tenants

BAD_TENANTS = ["a" * 129, "a\x00b", "a/b", "x y", "ü", "../etc", "a" * (1024 * 1024)]


def test_check_tenant_is_the_id_rule_with_empty_allowed():
    for tenant in ("", "acme", "t" * 128, "Org_1.eu-west:2"):
        assert check_tenant(pb.ListTasksRequest(tenant=tenant)) == tenant
    for tenant in BAD_TENANTS:
        with pytest.raises(InvalidParamsError) as info:
            check_tenant(pb.SendMessageRequest(tenant=tenant))
        assert info.value.field_violations[0][0] == "tenant"
        assert len(info.value.message) < 200  # the value is not echoed
    assert check_tenant(pb.AgentCard()) == ""  # a message without the field has no tenant


async def test_tenants_follow_the_id_rules_on_every_binding(gw):
    service = gw.service
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for tenant in BAD_TENANTS:
            await expect_error(
                stub.SendMessage(
                    pb.SendMessageRequest(tenant=tenant, message=user_message("echo x"))
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_PARAMS",
            )
            await expect_error(
                stub.ListTasks(pb.ListTasksRequest(tenant=tenant)),
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_PARAMS",
            )
        # Empty (no tenant) and a valid one are fine; 128 characters is the longest.
        for tenant in ("", "acme", "t" * 128, "Org_1.eu-west:2"):
            await stub.ListTasks(pb.ListTasksRequest(tenant=tenant))
    for tenant in BAD_TENANTS[:-1]:
        response = await gw.post(
            "/",
            content=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"tenant": tenant, "message": MESSAGE},
                }
            ).encode(),
            headers=V1,
        )
        error = response.json()["error"]
        assert error["code"] == -32602 and violations(error["data"]) == ["tenant"], (
            tenant[:20],
            error,
        )
    for raw in ("a%00b", "a%2Fb", "x%20y", "%C3%BC", "a" * 129):
        response = await gw.post(
            f"/{raw}/message:send", content=json.dumps({"message": MESSAGE}).encode(), headers=V1
        )
        assert response.status_code == 400, (raw[:20], response.text[:300])
        assert violations(response.json()["error"]["details"]) == ["tenant"]
        response = await gw.get(f"/{raw}/tasks", headers=V1)
        assert response.status_code == 400 and violations(response.json()["error"]["details"]) == [
            "tenant"
        ]
    await assert_nothing_ran(gw)
