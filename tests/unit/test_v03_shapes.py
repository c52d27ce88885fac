"""Each v0.3 ⇄ 1.0 translation rule, both ways (gateway/v03_shapes.py, service/cards/v03.py),
and the version rules of VersionCheck. a2a-sdk 1.3.0's v0.3 models read what we write, and
its v0.3 → 1.0 conversion of it gives back the message we started from."""

from __future__ import annotations

import base64

import pytest
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from google.protobuf import json_format

from gateway import v03_shapes as shapes
from gateway.transcode import build_request, to_json_dict
from gen import a2a_pb2 as pb
from service.calls.admission import VersionCheck
from service.calls.record import Call
from service.cards.card import interface
from service.cards.v03 import add_v03_members, openapi_scheme
from service.protocol import errors
from service.protocol.params import CallContext


def sdk_pb(message):
    """Our 1.0 message as a2a-sdk's (same proto, another module)."""
    from a2a.types import a2a_pb2 as sdk

    return getattr(sdk, type(message).__name__).FromString(message.SerializeToString())


# ------------------------------------------------------------------------------ parts


PARTS_V03 = [
    {"kind": "text", "text": "hi", "metadata": {"k": 1}},
    {
        "kind": "file",
        "file": {
            "bytes": base64.b64encode(b"\x00\x01").decode(),
            "mimeType": "a/b",
            "name": "f.bin",
        },
    },
    {"kind": "file", "file": {"uri": "https://x/y", "mimeType": "text/plain"}},
    {"kind": "data", "data": {"a": [1, 2]}},
]
PARTS_V10 = [
    {"text": "hi", "metadata": {"k": 1}},
    {"raw": base64.b64encode(b"\x00\x01").decode(), "mediaType": "a/b", "filename": "f.bin"},
    {"url": "https://x/y", "mediaType": "text/plain"},
    {"data": {"a": [1, 2]}},
]


@pytest.mark.parametrize("v03,v10", list(zip(PARTS_V03, PARTS_V10, strict=True)))
def test_parts_both_ways(v03, v10):
    assert shapes.part_in(v03, "p") == v10
    assert shapes.part_out(v10) == v03


def test_part_kind_may_be_left_out_and_bad_kinds_are_named():
    assert shapes.part_in({"text": "x"}, "p") == {"text": "x"}
    with pytest.raises(errors.InvalidParamsError) as info:
        shapes.part_in({"kind": "image"}, "message.parts[0]")
    assert info.value.field_violations[0][0] == "message.parts[0].kind"
    with pytest.raises(errors.InvalidParamsError):
        shapes.part_in({"kind": "file", "file": {"name": "x"}}, "p")


def test_a_data_part_that_is_no_object_travels_wrapped():
    out = shapes.part_out({"data": [1, 2]})
    assert out == {
        "kind": "data",
        "data": {"value": [1, 2]},
        "metadata": {"data_part_compat": True},
    }
    assert shapes.part_in(out, "p") == {"data": [1, 2]}
    core = conversions.to_core_part(types_v03.Part.model_validate(out))
    assert json_format.MessageToDict(core) == {"data": [1, 2]}  # as a2a-sdk reads it back


# ------------------------------------------------------------------------------ messages, roles


def test_roles_and_messages_both_ways():
    v03 = {
        "kind": "message",
        "messageId": "m1",
        "role": "user",
        "parts": [{"kind": "text", "text": "hi"}],
        "contextId": "c",
        "taskId": "t",
        "referenceTaskIds": ["r"],
        "extensions": ["urn:x"],
        "metadata": {"a": "b"},
    }
    v10 = shapes.message_in(v03)
    assert v10["role"] == "ROLE_USER" and v10["parts"] == [{"text": "hi"}]
    assert shapes.message_out(v10) == v03
    assert shapes.message_out({"role": "ROLE_AGENT", "messageId": "x"})["role"] == "agent"
    for bad in ("ROLE_USER", "", None):
        with pytest.raises(errors.InvalidParamsError):
            shapes.message_in({**v03, "role": bad})


