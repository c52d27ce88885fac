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
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from gen import a2a_v0_3_pb2 as v03
from service.api import A2AApi, CallContext
from service.auth.schemes import CallMetadata, call_metadata
from service.calls.pipeline import Pipeline
from service.calls.record import CANCELLED, OK, Call
from service.inputs.early import WIRE, WIRE_V03, PartLimits, WireShape, proto_oversized
from service.net.limits import CallLimit
from service.protocol.errors import A2AError, InvalidRequestError
from service.protocol.event_ids import (
    RESUME_KEY,
    opens_replay,
    resume_point,
    set_event_id,
    with_event_id,
)
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
    """Stands in for a request whose bytes are not a valid message of its type, or (with
    `refused`) one refused from its bytes before decoding: a part too large for any type."""

    def __init__(self, type_name: str, refused: A2AError | None = None) -> None:
        self.type_name = type_name
        self.refused = refused


def _decoded(request: ProtoMessage | Undecodable) -> ProtoMessage:
    if isinstance(request, Undecodable):
        if request.refused is not None:
            raise request.refused
        raise InvalidRequestError(
            f"The request is not a valid {request.type_name} protobuf message."
        )
    return request


@dataclass(frozen=True, slots=True)
class Edge:
    """How a binding of another A2A version meets the A2AApi (grpc_v03.py): its request
    as the API's, the API's answer (or each event of a stream) as its own, an error as
    its status, and after which API event its stream ends (None: when the API's does).
    The 1.0 binding has none: the API speaks its messages."""

    request: Callable[[Any], ProtoMessage]
    reply: Callable[[Any], ProtoMessage]
    status: Callable[[A2AError], grpc.Status] = error_status
    ends: Callable[[Any], bool] | None = None


class Binding:
    """What every generated method shares: the pipeline, the binding's own limit on calls
    in flight (taken before anything else, so a flood costs no authentication; one limit
    for every service on the server), and the names its calls are recorded under."""

    __slots__ = ("pipeline", "calls", "name", "service")

    def __init__(
        self,
        pipeline: Pipeline,
        calls: CallLimit,
        name: str = ACCESS_BINDING,
        service: str = SERVICE_NAME,
    ) -> None:
        self.pipeline = pipeline
        self.calls = calls
        self.name = name  # in access lines; a v0.3 binding's ends with "-v0.3"
        self.service = service  # the gRPC service, on the call's span

    def open(self, name: str, context: grpc.aio.ServicerContext) -> tuple[Call, CallMetadata]:
        """The call's record, opened as it arrives (its span continues the caller's trace)."""
        metadata = metadata_of(context)
        call = self.pipeline.open(
            self.name, name, span_binding=names.GRPC, carrier=metadata, service=self.service
        )
        if call.logged:
            _transport(call, context, metadata)
        return call, metadata

    async def enter(
        self,
        call: Call,
        metadata: CallMetadata,
        request: ProtoMessage | Undecodable,
        edge: Edge | None = None,
        *,
        stream: bool = False,
    ) -> tuple[ProtoMessage, CallContext]:
        """A slot of the call limit first (a flood costs no authentication), then
        authentication, the request's decoding (and, on another version's binding, its
        translation: a request that does not translate is refused like one that does not
        parse), the interceptors."""
        self.calls.take()
        call.held = True
        if not isinstance(request, Undecodable):
            call.saw(request)
        pipeline = self.pipeline
        principal = await pipeline.authenticate(call, metadata)
        message = _decoded(request)  # after authentication: an unknown caller learns nothing
        if edge is not None:
            message = edge.request(message)
        context = CallContext(
            metadata=metadata,
            principal=principal,
            resume_after=resume_point(metadata.get(RESUME_KEY), "Last-Event-ID"),
        )
        await pipeline.admit(call, context, message, stream=stream)
        return message, context

    async def refuse(
        self,
        call: Call,
        exc: Exception,
        name: str,
        context: grpc.aio.ServicerContext,
        status: Callable[[A2AError], grpc.Status],
    ) -> None:
        """End the call with `exc` as a typed status (every failure leaves so)."""
        err = self.pipeline.failed(call, exc, name)
        call.status = err.grpc_status
        await context.abort_with_status(status(err))

    def close(self, call: Call) -> None:
        if call.held:
            self.calls.give()
        self.pipeline.close(call)


