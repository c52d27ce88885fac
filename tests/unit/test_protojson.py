"""gateway/protojson.py answers exactly as json_format does, or not at all.

Every message type of both contracts is filled with values of every kind (strings with
and without non-ASCII, enums by every name, int64s, bytes, maps, Struct metadata,
timestamps, repeated fields, each member of a oneof) and written both ways; documents of
the wrong shape are read both ways. Where the fast path answers, its answer must be
json_format's; the send and its task reply must take the fast path at all.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from gateway.protojson import from_dict, to_dict
from gateway.transcode import build_request, known_fields_only, to_json_dict
from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as pb03

_TEXTS = ["", "hello", "grüße ✓", 'line\nbreak "quoted"', "😀 pair"]


def _all_types() -> list[Descriptor]:
    out: list[Descriptor] = []

    def visit(d: Descriptor) -> None:
        if d.GetOptions().map_entry:
            return
        out.append(d)
        for nested in d.nested_types:
            visit(nested)

    for module in (pb, pb03):
        for d in module.DESCRIPTOR.message_types_by_name.values():
            visit(d)
    return out


def _scalar(field: FieldDescriptor, rng: random.Random) -> Any:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return rng.choice(_TEXTS)
    if t == FieldDescriptor.TYPE_BYTES:
        return rng.choice([b"", b"\x00\xffraw", b"abc"])
    if t == FieldDescriptor.TYPE_BOOL:
        return rng.choice([True, False])
    if t == FieldDescriptor.TYPE_ENUM:
        return rng.choice(field.enum_type.values).number
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice([0.5, 1.0, -2.25])
    if field.cpp_type in (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64):
        return rng.choice([0, 7, 2**31 - 1])
    return rng.choice([0, -3, 2**31 - 1])


def _fill(message: Message, rng: random.Random, depth: int = 0) -> None:
    descriptor = message.DESCRIPTOR
    name = descriptor.full_name
    if name == "google.protobuf.Struct":
        message.update({"k": rng.choice(_TEXTS), "n": 1.5, "nested": {"a": [1, "b", None, True]}})
        return
    if name == "google.protobuf.Value":
        message.string_value = rng.choice(_TEXTS)
        return
    if name == "google.protobuf.Timestamp":
        message.FromJsonString("2026-12-05T12:00:00.123Z")
        return
    if name.startswith("google.protobuf."):
        return
    chosen = {o.name: rng.choice(o.fields) for o in descriptor.oneofs}
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and chosen[oneof.name] is not field:
            continue
        if rng.random() < 0.2:
            continue
        repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth > 3:
                continue
            target = getattr(message, field.name)
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                for key in ("a", "b"):
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        _fill(target[key], rng, depth + 1)
                    else:
                        target[key] = _scalar(value_field, rng)
            elif repeated:
                for _ in range(rng.choice([1, 2])):
                    _fill(target.add(), rng, depth + 1)
            else:
                target.SetInParent()
                _fill(target, rng, depth + 1)
        elif repeated:
            getattr(message, field.name).extend(_scalar(field, rng) for _ in range(2))
        else:
            setattr(message, field.name, _scalar(field, rng))


@pytest.mark.parametrize("descriptor", _all_types(), ids=lambda d: d.full_name)
def test_every_message_type_reads_and_writes_as_json_format_does(descriptor: Descriptor) -> None:
    cls = GetMessageClass(descriptor)
    rng = random.Random(descriptor.full_name)
    for _ in range(12):
        message = cls()
        _fill(message, rng)
        expected = json_format.MessageToDict(message)
        fast = to_dict(message)
        assert fast is None or fast == expected
        for reject in (False, True):
            parsed = from_dict(expected, cls, reject_unknown=reject)
            if parsed is not None:
                assert parsed == json_format.ParseDict(expected, cls())


def _slow(document: Any, cls: type[Message], reject: bool) -> Message | None:
    try:
        cleaned = known_fields_only(document, cls.DESCRIPTOR, reject=reject)
        message = cls()
        json_format.ParseDict(cleaned, message)
        return message
    except Exception:
        return None


_MESSAGE = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


@pytest.mark.parametrize(
    "params",
    [
        {"message": _MESSAGE},
        {"message": _MESSAGE, "extra": 1},
        {"message": {**_MESSAGE, "unknownMember": {"x": 1}}},
        {"message": {**_MESSAGE, "message_id": "m2"}},
        {"message": {**_MESSAGE, "role": 1}},
        {"message": {**_MESSAGE, "role": "ROLE_NOPE"}},
        {"message": {**_MESSAGE, "role": None}},
        {"message": {**_MESSAGE, "messageId": 5}},
        {"message": {**_MESSAGE, "messageId": "\ud800"}},
        {"message": {**_MESSAGE, "parts": {"text": "not a list"}}},
        {"message": {**_MESSAGE, "parts": [None]}},
        {"message": {**_MESSAGE, "parts": [{"text": "a", "url": "b"}]}},
        {"message": {**_MESSAGE, "parts": [{"raw": "aGk="}]}},
        {"message": {**_MESSAGE, "parts": [{"data": {"k": [1, None]}}]}},
        {"message": {**_MESSAGE, "metadata": {"k": "v"}}},
        {"message": {**_MESSAGE, "metadata": "not an object"}},
        {"message": {**_MESSAGE, "extensions": ["a", 2]}},
        {"message": _MESSAGE, "configuration": {"historyLength": 3}},
        {"message": _MESSAGE, "configuration": {"historyLength": 2**40}},
        {"message": _MESSAGE, "configuration": {"historyLength": True}},
        {"message": _MESSAGE, "configuration": {"historyLength": "3"}},
        {"message": _MESSAGE, "configuration": {"historyLength": 3.0}},
        {"message": _MESSAGE, "configuration": {"returnImmediately": "true"}},
        {"message": _MESSAGE, "configuration": {}},
        {"message": _MESSAGE, "configuration": []},
        {"message": {}},
        {"tenant": "t", "message": _MESSAGE},
        [],
        "text",
    ],
)
def test_odd_send_documents_are_left_to_json_format(params: Any) -> None:
    for reject in (False, True):
        parsed = from_dict(params, pb.SendMessageRequest, reject_unknown=reject)
        if parsed is not None:
            assert parsed == _slow(params, pb.SendMessageRequest, reject)


def test_the_send_and_its_reply_take_the_fast_path() -> None:
    request = from_dict({"message": _MESSAGE}, pb.SendMessageRequest, reject_unknown=True)
    assert request is not None and request.message.parts[0].text == "hi"
    task = pb.Task(id="t1", context_id="c1")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromJsonString("2026-12-05T12:00:00Z")
    task.history.add().CopyFrom(request.message)
    task.artifacts.add(artifact_id="a1", name="echo").parts.add(text="hi")
    reply = pb.SendMessageResponse(task=task)
    assert to_dict(reply) == json_format.MessageToDict(reply)
    assert (
        build_request(pb.SendMessageRequest, body={"message": _MESSAGE}, body_field="*") == request
    )
    assert to_json_dict(reply) == json_format.MessageToDict(reply)


def test_unknown_enum_numbers_and_well_known_types_at_the_top_are_json_formats() -> None:
    task = pb.Task(id="t")
    task.status.state = 99  # an open enum keeps numbers it does not name
    assert to_dict(task) is None
    assert to_json_dict(task)["status"] == {"state": 99}
    assert to_dict(pb.google_dot_protobuf_dot_struct__pb2.Struct()) is None  # type: ignore[attr-defined]


def test_a_value_json_format_cannot_write_fails_as_json_format_fails() -> None:
    task = pb.Task(id="t")
    task.status.timestamp.seconds = 10**12  # past year 9999: no RFC 3339 form
    assert to_dict(task) is None
    with pytest.raises(json_format.Error) as slow:
        json_format.MessageToDict(task)
    with pytest.raises(json_format.Error) as fast:
        to_json_dict(task)
    assert str(fast.value) == str(slow.value)
