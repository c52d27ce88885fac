"""Where a streamed event's number travels on gRPC and how a resume point is read
(service/protocol/event_ids.py)."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as v03
from service.protocol.errors import InvalidParamsError
from service.protocol.event_ids import (
    opens_replay,
    resume_point,
    set_event_id,
    take_event_id,
    with_event_id,
)


def update(metadata: dict | None = None) -> pb.StreamResponse:
    event = pb.StreamResponse()
    event.status_update.task_id = "t"
    event.status_update.status.state = pb.TASK_STATE_WORKING
    if metadata is not None:
        event.status_update.metadata.update(metadata)
    return event


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("", None), (" 7 ", 7), ("0", 0)])
def test_resume_point(raw, expected):
    assert resume_point(raw, "Last-Event-ID") == expected


@pytest.mark.parametrize("raw", ["x", "-1", "1.0", "²", "٣", "1e3", "9" * 19])
def test_a_resume_point_that_is_not_a_number_is_invalid_params(raw):
    with pytest.raises(InvalidParamsError) as refused:
        resume_point(raw, "Last-Event-ID")
    assert [field for field, _ in refused.value.field_violations] == ["Last-Event-ID"]


def test_the_number_goes_beside_the_agents_keys_in_a_copy_and_comes_back_out():
    agent_keys = {"a2a_service": {"tool": {"status": "started"}}, "other": 1}
    event = update(agent_keys)
    numbered = with_event_id(event, 12)
    assert event == update(agent_keys)  # shared by every subscriber: never changed
    assert json_format.MessageToDict(numbered.status_update.metadata) == {
        "a2a_service": {"tool": {"status": "started"}, "eventId": "12"},
        "other": 1.0,
    }
    assert take_event_id(numbered) == 12
    assert numbered == update(agent_keys)  # the event as the HTTP bindings send it


def test_an_event_without_metadata_gets_it_only_for_its_number():
    numbered = with_event_id(update(), 3)
    assert take_event_id(numbered) == 3
    assert not numbered.status_update.HasField("metadata")
    assert take_event_id(numbered) is None
    assert with_event_id(update(), None) == update()  # no number, no change


def test_every_payload_of_either_version_can_carry_it():
    for event in (
        pb.StreamResponse(task=pb.Task(id="t")),
        pb.StreamResponse(message=pb.Message(message_id="m")),
        pb.StreamResponse(artifact_update=pb.TaskArtifactUpdateEvent(task_id="t")),
        v03.StreamResponse(task=v03.Task(id="t")),
        v03.StreamResponse(status_update=v03.TaskStatusUpdateEvent(task_id="t")),
    ):
        set_event_id(event, 5)
        assert take_event_id(event) == 5


def test_only_a_resumed_subscriptions_opening_task_with_events_to_follow_opens_a_replay():
    task = pb.StreamResponse(task=pb.Task(id="t"))
    assert opens_replay(task, 9, 4)
    assert not opens_replay(task, 9, 9)  # nothing after the resume point
    assert not opens_replay(task, 9, None)  # not resumed
    assert not opens_replay(update(), 9, 4)  # not a task
