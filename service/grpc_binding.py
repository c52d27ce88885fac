"""The gRPC binding: A2AApi behind `lf.a2a.v1.A2AService`, the status codec both ways
(A2AError -> status with typed details, and back for the proxy), and registration.

Methods are bound from the service descriptor, not written one by one: every
RPC in the contract maps to the A2AApi method of the same name.

Registration parses requests tolerantly: grpc's generated code parses with
`FromString`, and bytes that are not a valid message then surface as status
UNKNOWN with the parser's exception text. Here such a request becomes
INVALID_ARGUMENT with the A2A InvalidRequest reason, before the servicer sees it
(after authentication, so an unknown caller still gets UNAUTHENTICATED).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2, message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.api import A2AApi, CallContext
from service.auth.schemes import CallMetadata, call_metadata
from service.engine.limits import refuse
from service.net.access import CANCELLED, AccessLog, Call
from service.protocol.errors import (
    A2AError,
    InvalidRequestError,
    as_a2a_error,
    error_details,
)
from service.telemetry import hub, names
from service.telemetry.describe import describe

log = logging.getLogger("service.grpc")

SERVICE = pb.DESCRIPTOR.services_by_name["A2AService"]
# metadata -> principal, or raise UnauthenticatedError; it may remove the credentials from
# the metadata (service.auth.Authenticator does), so they go no further than this check.
Authenticator = Callable[[dict[str, str]], Awaitable[str]]


def error_status(err: A2AError) -> grpc.Status:
    """A2AError -> gRPC status with google.rpc.ErrorInfo (and BadRequest) details."""
    details = []
    for detail in error_details(err):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    code = grpc.StatusCode[err.grpc_status]
    return rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=err.message, details=details)
    )


def status_details(
    err: grpc.aio.AioRpcError,
) -> tuple[error_details_pb2.ErrorInfo | None, list[tuple[str, str]]]:
    """The reverse of error_status, as a gRPC client sees it: the first ErrorInfo and
    the BadRequest field violations (field, description) in the status details."""
    status = rpc_status.from_call(err)
    info: error_details_pb2.ErrorInfo | None = None
    violations: list[tuple[str, str]] = []
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and info is None:
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return info, violations


def retry_delay(err: grpc.aio.AioRpcError) -> float | None:
    """The google.rpc.RetryInfo delay of a status, in seconds (None when it has none)."""
    status = rpc_status.from_call(err)
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            return retry.retry_delay.ToNanoseconds() / 1e9
    return None


def metadata_of(context: grpc.aio.ServicerContext) -> CallMetadata:
    """The call's metadata, read once per call (grpc builds it anew on every read); it is
    also the carrier of the caller's W3C trace context."""
    return call_metadata(context.invocation_metadata() or ())  # notes repeated credentials


async def call_context(metadata: CallMetadata, authenticate: Authenticator | None) -> CallContext:
    principal = await authenticate(metadata) if authenticate is not None else ""
    return CallContext(metadata=metadata, principal=principal)


class CallLimit:
    """Calls in flight on the gRPC binding, and how many may be at once (0: no limit). Past
    it a call is refused at once, RESOURCE_EXHAUSTED with a retry hint, instead of queueing
    until grpc gives up on it."""

    __slots__ = ("limit", "active")

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.active = 0

    def refusal(self) -> A2AError:
        return refuse(
            "grpc_max_concurrent_calls",
            self.limit,
            f"The server is handling its limit of {self.limit} concurrent calls; retry shortly.",
            retry_after=RETRY_AFTER_OVERLOAD_SECONDS,
        )


RETRY_AFTER_OVERLOAD_SECONDS = 1.0


def _unary(
    name: str,
    api: A2AApi,
    authenticate: Authenticator | None,
    calls: CallLimit,
    access: AccessLog | None,
) -> Callable[..., Awaitable[Any]]:
    handler = getattr(api, name)
    tel = hub.current  # None (telemetry off): no span, no metric, one `is None` per step

    async def method(self: object, request: ProtoMessage, context: grpc.aio.ServicerContext) -> Any:
        call = access.open("grpc", name) if access is not None else None
        metadata = metadata_of(context)
        rec = tel.server_call(name, names.GRPC, metadata) if tel else None
        try:
            if calls.limit and calls.active >= calls.limit:
                await _abort(context, calls.refusal(), call, rec)
            calls.active += 1
            try:
                if call is not None:
                    call.saw(request)
                ctx = await call_context(metadata, authenticate)
                if call is not None:
                    call.principal = ctx.principal
                if rec is not None:
                    rec.principal(ctx.principal)
                response = await handler(request, ctx)
                if call is not None:
                    call.saw(response)
                if rec is not None:
                    describe(rec, response)
                return response
            except Exception as exc:  # every failure leaves as a typed status
                await _abort(context, as_a2a_error(exc, name), call, rec)
            except asyncio.CancelledError:  # the caller went away
                if call is not None:
                    call.outcome = CANCELLED
                raise
            finally:
                calls.active -= 1
        finally:
            if call is not None:
                call.close()  # while the call's span is still current (its ids in the line)
            if rec is not None:
                rec.end_rpc(SERVICE.full_name)

    method.__name__ = name
    return method


