"""The probes: `/health` and `/health/live` (the process answers; 503 once the drain
starts) and `/health/ready` (also 503 while a part every call needs is unreachable, see
service.ops.readiness; a shared part that does not count is listed as `degraded`, and
while the event loop lags past `stream_refusal_lag_ms` the body says new streams are
refused, with the lag). Public, JSON, never cached; also served alone on `probe_port`
(`probe_app`), plaintext, for probes that cannot present a client certificate."""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.body import json_response
from service.ops.readiness import Readiness

DRAINING = {"Retry-After": "1", "Cache-Control": "no-store"}
FRESH = {"Cache-Control": "no-store"}


def health_routes(is_serving: Callable[[], bool], readiness: Readiness | None) -> list[Route]:
    async def live(request: Request) -> Response:
        if is_serving():
            return json_response({"status": "healthy"}, headers=FRESH)
        return json_response({"status": "draining"}, status=503, headers=DRAINING)

    async def ready(request: Request) -> Response:
        if not is_serving():
            return json_response({"status": "draining"}, status=503, headers=DRAINING)
        if readiness is not None and not readiness.ready:
            return json_response(
                {"status": "unavailable", "unreachable": sorted(readiness.failing)},
                status=503,
                headers=DRAINING,
            )
        if readiness is None:
            return json_response({"status": "ready"}, headers=FRESH)
        body: dict[str, object] = {"status": "ready"}
        degraded = readiness.degraded
        if degraded:
            body["degraded"] = degraded
        lag = readiness.refusing_streams
        if lag is not None:  # still ready: unary calls and open streams are served
            body["newStreams"] = "refused"
            body["eventLoopLagMs"] = round(lag)
        return json_response(body, headers=FRESH)

    methods = ["GET", "HEAD"]
    return [
        Route("/health", live, methods=methods),
        Route("/health/live", live, methods=methods),
        Route("/health/ready", ready, methods=methods),
    ]


def probe_app(is_serving: Callable[[], bool], readiness: Readiness | None) -> Starlette:
    """Only the probes (for `probe_port`)."""
    return Starlette(routes=health_routes(is_serving, readiness))
