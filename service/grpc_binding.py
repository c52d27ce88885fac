"""The gRPC binding: A2AApi behind `lf.a2a.v1.A2AService`, the status codec both ways
(A2AError -> status with typed details, and back for the proxy), and registration.

Methods are bound from the service descriptor, not written one by one: every
RPC in the contract maps to the A2AApi method of the same name, and runs the call
pipeline (service.calls) around it — this module is the codec: metadata and the
request message in, a response, a stream or a status with typed details out.

Registration parses requests tolerantly: grpc's generated code parses with
`FromString`, and bytes that are not a valid message then surface as status
UNKNOWN with the parser's exception text. Here such a request becomes
INVALID_ARGUMENT with the A2A InvalidRequest reason, after authentication (an unknown
caller still gets UNAUTHENTICATED).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.api import A2AApi, CallContext
from service.auth.schemes import CallMetadata, call_metadata
from service.calls.pipeline import Pipeline
from service.calls.record import CANCELLED, OK, Call
from service.net.limits import CallLimit
from service.protocol.errors import InvalidRequestError
from service.protocol.grpc_status import error_status
from service.telemetry import names

log = logging.getLogger("service.grpc")

SERVICE = pb.DESCRIPTOR.services_by_name["A2AService"]
SERVICE_NAME = SERVICE.full_name
ACCESS_BINDING = "grpc"  # the binding's name in access lines


def metadata_of(context: grpc.aio.ServicerContext) -> CallMetadata:
    """The call's metadata, read once per call (grpc builds it anew on every read); it is
    also the carrier of the caller's W3C trace context."""
    return call_metadata(context.invocation_metadata() or ())  # notes repeated credentials


def _transport(call: Call, context: grpc.aio.ServicerContext, metadata: CallMetadata) -> None:
    """What the access line says of the caller: grpc's peer string (parsed when the line is
    written) and the User-Agent grpc clients send."""
    call.client = context.peer() or ""
    call.user_agent = metadata.get("user-agent", "")


