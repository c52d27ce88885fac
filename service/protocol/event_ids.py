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
