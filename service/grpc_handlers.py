"""Registers the A2A servicer on a gRPC server with request parsing that fails cleanly.

grpc's generated registration parses requests with `FromString`; bytes that are
not a valid message then surface as status UNKNOWN with the parser's exception
text. Here a request that does not parse becomes INVALID_ARGUMENT with the A2A
InvalidRequest reason, before the servicer sees it (after authentication, so an
unknown caller still gets UNAUTHENTICATED). Everything else is the generated
behaviour: one handler per RPC of the service descriptor.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from service.errors import InvalidRequestError, as_a2a_error
from service.grpc_servicer import SERVICE, Authenticator, call_context, error_status


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
    request: Undecodable, context: grpc.aio.ServicerContext, authenticate: Authenticator | None
) -> None:
    try:
        await call_context(context, authenticate)  # UnauthenticatedError first, as for any call
        err = InvalidRequestError(
            f"The request is not a valid {request.type_name} protobuf message."
        )
    except Exception as exc:
        err = as_a2a_error(exc, "gRPC request parsing")
    await context.abort_with_status(error_status(err))


def _unary(behavior, authenticate: Authenticator | None):
    async def handle(request, context):
        if isinstance(request, Undecodable):
            await _refuse(request, context, authenticate)
        return await behavior(request, context)

    return handle


def _streaming(behavior, authenticate: Authenticator | None):
    if not inspect.isasyncgenfunction(behavior):  # writes with context.write (health's Watch)
        return _unary(behavior, authenticate)

    async def handle(request, context):
        if isinstance(request, Undecodable):
            await _refuse(request, context, authenticate)
        async for event in behavior(request, context):
            yield event

    return handle


def add_servicer(
    servicer: Any,
    server: grpc.aio.Server,
    authenticate: Authenticator | None = None,
    service: ServiceDescriptor = SERVICE,
) -> None:
    """`add_<Service>Servicer_to_server` (the A2A service by default; also the public health
    service, without `authenticate`), with tolerant request parsing."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _streaming(behavior, authenticate),
                request_deserializer=_parser(request_cls),
                response_serializer=response_cls.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(behavior, authenticate),
                request_deserializer=_parser(request_cls),
                response_serializer=response_cls.SerializeToString,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)
