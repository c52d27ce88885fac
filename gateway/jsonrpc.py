"""The JSON-RPC 2.0 binding: `POST /`.

The method table is the service descriptor: method names are the RPC names
(`SendMessage`, `GetTask`, ...), `params` is the request message in ProtoJSON,
`result` the response message. Server-streaming RPCs answer with an event
stream whose events are JSON-RPC responses carrying the request id.

Errors: -32700 unparsable JSON; -32600 invalid envelope (not an object, a
batch, `jsonrpc` not "2.0", a missing or ill-typed `id`, a missing or
non-string `method`); -32601 unknown method; -32602 bad params (BadRequest
details name the field); -32603 internal; A2A errors -32001..-32009. Every
error's `data` is the array of typed details (`google.rpc.ErrorInfo`, ...).
JSON-RPC errors travel with HTTP 200, as JSON-RPC over HTTP does, except
transport-level refusals (401, 405, 413, 415, and 503 while the server drains)
which keep their HTTP status.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import JSON_MEDIA_TYPE, MAX_BODY_BYTES, read_json_body
from gateway.errors import MethodNotAllowedError, http_headers, jsonrpc_error_body
from gateway.invoker import Invoker
from gateway.params import PRINCIPAL_KEY, call_context
from gateway.sse import event_stream
from gateway.transcode import build_request, dumps, dumps_str, parse_json_body, to_json_dict
from service.protocol.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    as_a2a_error,
)

_KEEP_HTTP_STATUS = frozenset({401, 405, 413, 415, 503})


def method_table(service: ServiceDescriptor) -> dict[str, tuple[MethodDescriptor, type[Message]]]:
    """JSON-RPC method name -> (RPC descriptor, request class), straight from the descriptor."""
    return {m.name: (m, message_factory.GetMessageClass(m.input_type)) for m in service.methods}


def _request_id(envelope: dict[str, Any]) -> Any:
    """The id to echo in an error about this envelope (null when unusable)."""
    rid = envelope.get("id")
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _check_envelope(doc: Any) -> tuple[Any, str, Any]:
    if isinstance(doc, list):
        raise InvalidRequestError(
            "Batch requests are not supported; send one JSON-RPC request object per call."
        )
    if not isinstance(doc, dict):
        raise InvalidRequestError("A JSON-RPC request must be a JSON object.")
    if doc.get("jsonrpc") != "2.0":
        raise InvalidRequestError('The member "jsonrpc" must be exactly "2.0".')
    if "id" not in doc:
        raise InvalidRequestError(
            'Notifications (requests without "id") are not supported: every A2A method has a result.'
        )
    rid = doc["id"]
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int))):
        raise InvalidRequestError('The member "id" must be a string, an integer or null.')
    method = doc.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequestError('The member "method" must be a non-empty string.')
    params = doc.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParamsError('"params" must be an object: the request message in ProtoJSON.')
    return rid, method, params


class JsonRpcEndpoint:
    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        *,
        keepalive_seconds: float,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.invoker = invoker
        self.methods = method_table(service)
        self.keepalive_seconds = keepalive_seconds
        self.max_body_bytes = max_body_bytes

    def _error(self, err: A2AError, rid: Any) -> Response:
        status = err.http_status if err.http_status in _KEEP_HTTP_STATUS else 200
        return Response(
            dumps(jsonrpc_error_body(err, rid)),
            status_code=status,
            media_type=JSON_MEDIA_TYPE,
            headers=http_headers(err),
        )

    async def handle(self, request: Request) -> Response:
        rid: Any = None
        name = "?"
        try:
            if request.method != "POST":
                raise MethodNotAllowedError("The JSON-RPC endpoint accepts only POST.", ["POST"])
            doc = parse_json_body(await read_json_body(request, self.max_body_bytes))
            if isinstance(doc, dict):
                rid = _request_id(doc)
            rid, name, params = _check_envelope(doc)
            entry = self.methods.get(name)
            if entry is None:
                raise MethodNotFoundError(
                    f"Unknown method {name!r}; methods are the A2AService RPC names, e.g. SendMessage."
                )
            method, request_cls = entry
            message = build_request(request_cls, body=params, body_field="*")
            call = call_context(
                request.scope["headers"],
                request.headers,
                request.query_params,
                request.scope.get(PRINCIPAL_KEY, ""),
            )
            if method.server_streaming:
                events = await self.invoker.stream(name, message, call)
                return event_stream(
                    events,
                    frame=lambda event, rid=rid: dumps_str(
                        {"jsonrpc": "2.0", "id": rid, "result": to_json_dict(event)}
                    ),
                    frame_error=lambda err, rid=rid: dumps_str(jsonrpc_error_body(err, rid)),
                    keepalive_seconds=self.keepalive_seconds,
                    where=f"JSON-RPC {name} stream",
                )
            result = await self.invoker.unary(name, message, call)
            body = {"jsonrpc": "2.0", "id": rid, "result": to_json_dict(result)}
            return Response(dumps(body), media_type=JSON_MEDIA_TYPE)
        except Exception as exc:
            return self._error(as_a2a_error(exc, f"JSON-RPC {name}"), rid)