def unary_method(
    name: str,
    handler: Callable[[Any, CallContext], Awaitable[Any]],
    binding: Binding,
    edge: Edge | None = None,
) -> Callable[..., Awaitable[Any]]:
    """The servicer method `name`: the pipeline around `handler` (an A2AApi method)."""
    status = edge.status if edge is not None else error_status

    async def method(self: object, request: Any, context: grpc.aio.ServicerContext) -> Any:
        call, metadata = binding.open(name, context)
        try:
            message, ctx = await binding.enter(call, metadata, request, edge)
            response = await handler(message, ctx)
            call.replied(response)
            reply = response if edge is None else edge.reply(response)
            call.status = OK
            if call.logged:
                call.bytes = reply.ByteSize()
            return reply
        except Exception as exc:
            await binding.refuse(call, exc, name, context, status)
        except asyncio.CancelledError:  # the caller went away
            call.cancelled()
            call.status = CANCELLED
            raise
        finally:
            binding.close(call)

    method.__name__ = name
    return method


def streaming_method(
    name: str,
    handler: Callable[[Any, CallContext], Awaitable[Any]],
    binding: Binding,
    edge: Edge | None = None,
) -> Callable[..., AsyncIterator[Any]]:
    """The server-streaming servicer method `name`: the pipeline around `handler`."""
    status = edge.status if edge is not None else error_status
    ends = edge.ends if edge is not None else None

    async def method(
        self: object, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        call, metadata = binding.open(name, context)
        logged = call.logged
        try:
            message, ctx = await binding.enter(call, metadata, request, edge, stream=True)
            events = await handler(message, ctx)
            call.streaming()
            numbered = hasattr(events, "seq")  # an EventStream: each event's number
            if edge is None:
                async for event in events:
                    call.event(event)
                    reply = with_event_id(event, events.seq) if numbered else event
                    if logged:
                        call.bytes += reply.ByteSize()
                    yield reply
            else:
                first = True
                async for event in events:
                    call.event(event)
                    reply = edge.reply(event)  # a new message: numbered in place
                    seq = events.seq if numbered else None
                    if seq:
                        set_event_id(reply, seq)
                    if logged:
                        call.bytes += reply.ByteSize()
                    yield reply
                    if ends is not None and ends(event):
                        if not (first and opens_replay(event, seq, ctx.resume_after)):
                            break
                    first = False
            call.status = OK
        except Exception as exc:
            await binding.refuse(call, exc, name, context, status)
        except asyncio.CancelledError:  # the caller went away
            call.cancelled()
            call.status = CANCELLED
            raise
        finally:
            binding.close(call)

    method.__name__ = name
    return method


def make_servicer(
    api: A2AApi, pipeline: Pipeline | None = None, calls: CallLimit | None = None
) -> a2a_pb2_grpc.A2AServiceServicer:
    """A servicer instance whose methods are generated from the service descriptor, each
    running `pipeline` (default: no authentication, interceptors, access log or spans)."""
    binding = Binding(pipeline or Pipeline(), calls or CallLimit())
    methods = {
        m.name: (streaming_method if m.server_streaming else unary_method)(
            m.name, getattr(api, m.name), binding
        )
        for m in SERVICE.methods
    }
    cls = type("A2AServicer", (a2a_pb2_grpc.A2AServiceServicer,), methods)
    servicer: a2a_pb2_grpc.A2AServiceServicer = cls()  # type() builds an untyped class
    return servicer


# ----------------------------------------------------------------------------- registration


def _parser(
    cls: Any, parts: PartLimits | None = None, shape: WireShape | None = None
) -> Callable[[bytes], Any]:
    """`cls.FromString`, tolerant; with `parts` and `shape` (a send of either version), a
    part too large for any media type is refused from the wire bytes before anything is
    decoded."""

    def parse(data: bytes) -> Any:
        if parts is not None and shape is not None:
            refused = proto_oversized(data, parts, shape)
            if refused is not None:
                return Undecodable(cls.DESCRIPTOR.full_name, refused)
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


_SEND_SHAPES = {  # the request of each version's sends, and where its parts are
    pb.SendMessageRequest.DESCRIPTOR.full_name: WIRE,
    v03.SendMessageRequest.DESCRIPTOR.full_name: WIRE_V03,
}


def add_servicer(
    servicer: Any,
    server: grpc.aio.Server,
    service: ServiceDescriptor = SERVICE,
    *,
    pipelined: bool | None = None,
    parts: PartLimits | None = None,
) -> None:
    """`add_<Service>Servicer_to_server` (the A2A service by default; also the v0.3 A2A
    service and the public health service) with tolerant request parsing: bytes that are
    not a valid message reach an A2A servicer (`pipelined`, by default the 1.0 service) as
    `Undecodable` (its pipeline refuses them after authentication); other services refuse
    them before their handler runs."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        if not (service is SERVICE if pipelined is None else pipelined):
            behavior = _refusing_undecodable(behavior)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            behavior,
            request_deserializer=_parser(
                request_cls, parts, _SEND_SHAPES.get(method.input_type.full_name)
            ),
            response_serializer=response_cls.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)
