"""JSON-RPC 2.0 over HTTP: `POST /`, a thin adapter over jsonrpc.py's dispatcher (and,
for A2A v0.3 clients, v03_jsonrpc.py's).

The version is read first, from the A2A-Version header or query parameter: with 0.3 or
none (which the spec reads as 0.3) a slash-named method (`message/send`) is a v0.3 call,
served by the v0.3 dispatcher while `compat_v03` is on; anything else goes to the 1.0
dispatcher, which checks that version before the method and its params (no version and
a 1.0 method: VersionNotSupported, saying that 0.3 was assumed and which header to send).

It reads the body (Content-Type and size checked, body.py), parses it (not
JSON: -32700 with `id` null), dispatches the document with the request's call
context and writes the reply with the JSON-RPC codec (dispatch.py): JSON-RPC
errors travel with HTTP 200, except transport-level refusals (405 for a method
other than POST, 413, 415, and 503 while the server drains) which keep their
HTTP status; streams are SSE whose events are JSON-RPC responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from google.protobuf.descriptor import ServiceDescriptor
from starlette.requests import Request
from starlette.responses import Response

from gateway.body import may_hold_oversized, read_json_body
from gateway.dispatch import JSONRPC, HttpOptions, forward, forward_error
from gateway.errors import MethodNotAllowedError
from gateway.invoker import Invoker
from gateway.jsonrpc import Envelope, JsonRpcDispatcher
from gateway.params import HTTP_DEFAULT_VERSION, Caller, call_context, sent_version
from gateway.replies import ErrorReply
from gateway.transcode import parse_json_body
from gateway.v03_jsonrpc import V03JsonRpcDispatcher, is_v03_method
from service.api import CallContext
from service.calls.pipeline import Pipeline
from service.inputs.early import JSONRPC_SENDS, V03_JSONRPC, V03_SENDS, SendScan
from service.protocol.params import VERSION_KEY, is_v03_version

_NO_QUERY: Mapping[str, str] = MappingProxyType({})


class JsonRpcEndpoint:
    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        options: HttpOptions,
        pipeline: Pipeline | None = None,
        *,
        compat_v03: bool = False,
    ) -> None:
        self.dispatcher = JsonRpcDispatcher(
            invoker,
            service,
            reject_unknown_fields=options.reject_unknown_fields,
            pipeline=pipeline,
        )
        self.v03 = V03JsonRpcDispatcher(invoker, service, pipeline) if compat_v03 else None
        self.options = options

    def _scan(self, request: Request, version: str | None) -> SendScan | None:
        """The scan of a send's body as it arrives (the methods whose parts it knows: 1.0's,
        and v0.3's when a v0.3 call would serve them); None without part limits or for a
        body too short to hold a part past them."""
        limits = self.options.part_limits
        if limits is None or not may_hold_oversized(request, limits):
            return None
        methods = JSONRPC_SENDS
        if self.v03 is not None and (not version or is_v03_version(version)):
            methods = {**JSONRPC_SENDS, **dict.fromkeys(V03_SENDS, V03_JSONRPC)}
        return SendScan(limits, methods=methods)

    def _refused_early(self, scan: SendScan | None) -> Response | None:
        """A send whose part is too large for any media type, answered before its body is
        read whole or parsed (the error under the request's id, as its version says it)."""
        if scan is None or scan.found is None:
            return None
        if scan.method in V03_SENDS and self.v03 is not None:
            reply = self.v03.refusal(scan.found, scan.rid, str(scan.method))
        else:
            reply = ErrorReply.of(scan.found, Envelope(scan.rid), "JSON-RPC send")
        return forward(reply, JSONRPC, self.options)

    async def handle(self, request: Request, caller: Caller) -> Response:
        # Most calls have no query string: no parsing of one (starlette's QueryParams).
        query = request.query_params if request.scope.get("query_string") else _NO_QUERY
        version = sent_version(caller, query)  # before the body
        try:
            if request.method != "POST":
                raise MethodNotAllowedError("The JSON-RPC endpoint accepts only POST.", ["POST"])
            scan = self._scan(request, version)
            raw = await read_json_body(request, self.options.max_body_bytes, scan)
            refused = self._refused_early(scan)
            if refused is not None:
                return refused
            doc = parse_json_body(raw)
        except Exception as exc:
            return forward_error(exc, JSONRPC, "JSON-RPC ?")
        if self.v03 is not None and (not version or is_v03_version(version)) and is_v03_method(doc):
            reply = await self.v03.dispatch(
                doc,
                lambda: call_context(caller, request.headers, query, v03=True),
            )
        else:
            reply = await self.dispatcher.dispatch(
                doc,
                lambda: call_context(caller, request.headers, query),
                CallContext(
                    metadata={VERSION_KEY: version} if version else {},
                    default_version=HTTP_DEFAULT_VERSION,
                ),
            )
        return forward(reply, JSONRPC, self.options)
