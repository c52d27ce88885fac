"""The HTTP+JSON (REST) binding: routes from the descriptor's HttpRules.

The router is built once from `route_table` (plus POST twins of streaming GET
rules, see routes.py). A matched route's RPC gets its request message from the
body, the path variables and the query parameters (transcode.py), and its
reply is written by dispatch.py with the REST codec: unary results are
ProtoJSON, streams are SSE with one StreamResponse per event, errors are
`{"error": {"code", "status", "message", "details"}}` with the HTTP status of
the one error table; an unknown path is 404, a known path with another method
is 405 with an Allow header.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import may_hold_oversized, read_json_body
from gateway.dispatch import REST_A2A, HttpOptions, forward, forward_error, rest_codec
from gateway.errors import MethodNotAllowedError
from gateway.invoker import Invoker
from gateway.params import Caller, call_context
from gateway.replies import invoke
from gateway.routes import Route, Router, route_table, with_post_aliases
from gateway.transcode import build_request, parse_json_body, resolve_path
from service.calls import record
from service.calls.pipeline import Pipeline
from service.inputs.early import PROTO_JSON, SENDS, PartLimits, PartShape, SendScan
from service.protocol.errors import MethodNotFoundError


def build_router(service: ServiceDescriptor) -> Router:
    routes = with_post_aliases(route_table(service))
    for (
        route
    ) in routes:  # a rule naming a field the request lacks is a contract bug: fail at startup
        input_type = route.method.input_type
        for name in (*route.variables, *([route.body] if route.body not in ("", "*") else [])):
            try:
                resolve_path(input_type, name)
            except KeyError:
                raise ValueError(
                    f"{route.method.full_name}: {route.template} names {name!r}, "
                    f"which {input_type.full_name} does not have"
                ) from None
    return Router(routes)


class RestEndpoint:
    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        options: HttpOptions,
        pipeline: Pipeline | None = None,
    ) -> None:
        self.invoker = invoker
        self.pipeline = pipeline or Pipeline()
        self.router = build_router(service)
        self.request_classes = {
            m.name: message_factory.GetMessageClass(m.input_type) for m in service.methods
        }
        self.options = options

    async def handle(self, request: Request, caller: Caller) -> Response:
        codec = REST_A2A
        name = "?"
        try:
            codec = rest_codec(request.headers.get("accept"))
            route, path_vars, body = await routed(
                self.router,
                request,
                "A2A",
                self.options.max_body_bytes,
                self.options.part_limits,
            )
            name = route.method.name
            message = build_request(
                self.request_classes[name],
                body=body,
                body_field=route.body,
                path_vars=path_vars,
                query=request.query_params.multi_items(),
                reject_unknown=self.options.reject_unknown_fields,
            )
            call = call_context(caller, request.headers, request.query_params)
            reply = await invoke(
                self.invoker, self.pipeline, route.method, message, call, codec, f"REST {name}"
            )
        except Exception as exc:
            return forward_error(exc, codec, f"REST {name}")
        return forward(reply, codec, self.options)


async def routed(
    router: Router,
    request: Request,
    what: str,
    max_body_bytes: int,
    part_limits: PartLimits | None = None,
    shape: PartShape = PROTO_JSON,
) -> tuple[Route, dict[str, str], Any]:
    """The route `request` takes (named on the call's record and span), its path variables,
    and its parsed JSON body (None when the route takes none or the body is empty); an
    unknown path or method is refused naming what is allowed. With `part_limits`, a
    send's part too large for any media type (its parts where `shape` says) is refused
    as soon as it is read, before the rest of the body is."""
    raw_path = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else request.url.path
    match = router.match(request.method, path)
    if match is None:
        allowed = router.allowed_methods(path)
        if allowed:
            raise MethodNotAllowedError(
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}.",
                allowed,
            )
        raise MethodNotFoundError(f"No {what} operation at {request.method} {request.url.path}.")
    route = match.route
    record.name_method(route.method.name)
    record.name_route(route.template)
    body = None
    if route.body:
        scan = None
        if (
            part_limits is not None
            and route.method.name in SENDS
            and may_hold_oversized(request, part_limits)
        ):
            scan = SendScan(part_limits, shape)
        raw = await read_json_body(request, max_body_bytes, scan)
        if scan is not None and scan.found is not None:
            # refused from its bytes, before the rest was read; the error's traceback keeps
            # this frame until a collection: it must not keep what was read with it
            refused, scan, raw = scan.found, None, b""
            raise refused
        if raw.strip():
            body = parse_json_body(raw)
    return route, match.path_vars, body