# ------------------------------------------------------------------------------ states, final


@pytest.mark.parametrize("state", [s for s in pb.TaskState.keys()])
def test_states_are_kebab_case_and_final_where_a_stream_ends(state):
    event = pb.TaskStatusUpdateEvent(
        task_id="t", context_id="c", status=pb.TaskStatus(state=pb.TaskState.Value(state))
    )
    out = shapes.status_update_out(to_json_dict(event))
    expected = state.removeprefix("TASK_STATE_").lower().replace("_", "-")
    assert out["status"]["state"] == ("unknown" if expected == "unspecified" else expected)
    ends = expected in (
        "completed",
        "canceled",
        "failed",
        "rejected",
        "input-required",
        "auth-required",
    )
    assert out["final"] is ends and out["kind"] == "status-update"
    parsed = types_v03.TaskStatusUpdateEvent.model_validate(out)
    assert conversions.to_core_task_status_update_event(parsed) == sdk_pb(event)
    assert shapes.STATE_IN[out["status"]["state"]] == state


def test_a_task_and_its_artifacts_round_trip_through_the_sdk_models():
    task = pb.Task(
        id="t",
        context_id="c",
        status=pb.TaskStatus(state=pb.TASK_STATE_WORKING),
        artifacts=[
            pb.Artifact(artifact_id="a", name="n", parts=[pb.Part(raw=b"xy", filename="f")])
        ],
        history=[pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="q")])],
    )
    task.status.timestamp.FromJsonString("2025-01-02T03:04:05Z")
    out = shapes.task_out(to_json_dict(task))
    assert out["kind"] == "task" and out["history"][0]["kind"] == "message"
    assert conversions.to_core_task(types_v03.Task.model_validate(out)) == sdk_pb(task)
    update = pb.TaskArtifactUpdateEvent(
        task_id="t", context_id="c", artifact=task.artifacts[0], append=True, last_chunk=False
    )
    out = shapes.artifact_update_out(to_json_dict(update))
    assert out["kind"] == "artifact-update" and out["append"] is True and out["lastChunk"] is False
    assert conversions.to_core_task_artifact_update_event(
        types_v03.TaskArtifactUpdateEvent.model_validate(out)
    ) == sdk_pb(update)


def test_send_results_carry_their_kind():
    message = pb.Message(message_id="m", role=pb.ROLE_AGENT, parts=[pb.Part(text="x")])
    assert (
        shapes.send_result_out(to_json_dict(pb.SendMessageResponse(message=message)))["kind"]
        == "message"
    )
    task = pb.Task(id="t", context_id="c", status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED))
    assert shapes.send_result_out(to_json_dict(pb.StreamResponse(task=task)))["kind"] == "task"


# ------------------------------------------------------------------------------ requests


def send_request(params: dict) -> pb.SendMessageRequest:
    return build_request(pb.SendMessageRequest, body=shapes.send_in(params), body_field="*")


MESSAGE = {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "x"}]}


def test_blocking_defaults_to_true():
    assert not send_request({"message": MESSAGE}).configuration.return_immediately
    blocking = {"message": MESSAGE, "configuration": {"blocking": True}}
    assert not send_request(blocking).configuration.return_immediately
    not_blocking = {"message": MESSAGE, "configuration": {"blocking": False}}
    assert send_request(not_blocking).configuration.return_immediately
    with pytest.raises(errors.InvalidParamsError):
        shapes.send_in({"message": MESSAGE, "configuration": {"blocking": "no"}})


