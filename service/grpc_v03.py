"""The v0.3 gRPC binding: `a2a.v1.A2AService` beside 1.0's `lf.a2a.v1.A2AService`, on the
same server and the same `A2AApi`.

A codec on the call pipeline like grpc_binding.py, whose generated methods it reuses
with an `Edge`: each v0.3 request is translated into the 1.0 request of the API method
that serves it (service/protocol/v03_proto.py), after authentication, and the answer (each
event of a stream) back into v0.3. Its calls are recorded under the binding `grpc-v0.3`,
which is what lets the version check accept "0.3" (or no version) for them. A stream ends
after the event v0.3 marks `final` (the task is terminal or waits for the client), as v0.3
streams do; errors are statuses whose message is `<ErrorName>: <message>`, the form v0.3
clients parse, with the same codes and typed details as 1.0's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as v03
from gen import a2a_v0_3_pb2_grpc
from service.api import A2AApi, CallContext
from service.calls.pipeline import Pipeline
from service.grpc_binding import Binding, Edge, streaming_method, unary_method
from service.net.limits import CallLimit
from service.protocol import v03_proto as t
from service.protocol.errors import A2AError, ExtendedAgentCardNotConfiguredError
from service.protocol.grpc_status import error_status
from service.protocol.states import ends_stream

SERVICE = v03.DESCRIPTOR.services_by_name["A2AService"]
SERVICE_NAME = SERVICE.full_name  # a2a.v1.A2AService
ACCESS_BINDING = "grpc-v0.3"  # ends with "-v0.3": the version check reads it


def v03_status(err: A2AError) -> grpc.Status:
    return error_status(err, t.error_message(err))


def _card(
    api: A2AApi,
) -> Callable[[pb.GetExtendedAgentCardRequest, CallContext], Awaitable[pb.AgentCard]]:
    """v0.3's GetAgentCard: the extended card when one is configured, else the public one
    (v0.3 serves both from this one RPC)."""

    async def card(request: pb.GetExtendedAgentCardRequest, call: CallContext) -> pb.AgentCard:
        try:
            return await api.GetExtendedAgentCard(request, call)
        except ExtendedAgentCardNotConfiguredError:
            return api.cards.public_card()

    return card


def make_v03_servicer(
    api: A2AApi, pipeline: Pipeline | None = None, calls: CallLimit | None = None
) -> a2a_v0_3_pb2_grpc.A2AServiceServicer:
    """A servicer of the v0.3 service, every method on `pipeline` and sharing `calls` (the
    call limit) with the 1.0 servicer."""
    binding = Binding(pipeline or Pipeline(), calls or CallLimit(), ACCESS_BINDING, SERVICE_NAME)
    methods: dict[str, Callable[..., Any]] = {}
    for method in SERVICE.methods:
        target, request_in, reply_out = t.ROUTES[method.name]
        handler = _card(api) if method.name == "GetAgentCard" else getattr(api, target)
        if method.server_streaming:
            edge = Edge(request_in, reply_out, v03_status, ends_stream)
            methods[method.name] = streaming_method(method.name, handler, binding, edge)
        else:
            edge = Edge(request_in, reply_out, v03_status)
            methods[method.name] = unary_method(method.name, handler, binding, edge)
    cls = type("A2AServicerV03", (a2a_v0_3_pb2_grpc.A2AServiceServicer,), methods)
    servicer: a2a_v0_3_pb2_grpc.A2AServiceServicer = cls()  # type() builds an untyped class
    return servicer
