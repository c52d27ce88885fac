"""Each rule of the v0.3 ⇄ 1.0 protobuf translation (service/protocol/v03_proto.py), both
ways where it has two."""

from __future__ import annotations

import pytest

from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as v03
from service.protocol import v03_proto as t
from service.protocol.errors import (
    InvalidParamsError,
    OverloadedError,
    TaskNotFoundError,
    UnauthenticatedError,
)


def test_message_parts_are_content_and_come_back():
    old = v03.Message(
        message_id="m", context_id="c", task_id="t", role=v03.ROLE_USER, extensions=["urn:x"]
    )
    old.content.add(text="hi")
    old.metadata.update({"k": "v"})
    new = t.message_in(old)
    assert [p.text for p in new.parts] == ["hi"] and new.role == pb.ROLE_USER
    assert (new.message_id, new.context_id, new.task_id) == ("m", "c", "t")
    assert list(new.extensions) == ["urn:x"] and new.metadata["k"] == "v"
    assert t.message_out(new) == old


@pytest.mark.parametrize(
    ("file", "part"),
    [
        (
            v03.FilePart(file_with_uri="https://x/f", mime_type="text/plain", name="f.txt"),
            pb.Part(url="https://x/f", media_type="text/plain", filename="f.txt"),
        ),
        (
            v03.FilePart(file_with_bytes=b"\x00\x01", mime_type="a/b", name="b"),
            pb.Part(raw=b"\x00\x01", media_type="a/b", filename="b"),
        ),
    ],
)
def test_file_parts(file, part):
    assert t.part_in(v03.Part(file=file)) == part
    assert t.part_out(part) == v03.Part(file=file)


def test_data_part_object_both_ways():
    old = v03.Part()
    old.data.data.update({"a": 1})
    new = t.part_in(old)
    assert new.data.struct_value["a"] == 1
    assert t.part_out(new) == old


def test_data_part_that_is_no_object_is_wrapped_and_unwrapped():
    new = pb.Part()
    new.data.list_value.values.add().number_value = 3
    old = t.part_out(new)
    assert old.data.data["value"][0] == 3 and old.metadata[t.DATA_PART_COMPAT] is True
    back = t.part_in(old)
    assert back == new and not back.HasField("metadata")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (v03.TASK_STATE_SUBMITTED, pb.TASK_STATE_SUBMITTED),
        (v03.TASK_STATE_WORKING, pb.TASK_STATE_WORKING),
        (v03.TASK_STATE_COMPLETED, pb.TASK_STATE_COMPLETED),
        (v03.TASK_STATE_FAILED, pb.TASK_STATE_FAILED),
        (v03.TASK_STATE_CANCELLED, pb.TASK_STATE_CANCELED),
        (v03.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_INPUT_REQUIRED),
        (v03.TASK_STATE_REJECTED, pb.TASK_STATE_REJECTED),
        (v03.TASK_STATE_AUTH_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED),
    ],
)
def test_states_both_ways(old, new):
    assert t.state_in(old) == new and t.state_out(new) == old
    assert v03.TaskState.Name(old).removeprefix("TASK_STATE_").replace("CANCELLED", "CANCELED") == (
        pb.TaskState.Name(new).removeprefix("TASK_STATE_")
    )


def test_task_status_message_is_update():
    task = pb.Task(id="t", context_id="c")
    task.status.state = pb.TASK_STATE_INPUT_REQUIRED
    task.status.message.parts.add(text="more?")
    task.status.timestamp.FromSeconds(5)
    task.artifacts.add(artifact_id="a", name="n").parts.add(text="x")
    task.history.add(message_id="m").parts.add(text="q")
    old = t.task_out(task)
    assert old.status.update.content[0].text == "more?" and old.status.timestamp.seconds == 5
    assert old.artifacts[0].parts[0].text == "x" and old.history[0].content[0].text == "q"
    assert t.task_in(old) == task


@pytest.mark.parametrize(
    ("state", "final"),
    [
        (pb.TASK_STATE_WORKING, False),
        (pb.TASK_STATE_COMPLETED, True),
        (pb.TASK_STATE_CANCELED, True),
        (pb.TASK_STATE_INPUT_REQUIRED, True),
        (pb.TASK_STATE_AUTH_REQUIRED, True),
    ],
)
def test_final_on_terminal_and_interrupted_status_updates(state, final):
    event = pb.StreamResponse()
    event.status_update.task_id = "t"
    event.status_update.status.state = state
    assert t.stream_out(event).status_update.final is final


