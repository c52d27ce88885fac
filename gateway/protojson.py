"""ProtoJSON without json_format's per-field dispatch, for the shapes every send carries.

`json_format` decides each field's conversion by inspecting its descriptor on every call;
on a SendMessage over HTTP that was about a fifth of the gateway's CPU per request. Here
each message type's fields are looked at once (a plan, cached per descriptor) and a message
is then read or written with a dict lookup per field.

Both directions cover only what they can answer exactly as `json_format` would, and say
`None` otherwise, so the caller uses `json_format` itself: well-known types (Struct,
Value, Timestamp, ...) are handed to `json_format` one field at a time; floats, bytes,
maps other than string to string, unknown enum numbers, `null`, a proto-named key and
any value of an unexpected JSON type send the whole message back to it. So every refusal
(and its message) is still `json_format`'s, and tests/unit/test_protojson.py checks the
two agree on every message type of the contract.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_WKT_PREFIX = "google.protobuf."
_INT_TYPES = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
    }
)
_INT64_TYPES = frozenset({FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64})
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 50  # json_format's own limit is 100; deeper documents take its path

# How a field's value is written (render) or read (parse).
_PLAIN, _INT64, _ENUM, _MESSAGE, _WKT, _STRING_MAP, _OTHER = range(7)
_STRING, _BOOL, _INT, _JSON_STRING = range(7, 11)
# Well-known types whose JSON is their own `ToJsonString()` (as json_format writes them).
_STRING_WKT = frozenset(
    {"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"}
)


class _Unsure(Exception):
    """This value is json_format's to convert (or to refuse)."""


def _kind(field: FieldDescriptor) -> int:
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_MESSAGE:
        message = field.message_type
        if message.GetOptions().map_entry:
            key, value = message.fields_by_name["key"], message.fields_by_name["value"]
            both_strings = key.type == value.type == FieldDescriptor.TYPE_STRING
            return _STRING_MAP if both_strings else _OTHER
        return _WKT if message.full_name.startswith(_WKT_PREFIX) else _MESSAGE
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        return _ENUM
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        return _STRING if field.type == FieldDescriptor.TYPE_STRING else _OTHER  # bytes: base64
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return _BOOL
    if cpp in _INT_TYPES:
        return _INT
    return _OTHER  # float, double: json_format's own formatting of NaN, infinities, floats


def _repeated(field: FieldDescriptor) -> bool:
    repeated: bool = field.is_repeated
    return repeated


# ---------------------------------------------------------------- message -> JSON

_Out = tuple[str, int, bool, Any]  # json name, kind, repeated, enum names or sub-descriptor


@cache
def _out_plan(descriptor: Descriptor) -> dict[int, _Out]:
    plan: dict[int, _Out] = {}
    for field in descriptor.fields:
        kind = _kind(field)
        extra: Any = None
        if kind in (_STRING, _BOOL):
            kind = _PLAIN
        elif kind == _INT:
            kind = _INT64 if field.cpp_type in _INT64_TYPES else _PLAIN
        elif kind == _ENUM:
            if field.enum_type.full_name == "google.protobuf.NullValue":
                kind = _OTHER
            extra = {v.number: v.name for v in field.enum_type.values}
        elif kind == _MESSAGE:
            extra = field.message_type
        elif kind == _WKT and field.message_type.full_name in _STRING_WKT:
            kind = _JSON_STRING
        plan[field.number] = (field.json_name, kind, _repeated(field), extra)
    return plan


def to_dict(message: Message) -> dict[str, Any] | None:
    """`json_format.MessageToDict(message)`, or None when this cannot say."""
    descriptor = message.DESCRIPTOR
    if descriptor.full_name.startswith(_WKT_PREFIX):
        return None
    try:
        return _render(message, descriptor, 0)
    except (_Unsure, ValueError, json_format.Error):  # json_format words its own failure
        return None


