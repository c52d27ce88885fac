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
from google.protobuf.message import Message
from google.rpc import error_details_pb2

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
    return [_detail_json(detail) for detail in error_details(err)]


_TYPE_URL = "type.googleapis.com/"


def _detail_json(detail: Message) -> dict[str, Any]:
    """One detail as ProtoJSON `Any`. The three kinds every error carries are written
    directly (json_format costs ~50 us each, a refusal under load pays that per request);
    anything else goes through json_format. A test holds them equal."""
    if isinstance(detail, error_details_pb2.ErrorInfo):
        out: dict[str, Any] = {"@type": _TYPE_URL + "google.rpc.ErrorInfo"}
        if detail.reason:
            out["reason"] = detail.reason
        if detail.domain:
            out["domain"] = detail.domain
        if detail.metadata:
            out["metadata"] = dict(detail.metadata)
        return out
    if isinstance(detail, error_details_pb2.RetryInfo):
        out = {"@type": _TYPE_URL + "google.rpc.RetryInfo"}
        if detail.HasField("retry_delay"):
            out["retryDelay"] = detail.retry_delay.ToJsonString()
        return out
    if isinstance(detail, error_details_pb2.BadRequest):
        violations = []
        for v in detail.field_violations:
            if any(f.name not in ("field", "description") for f, _ in v.ListFields()):
                return _any_json(detail)
            violation = {}
            if v.field:
                violation["field"] = v.field
            if v.description:
                violation["description"] = v.description
            violations.append(violation)
        out = {"@type": _TYPE_URL + "google.rpc.BadRequest"}
        if violations:
            out["fieldViolations"] = violations
        return out
    return _any_json(detail)


def _any_json(detail: Message) -> dict[str, Any]:
    packed = any_pb2.Any()
    packed.Pack(detail)
    out: dict[str, Any] = json_format.MessageToDict(packed)
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