class Undecodable:
    """Stands in for a request whose bytes are not a valid message of its type."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _decoded(request: ProtoMessage | Undecodable) -> ProtoMessage:
    if isinstance(request, Undecodable):
        raise InvalidRequestError(
            f"The request is not a valid {request.type_name} protobuf message."
        )
    return request


class _Binding:
    """What every generated method shares: the pipeline, and the binding's own limit on
    calls in flight (taken before anything else, so a flood costs no authentication)."""

    __slots__ = ("pipeline", "calls")

    def __init__(self, pipeline: Pipeline, calls: CallLimit) -> None:
        self.pipeline = pipeline
        self.calls = calls

    async def enter(
        self, call: Call, metadata: CallMetadata, request: ProtoMessage | Undecodable
    ) -> tuple[ProtoMessage, CallContext]:
        """Authentication, the request's decoding, the interceptors (the call holds a slot
        of the call limit by now)."""
        if not isinstance(request, Undecodable):
            call.saw(request)
        pipeline = self.pipeline
        principal = await pipeline.authenticate(call, metadata)
        message = _decoded(request)  # after authentication: an unknown caller learns nothing
        context = CallContext(metadata=metadata, principal=principal)
        await pipeline.admit(call, context, message)
        return message, context


def _unary(name: str, api: A2AApi, binding: _Binding) -> Callable[..., Awaitable[Any]]:
    handler = getattr(api, name)
    pipeline = binding.pipeline

    async def method(self: object, request: Any, context: grpc.aio.ServicerContext) -> Any:
        metadata = metadata_of(context)
        call = pipeline.open(
            ACCESS_BINDING, name, span_binding=names.GRPC, carrier=metadata, service=SERVICE_NAME
        )
        logged = call.logged
        if logged:
            _transport(call, context, metadata)
        calls = binding.calls
        held = False
        try:
            calls.take()
            held = True
            message, ctx = await binding.enter(call, metadata, request)
            response = await handler(message, ctx)
            call.replied(response)
            call.status = OK
            if logged:
                call.bytes = response.ByteSize()
            return response
        except Exception as exc:  # every failure leaves as a typed status
            err = pipeline.failed(call, exc, name)
            call.status = err.grpc_status
            await context.abort_with_status(error_status(err))
        except asyncio.CancelledError:  # the caller went away
            call.cancelled()
            call.status = CANCELLED
            raise
        finally:
            if held:
                calls.give()
            pipeline.close(call)

    method.__name__ = name
    return method


def _streaming(name: str, api: A2AApi, binding: _Binding) -> Callable[..., AsyncIterator[Any]]:
    handler = getattr(api, name)
    pipeline = binding.pipeline

    async def method(
        self: object, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        metadata = metadata_of(context)
        call = pipeline.open(
            ACCESS_BINDING, name, span_binding=names.GRPC, carrier=metadata, service=SERVICE_NAME
        )
        logged = call.logged
        if logged:
            _transport(call, context, metadata)
        calls = binding.calls
        held = False
        try:
            calls.take()
            held = True
            message, ctx = await binding.enter(call, metadata, request)
            events = await handler(message, ctx)
            call.streaming()
            async for event in events:
                call.event(event)
                if logged:
                    call.bytes += event.ByteSize()
                yield event
            call.status = OK
        except Exception as exc:
            err = pipeline.failed(call, exc, name)
            call.status = err.grpc_status
            await context.abort_with_status(error_status(err))
        except asyncio.CancelledError:  # the caller went away
            call.cancelled()
            call.status = CANCELLED
            raise
        finally:
            if held:
                calls.give()
            pipeline.close(call)

    method.__name__ = name
    return method


def make_servicer(
    api: A2AApi, pipeline: Pipeline | None = None, calls: CallLimit | None = None
) -> a2a_pb2_grpc.A2AServiceServicer:
    """A servicer instance whose methods are generated from the service descriptor, each
    running `pipeline` (default: no authentication, interceptors, access log or spans)."""
    binding = _Binding(pipeline or Pipeline(), calls or CallLimit())
    methods = {
        m.name: (_streaming if m.server_streaming else _unary)(m.name, api, binding)
        for m in SERVICE.methods
    }
    cls = type("A2AServicer", (a2a_pb2_grpc.A2AServiceServicer,), methods)
    servicer: a2a_pb2_grpc.A2AServiceServicer = cls()  # type() builds an untyped class
    return servicer


# ----------------------------------------------------------------------------- registration


def _parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, RecursionError, ValueError):
            return Undecodable(cls.DESCRIPTOR.full_name)

    return parse


# A handler as grpc calls it: (request, context) -> response, or an async iterator of them.
Handler = Callable[[Any, Any], Any]


def _refusing_undecodable(behavior: Handler) -> Handler:
    """A handler of a service without the pipeline (health): an undecodable request is
    refused as InvalidRequest before it runs."""

    async def refuse(request: Undecodable, context: grpc.aio.ServicerContext) -> None:
        err = InvalidRequestError(
            f"The request is not a valid {request.type_name} protobuf message."
        )
        await context.abort_with_status(error_status(err))

    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, Undecodable):
                await refuse(request, context)
            async for event in behavior(request, context):
                yield event

        return stream

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await refuse(request, context)
        return await behavior(request, context)

    return unary


def add_servicer(
    servicer: Any, server: grpc.aio.Server, service: ServiceDescriptor = SERVICE
) -> None:
    """`add_<Service>Servicer_to_server` (the A2A service by default; also the public health
    service) with tolerant request parsing: bytes that are not a valid message reach the
    A2A servicer as `Undecodable` (its pipeline refuses them after authentication); other
    services refuse them before their handler runs."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        if service is not SERVICE:
            behavior = _refusing_undecodable(behavior)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            behavior,
            request_deserializer=_parser(request_cls),
            response_serializer=response_cls.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)