def _render(message: Message, descriptor: Descriptor, depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise _Unsure
    plan = _out_plan(descriptor)
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        entry = plan.get(field.number)
        if entry is None or field.is_extension:
            raise _Unsure
        name, kind, repeated, extra = entry
        if kind == _PLAIN:
            out[name] = list(value) if repeated else value
        elif kind == _MESSAGE:
            if repeated:
                out[name] = [_render(item, extra, depth + 1) for item in value]
            else:
                out[name] = _render(value, extra, depth + 1)
        elif kind == _ENUM:
            try:
                out[name] = [extra[v] for v in value] if repeated else extra[value]
            except KeyError:  # a number the enum does not name
                raise _Unsure from None
        elif kind == _WKT:
            if repeated:
                out[name] = [json_format.MessageToDict(item) for item in value]
            else:
                out[name] = json_format.MessageToDict(value)
        elif kind == _JSON_STRING:
            if repeated:
                out[name] = [item.ToJsonString() for item in value]
            else:
                out[name] = value.ToJsonString()
        elif kind == _INT64:
            out[name] = [str(v) for v in value] if repeated else str(value)
        elif kind == _STRING_MAP:
            out[name] = dict(value)
        else:
            raise _Unsure
    return out


# ---------------------------------------------------------------- JSON -> message

_In = tuple[FieldDescriptor, int, bool, Any]  # field, kind, repeated, enum numbers or plan


@cache
def _in_plan(descriptor: Descriptor) -> tuple[dict[str, _In], frozenset[str]]:
    """By JSON name, how each field is read; and the proto names that are not JSON names
    (json_format takes them too, with its own rules for a field named twice)."""
    plan: dict[str, _In] = {}
    for field in descriptor.fields:
        kind = _kind(field)
        extra: Any = None
        if kind == _ENUM:
            if field.enum_type.full_name == "google.protobuf.NullValue":
                kind = _OTHER
            extra = {v.name: v.number for v in field.enum_type.values}
        elif kind == _MESSAGE:
            extra = field.message_type
        plan[field.json_name] = (field, kind, _repeated(field), extra)
    other_names = frozenset(f.name for f in descriptor.fields if f.name != f.json_name)
    return plan, other_names


def from_dict(document: Any, cls: type[Message], *, reject_unknown: bool) -> Message | None:
    """`json_format.ParseDict` of `document` (with members that name no field dropped,
    as `transcode.known_fields_only` drops them) into a new `cls`; None when this cannot
    say (the caller then takes json_format's path, which also words every refusal)."""
    message = cls()
    try:
        _parse(document, message, message.DESCRIPTOR, reject_unknown, 0)
    except (_Unsure, ValueError, TypeError, json_format.ParseError):
        return None
    return message


def _parse(
    document: Any, message: Message, descriptor: Descriptor, reject: bool, depth: int
) -> None:
    if not isinstance(document, dict) or depth > _MAX_DEPTH:
        raise _Unsure
    plan, other_names = _in_plan(descriptor)
    oneofs: set[str] = set()
    for key, value in document.items():
        entry = plan.get(key)
        if entry is None:
            if reject or key in other_names:
                raise _Unsure
            continue  # a member that names no field: dropped
        if value is None:
            raise _Unsure
        field, kind, repeated, extra = entry
        oneof = field.containing_oneof
        if oneof is not None:
            if oneof.name in oneofs:
                raise _Unsure
            oneofs.add(oneof.name)
        if repeated:
            if not isinstance(value, list):
                raise _Unsure
            if kind == _MESSAGE:
                target = getattr(message, field.name)
                for item in value:
                    _parse(item, target.add(), extra, reject, depth + 1)
            else:
                getattr(message, field.name).extend([_scalar(kind, extra, v) for v in value])
        elif kind == _MESSAGE:
            sub = getattr(message, field.name)
            sub.SetInParent()
            _parse(value, sub, extra, reject, depth + 1)
        elif kind == _WKT:
            sub = getattr(message, field.name)
            sub.SetInParent()
            # json_format counts depth from the top message; this call starts its own count.
            json_format.ParseDict(value, sub, max_recursion_depth=99 - depth)
        else:
            setattr(message, field.name, _scalar(kind, extra, value))


def _scalar(kind: int, extra: Any, value: Any) -> Any:
    if kind == _STRING:
        if type(value) is str and (value.isascii() or _SURROGATE.search(value) is None):
            return value
    elif kind == _ENUM:
        if type(value) is str and value in extra:
            return extra[value]
    elif kind == _BOOL:
        if type(value) is bool:
            return value
    elif kind == _INT:
        if type(value) is int:
            return value  # the field's range is checked when it is set (ValueError)
    raise _Unsure
