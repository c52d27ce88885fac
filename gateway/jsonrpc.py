"""JSON-RPC 2.0: request documents in, response documents out; no HTTP here.

The method table is the service descriptor: method names are the RPC names
(`SendMessage`, `GetTask`, ...), `params` is the request message in ProtoJSON,
`result` the response message. `JsonRpcDispatcher.dispatch` takes a parsed
request document and a call context and answers a reply (replies.py): a
response document, an error document, or for server-streaming RPCs a stream
of response documents carrying the request id. It knows nothing of the
transport, so JSON-RPC over HTTP (jsonrpc_http.py) is a thin adapter over it,
and other framings (WebSocket, newline-delimited over a socket) can be too.

Errors: -32600 invalid envelope (not an object, a batch, `jsonrpc` not "2.0",
a missing or ill-typed `id`, a missing or non-string `method`); -32601 unknown
method; -32602 bad params (BadRequest details name the field); -32603
internal; A2A errors -32001..-32009. Every error's `data` is the array of
typed details (`google.rpc.ErrorInfo`, ...). A document that is not JSON
(-32700) is the transport's to refuse, as it parses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from gateway.errors import jsonrpc_error_body
from gateway.invoker import Invoker
from gateway.replies import Document, ErrorReply, Reply, invoke
from gateway.transcode import build_request, to_json_dict
from service.api import CallContext
from service.calls import record
from service.calls.admission import VersionCheck
from service.calls.pipeline import Pipeline
from service.protocol.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
)


def method_table(service: ServiceDescriptor) -> dict[str, tuple[MethodDescriptor, type[Message]]]:
    """JSON-RPC method name -> (RPC descriptor, request class), straight from the descriptor."""
    return {m.name: (m, message_factory.GetMessageClass(m.input_type)) for m in service.methods}


@dataclass(frozen=True, slots=True)
class Envelope:
    """The response documents for one request id (the replies' Renderer)."""

    id: Any

    def result(self, message: Message) -> Document:
        return {"jsonrpc": "2.0", "id": self.id, "result": to_json_dict(message)}

    def error(self, err: A2AError) -> Document:
        return jsonrpc_error_body(err, self.id)


def request_id(doc: Any) -> Any:
    """The id to echo in an answer to `doc` (null when there is no usable one)."""
    rid = doc.get("id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def check_envelope(doc: Any) -> tuple[str, dict[str, Any]]:
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
    return method, params


class JsonRpcDispatcher:
    def __init__(
        self,
        invoker: Invoker,
        service: ServiceDescriptor,
        *,
        reject_unknown_fields: bool = False,
        pipeline: Pipeline | None = None,
    ) -> None:
        self.invoker = invoker
        self.pipeline = pipeline or Pipeline()  # default: no interceptors, no record written
        self.methods = method_table(service)
        self.reject_unknown_fields = reject_unknown_fields  # else members of no field are dropped
        # The pipeline's version check, run before params are read (None: not checked here).
        self.version_check = next(
            (i for i in self.pipeline.interceptors if isinstance(i, VersionCheck)), None
        )

    async def dispatch(
        self,
        doc: Any,
        call: CallContext | Callable[[], CallContext],
        version: CallContext | None = None,
    ) -> Reply:
        """Answer the request document `doc`. `call` may be a function that builds the
        call context: it is called once the request is valid, so a request's own errors
        come before those of its transport parameters (as on REST, e.g. a bad
        Last-Event-ID header). `version`: the version the transport read before the body
        (its A2A-Version), checked before the method and its params are, so a caller of
        another version learns that first."""
        envelope = Envelope(request_id(doc))
        name = "?"
        try:
            name, params = check_envelope(doc)
            if version is not None and self.version_check is not None:
                current = record.current()
                binding = current.binding if current is not None else "jsonrpc"
                known = name if name in self.methods else ""
                self.version_check.check_version(binding, known, version)
            entry = self.methods.get(name)
            if entry is None:
                raise MethodNotFoundError(
                    f"Unknown method {name!r}; methods are the A2AService RPC names, e.g. SendMessage."
                )
            method, request_cls = entry
            record.name_method(method.name)
            message = build_request(
                request_cls,
                body=params,
                body_field="*",
                reject_unknown=self.reject_unknown_fields,
            )
            context = call() if callable(call) else call
            return await invoke(
                self.invoker,
                self.pipeline,
                method,
                message,
                context,
                envelope,
                f"JSON-RPC {name}",
            )
        except Exception as exc:
            return ErrorReply.of(exc, envelope, f"JSON-RPC {name}")
