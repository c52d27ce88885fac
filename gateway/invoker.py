"""How the gateway reaches the servicer: in-process, or over gRPC to an upstream.

Both invokers expose the same two calls, keyed by the RPC's descriptor name:

- `await unary(name, request, call)` -> the response message;
- `await stream(name, request, call)` -> `NumberedEvents` of StreamResponse: an
  async iterator whose `seq` is the number of the event it yielded last (the
  SSE event id). Errors found before the stream starts (validation, unknown
  task, ...) are raised by the await, so the HTTP layer can still answer with a
  plain error.

The in-process invoker calls `A2AApi` directly (no network hop, no
re-serialization). The gRPC invoker is the proxy mode: it forwards the
request and the call metadata to the upstream service and maps gRPC errors
back to the one error table through their `google.rpc.ErrorInfo` reason.
A resume point (`Last-Event-ID`) travels upstream as the `last-event-id`
metadata, and each relayed event's number comes back out of the event
(`a2a_service.eventId`, service.protocol.event_ids), so SSE ids and resume work
through the proxy as they do in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, cast

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

from service.api import CallContext
from service.engine.stream import NumberedEvents
from service.protocol.admission import Gate
from service.protocol.errors import (
    BY_REASON,
    A2AError,
    InternalError,
    InvalidParamsError,
    MethodNotFoundError,
    UnauthenticatedError,
)
from service.protocol.event_ids import RESUME_KEY, take_event_id
from service.protocol.grpc_status import retry_delay, status_details
from service.protocol.params import VERSION_KEY
from service.telemetry import hub

# How long the proxy waits for a stream's first event before it commits to a
# 200 event stream; errors raised later travel inside the stream.
FIRST_EVENT_GRACE_SECONDS = 1.0


class Invoker(Protocol):
    async def unary(self, name: str, request: Message, call: CallContext) -> Message: ...

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]: ...

    async def close(self) -> None: ...


class InProcessInvoker:
    """Calls the A2AApi method named like the RPC."""

    def __init__(self, api: object, service: ServiceDescriptor) -> None:
        self._handlers: dict[str, Callable[[Message, CallContext], Awaitable[Any]]] = {}
        for method in service.methods:
            handler = getattr(api, method.name, None)
            if handler is None:
                raise TypeError(
                    f"{type(api).__name__} has no method {method.name} for RPC {method.full_name}"
                )
            self._handlers[method.name] = handler

    async def unary(self, name: str, request: Message, call: CallContext) -> Message:
        tel = hub.current
        if tel is None:
            return await self._handlers[name](request, call)
        return await self._servicer_call(tel, name, request, call)

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]:
        # A streaming RPC's handler returns its events (the handlers are typed for both kinds).
        tel = hub.current
        if tel is None:
            return cast("NumberedEvents[Message]", await self._handlers[name](request, call))
        events = await self._servicer_call(tel, name, request, call)  # the span: until it starts
        return cast("NumberedEvents[Message]", events)

    async def _servicer_call(
        self, tel: hub.Telemetry, name: str, request: Message, call: CallContext
    ) -> Any:
        span = tel.servicer_span(name)
        token = hub.enter(span)
        try:
            return await self._handlers[name](request, call)
        finally:
            hub.leave(token)
            span.end()

    async def close(self) -> None:
        return None


class GatedInvoker:
    """Refuses new calls once `gate` is closed (a draining proxy; in-process, A2AApi checks)."""

    def __init__(self, inner: Invoker, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate

    async def unary(self, name: str, request: Message, call: CallContext) -> Message:
        self._gate.check()
        return await self._inner.unary(name, request, call)

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]:
        self._gate.check()
        return await self._inner.stream(name, request, call)

    async def close(self) -> None:
        await self._inner.close()

    def end_streams(self, error: BaseException) -> int:
        return self._inner.end_streams(error) if isinstance(self._inner, GrpcInvoker) else 0


# ----------------------------------------------------------------------------- proxy mode


class UpstreamUnavailableError(InternalError):
    """The upstream gRPC service cannot be reached (proxy mode only)."""

    grpc_status = "UNAVAILABLE"
    http_status = 503
    default_message = "The upstream A2A service is unavailable; try again later."


_BY_CODE: dict[grpc.StatusCode, type[A2AError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidParamsError,
    grpc.StatusCode.UNIMPLEMENTED: MethodNotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.UNAVAILABLE: UpstreamUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: UpstreamUnavailableError,
}


def error_from_grpc(exc: grpc.aio.AioRpcError) -> A2AError:
    """An upstream gRPC error as the A2AError it was raised as (by its ErrorInfo reason)."""
    info, violations = status_details(exc)
    cls = BY_REASON.get(info.reason) if info is not None else None
    if info is not None and cls is not None:
        return cls(
            exc.details() or None,
            metadata=dict(info.metadata),
            field_violations=violations,
            retry_after=retry_delay(exc),  # a refusal's Retry-After survives the proxy
        )
    fallback = _BY_CODE.get(exc.code())
    if fallback is not None:
        message = exc.details() if fallback is not UpstreamUnavailableError else None
        return fallback(message or None, field_violations=violations)
    return InternalError(f"The upstream service failed ({exc.code().name}).")


def _metadata(call: CallContext) -> tuple[tuple[str, str], ...]:
    items = dict(call.metadata)
    # The resume point is the one the call was given (HTTP: Last-Event-ID), nothing else.
    items.pop(RESUME_KEY, None)
    if call.resume_after is not None:
        items[RESUME_KEY] = str(call.resume_after)
    if not items.get(VERSION_KEY, "").strip():
        items[VERSION_KEY] = call.default_version  # make the HTTP default explicit upstream
    if hub.current is not None:  # the upstream's server span continues this request's trace
        hub.inject(items)  # in the configured propagator's format, with the baggage
    return tuple(items.items())


class GrpcInvoker:
    """Forwards every RPC to `target` (host:port) over one grpc.aio channel."""

    def __init__(
        self, target: str, service: ServiceDescriptor, channel: grpc.aio.Channel | None = None
    ) -> None:
        self.target = target
        self._channel = channel or grpc.aio.insecure_channel(
            target, options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        )
        self._open: set[grpc.aio.UnaryStreamCall] = set()  # streams being relayed
        self._ended_with: BaseException | None = None  # set when a drain ends the streams
        self._unary: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}
        self._stream: dict[str, grpc.aio.UnaryStreamMultiCallable] = {}
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            output = message_factory.GetMessageClass(method.output_type)
            kwargs = dict(request_serializer=_serialize, response_deserializer=output.FromString)
            if method.server_streaming:
                self._stream[method.name] = self._channel.unary_stream(path, **kwargs)
            else:
                self._unary[method.name] = self._channel.unary_unary(path, **kwargs)

    async def unary(self, name: str, request: Message, call: CallContext) -> Message:
        try:
            return await self._unary[name](request, metadata=_metadata(call))
        except grpc.aio.AioRpcError as exc:
            raise error_from_grpc(exc) from None

    async def stream(
        self, name: str, request: Message, call: CallContext
    ) -> NumberedEvents[Message]:
        rpc = self._stream[name](request, metadata=_metadata(call))
        iterator = rpc.__aiter__()
        first = asyncio.ensure_future(anext(iterator, None))
        done, _ = await asyncio.wait({first}, timeout=FIRST_EVENT_GRACE_SECONDS)
        if done:
            try:
                first.result()
            except grpc.aio.AioRpcError as exc:
                raise error_from_grpc(exc) from None
        return Relayed(self._relay(rpc, iterator, first))

    def end_streams(self, error: BaseException) -> int:
        """End every relayed stream with `error` (a draining proxy); returns how many."""
        self._ended_with = error
        ended = len(self._open)
        for rpc in list(self._open):
            rpc.cancel()
        return ended

    async def close(self) -> None:
        await self._channel.close()

    async def _relay(
        self,
        rpc: grpc.aio.UnaryStreamCall,
        iterator: AsyncIterator[Message],
        first: asyncio.Future[Message | None],
    ) -> AsyncGenerator[Message, None]:
        self._open.add(rpc)
        try:
            try:
                event = await first
                while event is not None:
                    yield event
                    event = await anext(iterator, None)
            except grpc.aio.AioRpcError as exc:
                if self._ended_with is not None and exc.code() == grpc.StatusCode.CANCELLED:
                    raise self._ended_with from None
                raise error_from_grpc(exc) from None
            except asyncio.CancelledError:
                if self._ended_with is not None and rpc.cancelled():
                    raise self._ended_with from None
                raise
        finally:
            self._open.discard(rpc)
            if not first.done():
                first.cancel()
            with contextlib.suppress(Exception):
                rpc.cancel()  # a client that went away ends only its own upstream stream


class Relayed:
    """A relayed stream as `NumberedEvents`: `seq` is the number the upstream wrote into
    the event (taken out of it, so the event is the one the upstream's own HTTP binding
    would send), None for an event without one."""

    __slots__ = ("_source", "seq")

    def __init__(self, source: AsyncGenerator[Message, None]) -> None:
        self._source = source
        self.seq: int | None = None

    def __aiter__(self) -> Relayed:
        return self

    async def __anext__(self) -> Message:
        event = await self._source.__anext__()
        # A direct Message reply has no number: whatever its metadata holds is the agent's.
        numbered = event.WhichOneof("payload") != "message"
        self.seq = take_event_id(event) if numbered else None
        return event

    async def aclose(self) -> None:
        await self._source.aclose()


def _serialize(message: Message) -> bytes:
    data: bytes = message.SerializeToString()  # protobuf is untyped here
    return data
