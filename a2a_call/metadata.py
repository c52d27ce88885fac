"""The `a2a_service` metadata namespace as a2a-call reads it (permission envelopes, stored
file parts)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

from a2a_wire.event_ids import NAMESPACE


def _whole(value: Any) -> Any:
    """JSON numbers in a Struct are doubles: give whole ones back as ints (schemaVersion 1)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def namespace_of(*structs: struct_pb2.Struct) -> dict[str, Any]:
    """The `a2a_service` entries of metadata Structs, first one wins: nested
    (`{"a2a_service": {...}}`) or dotted keys (`"a2a_service.input"`); whole numbers as ints."""
    found: dict[str, Any] = {}
    for struct in structs:
        doc = _whole(json_format.MessageToDict(struct))
        nested = doc.get(NAMESPACE)
        for key, value in (nested if isinstance(nested, dict) else {}).items():
            found.setdefault(key, value)
        for key, value in doc.items():
            if key.startswith(NAMESPACE + "."):
                found.setdefault(key[len(NAMESPACE) + 1 :], value)
    return found
