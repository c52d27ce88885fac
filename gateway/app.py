"""The gateway's starlette application.

    POST /                              JSON-RPC 2.0 (jsonrpc.py)
    GET  /.well-known/agent-card.json   the public agent card (card.py)
    GET  /health                        {"status": "healthy"}; 503 while draining
    *    anything else                  REST, routed by the proto's HttpRules (rest.py)

No business logic lives here: every A2A operation goes through the invoker to
the same servicer the gRPC binding uses.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.body import json_response
from gateway.card import WELL_KNOWN_PATH, CardEndpoint
from gateway.invoker import Invoker
from gateway.jsonrpc import JsonRpcEndpoint
from gateway.params import Authenticator
from gateway.rest import RestEndpoint

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def health_endpoint(is_serving: Callable[[], bool]):
    async def health(request: Request) -> Response:
        if is_serving():
            return json_response({"status": "healthy"})
        return json_response({"status": "draining"}, status=503, headers={"Retry-After": "1"})

    return health


def build_app(
    *,
    invoker: Invoker,
    service: ServiceDescriptor,
    card: Message,
    is_serving: Callable[[], bool],
    card_max_age: int = 60,
    keepalive_seconds: float = 15.0,
    authenticate: Authenticator | None = None,
) -> Starlette:
    jsonrpc = JsonRpcEndpoint(invoker, service, keepalive_seconds=keepalive_seconds,
                              authenticate=authenticate)
    rest = RestEndpoint(invoker, service, keepalive_seconds=keepalive_seconds,
                        authenticate=authenticate)
    routes = [
        Route("/", jsonrpc.handle, methods=ALL_METHODS),
        Route(WELL_KNOWN_PATH, CardEndpoint(card, card_max_age).handle, methods=ALL_METHODS),
        Route("/health", health_endpoint(is_serving), methods=["GET", "HEAD"]),
        Route("/{path:path}", rest.handle, methods=ALL_METHODS),
    ]
    return Starlette(routes=routes)
