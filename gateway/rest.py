"""The HTTP+JSON (REST) binding: routes from the descriptor's HttpRules.

The router is built once from `route_table` (plus POST twins of streaming GET
rules, see routes.py). A matched route's RPC gets its request message from the
body, the path variables and the query parameters (transcode.py); unary
results are ProtoJSON, streams are SSE with one StreamResponse per event.
Errors are `{"error": {"code", "status", "message", "details"}}` with the HTTP
status of the one error table; an unknown path is 404, a known path with
another method is 405 with an Allow header.
"""

from __future__ import annotations

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import A2A_MEDIA_TYPE, MAX_BODY_BYTES, read_json_body, rest_media_type
from gateway.errors import MethodNotAllowedError, http_headers, rest_error_body
from gateway.invoker import Invoker
from gateway.params import PRINCIPAL_KEY, call_context
from gateway.routes import Router, route_table, with_post_aliases
from gateway.sse import event_stream
from gateway.transcode import (
    build_request,
    dumps,
    dumps_str,
    parse_json_body,
    resolve_path,
    to_json_dict,
)
from service.protocol.errors import MethodNotFoundError, as_a2a_error


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
        *,
        keepalive_seconds: float,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.invoker = invoker
        self.router = build_router(service)
        self.request_classes = {
            m.name: message_factory.GetMessageClass(m.input_type) for m in service.methods
        }
        self.keepalive_seconds = keepalive_seconds
        self.max_body_bytes = max_body_bytes

    async def handle(self, request: Request) -> Response:
        media_type = A2A_MEDIA_TYPE
        name = "?"
        try:
            media_type = rest_media_type(request.headers.get("accept"))
            raw_path = request.scope.get("raw_path")
            path = raw_path.decode("latin-1") if raw_path else request.url.path
            match = self.router.match(request.method, path)
            if match is None:
                allowed = self.router.allowed_methods(path)
                if allowed:
                    raise MethodNotAllowedError(
                        f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}.",
                        allowed,
                    )
                raise MethodNotFoundError(
                    f"No A2A operation at {request.method} {request.url.path}."
                )
            route = match.route
            name = route.method.name
            body = None
            if route.body:
                raw = await read_json_body(request, self.max_body_bytes)
                if raw.strip():
                    body = parse_json_body(raw)
            message = build_request(
                self.request_classes[name],
                body=body,
                body_field=route.body,
                path_vars=match.path_vars,
                query=request.query_params.multi_items(),
            )
            call = call_context(
                request.scope["headers"],
                request.headers,
                request.query_params,
                request.scope.get(PRINCIPAL_KEY, ""),
            )
            if route.method.server_streaming:
                events = await self.invoker.stream(name, message, call)
                return event_stream(
                    events,
                    frame=lambda event: dumps_str(to_json_dict(event)),
                    frame_error=lambda err: dumps_str(rest_error_body(err)),
                    keepalive_seconds=self.keepalive_seconds,
                    where=f"REST {name} stream",
                )
            result = await self.invoker.unary(name, message, call)
            return Response(dumps(to_json_dict(result)), media_type=media_type)
        except Exception as exc:
            err = as_a2a_error(exc, f"REST {name}")
            return Response(
                dumps(rest_error_body(err)),
                status_code=err.http_status,
                media_type=media_type,
                headers=http_headers(err),
            )
