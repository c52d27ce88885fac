"""Request JSON members that name no field: dropped at any depth by default, the first one
refused with a helpful InvalidParams in strict mode; values a field cannot hold are refused
either way; free-form values (Struct metadata, data parts) keep every key. (Over the wire:
tests/integration/test_unknown_fields.py.)"""

from __future__ import annotations

import copy

import pytest

from gateway.transcode import build_request, known_fields_only
from gen import a2a_pb2 as pb
from service.protocol.errors import InvalidParamsError


def request_doc() -> dict:
    """A SendMessageRequest with unknown members at every level, and free-form values."""
    return {
        "futureTopLevel": {"deep": [1, 2]},
        "message": {
            "messageId": "m-1",
            "role": "ROLE_USER",
            "futureMessageField": True,
            "parts": [
                {"text": "hi", "futurePartField": "x"},
                {"data": {"anything": {"goes": 1}}, "metadata": {"free": "form"}},
            ],
            "metadata": {"k": {"nested": "kept"}},
        },
        "configuration": {"historyLength": 2, "future_config": 1},
    }


def test_unknown_members_are_dropped_at_every_depth_and_free_form_values_kept():
    doc = request_doc()
    before = copy.deepcopy(doc)
    cleaned = known_fields_only(doc, pb.SendMessageRequest.DESCRIPTOR, reject=False)
    assert doc == before  # the caller's document is not modified
    assert set(cleaned) == {"message", "configuration"}
    message = cleaned["message"]
    assert "futureMessageField" not in message
    assert message["parts"][0] == {"text": "hi"}
    assert message["parts"][1] == before["message"]["parts"][1]  # data and metadata untouched
    assert message["metadata"] == {"k": {"nested": "kept"}}
    assert cleaned["configuration"] == {"historyLength": 2}
    built = build_request(pb.SendMessageRequest, body=request_doc(), body_field="*")
    assert built.message.parts[0].text == "hi" and built.configuration.history_length == 2


def test_proto_names_are_fields_too():
    doc = {"message": {"message_id": "m", "role": "ROLE_USER", "parts": [{"media_type": "a/b"}]}}
    assert known_fields_only(doc, pb.SendMessageRequest.DESCRIPTOR, reject=True) == doc


@pytest.mark.parametrize(
    ("path", "type_name"),
    [
        ("futureTopLevel", "SendMessageRequest"),
        ("message.futureMessageField", "Message"),
        ("message.parts[0].futurePartField", "Part"),
        ("configuration.future_config", "SendMessageConfiguration"),
    ],
)
def test_strict_mode_refuses_the_first_unknown_member_naming_its_path(path, type_name):
    doc = request_doc()
    # Keep only the unknown member under test.
    for other in (
        "futureTopLevel",
        "message.futureMessageField",
        "message.parts[0].futurePartField",
        "configuration.future_config",
    ):
        if other != path:
            _remove(doc, other)
    with pytest.raises(InvalidParamsError) as refused:
        build_request(pb.SendMessageRequest, body=doc, body_field="*", reject_unknown=True)
    [(field, problem)] = refused.value.field_violations
    assert field == path
    assert f"{type_name} has no field" in problem and "refuses unknown fields" in problem
    assert "its fields:" in problem  # says what the type does have


def _remove(doc: dict, path: str) -> None:
    node = doc
    *parents, last = path.replace("[0]", ".0").split(".")
    for name in parents:
        node = node[int(name)] if name.isdigit() else node[name]
    del node[last]


def test_a_value_the_field_cannot_hold_is_refused_in_either_mode():
    doc = {"message": {"messageId": "m", "role": "ROLE_FROM_THE_FUTURE", "parts": [{"text": "x"}]}}
    for reject in (False, True):
        with pytest.raises(InvalidParamsError) as refused:
            build_request(pb.SendMessageRequest, body=doc, body_field="*", reject_unknown=reject)
        assert "ROLE_FROM_THE_FUTURE" in refused.value.message


def test_a_long_unknown_name_is_cut_in_the_refusal():
    doc = {"id": "t", "x" * 10_000: 1}
    with pytest.raises(InvalidParamsError) as refused:
        build_request(pb.GetTaskRequest, body=doc, body_field="*", reject_unknown=True)
    assert len(refused.value.message) < 400
    assert refused.value.field_violations[0][0] == "x" * 64 + "..."


def test_shapes_the_parser_must_refuse_are_left_to_it():
    descriptor = pb.SendMessageRequest.DESCRIPTOR
    for odd in ({"message": "text"}, {"message": {"parts": {"not": "a list"}}}, [1], None):
        assert known_fields_only(odd, descriptor, reject=False) == odd
