"""The gateway's starlette application.

    POST /                              JSON-RPC 2.0 (jsonrpc_http.py over jsonrpc.py, and
                                        v03_jsonrpc.py for A2A v0.3 clients)
    GET  /.well-known/agent-card.json   the public agent card (card.py)
    GET  /health, /health/live          {"status": "healthy"}; 503 while draining (health.py)
    GET  /health/ready                  also 503 while the store, bus or push queue is unreachable
    GET  /.well-known/jwks.json         the card signing keys, when cards are signed (jwks.py)
    GET  [/{tenant}]/tasks/{taskId}/files/{sha256}
                                        a stored file artifact, to its task's owner (files.py)
    GET  /metrics                       Prometheus text, with `metrics_endpoint` (behind the guard,
                                        counted by the caller's rate limit)
    *    /v1/...                        REST v0.3, routed by the v0.3 proto's HttpRules (rest_v03.py)
    *    anything else                  REST, routed by the proto's HttpRules (rest.py)

JSON-RPC and REST sit behind the guard of auth.py, which resolves the caller once
per request and passes it to them (with authentication configured, 401 before
anything else; without, everyone is anonymous); the card and /health stay public.

No business logic lives here: every A2A operation goes through the invoker to
the same servicer the gRPC binding uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.access import a2a_route
from gateway.auth import Handler, HttpAuth
from gateway.body import MAX_BODY_BYTES
from gateway.card import WELL_KNOWN_PATH, CardEndpoint
from gateway.dispatch import REST_JSON, HttpOptions, forward_error
from gateway.files import FileEndpoint, FileReader
from gateway.health import health_routes
from gateway.invoker import Invoker
from gateway.jsonrpc_http import JsonRpcEndpoint
from gateway.jwks import JwksEndpoint
from gateway.params import Caller
from gateway.rest import RestEndpoint
from gateway.rest_v03 import ACCESS_BINDING as REST_V03
from gateway.rest_v03 import PREFIX as V03_PREFIX
from gateway.rest_v03 import RestV03Endpoint
from service.auth import Authenticator
from service.calls.admission import DOWNLOAD
from service.calls.pipeline import Pipeline
from service.engine.limits import RateLimiter
from service.inputs.early import PartLimits
from service.ops.readiness import Readiness
from service.protocol.errors import A2AError
from service.protocol.files import FILES_ROUTE, TENANT_FILES_ROUTE

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


METRICS_PATH = "/metrics"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def metrics_endpoint(render: Callable[[], bytes], rate_limit: RateLimiter | None) -> Handler:
    """Prometheus text; a scrape counts against the caller's rate limit like any call."""

    async def metrics(request: Request, caller: Caller) -> Response:
        if rate_limit is not None:
            try:
                rate_limit.check(caller.principal)
            except A2AError as exc:
                return forward_error(exc, REST_JSON, "metrics")
        # Off the loop: under --workers the text is read from every worker's socket.
        return Response(await asyncio.to_thread(render), media_type=PROMETHEUS_TEXT)

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
    part_limits: PartLimits | None = None,
    jwks: dict[str, Any] | None = None,
    jwks_path: str = "",
    auth: Authenticator | None = None,
    forward_credentials: bool = False,
    files: FileReader | None = None,
    reject_unknown_fields: bool = False,
    pipeline: Pipeline | None = None,
    readiness: Readiness | None = None,
    metrics: Callable[[], bytes] | None = None,
    rate_limit: RateLimiter | None = None,
    compat_v03: bool = False,
) -> Starlette:
    """`pipeline`: what every JSON-RPC and REST call runs (service.calls: authentication,
    interceptors, the access line and span); without one, `auth` says who may call (None:
    everyone, anonymously) and `forward_credentials` keeps the credential headers for the
    invoker (proxy mode: the upstream authenticates again). `files`: where stored file
    artifacts are read (None: no download route, as in proxy mode, where the bytes live
    with the upstream). `reject_unknown_fields`: request JSON members that name no field
    are InvalidParams (else they are ignored). `readiness`: what `/health/ready`
    reports besides the drain (None: ready while serving). `rate_limit`: the API's limit per
    principal, which `/metrics` counts against too (None: off, or kept upstream).
    `compat_v03`: A2A v0.3 clients are served too (JSON-RPC's slash-named methods)."""
    options = HttpOptions(
        keepalive_seconds=keepalive_seconds,
        max_body_bytes=max_body_bytes,
        part_limits=part_limits,
        reject_unknown_fields=reject_unknown_fields,
    )
    if pipeline is None:
        pipeline = Pipeline(authenticator=auth, forward_credentials=forward_credentials)
    jsonrpc = JsonRpcEndpoint(invoker, service, options, pipeline, compat_v03=compat_v03)
    rest = RestEndpoint(invoker, service, options, pipeline)
    rest_v03 = RestV03Endpoint(invoker, options, pipeline, card)
    http_auth = HttpAuth(pipeline)
    guard = http_auth.guard
    routes = [
        Route("/", a2a_route("jsonrpc", jsonrpc.handle, pipeline, http_auth), methods=ALL_METHODS),
        Route(WELL_KNOWN_PATH, CardEndpoint(card, card_max_age).handle, methods=ALL_METHODS),
        *health_routes(is_serving, readiness),
        Route(  # v0.3 owns /v1: never a tenant of the 1.0 routes below
            V03_PREFIX + "/{path:path}",
            a2a_route(REST_V03, rest_v03.handle, pipeline, http_auth),
            methods=ALL_METHODS,
        ),
        Route(
            "/{path:path}", a2a_route("rest", rest.handle, pipeline, http_auth), methods=ALL_METHODS
        ),
    ]
    if files is not None:  # before the REST catch-all; other methods fall through to it
        endpoint = FileEndpoint(files, pipeline)
        download = a2a_route("rest", endpoint.handle, pipeline, http_auth, DOWNLOAD)
        for template in (FILES_ROUTE, TENANT_FILES_ROUTE):
            routes.insert(-1, Route(template, download, methods=["GET", "HEAD"]))
    if metrics is not None:  # Prometheus text; behind the guard like every A2A route
        routes.insert(
            -1, Route(METRICS_PATH, guard(metrics_endpoint(metrics, rate_limit)), methods=["GET"])
        )
    if jwks is not None and jwks_path:  # the card signing keys, before the REST catch-all
        routes.insert(
            -1, Route(jwks_path, JwksEndpoint(jwks, card_max_age).handle, methods=ALL_METHODS)
        )
    return Starlette(routes=routes)