def test_history_length_zero_is_unlimited():
    zero = send_request({"message": MESSAGE, "configuration": {"historyLength": 0}})
    assert not zero.configuration.HasField("history_length")  # 1.0: no limit
    two = send_request({"message": MESSAGE, "configuration": {"historyLength": 2}})
    assert two.configuration.history_length == 2
    get = build_request(
        pb.GetTaskRequest,
        body=shapes.task_query_in({"id": "t", "historyLength": 0}),
        body_field="*",
    )
    assert get.id == "t" and not get.HasField("history_length")


def test_push_authentication_schemes_both_ways():
    v03 = {
        "taskId": "t",
        "pushNotificationConfig": {
            "url": "https://hook",
            "id": "c",
            "token": "tok",
            "authentication": {"schemes": ["Bearer", "Basic"], "credentials": "cred"},
        },
    }
    config = build_request(
        pb.TaskPushNotificationConfig, body=shapes.set_push_in(v03), body_field="*"
    )
    assert config.task_id == "t" and config.id == "c" and config.url == "https://hook"
    assert config.authentication.scheme == "Bearer" and config.authentication.credentials == "cred"
    out = shapes.push_config_out(to_json_dict(config))
    assert out["pushNotificationConfig"]["authentication"] == {
        "schemes": ["Bearer"],
        "credentials": "cred",
    }
    assert out["taskId"] == "t" and out["pushNotificationConfig"]["token"] == "tok"
    with pytest.raises(errors.InvalidParamsError):
        shapes.set_push_in(
            {
                "taskId": "t",
                "pushNotificationConfig": {"url": "u", "authentication": {"schemes": "Bearer"}},
            }
        )
    in_send = send_request(
        {
            "message": MESSAGE,
            "configuration": {"pushNotificationConfig": v03["pushNotificationConfig"]},
        }
    )
    assert in_send.configuration.task_push_notification_config.authentication.scheme == "Bearer"


def test_push_references():
    assert shapes.push_ref_in({"id": "t", "pushNotificationConfigId": "c"}) == {
        "taskId": "t",
        "id": "c",
    }
    assert shapes.push_ref_in({"id": "t"}) == {"taskId": "t"}
    listed = pb.ListTaskPushNotificationConfigsResponse(
        configs=[pb.TaskPushNotificationConfig(task_id="t", id="c", url="u")]
    )
    assert shapes.push_configs_out(to_json_dict(listed)) == [
        {"taskId": "t", "pushNotificationConfig": {"url": "u", "id": "c"}}
    ]


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "err,code",
    [
        (errors.TaskNotFoundError("x"), -32001),
        (errors.TaskNotCancelableError("x"), -32002),
        (errors.PushNotificationNotSupportedError("x"), -32003),
        (errors.UnsupportedOperationError("x"), -32004),
        (errors.ContentTypeNotSupportedError("x"), -32005),
        (errors.InvalidAgentResponseError("x"), -32006),
        (errors.ExtendedAgentCardNotConfiguredError("x"), -32007),
        (errors.InvalidParamsError("x"), -32602),
        (errors.InternalError("x"), -32603),
    ],
)
def test_error_codes_v03_has_are_kept(err, code):
    assert shapes.error_out(err, []) == {"code": code, "message": "x", "data": []}


@pytest.mark.parametrize(
    "err",
    [
        errors.ExtensionSupportRequiredError("need it"),
        errors.VersionNotSupportedError("need it"),
        errors.UnauthenticatedError("need it"),
    ],
)
def test_errors_v03_lacks_are_internal_naming_the_reason(err):
    out = shapes.error_out(err, ["details"])
    assert out["code"] == -32603 and out["message"] == f"{err.reason}: need it"
    assert out["data"] == ["details"]


# ------------------------------------------------------------------------------ the card


