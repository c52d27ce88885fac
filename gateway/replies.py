"""What a call answers, as JSON documents, before any transport frames them.

Both bindings call the servicer the same way (`invoke`) and get one of three
replies: a result document (a unary RPC), a `DocumentStream` (a server-streaming
RPC: one result document per event, numbered like the event), or an
`ErrorReply` (the error document and the A2AError it renders, so a transport
can still pick a status). How a document looks is the binding's `Renderer`:
REST renders the message itself and a google.rpc.Status-like error, JSON-RPC
a response envelope carrying the request id.

Nothing here knows HTTP: dispatch.py writes these replies as HTTP responses and
SSE, and any other framing of JSON-RPC (WebSocket, newline-delimited JSON) can
write the same documents its own way.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from gateway.invoker import Invoker
from service.api import CallContext
from service.calls import record
from service.calls.pipeline import Pipeline
from service.engine.stream import NumberedEvents
from service.protocol.errors import A2AError, as_a2a_error

Document = dict[str, Any]


class ErrorRenderer(Protocol):
    def error(self, err: A2AError) -> Document: ...


class Renderer(ErrorRenderer, Protocol):
    """How a binding writes a result and an error as JSON documents."""

    def result(self, message: Message) -> Document: ...


@dataclass(frozen=True, slots=True)
class ErrorReply:
    document: Document
    error: A2AError

    @classmethod
    def of(cls, exc: BaseException, renderer: ErrorRenderer, where: str) -> ErrorReply:
        """`exc` as the binding's error document (an unexpected one is logged, see
        `as_a2a_error`: `where` names the call in the log)."""
        err = as_a2a_error(exc, where)
        call = record.current()
        if call is not None:
            call.failed(err)
        return cls(renderer.error(err), err)


class DocumentStream:
    """The result documents of a server-streaming call, as `NumberedEvents`: `seq` is
    the number of the event the last document carries. An error while streaming ends
    the stream with one `ErrorReply`; closing it closes the events, which ends only
    this subscription (the task keeps running)."""

    __slots__ = ("_events", "_renderer", "_where", "_ended", "_call")

    def __init__(
        self,
        events: NumberedEvents[Message],
        renderer: Renderer,
        where: str,
        call: record.Call | None = None,
    ) -> None:
        self._events = events
        self._renderer = renderer
        self._where = where
        self._ended = False
        self._call = call  # the call's record (None: the stream is not a call's)
        if call is not None:
            call.streaming()

    @property
    def seq(self) -> int | None:
        return self._events.seq

    def __aiter__(self) -> DocumentStream:
        return self

    async def __anext__(self) -> Document | ErrorReply:
        if self._ended:
            raise StopAsyncIteration
        try:
            event = await self._events.__anext__()
            if self._call is not None:
                self._call.event(event)
            return self._renderer.result(event)
        except StopAsyncIteration:
            raise
        except Exception as exc:
            self._ended = True
            return ErrorReply.of(exc, self._renderer, self._where)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._events.aclose()


Reply = Document | ErrorReply | DocumentStream


async def invoke(
    invoker: Invoker,
    pipeline: Pipeline,
    method: MethodDescriptor,
    message: Message,
    call: CallContext,
    renderer: Renderer,
    where: str,
) -> Document | DocumentStream:
    """Run the pipeline's interceptors, call `method` and render what it answers. An error
    before a stream starts is raised, for the binding to answer as an ErrorReply."""
    logged = record.current()
    if logged is None:  # not under an A2A route's entry (access.py): a call of its own
        logged = pipeline.open("jsonrpc", method.name)
    logged.named(method.name)
    await pipeline.admit(logged, call, message, stream=method.server_streaming)
    if method.server_streaming:
        events = await invoker.stream(method.name, message, call)
        return DocumentStream(events, renderer, f"{where} stream", logged)
    response = await invoker.unary(method.name, message, call)
    logged.replied(response)
    return renderer.result(response)
