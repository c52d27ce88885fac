"""A gRPC stream event's sequence number, carried in its payload's metadata.

`lf.a2a.v1` has no field for it and a gRPC stream has no per-message headers, so the server
writes it into `<payload>.metadata.a2a_service.eventId` (a string of digits, so it comes
back verbatim); a reader takes it out again so the event shows as on the HTTP bindings.
"""

from __future__ import annotations

from google.protobuf.message import Message

NAMESPACE = "a2a_service"  # this service's key in the protocol's metadata objects
EVENT_ID_KEY = "eventId"  # the event's number in that namespace (gRPC streams)
MAX_DIGITS = 18  # fits an int64, as the store numbers events


def take_event_id(event: Message) -> str | None:
    """The number a gRPC stream event carries, as its digits (None when it has none, or
    something that is not one), removed from the event in place with the namespace and the
    metadata when nothing else is left in them."""
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
    if EVENT_ID_KEY not in inner:
        return None
    value = inner[EVENT_ID_KEY]
    raw = value.string_value if value.WhichOneof("kind") == "string_value" else ""
    del inner[EVENT_ID_KEY]
    if not inner:
        del fields[NAMESPACE]
    if not fields:
        payload.ClearField("metadata")
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_DIGITS:
        return raw
    return None