def _streaming(
    name: str,
    api: A2AApi,
    authenticate: Authenticator | None,
    calls: CallLimit,
    access: AccessLog | None,
) -> Callable[..., AsyncIterator[Any]]:
    handler = getattr(api, name)
    tel = hub.current

    async def method(
        self: object, request: ProtoMessage, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        call = access.open("grpc", name) if access is not None else None
        metadata = metadata_of(context)
        rec = tel.server_call(name, names.GRPC, metadata) if tel else None
        try:
            if calls.limit and calls.active >= calls.limit:
                await _abort(context, calls.refusal(), call, rec)
            calls.active += 1
            try:
                if call is not None:
                    call.saw(request)
                ctx = await call_context(metadata, authenticate)
                if call is not None:
                    call.principal = ctx.principal
                if rec is not None:
                    rec.principal(ctx.principal)
                events = await handler(request, ctx)
                if rec is not None:
                    rec.detach()  # the events are sent outside the span's context
                    rec.stream_opened()
                async for event in events:
                    if call is not None:
                        call.saw(event)
                    if rec is not None:
                        rec.stream_event(event, describe)
                    yield event
            except Exception as exc:
                await _abort(context, as_a2a_error(exc, name), call, rec)
            except asyncio.CancelledError:  # the caller went away
                if call is not None:
                    call.outcome = CANCELLED
                raise
            finally:
                calls.active -= 1
        finally:
            if call is not None:
                call.close()
            if rec is not None:
                rec.end_rpc(SERVICE.full_name)

    method.__name__ = name
    return method


async def _abort(
    context: grpc.aio.ServicerContext, err: A2AError, call: Call | None, rec: hub.Call | None
) -> None:
    """End the call with `err` as a typed status (and say so in its access line and span)."""
    if call is not None:
        call.failed(err)
    if rec is not None:
        rec.failed(err.reason, err.grpc_status)
    await context.abort_with_status(error_status(err))


def make_servicer(
    api: A2AApi,
    authenticate: Authenticator | None = None,
    calls: CallLimit | None = None,
    access: AccessLog | None = None,
) -> a2a_pb2_grpc.A2AServiceServicer:
    """A servicer instance whose methods are generated from the service descriptor;
    `access`: write an access line per call (None: off)."""
    limit = calls or CallLimit()
    methods = {
        m.name: (_streaming if m.server_streaming else _unary)(
            m.name, api, authenticate, limit, access
        )
        for m in SERVICE.methods
    }
    cls = type("A2AServicer", (a2a_pb2_grpc.A2AServiceServicer,), methods)
    return cls()


# ----------------------------------------------------------------------------- registration


class Undecodable:
    """Stands in for a request whose bytes are not a valid message of its type."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, RecursionError, ValueError):
            return Undecodable(cls.DESCRIPTOR.full_name)

    return parse


async def _refuse(
    request: Undecodable,
    context: grpc.aio.ServicerContext,
    authenticate: Authenticator | None,
    call: Call | None,
) -> None:
    err: A2AError
    try:
        # UnauthenticatedError first, as for any call
        ctx = await call_context(metadata_of(context), authenticate)
        if call is not None:
            call.principal = ctx.principal
        err = InvalidRequestError(
            f"The request is not a valid {request.type_name} protobuf message."
        )
    except Exception as exc:
        err = as_a2a_error(exc, "gRPC request parsing")
    try:
        await _abort(context, err, call, None)
    finally:
        if call is not None:
            call.close()


# A handler as grpc calls it: (request, context) -> response, or an async iterator of them.
Handler = Callable[[Any, Any], Any]


def _parsed_unary(
    behavior: Callable[[Any, Any], Awaitable[Any]],
    authenticate: Authenticator | None,
    access: AccessLog | None = None,
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handle(request: ProtoMessage | Undecodable, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            call = access.open("grpc", behavior.__name__) if access is not None else None
            await _refuse(request, context, authenticate, call)
        return await behavior(request, context)

    return handle


def _parsed_streaming(
    behavior: Handler, authenticate: Authenticator | None, access: AccessLog | None = None
) -> Handler:
    if not inspect.isasyncgenfunction(behavior):  # writes with context.write (health's Watch)
        return _parsed_unary(behavior, authenticate, access)

    async def handle(
        request: ProtoMessage | Undecodable, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            call = access.open("grpc", behavior.__name__) if access is not None else None
            await _refuse(request, context, authenticate, call)
        async for event in behavior(request, context):
            yield event

    return handle


def add_servicer(
    servicer: Any,
    server: grpc.aio.Server,
    authenticate: Authenticator | None = None,
    service: ServiceDescriptor = SERVICE,
    access: AccessLog | None = None,
) -> None:
    """`add_<Service>Servicer_to_server` (the A2A service by default; also the public health
    service, without `authenticate`), with tolerant request parsing; `access`: an access line
    for requests refused as undecodable (the servicer writes those of the others)."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _parsed_streaming(behavior, authenticate, access),
                request_deserializer=_parser(request_cls),
                response_serializer=response_cls.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _parsed_unary(behavior, authenticate, access),
                request_deserializer=_parser(request_cls),
                response_serializer=response_cls.SerializeToString,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)