def card_with(*versions: str) -> pb.AgentCard:
    card = pb.AgentCard(name="n", description="d", version="1")
    card.capabilities.streaming = True
    for version in versions:
        card.supported_interfaces.append(interface("http://h", "JSONRPC", version=version))
        card.supported_interfaces.append(interface("http://h", "HTTP+JSON", version=version))
    card.security_schemes["bearer"].http_auth_security_scheme.scheme = "Bearer"
    card.security_schemes["key"].api_key_security_scheme.CopyFrom(
        pb.APIKeySecurityScheme(location="header", name="X-API-Key")
    )
    card.security_schemes["mtls"].mtls_security_scheme.SetInParent()
    card.security_requirements.add().schemes["bearer"].list.extend([])
    card.security_requirements.add().schemes["oauth"].list.extend(["read"])
    return card


def test_card_v03_members_come_from_the_10_ones():
    card = card_with("1.0", "0.3")
    document = add_v03_members(to_json_dict(card), card)
    assert document["url"] == "http://h" and document["preferredTransport"] == "JSONRPC"
    assert document["additionalInterfaces"] == [
        {"url": "http://h", "transport": "JSONRPC"},
        {"url": "http://h", "transport": "HTTP+JSON"},
    ]
    assert document["protocolVersion"] == "0.3.0" and document["skills"] == []
    assert document["security"] == [{"bearer": []}, {"oauth": ["read"]}]
    schemes = document["securitySchemes"]
    assert schemes["bearer"] == {
        "httpAuthSecurityScheme": {"scheme": "Bearer"},
        "type": "http",
        "scheme": "Bearer",
    }
    assert schemes["key"]["type"] == "apiKey" and schemes["key"]["in"] == "header"
    assert schemes["mtls"]["type"] == "mutualTLS"
    v03 = types_v03.AgentCard.model_validate(document)
    assert v03.security_schemes["key"].root.in_.value == "header"
    # the 1.0 members are unchanged: a 1.0 parser sees the card it was
    parsed = json_format.ParseDict(document, pb.AgentCard(), ignore_unknown_fields=True)
    assert parsed == card


def test_a_card_without_03_interfaces_gets_no_v03_members():
    card = card_with("1.0")
    assert add_v03_members(to_json_dict(card), card) == to_json_dict(card)
    assert openapi_scheme({}) == {}


# ------------------------------------------------------------------------------ versions


async def check(
    binding: str, version: str | None, method: str = "SendMessage", compat: bool = True
):
    metadata = {"a2a-version": version} if version is not None else {}
    context = CallContext(metadata=metadata, default_version="0.3")
    await VersionCheck(compat_v03=compat).before(Call(binding, method), context, None)


@pytest.mark.parametrize("version", [None, "", "0.3", "0.3.0"])
async def test_a_v03_call_is_served_with_03_or_none(version):
    for binding in ("jsonrpc-v0.3", "rest-v0.3", "grpc-v0.3"):
        await check(binding, version)


async def test_a_v03_call_refused_with_another_version_or_when_off():
    with pytest.raises(errors.VersionNotSupportedError, match="0.3 method"):
        await check("jsonrpc-v0.3", "1.0")
    with pytest.raises(errors.VersionNotSupportedError, match="compat_v03 = false") as info:
        await check("jsonrpc-v0.3", None, compat=False)
    assert info.value.metadata["supported"] == "1.0"


async def test_a_10_call_without_a_version_says_03_was_assumed():
    with pytest.raises(errors.VersionNotSupportedError) as info:
        await check("jsonrpc", None)
    message = info.value.message
    assert "No A2A-Version was sent, so A2A 0.3 was assumed" in message
    assert "SendMessage is an A2A 1.0 method" in message and "'A2A-Version: 1.0'" in message
    assert "Supported versions: 1.0, 0.3." in message
    assert info.value.metadata == {"requested": "0.3", "supported": "1.0,0.3"}
    with pytest.raises(errors.VersionNotSupportedError) as info:
        await check("grpc", "0.3")  # sent explicitly to a 1.0 method
    assert "'0.3' is not supported by SendMessage" in info.value.message
    assert "a2a.v1.A2AService" in info.value.message
    await check("jsonrpc", "1.0")
    await check("rest", "1.2")
