"""A2A v0.3 clients over JSON-RPC: a2a-sdk 1.3.0's v0.3 compat client (CompatJsonRpcTransport,
what an a2a-sdk 0.3 client sends) against our server, found through the one agent card; raw
requests for the negotiation rules; a task seen from both versions."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import pytest
from a2a.client import ClientConfig
from a2a.client.base_client import BaseClient
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import a2a_pb2 as sdk
from a2a.utils import errors as sdk_errors
from google.protobuf import json_format

from tests.conftest import user_message
from tests.push_util import Receiver, event_kind, eventually

EXTENDED_SKILLS = [{"id": "more", "name": "More", "description": "extra", "tags": ["t"]}]
V1 = {"A2A-Version": "1.0"}


async def _client(service) -> SimpleNamespace:
    base = f"http://127.0.0.1:{service.http_port}"
    http = httpx.AsyncClient(timeout=10)
    card_json = (await http.get(f"{base}/.well-known/agent-card.json")).json()
    v03_card = types_v03.AgentCard.model_validate(card_json)  # what a v0.3 client reads
    card = parse_agent_card(json.loads(json.dumps(card_json)))

    def client(streaming: bool) -> BaseClient:
        transport = CompatJsonRpcTransport(http, card, v03_card.url, is_shared_httpx=True)
        return BaseClient(card, ClientConfig(streaming=streaming), transport, [])

    return SimpleNamespace(
        http=http,
        base=base,
        card_json=card_json,
        v03_card=v03_card,
        unary=client(False),
        streaming=client(True),
        service=service,
    )


@pytest.fixture
async def v03(start_service):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        extended_card=True,
        extended_skills=EXTENDED_SKILLS,
    )
    client = await _client(service)
    yield client
    await client.http.aclose()


async def collect(iterator):
    return [event async for event in iterator]


async def send(client, text: str, **config) -> sdk.StreamResponse:
    request = sdk.SendMessageRequest(message=user_message(text))
    if config:
        request.configuration.CopyFrom(sdk.SendMessageConfiguration(**config))
    [event] = await collect(client.send_message(request))
    return event


def rpc(method: str, params: dict, id: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def v03_message(text: str, **fields) -> dict:
    return {
        "kind": "message",
        "messageId": fields.pop("messageId", f"m-{text.replace(' ', '-')}"),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


# ------------------------------------------------------------------------------ discovery


async def test_card_serves_both_versions(v03):
    card = v03.card_json
    assert card["protocolVersion"] == "0.3.0" and card["preferredTransport"] == "JSONRPC"
    assert card["url"] == v03.base and card["supportsAuthenticatedExtendedCard"] is True
    assert {i["transport"] for i in card["additionalInterfaces"]} == {
        "JSONRPC",
        "HTTP+JSON",
        "GRPC",
    }
    versions = [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]
    assert versions[:3] == [("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("GRPC", "1.0")]
    assert versions[3:] == [("JSONRPC", "0.3"), ("HTTP+JSON", "0.3"), ("GRPC", "0.3")]
    assert v03.v03_card.capabilities.streaming is True
    # A 1.0 client still picks 1.0 (a2a-sdk prefers the 1.0 entry of a binding).
    assert v03.unary._card.supported_interfaces[0].protocol_version == "1.0"


async def test_card_without_compat_has_no_v03_members(start_service):
    service = await start_service(http_port=0, store="memory:", compat_v03=False)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert "protocolVersion" not in card and "url" not in card
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}
        r = await http.post("/", json=rpc("message/send", {"message": v03_message("echo x")}))
        error = r.json()["error"]
        assert error["code"] == -32009 and "compat_v03" in error["message"]


# ------------------------------------------------------------------------------ the client


async def test_send_blocking_get_and_direct_reply(v03):
    task = (await send(v03.unary, "echo hello")).task
    assert task.status.state == sdk.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo hello"
    full = await v03.unary.get_task(sdk.GetTaskRequest(id=task.id))
    assert full.history[0].parts[0].text == "echo hello"
    reply = await send(v03.unary, "reply hi there")
    assert reply.HasField("message") and reply.message.parts[0].text == "hi there"
    assert reply.message.role == sdk.ROLE_AGENT


async def test_send_not_blocking_then_get(v03):
    task = (await send(v03.unary, "slow 3", return_immediately=True)).task
    assert task.status.state in (sdk.TASK_STATE_SUBMITTED, sdk.TASK_STATE_WORKING)
    for _ in range(100):
        got = await v03.unary.get_task(sdk.GetTaskRequest(id=task.id))
        if got.status.state == sdk.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.05)
    assert got.status.state == sdk.TASK_STATE_COMPLETED


async def test_stream_to_the_end(v03):
    events = await collect(
        v03.streaming.send_message(sdk.SendMessageRequest(message=user_message("chunks 3")))
    )
    assert events[0].HasField("task")
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [c.artifact.parts[0].text for c in chunks] == ["c0", "c1", "c2"]
    assert chunks[-1].last_chunk and not chunks[0].append and chunks[1].append
    assert events[-1].status_update.status.state == sdk.TASK_STATE_COMPLETED


async def test_stream_through_input_required_and_follow_up(v03):
    events = await collect(
        v03.streaming.send_message(sdk.SendMessageRequest(message=user_message("input more")))
    )
    assert events[-1].status_update.status.state == sdk.TASK_STATE_INPUT_REQUIRED
    task_id = events[0].task.id
    follow = user_message("the answer", task_id=task_id, context_id=events[0].task.context_id)
    done = (await collect(v03.unary.send_message(sdk.SendMessageRequest(message=follow))))[0].task
    assert done.status.state == sdk.TASK_STATE_COMPLETED
    assert done.artifacts[-1].parts[0].text == "follow-up: the answer"


async def test_raw_stream_marks_the_last_status_update_final(v03):
    body = rpc("message/stream", {"message": v03_message("input more")})
    async with v03.http.stream("POST", v03.base, json=body) as r:
        lines = [line async for line in r.aiter_lines() if line.startswith("data:")]
    results = [json.loads(line[5:])["result"] for line in lines]
    assert results[0]["kind"] == "task"
    updates = [e for e in results if e["kind"] == "status-update"]
    assert updates[-1]["status"]["state"] == "input-required" and updates[-1]["final"] is True
    assert all(u["final"] is False for u in updates[:-1])


async def test_cancel_a_running_task_and_resubscribe(v03):
    running = (await send(v03.unary, "hang", return_immediately=True)).task
    sub = v03.streaming.subscribe(sdk.SubscribeToTaskRequest(id=running.id))
    snapshot = await sub.__anext__()
    assert snapshot.task.id == running.id
    canceled = await v03.unary.cancel_task(sdk.CancelTaskRequest(id=running.id))
    assert canceled.status.state == sdk.TASK_STATE_CANCELED
    rest = await collect(sub)
    assert rest[-1].status_update.status.state == sdk.TASK_STATE_CANCELED


async def test_push_config_set_get_list_delete(v03):
    task = (await send(v03.unary, "echo x")).task
    created = await v03.unary.create_task_push_notification_config(
        sdk.TaskPushNotificationConfig(
            task_id=task.id,
            id="c1",
            url="https://example.com/cb",
            token="tok",
            authentication=sdk.AuthenticationInfo(scheme="Bearer", credentials="secret"),
        )
    )
    assert created.id == "c1" and created.task_id == task.id
    assert created.authentication.scheme == "Bearer"
    got = await v03.unary.get_task_push_notification_config(
        sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    assert got.url == "https://example.com/cb" and got.token == "tok"
    listed = await v03.unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in listed.configs] == ["c1"]
    # v0.3's get without a config id: the task's (first) config
    r = await v03.http.post(v03.base, json=rpc("tasks/pushNotificationConfig/get", {"id": task.id}))
    assert r.json()["result"]["pushNotificationConfig"]["id"] == "c1"
    await v03.unary.delete_task_push_notification_config(
        sdk.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
    )
    listed = await v03.unary.list_task_push_notification_configs(
        sdk.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert list(listed.configs) == []
    with pytest.raises(sdk_errors.TaskNotFoundError):
        await v03.unary.get_task_push_notification_config(
            sdk.GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )


async def test_extended_card(v03):
    card = await v03.unary.get_extended_agent_card(sdk.GetExtendedAgentCardRequest())
    assert "more" in [s.id for s in card.skills]


async def test_extended_card_not_configured_is_32007(start_service):
    service = await start_service(http_port=0, store="memory:", extended_card=True)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        r = await http.post("/", json=rpc("agent/getAuthenticatedExtendedCard", {}))
        assert r.json()["error"]["code"] == -32007


# ---------------------------------------------------------------- errors, in v0.3's codes


async def _completed(v03) -> str:
    return (await send(v03.unary, "echo done")).task.id


async def _err_unknown_task(v03):
    await v03.unary.get_task(sdk.GetTaskRequest(id="no-such-task"))


async def _err_bad_id(v03):
    await v03.unary.get_task(sdk.GetTaskRequest(id="not a valid id!"))


async def _err_cancel_completed(v03):
    await v03.unary.cancel_task(sdk.CancelTaskRequest(id=await _completed(v03)))


async def _err_message_to_completed(v03):
    message = user_message("more", task_id=await _completed(v03))
    await collect(v03.unary.send_message(sdk.SendMessageRequest(message=message)))


async def _err_stream_unknown_task(v03):
    message = user_message("more", task_id="no-such-task")
    await collect(v03.streaming.send_message(sdk.SendMessageRequest(message=message)))


async def _err_subscribe_completed(v03):
    await collect(v03.streaming.subscribe(sdk.SubscribeToTaskRequest(id=await _completed(v03))))


async def _err_missing_message_id(v03):
    message = user_message("x")
    message.ClearField("message_id")
    await collect(v03.unary.send_message(sdk.SendMessageRequest(message=message)))


ERROR_CASES = [
    (_err_unknown_task, sdk_errors.TaskNotFoundError),
    (_err_bad_id, sdk_errors.InvalidParamsError),
    (_err_cancel_completed, sdk_errors.TaskNotCancelableError),
    (_err_message_to_completed, sdk_errors.UnsupportedOperationError),
    (_err_stream_unknown_task, sdk_errors.TaskNotFoundError),
    (_err_subscribe_completed, sdk_errors.UnsupportedOperationError),
    (_err_missing_message_id, sdk_errors.InvalidParamsError),
]


@pytest.mark.parametrize("case,expected", ERROR_CASES, ids=[c.__name__[5:] for c, _ in ERROR_CASES])
async def test_errors_map_to_the_sdk_exception(v03, case, expected):
    with pytest.raises(expected):
        await case(v03)


async def test_errors_v03_lacks_are_32603_naming_the_reason(start_service):
    service = await start_service(
        http_port=0, store="memory:", required_extensions=["urn:example:ext"]
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        body = rpc("tasks/get", {"id": "x"})
        error = (await http.post("/", json=body)).json()["error"]
        assert error["code"] == -32603
        assert error["message"].startswith("EXTENSION_SUPPORT_REQUIRED: ")
        # v0.3's header name is honoured on a v0.3 call
        r = await http.post("/", json=body, headers={"X-A2A-Extensions": "urn:example:ext"})
        assert r.json()["error"]["code"] == -32001
        r = await http.post("/", json=body, headers={"A2A-Extensions": "urn:example:ext"})
        assert r.json()["error"]["code"] == -32001


async def test_raw_envelope_and_params_errors(v03):
    r = await v03.http.post(v03.base, json=rpc("tasks/list", {}))
    assert r.json()["error"]["code"] == -32601 and "message/send" in r.json()["error"]["message"]
    r = await v03.http.post(
        v03.base, json=rpc("message/send", {"message": {**v03_message("x"), "role": "ROLE_USER"}})
    )
    error = r.json()["error"]
    assert error["code"] == -32602 and "message.role" in json.dumps(error["data"])
    r = await v03.http.post(v03.base, json={"jsonrpc": "2.0", "method": "tasks/get", "params": {}})
    assert r.json()["error"]["code"] == -32600


# ------------------------------------------------------------------------------ negotiation


async def test_no_header_and_a_v03_method_is_served(v03):
    r = await v03.http.post(v03.base, json=rpc("message/send", {"message": v03_message("echo a")}))
    result = r.json()["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "completed"
    assert result["artifacts"][0]["parts"] == [{"kind": "text", "text": "echo a"}]
    assert result["history"][0]["role"] == "user"
    r = await v03.http.post(
        f"{v03.base}/?A2A-Version=0.3",
        json=rpc("tasks/get", {"id": result["id"], "historyLength": 0}),
    )
    assert r.json()["result"]["history"]  # 0 is unlimited in v0.3


async def test_no_header_and_a_v10_method_is_32009_saying_03_was_assumed(v03):
    r = await v03.http.post(v03.base, json=rpc("SendMessage", {"message": {"bad": "shape"}}))
    error = r.json()["error"]
    assert error["code"] == -32009  # the version is checked before the params are read
    assert "No A2A-Version was sent, so A2A 0.3 was assumed" in error["message"]
    assert (
        "A2A-Version: 1.0" in error["message"]
        and "Supported versions: 1.0, 0.3" in error["message"]
    )
    # a v0.3 method with a 1.0 header is a 1.0 call: no such method
    r = await v03.http.post(v03.base, json=rpc("tasks/get", {"id": "x"}), headers=V1)
    assert r.json()["error"]["code"] == -32601


async def test_a_task_is_the_same_over_both_versions(v03):
    r = await v03.http.post(v03.base, json=rpc("message/send", {"message": v03_message("echo b")}))
    v03_task = r.json()["result"]
    r = await v03.http.post(v03.base, json=rpc("GetTask", {"id": v03_task["id"]}), headers=V1)
    assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    r = await v03.http.post(
        v03.base,
        json=rpc(
            "SendMessage",
            {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "echo c"}]}},
        ),
        headers=V1,
    )
    v10_task = r.json()["result"]["task"]
    got = await v03.unary.get_task(sdk.GetTaskRequest(id=v10_task["id"]))
    assert (
        got.status.state == sdk.TASK_STATE_COMPLETED and got.artifacts[0].parts[0].text == "echo c"
    )


async def test_push_config_created_over_v03_gets_10_webhook_bodies(start_service):
    """The documented choice: a webhook gets the same 1.0 StreamResponse bodies whichever
    version created its config, with the config's token and v0.3 auth scheme."""
    receiver = await Receiver().start()
    try:
        service = await start_service(
            http_port=0,
            store="memory:",
            agent="tests.agents:ScriptedAgent",
            push_allow_networks=["127.0.0.0/8"],
        )
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
        ) as http:
            push = {
                "url": receiver.url,
                "token": "tok",
                "authentication": {"schemes": ["Bearer"], "credentials": "cred"},
            }
            params = {
                "message": v03_message("slow 2"),
                "configuration": {"blocking": False, "pushNotificationConfig": push},
            }
            r = await http.post("/", json=rpc("message/send", params))
            task_id = r.json()["result"]["id"]

            def completed() -> bool:
                return any(
                    b.body.get("statusUpdate", {}).get("status", {}).get("state")
                    == "TASK_STATE_COMPLETED"
                    for b in receiver.requests
                )

            await eventually(completed, what="completion")
        kinds = {event_kind(r.body) for r in receiver.requests}
        assert kinds <= {"task", "statusUpdate", "artifactUpdate"}
        assert all(
            (r.body.get("statusUpdate") or r.body.get("task") or r.body["artifactUpdate"]).get(
                "taskId", task_id
            )
            == task_id
            for r in receiver.requests
        )
        assert {r.headers["x-a2a-notification-token"] for r in receiver.requests} == {"tok"}
        assert {r.headers["authorization"] for r in receiver.requests} == {"Bearer cred"}
    finally:
        await receiver.stop()


