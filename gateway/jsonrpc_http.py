"""JSON-RPC 2.0 over HTTP: `POST /`, a thin adapter over jsonrpc.py's dispatcher.

It reads the body (Content-Type and size checked, body.py), parses it (not
JSON: -32700 with `id` null), dispatches the document with the request's call
context and writes the reply with the JSON-RPC codec (dispatch.py): JSON-RPC
errors travel with HTTP 200, except transport-level refusals (405 for a method
other than POST, 413, 415, and 503 while the server drains) which keep their
HTTP status; streams are SSE whose events are JSON-RPC responses.
"""

from __future__ import annotations

from google.protobuf.descriptor import ServiceDescriptor
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import read_json_body
from gateway.dispatch import JSONRPC, HttpOptions, forward, forward_error
from gateway.errors import MethodNotAllowedError
from gateway.invoker import Invoker
from gateway.jsonrpc import JsonRpcDispatcher
from gateway.params import Caller, call_context
from gateway.transcode import parse_json_body
from service.calls.pipeline import Pipeline


class JsonRpcEndpoint:
    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        options: HttpOptions,
        pipeline: Pipeline | None = None,
    ) -> None:
        self.dispatcher = JsonRpcDispatcher(
            invoker,
            service,
            reject_unknown_fields=options.reject_unknown_fields,
            pipeline=pipeline,
        )
        self.options = options

    async def handle(self, request: Request, caller: Caller) -> Response:
        try:
            if request.method != "POST":
                raise MethodNotAllowedError("The JSON-RPC endpoint accepts only POST.", ["POST"])
            doc = parse_json_body(await read_json_body(request, self.options.max_body_bytes))
        except Exception as exc:
            return forward_error(exc, JSONRPC, "JSON-RPC ?")
        reply = await self.dispatcher.dispatch(
            doc,
            lambda: call_context(caller, request.headers, request.query_params),
        )
        return forward(reply, JSONRPC, self.options)
