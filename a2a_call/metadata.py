"""The `a2a_service` metadata namespace as a2a-call reads it (permission envelopes, stored
file parts)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

NAMESPACE = "a2a_service"  # this service's metadata namespace


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


EVENT_ID = "eventId"  # a gRPC stream event's sequence number, in the payload's namespace


def take_event_id(event: Any) -> str | None:
    """The sequence number a gRPC stream event carries in its payload's metadata
    (`a2a_service.eventId`, what SSE sends as `id:`), taken out of the event so it prints
    as on the HTTP bindings; None when it has none."""
    which = event.WhichOneof("payload")
    if which is None:
        return None
    payload = getattr(event, which)
    if not payload.HasField("metadata"):
        return None
    fields = payload.metadata.fields
    if NAMESPACE not in fields or not fields[NAMESPACE].HasField("struct_value"):
        return None
    inner = fields[NAMESPACE].struct_value.fields
    if EVENT_ID not in inner or inner[EVENT_ID].WhichOneof("kind") != "string_value":
        return None
    value: str = inner[EVENT_ID].string_value
    del inner[EVENT_ID]
    if not inner:
        del fields[NAMESPACE]
    if not fields:
        payload.ClearField("metadata")
    return value if value.isascii() and value.isdigit() else None