# ------------------------------------------------------------------------------ auth, signing


async def test_signed_card_with_auth_serves_both_and_verifies(start_service, tmp_path):
    from a2a_cards.jws import verify_card_json
    from a2a_cards.keys import key_from_jwk
    from tests.integration.test_card_signing import sdk_verifier, write_key
    from tests.security_util import TOKENS, all_static_settings

    key_file = write_key(tmp_path, "k.pem", "ES256")
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        card_signing_key_files=[key_file],
        **all_static_settings(),
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as http:
        r = await http.get("/.well-known/agent-card.json")
        card, etag = r.json(), r.headers["etag"]
        jwks = (await http.get("/.well-known/jwks.json")).json()
        # v0.3: OpenAPI-style schemes and requirements beside the 1.0 ones
        v03_card = types_v03.AgentCard.model_validate(card)
        kinds = {name: s.root.type for name, s in (v03_card.security_schemes or {}).items()}
        assert set(kinds.values()) == {"http", "apiKey"}
        assert v03_card.security and all(isinstance(r, dict) for r in v03_card.security)
        api_key = next(
            s.root for s in v03_card.security_schemes.values() if s.root.type == "apiKey"
        )
        assert api_key.in_.value == "header" and api_key.name
        # 1.0: a2a-sdk's resolver reads the same schemes; its verifier and ours accept it
        parsed = parse_agent_card(json.loads(json.dumps(card)))
        plain = json_format.ParseDict(card, sdk.AgentCard(), ignore_unknown_fields=True)
        assert parsed.security_schemes == plain.security_schemes
        sdk_verifier(jwks)(parsed)
        keys = {k["kid"]: key_from_jwk(k) for k in jwks["keys"]}
        verified = verify_card_json(card, lambda h: keys.get(h["kid"]), algorithms=["ES256"])
        assert verified.form == "1.0 members"
        # auth applies to v0.3 calls
        body = rpc("message/send", {"message": v03_message("echo a")})
        assert (await http.post("/", json=body)).status_code == 401
        bearer = {"Authorization": f"Bearer {TOKENS['alice']}"}
        r = await http.post("/", json=body, headers=bearer)
        assert r.json()["result"]["status"]["state"] == "completed"
    off = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        card_signing_key_files=[key_file],
        compat_v03=False,
        data_dir=str(tmp_path / "off"),
        **all_static_settings(),
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{off.http_port}") as http:
        assert (await http.get("/.well-known/agent-card.json")).headers["etag"] != etag
