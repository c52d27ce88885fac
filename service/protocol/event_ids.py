"""Event ids on a stream: where a streamed event's sequence number travels, and the resume
point a caller sends back.

A task's events are numbered 1, 2, ... in the store; a stream tells each event's number so
a caller that loses the stream can pick it up again after the last one it received:

- HTTP (SSE): the event's `id:` line; the resume point comes back as `Last-Event-ID`.
- gRPC: a gRPC stream has no per-message headers and `lf.a2a.v1` has no field for it, so
  the number travels inside the event, in this service's metadata namespace of the
  event's payload: `<payload>.metadata.a2a_service.eventId`, a string of digits (a string,
  so it goes back verbatim, never as `5.0`). Every payload of a `StreamResponse` (Task,
  Message, status and artifact update) has that `metadata`. The resume point comes back
  as the request metadata `last-event-id`.

An event without a number (a direct Message reply) carries none. The proxy (`--upstream`)
takes the number out of the relayed gRPC event again (`take_event_id`) and sends it as
the SSE id, so what an HTTP client sees is the same with or without the proxy.
"""

from __future__ import annotations

from google.protobuf.message import Message

from a2a_wire.event_ids import EVENT_ID_KEY, MAX_DIGITS, NAMESPACE
from a2a_wire.event_ids import take_event_id as take_digits
from service.protocol.errors import invalid_field

RESUME_KEY = "last-event-id"  # gRPC request metadata (HTTP: the Last-Event-ID header)


def resume_point(raw: str | None, name: str) -> int | None:
    """The sequence number a caller resumes after (None when it sent none), refused as
    InvalidParams on `name` when it is not a number this server could have sent."""
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_DIGITS:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise invalid_field(name, f"must be an event id this server sent (a number), got {shown!r}")
    return int(raw)


def set_event_id(event: Message, seq: int) -> None:
    """Write `seq` into the payload of `event` (a StreamResponse of 1.0 or v0.3), in place."""
    which = event.WhichOneof("payload")
    if which is None:
        return
    # Straight through the fields (a value that is not an object becomes one, as with
    # Struct.get_or_create_struct, which costs about twice as much).
    namespace = getattr(event, which).metadata.fields[NAMESPACE].struct_value
    namespace.fields[EVENT_ID_KEY].string_value = str(seq)


def with_event_id(event: Message, seq: int | None) -> Message:
    """`event` as a gRPC stream sends it: a copy carrying `seq` (events are shared by every
    subscriber, so never changed in place), or `event` itself when it has no number."""
    if not seq:
        return event
    out = type(event)()
    out.CopyFrom(event)
    set_event_id(out, seq)
    return out


def encoded_with_event_id(event: Message, seq: int) -> bytes:
    """`with_event_id(event, seq)` encoded, without the copy: the event's own encoding with
    the number appended as a second occurrence of its payload holding only that metadata
    entry (a parser merges the two: an embedded message given twice is merged, and a map
    entry of a new key is added). When the payload's metadata holds this namespace already
    (the entry would replace it), the copy is made after all."""
    which = event.WhichOneof("payload")
    own: bytes
    if which is None:
        own = event.SerializeToString()
        return own
    payload = getattr(event, which)
    if payload.HasField("metadata") and NAMESPACE in payload.metadata.fields:
        own = with_event_id(event, seq).SerializeToString()
        return own
    digits = str(seq).encode()
    key = (type(event), which, len(digits))
    head = _ID_HEADS.get(key)
    if head is None:
        head = _ID_HEADS[key] = _id_head(event, which, len(digits))
    own = event.SerializeToString()
    return own + head + digits


# What goes before the digits, by (event type, payload, number of digits): every length in
# it depends on those alone, the digits come last.
_ID_HEADS: dict[tuple[type, str, int], bytes] = {}


def _id_head(event: Message, which: str, size: int) -> bytes:
    """The payload `which` holding metadata {NAMESPACE: {EVENT_ID_KEY: "<size digits>"}},
    encoded, without the digits at its end."""
    field = event.DESCRIPTOR.fields_by_name[which]
    metadata = field.message_type.fields_by_name["metadata"]
    placeholder = b"0" * size
    value = _field(2, _field(3, placeholder))  # Struct.fields entry's value: Value{string_value}
    entry = _field(1, _field(1, EVENT_ID_KEY.encode()) + value)  # Struct.fields entry
    namespace = _field(2, _field(5, entry))  # its value: Value{struct_value: that Struct}
    outer = _field(1, _field(1, NAMESPACE.encode()) + namespace)  # metadata.fields entry
    encoded = _field(field.number, _field(metadata.number, outer))
    return encoded[:-size]


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def take_event_id(event: Message) -> int | None:
    """The number a relayed gRPC event carries (None when none), removed from it in place."""
    raw = take_digits(event)
    return None if raw is None else int(raw)


def opens_replay(event: Message, seq: int | None, resume_after: int | None) -> bool:
    """Whether `event`, the first of a stream, is a resumed SubscribeToTask's snapshot that
    events after the resume point still follow: a binding whose streams end at a `final`
    event (v0.3) must not end at it, even when the task it shows is over."""
    return (
        resume_after is not None
        and seq is not None
        and seq > resume_after
        and event.WhichOneof("payload") == "task"
    )
