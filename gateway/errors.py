"""A2AError -> the JSON error shapes of the HTTP bindings.

Everything comes from the one error table (`service.errors`) and the one list
of typed details (`service.errors.error_details`), rendered as ProtoJSON `Any`
objects so each carries its `@type`:

- REST: `{"error": {"code": <HTTP status>, "status": <gRPC status name>,
  "message": ..., "details": [...]}}` (google.rpc.Status as grpc-gateway writes it);
- JSON-RPC: `{"jsonrpc": "2.0", "id": ..., "error": {"code": <JSON-RPC code>,
  "message": ..., "data": [...]}}`.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, json_format

from service.protocol.errors import A2AError, InvalidRequestError, error_details

# HTTP-only refusals: the same reason and codes as InvalidRequest (so clients map them
# to it), with the HTTP status that says what went wrong at the HTTP level.


class UnsupportedMediaTypeError(InvalidRequestError):
    """The request's Content-Type is not JSON."""

    http_status = 415


class PayloadTooLargeError(InvalidRequestError):
    http_status = 413


class MethodNotAllowedError(InvalidRequestError):
    """The path exists, but not for this HTTP method; `allow` lists the methods that are."""

    http_status = 405

    def __init__(self, message: str, allow: list[str]) -> None:
        super().__init__(message)
        self.allow = allow


def http_headers(err: A2AError) -> dict[str, str] | None:
    headers: dict[str, str] = {}
    allow = getattr(err, "allow", None)
    if allow:
        headers["Allow"] = ", ".join(allow)
    if err.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(err.retry_after)))
    return headers or None


def details_json(err: A2AError) -> list[dict[str, Any]]:
    out = []
    for detail in error_details(err):
        packed = any_pb2.Any()
        packed.Pack(detail)
        out.append(json_format.MessageToDict(packed))
    return out


def rest_error_body(err: A2AError, http_status: int | None = None) -> dict[str, Any]:
    return {
        "error": {
            "code": http_status or err.http_status,
            "status": err.grpc_status,
            "message": err.message,
            "details": details_json(err),
        }
    }


def jsonrpc_error_body(err: A2AError, request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": err.jsonrpc_code, "message": err.message, "data": details_json(err)},
    }