def test_stream_payloads():
    message = pb.StreamResponse(message=pb.Message(message_id="m"))
    assert t.stream_out(message).msg.message_id == "m"
    art = pb.StreamResponse()
    art.artifact_update.artifact.artifact_id = "a"
    art.artifact_update.append = True
    art.artifact_update.last_chunk = True
    out = t.stream_out(art).artifact_update
    assert out.artifact.artifact_id == "a" and out.append and out.last_chunk


def test_blocking_and_history_length():
    bare = t.send_request_in(v03.SendMessageRequest(request=v03.Message(message_id="m")))
    assert not bare.HasField("configuration")  # no configuration: blocking
    request = v03.SendMessageRequest(request=v03.Message(message_id="m"))
    request.configuration.blocking = True
    request.configuration.history_length = 0  # v0.3: all of it
    new = t.send_request_in(request)
    assert new.configuration.return_immediately is False
    assert not new.configuration.HasField("history_length")
    request.configuration.blocking = False
    request.configuration.history_length = 2
    new = t.send_request_in(request)
    assert new.configuration.return_immediately is True and new.configuration.history_length == 2
    assert not t.get_task_in(v03.GetTaskRequest(name="tasks/x")).HasField("history_length")
    assert t.get_task_in(v03.GetTaskRequest(name="tasks/x", history_length=3)).history_length == 3


def test_push_config_schemes_and_names():
    old = v03.PushNotificationConfig(id="c", url="https://x/cb", token="tok")
    old.authentication.schemes.extend(["Bearer", "Basic"])
    old.authentication.credentials = "s"
    request = v03.CreateTaskPushNotificationConfigRequest(
        parent="tasks/t1",
        config_id="c",
        config=v03.TaskPushNotificationConfig(push_notification_config=old),
    )
    new = t.create_config_in(request)
    assert (new.task_id, new.id, new.url, new.token) == ("t1", "c", "https://x/cb", "tok")
    assert new.authentication.scheme == "Bearer"  # the first of several
    out = t.task_config_out(new)
    assert out.name == "tasks/t1/pushNotificationConfigs/c"
    assert list(out.push_notification_config.authentication.schemes) == ["Bearer"]
    rest = v03.CreateTaskPushNotificationConfigRequest(
        parent="tasks/t1/pushNotificationConfigs",  # the REST route's collection
        config=v03.TaskPushNotificationConfig(push_notification_config=old),
    )
    assert (t.create_config_in(rest).task_id, t.create_config_in(rest).id) == ("t1", "c")
    got = t.get_config_in(v03.GetTaskPushNotificationConfigRequest(name=out.name))
    assert (got.task_id, got.id) == ("t1", "c")
    gone = t.delete_config_in(v03.DeleteTaskPushNotificationConfigRequest(name=out.name))
    assert (gone.task_id, gone.id) == ("t1", "c")


@pytest.mark.parametrize("name", ["t1", "tasks/", "tasks/a/b", "x/tasks/a"])
def test_bad_task_names_are_invalid_params(name):
    with pytest.raises(InvalidParamsError):
        t.cancel_task_in(v03.CancelTaskRequest(name=name))


def test_errors_named_as_v03_clients_parse_them():
    assert t.error_message(TaskNotFoundError("gone")) == "TaskNotFoundError: gone"
    assert t.error_message(UnauthenticatedError("who?")) == "who?"
    assert t.error_message(OverloadedError("busy")) == "busy"


def test_card_in_v03_shape():
    card = pb.AgentCard(name="n", description="d", version="1")
    card.supported_interfaces.add(
        url="http://h/", protocol_binding="JSONRPC", protocol_version="1.0"
    )
    card.supported_interfaces.add(url="h:1", protocol_binding="GRPC", protocol_version="0.3")
    card.capabilities.streaming = True
    card.capabilities.extended_agent_card = True
    card.skills.add(id="s", name="S", description="d", tags=["t"])
    card.security_schemes["bearer"].http_auth_security_scheme.scheme = "Bearer"
    old = t.card_out(card)
    assert old.protocol_version.startswith("0.3") and old.url == "h:1"
    assert old.preferred_transport == "GRPC" and len(old.additional_interfaces) == 2
    assert old.capabilities.streaming and old.supports_authenticated_extended_card
    assert old.skills[0].id == "s"
    assert old.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert not t.card_out(card, extended=True).supports_authenticated_extended_card
