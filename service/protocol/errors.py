"""The one error table.

Domain code raises these; each transport adapter turns them into its own form
(gRPC status + `google.rpc.ErrorInfo`, JSON-RPC error object, REST error body)
from the attributes declared here and nowhere else. The reasons are what
clients (a2a-sdk among them) use to map an error back to its exception class.
"""

from __future__ import annotations

import logging
import uuid
from typing import ClassVar

from google.protobuf.message import Message
from google.rpc import error_details_pb2

ERROR_DOMAIN = "a2a-protocol.org"

log = logging.getLogger("service.errors")


class A2AError(Exception):
    """Base of every error a client may see. The message is shown to the client as is."""

    reason: ClassVar[str]
    grpc_status: ClassVar[str]  # gRPC status code name; also the REST body's `status`
    http_status: ClassVar[int]
    jsonrpc_code: ClassVar[int]
    default_message: ClassVar[str]

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: dict[str, str] | None = None,
        field_violations: list[tuple[str, str]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.metadata = metadata or {}
        # (field path, description) pairs, sent as google.rpc.BadRequest.
        self.field_violations = field_violations or []
        # Seconds a client should wait before trying again: google.rpc.RetryInfo, and
        # Retry-After on HTTP.
        self.retry_after = retry_after
        super().__init__(self.message)


# The table: ErrorInfo reason, gRPC status name, HTTP status, JSON-RPC code, default message.


class TaskNotFoundError(A2AError):
    reason = "TASK_NOT_FOUND"
    grpc_status = "NOT_FOUND"
    http_status = 404
    jsonrpc_code = -32001
    default_message = "Task not found."


class TaskNotCancelableError(A2AError):
    reason = "TASK_NOT_CANCELABLE"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32002
    default_message = "Task cannot be canceled in its current state."


class PushNotificationNotSupportedError(A2AError):
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32003
    default_message = "Push notifications are not supported by this agent."


class UnsupportedOperationError(A2AError):
    reason = "UNSUPPORTED_OPERATION"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32004
    default_message = "This operation is not supported."


class ContentTypeNotSupportedError(A2AError):
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    jsonrpc_code = -32005
    default_message = "Content type not supported."


class InvalidAgentResponseError(A2AError):
    reason = "INVALID_AGENT_RESPONSE"
    grpc_status = "INTERNAL"
    http_status = 500
    jsonrpc_code = -32006
    default_message = "The agent produced an invalid response."


class ExtendedAgentCardNotConfiguredError(A2AError):
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32007
    default_message = "No extended agent card is configured."


class ExtensionSupportRequiredError(A2AError):
    reason = "EXTENSION_SUPPORT_REQUIRED"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32008
    default_message = "A required extension was not requested."


class VersionNotSupportedError(A2AError):
    reason = "VERSION_NOT_SUPPORTED"
    grpc_status = "FAILED_PRECONDITION"
    http_status = 400
    jsonrpc_code = -32009
    default_message = "Protocol version not supported."


class InvalidParamsError(A2AError):
    reason = "INVALID_PARAMS"
    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    jsonrpc_code = -32602
    default_message = "Invalid params."


class InvalidRequestError(A2AError):
    reason = "INVALID_REQUEST"
    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    jsonrpc_code = -32600
    default_message = "Invalid request."


class MethodNotFoundError(A2AError):
    reason = "METHOD_NOT_FOUND"
    grpc_status = "UNIMPLEMENTED"
    http_status = 404
    jsonrpc_code = -32601
    default_message = "Method not found."


class JSONParseError(A2AError):
    reason = "PARSE_ERROR"
    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    jsonrpc_code = -32700
    default_message = "Invalid JSON payload."


class UnauthenticatedError(A2AError):
    reason = "UNAUTHENTICATED"
    grpc_status = "UNAUTHENTICATED"
    http_status = 401
    jsonrpc_code = -32000
    default_message = "Unauthorized"


class UnavailableError(A2AError):
    """The service cannot take the call now (it is shutting down, or overloaded): retry."""

    reason = "UNAVAILABLE"
    grpc_status = "UNAVAILABLE"
    http_status = 503
    jsonrpc_code = -32603
    default_message = "The service is unavailable; try again later."


class OverloadedError(A2AError):
    """More calls at once than the configured limit: retry after the hint."""

    reason = "RESOURCE_EXHAUSTED"
    grpc_status = "RESOURCE_EXHAUSTED"
    http_status = 429
    jsonrpc_code = -32603
    default_message = "The server is busy; retry later."


class InternalError(A2AError):
    reason = "INTERNAL_ERROR"
    grpc_status = "INTERNAL"
    http_status = 500
    jsonrpc_code = -32603
    default_message = "Internal error."


ALL_ERRORS: tuple[type[A2AError], ...] = tuple(
    cls
    for cls in list(globals().values())  # every class above
    if isinstance(cls, type) and issubclass(cls, A2AError) and cls is not A2AError
)
BY_REASON: dict[str, type[A2AError]] = {cls.reason: cls for cls in ALL_ERRORS}


def invalid_field(field: str, problem: str) -> A2AError:
    """InvalidParams naming the offending field (camelCase, as clients write it)."""
    return InvalidParamsError(f"{field}: {problem}", field_violations=[(field, problem)])


def internal_error(exc: BaseException, where: str) -> A2AError:
    """Log an unexpected exception with a correlation id; the client gets only the id."""
    ref = uuid.uuid4().hex[:12]
    log.error("internal error ref=%s in %s", ref, where, exc_info=exc)
    return InternalError(f"Internal error (ref {ref}).", metadata={"ref": ref})


def as_a2a_error(exc: BaseException, where: str) -> A2AError:
    return exc if isinstance(exc, A2AError) else internal_error(exc, where)


def error_details(err: A2AError) -> list[Message]:
    """The typed details every binding sends: `google.rpc.ErrorInfo`, plus `google.rpc.BadRequest`
    for field violations (gRPC status details, JSON-RPC `error.data`, REST `error.details`)."""
    details: list[Message] = [
        error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN, metadata=err.metadata)
    ]
    if err.field_violations:
        bad = error_details_pb2.BadRequest()
        for path, problem in err.field_violations:
            bad.field_violations.add(field=path, description=problem)
        details.append(bad)
    if err.retry_after is not None:
        info = error_details_pb2.RetryInfo()
        info.retry_delay.FromNanoseconds(int(err.retry_after * 1e9))
        details.append(info)
    return details
