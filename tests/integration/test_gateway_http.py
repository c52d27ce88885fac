"""The HTTP gateway on the wire (raw httpx): JSON-RPC envelopes, REST transcoding, tenants,
the agent card's caching, SSE framing and resume, health while draining, proxy mode."""

from __future__ import annotations

import asyncio
import json
from email.utils import formatdate

import httpx
import pytest

from service.app.server import Service
from tests.conftest import make_settings

V1 = {"A2A-Version": "1.0"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def message(text: str, message_id: str | None = None, **fields) -> dict:
    import uuid

    return {
        "message": {
            "messageId": message_id or uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **fields,
        }
    }


@pytest.fixture
async def gw(start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        card_max_age=17,
        sse_keepalive_seconds=0.2,
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        client.service = service
        yield client


def rpc(method: str, params=None, id=1) -> dict:
    body = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def reason(details: list[dict]) -> str:
    [info] = [d for d in details if d["@type"] == ERROR_INFO]
    assert info["domain"] == "a2a-protocol.org"
    return info["reason"]


def violations(details: list[dict]) -> list[str]:
    return [v["field"] for d in details if d["@type"] == BAD_REQUEST for v in d["fieldViolations"]]


class SSE:
    """Reads one event stream incrementally (one line iterator for the whole response)."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def events(self, limit: int | None = None, comments: bool = False) -> list[tuple]:
        """(id, event, data) per SSE event, until `limit` events or the end of the stream;
        with `comments`, comment lines too, as ('#', None, text)."""
        out: list[tuple] = []
        fields: dict[str, str] = {}
        async for line in self.lines:
            if line.startswith(":"):
                if comments:
                    out.append(("#", None, line[1:].strip()))
            elif line == "":
                if fields:
                    out.append((fields.get("id"), fields.get("event"), json.loads(fields["data"])))
                    fields = {}
                    if limit is not None and len(out) >= limit:
                        break
            else:
                key, _, value = line.partition(":")
                fields[key] = value[1:] if value.startswith(" ") else value
        return out


async def sse_events(response: httpx.Response, limit: int | None = None) -> list[tuple]:
    return await SSE(response).events(limit)


# ------------------------------------------------------------------------------ JSON-RPC


async def test_jsonrpc_result_is_the_response_message(gw):
    r = await gw.post("/", json=rpc("SendMessage", message("echo hi")), headers=V1)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 1
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    r = await gw.post(
        "/", json=rpc("GetTask", {"id": task["id"], "historyLength": 0}, id="abc"), headers=V1
    )
    assert r.json()["id"] == "abc" and r.json()["result"]["id"] == task["id"]
    assert "history" not in r.json()["result"]


@pytest.mark.parametrize(
    "raw,code,rid",
    [
        (b"{not json", -32700, None),
        (b"\xff\xfe", -32700, None),
        (b"[]", -32600, None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]', -32600, None),
        (b'"hello"', -32600, None),
        (b'{"jsonrpc":"1.0","id":7,"method":"GetTask"}', -32600, 7),
        (b'{"id":7,"method":"GetTask"}', -32600, 7),
        (b'{"jsonrpc":"2.0","method":"GetTask","params":{"id":"x"}}', -32600, None),
        (b'{"jsonrpc":"2.0","id":true,"method":"GetTask"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"GetTask"}', -32600, None),
        (b'{"jsonrpc":"2.0","id":"s","params":{}}', -32600, "s"),
        (b'{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"id":"x"}}', -32601, 3),
        (b'{"jsonrpc":"2.0","id":3,"method":"NoSuchMethod"}', -32601, 3),
        (b'{"jsonrpc":"2.0","id":4,"method":"GetTask","params":["x"]}', -32602, 4),
        # An unknown member is ignored (json_unknown_fields = "ignore"): the task is looked up.
        (b'{"jsonrpc":"2.0","id":4,"method":"GetTask","params":{"id":"x","bogus":1}}', -32001, 4),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"GetTask","params":{"historyLength":"many"}}',
            -32602,
            4,
        ),
        (b'{"jsonrpc":"2.0","id":4,"method":"GetTask","params":{}}', -32602, 4),
        (b'{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"nope"}}', -32001, 5),
        (b'{"jsonrpc":"2.0","id":null,"method":"GetTask","params":{"id":"nope"}}', -32001, None),
    ],
)
async def test_jsonrpc_envelope_errors(gw, raw, code, rid):
    r = await gw.post("/", content=raw, headers=V1 | {"content-type": "application/json"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == rid and "result" not in body
    assert body["error"]["code"] == code and body["error"]["message"]
    data = body["error"]["data"]
    assert isinstance(data, list) and all("@type" in d for d in data)
    reason(data)


async def test_jsonrpc_bad_params_name_the_field(gw):
    r = await gw.post(
        "/",
        json=rpc(
            "SendMessage",
            {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "parts": [{"text": "x", "colour": 1}],
                }
            },
        ),
        headers=V1,
    )
    # An unknown member is ignored by default (strict mode: tests/integration/
    # test_unknown_fields.py); a missing required field is named.
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    r = await gw.post(
        "/",
        json=rpc("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}),
        headers=V1,
    )
    assert violations(r.json()["error"]["data"]) == ["message.messageId"]


async def test_jsonrpc_version_rules(gw):
    r = await gw.post("/", json=rpc("GetTask", {"id": "x"}))  # no header: 0.3 per the spec
    error = r.json()["error"]
    assert error["code"] == -32009 and reason(error["data"]) == "VERSION_NOT_SUPPORTED"
    assert "A2A-Version" in error["message"]
    r = await gw.post("/?A2A-Version=1.0", json=rpc("GetTask", {"id": "x"}))  # query parameter
    assert r.json()["error"]["code"] == -32001
    r = await gw.post("/", json=rpc("GetTask", {"id": "x"}), headers={"A2A-Version": "1.1"})
    assert r.json()["error"]["code"] == -32001  # any 1.x


async def test_jsonrpc_transport_level_refusals(gw):
    r = await gw.post(
        "/", content=b"id=1", headers=V1 | {"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 415 and r.json()["error"]["code"] == -32600
    r = await gw.post(
        "/",
        content=json.dumps(rpc("GetTask", {"id": "x"})).encode("utf-16"),
        headers=V1 | {"content-type": "application/json; charset=utf-16"},
    )
    assert r.status_code == 415
    r = await gw.get("/", headers=V1)
    assert (
        r.status_code == 405
        and r.headers["allow"] == "POST"
        and r.json()["error"]["code"] == -32600
    )
    r = await gw.post(
        "/", content=json.dumps(rpc("GetTask", {"id": "x"})), headers=V1
    )  # no content type
    assert r.json()["error"]["code"] == -32001
    r = await gw.post(
        "/", json=rpc("GetTask", {"id": "x"}), headers=V1 | {"content-type": "application/a2a+json"}
    )
    assert r.json()["error"]["code"] == -32001


async def test_jsonrpc_stream_wraps_each_event_with_the_request_id(gw):
    async with gw.stream(
        "POST", "/", json=rpc("SendStreamingMessage", message("chunks 2"), id="s-1"), headers=V1
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        events = await sse_events(r)
    assert all(
        data["jsonrpc"] == "2.0" and data["id"] == "s-1" and "result" in data
        for _, _, data in events
    )
    ids = [int(i) for i, _, _ in events]
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # one id per event, in sequence
    assert "task" in events[0][2]["result"]
    assert events[-1][2]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_jsonrpc_stream_errors_before_the_stream_are_plain_responses(gw):
    r = await gw.post("/", json=rpc("SubscribeToTask", {"id": "nope"}), headers=V1)
    assert r.headers["content-type"] == "application/json" and r.json()["error"]["code"] == -32001


# ------------------------------------------------------------------------------ REST


async def test_rest_send_get_and_media_types(gw):
    r = await gw.post("/message:send", json=message("echo hi"), headers=V1)
    assert r.status_code == 200 and r.headers["content-type"] == "application/a2a+json"
    task = r.json()["task"]
    r = await gw.get(f"/tasks/{task['id']}", headers=V1 | {"accept": "application/json"})
    assert r.headers["content-type"] == "application/json" and r.json()["id"] == task["id"]
    r = await gw.post(
        "/message:send",
        json=message("echo hi"),
        headers=V1 | {"content-type": "application/a2a+json", "accept": "application/a2a+json"},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/a2a+json"


async def test_rest_query_parameters(gw):
    ids = [
        (await gw.post("/message:send", json=message(f"echo {i}"), headers=V1)).json()["task"]["id"]
        for i in range(3)
    ]
    failed = (await gw.post("/message:send", json=message("fail"), headers=V1)).json()["task"]
    r = await gw.get("/tasks", params={"pageSize": 2}, headers=V1)
    page = r.json()
    assert page["totalSize"] == 4 and page["pageSize"] == 2 and len(page["tasks"]) == 2
    assert "artifacts" not in page["tasks"][0]
    r = await gw.get(
        "/tasks", params={"page_size": 2, "page_token": page["nextPageToken"]}, headers=V1
    )
    assert (
        r.json()["nextPageToken"] == "" and len(r.json()["tasks"]) == 2
    )  # always present, even empty
    r = await gw.get("/tasks", params={"status": "TASK_STATE_FAILED"}, headers=V1)
    assert [t["id"] for t in r.json()["tasks"]] == [failed["id"]]
    r = await gw.get("/tasks", params={"status": "4"}, headers=V1)  # enum by number (FAILED = 4)
    assert [t["id"] for t in r.json()["tasks"]] == [failed["id"]]
    r = await gw.get(
        "/tasks",
        params={"includeArtifacts": "true", "historyLength": "0", "pageSize": 10},
        headers=V1,
    )
    tasks = [t for t in r.json()["tasks"] if t["id"] in ids]
    assert len(tasks) == 3 and all(t["artifacts"] and "history" not in t for t in tasks)
    r = await gw.get("/tasks", params={"include_artifacts": "false"}, headers=V1)
    assert all("artifacts" not in t for t in r.json()["tasks"])
    r = await gw.get("/tasks", params={"statusTimestampAfter": "2999-01-01T00:00:00Z"}, headers=V1)
    assert r.json() == {"nextPageToken": "", "pageSize": 50, "totalSize": 0}
    r = await gw.get(
        "/tasks", params={"statusTimestampAfter": "2000-01-01T00:00:00+02:00"}, headers=V1
    )
    assert r.json()["totalSize"] == 4
    r = await gw.get("/tasks?pageSize=1&A2A-Version=1.0")  # version as a query parameter
    assert r.status_code == 200


@pytest.mark.parametrize(
    "query,field",
    [
        ({"pageSize": "lots"}, "pageSize"),
        ({"includeArtifacts": "maybe"}, "includeArtifacts"),
        ({"status": "TASK_STATE_SLEEPING"}, "status"),
        ({"statusTimestampAfter": "yesterday"}, "statusTimestampAfter"),
        ({"colour": "blue"}, "colour"),
        ({"tenant": "other"}, "tenant"),
    ],
)
async def test_rest_bad_query_parameters(gw, query, field):
    r = await gw.get("/tasks" if field != "tenant" else "/acme/tasks", params=query, headers=V1)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert reason(error["details"]) == "INVALID_PARAMS" and violations(error["details"]) == [field]


async def test_rest_repeated_pagesize_is_rejected(gw):
    r = await gw.get("/tasks?pageSize=1&pageSize=2", headers=V1)
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["pageSize"]


async def test_tenant_prefixed_routes_scope_tasks(gw):
    r = await gw.post("/acme/message:send", json=message("echo tenant"), headers=V1)
    task = r.json()["task"]
    assert (await gw.get(f"/acme/tasks/{task['id']}", headers=V1)).json()["id"] == task["id"]
    other = await gw.get(f"/globex/tasks/{task['id']}", headers=V1)
    assert other.status_code == 404 and reason(other.json()["error"]["details"]) == "TASK_NOT_FOUND"
    assert (await gw.get(f"/tasks/{task['id']}", headers=V1)).status_code == 404
    assert [t["id"] for t in (await gw.get("/acme/tasks", headers=V1)).json()["tasks"]] == [
        task["id"]
    ]
    assert (await gw.get("/globex/tasks", headers=V1)).json()["totalSize"] == 0
    r = await gw.post(
        f"/acme/tasks/{task['id']}/pushNotificationConfigs",
        json={"url": "https://example.com/hook", "id": "h1"},
        headers=V1,
    )
    assert (
        r.status_code == 200 and r.json()["tenant"] == "acme" and r.json()["taskId"] == task["id"]
    )
    r = await gw.get(f"/acme/tasks/{task['id']}/pushNotificationConfigs/h1", headers=V1)
    assert r.json()["url"] == "https://example.com/hook"
    r = await gw.delete(f"/acme/tasks/{task['id']}/pushNotificationConfigs/h1", headers=V1)
    assert r.status_code == 200 and r.json() == {}
    # The tenant in the body must agree with the one in the path.
    body = message("echo x") | {"tenant": "globex"}
    r = await gw.post("/acme/message:send", json=body, headers=V1)
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["tenant"]
    # JSON-RPC carries the tenant in params.
    r = await gw.post("/", json=rpc("GetTask", {"tenant": "acme", "id": task["id"]}), headers=V1)
    assert r.json()["result"]["id"] == task["id"]


async def test_rest_path_variables_are_percent_decoded(gw):
    r = await gw.get(
        "/tasks/a%20b", headers=V1
    )  # "a b" is not a valid id: the API says which field
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["id"]
    r = await gw.get("/tasks/ns:42", headers=V1)  # ':' inside an id is not a custom verb
    assert r.status_code == 404 and reason(r.json()["error"]["details"]) == "TASK_NOT_FOUND"


async def test_rest_bodies_and_content_types(gw):
    r = await gw.post(
        "/message:send", content=b"{oops", headers=V1 | {"content-type": "application/json"}
    )
    assert r.status_code == 400 and reason(r.json()["error"]["details"]) == "PARSE_ERROR"
    r = await gw.post(
        "/message:send", content=b"hello", headers=V1 | {"content-type": "text/plain"}
    )
    assert r.status_code == 415 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "application/json" in r.json()["error"]["message"]
    r = await gw.post("/message:send", json=[1, 2], headers=V1)
    assert r.status_code == 400 and reason(r.json()["error"]["details"]) == "INVALID_PARAMS"
    r = await gw.post("/message:send", content=b"", headers=V1)  # empty body = empty request
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["message"]
    hang = (
        await gw.post(
            "/message:send",
            json=message("hang") | {"configuration": {"returnImmediately": True}},
            headers=V1,
        )
    ).json()["task"]
    r = await gw.post(f"/tasks/{hang['id']}:cancel", headers=V1)  # no body at all
    assert r.status_code == 200 and r.json()["status"]["state"] == "TASK_STATE_CANCELED"


async def test_rest_unknown_routes_and_methods(gw):
    r = await gw.get("/no/such/thing", headers=V1)
    assert r.status_code == 404 and reason(r.json()["error"]["details"]) == "METHOD_NOT_FOUND"
    r = await gw.put("/tasks/abc", headers=V1)
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    r = await gw.post(
        "/tasks/abc:frobnicate", headers=V1
    )  # no such verb: "abc:frobnicate" is an id
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    r = await gw.get("/message:send", headers=V1)
    assert r.status_code == 405 and "POST" in r.headers["allow"]


async def test_rest_error_body_shape(gw):
    r = await gw.get("/tasks/nope", headers=V1)
    assert r.status_code == 404
    error = r.json()["error"]
    assert set(error) == {"code", "status", "message", "details"}
    assert error["code"] == 404 and error["status"] == "NOT_FOUND" and "nope" in error["message"]
    assert reason(error["details"]) == "TASK_NOT_FOUND"
    r = await gw.get("/tasks/nope")  # no version
    assert r.status_code == 400 and reason(r.json()["error"]["details"]) == "VERSION_NOT_SUPPORTED"


# ------------------------------------------------------------------------------ agent card


async def test_card_caching_headers_and_conditional_requests(gw):
    r = await gw.get("/.well-known/agent-card.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "public, max-age=17"
    etag, modified = r.headers["etag"], r.headers["last-modified"]
    assert etag.startswith('"') and etag.endswith('"')
    card = r.json()
    interfaces = [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]
    # 1.0 first; the same bindings once more for v0.3 clients (compat_v03, issue 22)
    assert interfaces == [(b, v) for v in ("1.0", "0.3") for b in ("JSONRPC", "HTTP+JSON", "GRPC")]
    assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{gw.service.http_port}"
    assert card["capabilities"]["streaming"] is True
    for inm in (etag, f"W/{etag}", f'"other", {etag}', f'"a,b",W/{etag}', "*"):
        r = await gw.get("/.well-known/agent-card.json", headers={"If-None-Match": inm})
        assert r.status_code == 304, inm
        assert r.content == b"" and r.headers["etag"] == etag and r.headers["cache-control"]
    r = await gw.get("/.well-known/agent-card.json", headers={"If-None-Match": '"other", W/"x"'})
    assert r.status_code == 200
    r = await gw.get("/.well-known/agent-card.json", headers={"If-Modified-Since": modified})
    assert r.status_code == 304
    r = await gw.get(
        "/.well-known/agent-card.json", headers={"If-Modified-Since": formatdate(0, usegmt=True)}
    )
    assert r.status_code == 200
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2).
    r = await gw.get(
        "/.well-known/agent-card.json",
        headers={"If-None-Match": '"x"', "If-Modified-Since": modified},
    )
    assert r.status_code == 200
    r = await gw.head("/.well-known/agent-card.json")
    assert r.status_code == 200 and r.headers["etag"] == etag
    r = await gw.post("/.well-known/agent-card.json", json={})
    assert r.status_code == 405


async def test_card_uses_public_url(start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        public_url="https://agents.example.com/a2a/",
        grpc_public_address="grpc.example.com:443",
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
    assert [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]] == 2 * [
        ("JSONRPC", "https://agents.example.com/a2a"),
        ("HTTP+JSON", "https://agents.example.com/a2a"),
        ("GRPC", "grpc.example.com:443"),
    ]  # 1.0, then the same for v0.3 clients (compat_v03, issue 22)
    assert card["url"] == "https://agents.example.com/a2a"  # v0.3's main interface


# ------------------------------------------------------------------------------ SSE


async def test_rest_stream_ids_and_resume_with_last_event_id(gw):
    async with gw.stream("POST", "/message:stream", json=message("slow 6"), headers=V1) as r:
        assert r.headers["cache-control"] == "no-store"
        first = await sse_events(r, limit=3)
    task_id = first[0][2]["task"]["id"]
    last_seen = first[-1][0]
    async with gw.stream(
        "GET", f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": last_seen}
    ) as r:
        assert r.status_code == 200
        rest = await sse_events(r)
    # The current task first (spec 1.0.1 §3.1.6), numbered with the last event it includes
    # (at least the resume point: the subscription came after it).
    snapshot_id, _, snapshot = rest.pop(0)
    assert snapshot["task"]["id"] == task_id and int(snapshot_id) >= int(last_seen)
    ids = [int(i) for i, _, _ in first + rest]
    assert ids == list(range(ids[0], ids[-1] + 1)), ids  # no gap, no duplicate
    assert rest[-1][2]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # From the very beginning: the final task, then every stored event (the first of them
    # the task as it was submitted), ending at the terminal one.
    async with gw.stream(
        "POST", f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": "0"}
    ) as r:
        everything = await sse_events(r)
    assert [int(i) for i, _, _ in everything] == [ids[-1], *range(1, ids[-1] + 1)]
    assert everything[0][2]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert everything[1][2]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    # Resumed at the last event: the final task alone, then the end.
    async with gw.stream(
        "GET", f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": str(ids[-1])}
    ) as r:
        final = await sse_events(r)
    assert [(int(i), e["task"]["status"]["state"]) for i, _, e in final] == [
        (ids[-1], "TASK_STATE_COMPLETED")
    ]
    # A finished task with no resume point has nothing to subscribe to.
    r = await gw.get(f"/tasks/{task_id}:subscribe", headers=V1)
    assert r.status_code == 400 and reason(r.json()["error"]["details"]) == "UNSUPPORTED_OPERATION"
    r = await gw.get(f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": "soon"})
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["Last-Event-ID"]
    # A resume point past the latest event would silently skip what comes next: refused.
    r = await gw.get(
        f"/tasks/{task_id}:subscribe", headers=V1 | {"Last-Event-ID": str(ids[-1] + 5)}
    )
    assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["Last-Event-ID"]


async def test_keepalive_and_disconnect_cancels_only_the_subscription(gw):
    hang = (
        await gw.post(
            "/message:send",
            json=message("hang") | {"configuration": {"returnImmediately": True}},
            headers=V1,
        )
    ).json()["task"]
    async with gw.stream("GET", f"/tasks/{hang['id']}:subscribe", headers=V1) as r:
        seen = []
        async for line in r.aiter_lines():
            seen.append(line)
            if line.startswith(": keep-alive"):
                break
    assert seen[0].startswith("id: ")
    await asyncio.sleep(0.1)
    task = (await gw.get(f"/tasks/{hang['id']}", headers=V1)).json()
    assert task["status"]["state"] == "TASK_STATE_WORKING"  # the client went away; the task did not
    async with gw.stream("GET", f"/tasks/{hang['id']}:subscribe", headers=V1) as r:
        sse = SSE(r)
        snapshot = await sse.events(limit=1)
        canceled = await gw.post(f"/tasks/{hang['id']}:cancel", json={}, headers=V1)
        assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
        rest = await sse.events()
    assert snapshot[-1][2]["task"]["id"] == hang["id"]
    assert rest[-1][2]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_stream_of_a_direct_reply_has_no_event_id(gw):
    async with gw.stream("POST", "/message:stream", json=message("reply hi"), headers=V1) as r:
        events = await sse_events(r)
    assert (
        len(events) == 1
        and events[0][0] is None
        and events[0][2]["message"]["parts"][0]["text"] == "hi"
    )


# ------------------------------------------------------------------------------ health & drain


async def test_health_goes_non_200_while_draining(tmp_path):
    service = Service(
        make_settings(
            tmp_path,
            http_port=0,
            store="memory:",
            agent="tests.agents:ScriptedAgent",
            drain_seconds=1.0,
        )
    )
    await service.start()
    base = f"http://127.0.0.1:{service.http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        r = await client.get("/health")
        assert r.status_code == 200 and r.json() == {"status": "healthy"}
        hang = (
            await client.post(
                "/message:send",
                json=message("hang") | {"configuration": {"returnImmediately": True}},
                headers=V1,
            )
        ).json()["task"]
        async with client.stream("GET", f"/tasks/{hang['id']}:subscribe", headers=V1) as stream:
            sse = SSE(stream)
            await sse.events(limit=1)  # a request in flight keeps the drain going
            stopping = asyncio.create_task(service.stop())
            await asyncio.sleep(0.2)
            r = await client.get("/health")
            assert r.status_code == 503 and r.json() == {"status": "draining"}
            await sse.events()  # ends cleanly when the engine closes at the end of the drain
        await asyncio.wait_for(stopping, 10)
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"{base}/health")


# ------------------------------------------------------------------------------ proxy mode


async def test_proxy_mode_forwards_to_an_upstream_grpc_server(start_service):
    upstream = await start_service(
        store="memory:", agent="tests.agents:ScriptedAgent", required_extensions=["urn:example:ext"]
    )
    proxy = await start_service(
        http_port=0, upstream=f"127.0.0.1:{upstream.grpc_port}", agent="tests.agents:ScriptedAgent"
    )
    assert proxy.engine is None and proxy.grpc_server is None  # only the gateway runs here
    headers = V1 | {"A2A-Extensions": "urn:example:ext"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{proxy.http_port}", timeout=10
    ) as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
        assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == 2 * [
            "JSONRPC",
            "HTTP+JSON",
        ]  # 1.0, then the same for v0.3 clients (compat_v03, issue 22)
        task = (
            await client.post("/message:send", json=message("echo via proxy"), headers=headers)
        ).json()["task"]
        assert task["artifacts"][0]["parts"][0]["text"] == "echo via proxy"
        r = await client.post("/", json=rpc("GetTask", {"id": task["id"]}), headers=headers)
        assert r.json()["result"]["id"] == task["id"]
        # Errors come back through their ErrorInfo reason, with the same codes.
        r = await client.post("/", json=rpc("GetTask", {"id": "nope"}), headers=headers)
        assert (
            r.json()["error"]["code"] == -32001
            and reason(r.json()["error"]["data"]) == "TASK_NOT_FOUND"
        )
        r = await client.get("/tasks/bad%20id", headers=headers)
        assert r.status_code == 400 and violations(r.json()["error"]["details"]) == ["id"]
        r = await client.get(f"/tasks/{task['id']}", headers=V1)  # extension header not forwarded
        assert reason(r.json()["error"]["details"]) == "EXTENSION_SUPPORT_REQUIRED"
        r = await client.get(f"/tasks/{task['id']}", headers={"A2A-Extensions": "urn:example:ext"})
        assert (
            reason(r.json()["error"]["details"]) == "VERSION_NOT_SUPPORTED"
        )  # HTTP default 0.3 forwarded
        async with client.stream(
            "POST", "/message:stream", json=message("chunks 2"), headers=headers
        ) as r:
            events = await sse_events(r)
        assert (
            "task" in events[0][2]
            and events[-1][2]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )
        r = await client.get("/tasks/nope:subscribe", headers=headers)
        assert r.status_code == 404 and reason(r.json()["error"]["details"]) == "TASK_NOT_FOUND"


async def test_proxy_mode_upstream_down_is_503(start_service):
    proxy = await start_service(
        http_port=0, upstream="127.0.0.1:1", agent="tests.agents:ScriptedAgent"
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{proxy.http_port}", timeout=20
    ) as client:
        r = await client.get("/tasks/x", headers=V1)
    assert r.status_code == 503 and r.json()["error"]["status"] == "UNAVAILABLE"
    assert reason(r.json()["error"]["details"]) == "INTERNAL_ERROR"
