"""The one place that frames streams as Server-Sent Events.

Each StreamResponse becomes one event whose `data:` is built by the binding
(REST: the StreamResponse JSON; JSON-RPC: a JSON-RPC response carrying the
request id) and whose `id:` is the task event's sequence number, so a client
can reconnect to SubscribeToTask with `Last-Event-ID` and continue after it.
Events without a number (a direct Message reply, proxy mode) carry no `id:`.

Idle streams get keep-alive comments; responses say `Cache-Control: no-store`.
The stream ends when the API's iterator ends (a terminal or interrupted
state). An error after the stream has started is sent as one `event: error`
whose data is the binding's error object, then the stream ends. A client that
disconnects only ends its own subscription: the task keeps running.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from google.protobuf.message import Message
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse

from service.engine.stream import NumberedEvents
from service.protocol.errors import A2AError, as_a2a_error

Framer = Callable[[Message], str]
ErrorFramer = Callable[[A2AError], str]


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive")


async def _frames(
    events: NumberedEvents[Message], frame: Framer, frame_error: ErrorFramer, where: str
) -> AsyncIterator[ServerSentEvent]:
    try:
        async for event in events:
            seq = events.seq
            yield ServerSentEvent(frame(event), id=str(seq) if seq else None)
    except Exception as exc:
        yield ServerSentEvent(frame_error(as_a2a_error(exc, where)), event="error")
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()


def event_stream(
    events: NumberedEvents[Message],
    *,
    frame: Framer,
    frame_error: ErrorFramer,
    keepalive_seconds: float,
    where: str,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    return EventSourceResponse(
        _frames(events, frame, frame_error, where),
        headers={"Cache-Control": "no-store", **(headers or {})},
        ping=keepalive_seconds,
        ping_message_factory=_keepalive,
    )
