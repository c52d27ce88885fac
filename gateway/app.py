"""The gateway's starlette application.

    POST /                              JSON-RPC 2.0 (jsonrpc_http.py over jsonrpc.py)
    GET  /.well-known/agent-card.json   the public agent card (card.py)
    GET  /health                        {"status": "healthy"}; 503 while draining
    GET  /.well-known/jwks.json         the card signing keys, when cards are signed (jwks.py)
    GET  /metrics                       Prometheus text, with `metrics_endpoint` (behind the guard)
    *    anything else                  REST, routed by the proto's HttpRules (rest.py)

JSON-RPC and REST sit behind the guard of auth.py, which resolves the caller once
per request and passes it to them (with authentication configured, 401 before
anything else; without, everyone is anonymous); the card and /health stay public.

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

from gateway.auth import Handler, HttpAuth, anonymous
from gateway.body import MAX_BODY_BYTES, json_response
from gateway.card import WELL_KNOWN_PATH, CardEndpoint
from gateway.dispatch import HttpOptions
from gateway.invoker import Invoker
from gateway.jsonrpc_http import JsonRpcEndpoint
from gateway.jwks import JwksEndpoint
from gateway.params import Caller
from gateway.rest import RestEndpoint
from service.auth import Authenticator

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def health_endpoint(is_serving: Callable[[], bool]):
    async def health(request: Request) -> Response:
        if is_serving():
            return json_response({"status": "healthy"})
        return json_response({"status": "draining"}, status=503, headers={"Retry-After": "1"})

    return health


METRICS_PATH = "/metrics"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def metrics_endpoint(render: Callable[[], bytes]) -> Handler:
    async def metrics(request: Request, caller: Caller) -> Response:
        return Response(render(), media_type=PROMETHEUS_TEXT)

    return metrics


def build_app(
    *,
    invoker: Invoker,
    service: ServiceDescriptor,
    card: Message,
    is_serving: Callable[[], bool],
    card_max_age: int = 60,
    keepalive_seconds: float = 15.0,
    max_body_bytes: int = MAX_BODY_BYTES,
    jwks: dict | None = None,
    jwks_path: str = "",
    auth: Authenticator | None = None,
    forward_credentials: bool = False,
    metrics: Callable[[], bytes] | None = None,
) -> Starlette:
    """`auth`: who may call (None: everyone, anonymously). `forward_credentials`: keep the
    credential headers for the invoker (proxy mode: the upstream authenticates again)."""
    options = HttpOptions(keepalive_seconds=keepalive_seconds, max_body_bytes=max_body_bytes)
    jsonrpc = JsonRpcEndpoint(invoker, service, options)
    rest = RestEndpoint(invoker, service, options)
    guard = (
        anonymous if auth is None else HttpAuth(auth, forward_credentials=forward_credentials).guard
    )
    routes = [
        Route("/", guard(jsonrpc.handle), methods=ALL_METHODS),
        Route(WELL_KNOWN_PATH, CardEndpoint(card, card_max_age).handle, methods=ALL_METHODS),
        Route("/health", health_endpoint(is_serving), methods=["GET", "HEAD"]),
        Route("/{path:path}", guard(rest.handle), methods=ALL_METHODS),
    ]
    if metrics is not None:  # Prometheus text; behind the guard like every A2A route
        routes.insert(-1, Route(METRICS_PATH, guard(metrics_endpoint(metrics)), methods=["GET"]))
    if jwks is not None and jwks_path:  # the card signing keys, before the REST catch-all
        routes.insert(
            -1, Route(jwks_path, JwksEndpoint(jwks, card_max_age).handle, methods=ALL_METHODS)
        )
    return Starlette(routes=routes)
