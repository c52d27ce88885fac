"""Telemetry of the HTTP gateway: one server span per request, named as OpenTelemetry's
HTTP conventions say: `{method} {http.route}` (`POST /message:send`, `POST /` for
JSON-RPC), or just the method while no route matched.

`TelemetryMiddleware` (installed by the composition root when telemetry is on) starts
the span of every request but the probes and `/metrics`, continuing the caller's trace
and baggage from the headers the configured propagator reads (`OTEL_PROPAGATORS`), keeps
it current while the request is handled, and records `http.server.request.duration` when
the response is done. Its attributes: `http.request.method`, `url.path`, `url.scheme`,
`client.address`, `http.route` once known and `http.response.status_code` (an int).
While a request runs, `REQUEST` holds its `hub.Call`: the record of an A2A call made
under it (service.calls) adopts it as its span, notes the A2A method once known, the
principal, the task and the outcome, and counts its stream and events.

The request's method and scheme are the caller's to choose: one outside the known sets
(names.HTTP_METHODS, names.URL_SCHEMES) is recorded as `_OTHER`, and such a request's span
is named `HTTP`, as OpenTelemetry's HTTP conventions say.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.calls.record import REQUEST_SPAN
from service.telemetry import hub, names

REQUEST: ContextVar[hub.Call | None] = REQUEST_SPAN
UNTRACED = ("/health", "/metrics")  # probes and scrapes: no spans, no request metric
_SPAN_NAMES = {method: method for method in names.HTTP_METHODS}
_UNKNOWN_METHOD_SPAN = "HTTP"
JSONRPC_ROUTE = "/"


class TelemetryMiddleware:
    def __init__(self, app: ASGIApp, tel: hub.Telemetry) -> None:
        self.app = app
        self.tel = tel
        self.carried = frozenset(field.encode("latin-1") for field in tel.carried)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(UNTRACED):
            await self.app(scope, receive, send)
            return
        carried = self.carried
        carrier = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in carried
        }
        path = scope["path"]
        binding = names.JSONRPC if path == JSONRPC_ROUTE else names.REST
        method = scope["method"]
        span_name = _SPAN_NAMES.get(method)
        if span_name is None:
            method, span_name = names.OTHER, _UNKNOWN_METHOD_SPAN
        scheme = scope.get("scheme", "http")
        if scheme not in names.URL_SCHEMES:
            scheme = names.OTHER
        client = scope.get("client")
        attributes = {
            names.HTTP_METHOD: method,
            names.URL_PATH: path,
            names.URL_SCHEME: scheme,
            names.CLIENT_ADDRESS: client[0] if client else "",
        }
        rec = self.tel.server_call(span_name, binding, carrier, attributes=attributes)
        if binding is names.JSONRPC:
            rec.routed(JSONRPC_ROUTE)
        token = REQUEST.set(rec)
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            REQUEST.reset(token)
            if rec.outcome == names.OK and status >= 400:
                reason = "UNAUTHENTICATED" if status == 401 else f"HTTP_{status}"
                rec.failed(reason, "INTERNAL" if status >= 500 else "")
            rec.end_request(
                self.tel.http_duration,
                (
                    (names.HTTP_METHOD, method),
                    (names.HTTP_STATUS, status),
                    (names.URL_SCHEME, scheme),
                ),
                status,
            )
