"""a2a-call's exit codes, the one table of how a stream (or unary answer) can end and the exit
status each ending gives on every binding, and `CallError`, which every part of the CLI raises
to end with one; `classify` says what an error of the a2a-sdk client (or httpx, grpc) means
for the exit code.

The table is imported by the parser for its help text, which must work without the optional
`client` extra: so this module imports the a2a-sdk, httpx and grpc only inside `classify`.
"""

from __future__ import annotations

import enum
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

from a2a_call.safe import printable, redact


class Exit(enum.IntEnum):
    """The documented exit codes (docs/client.md)."""

    COMPLETED = 0
    FAILED = 1
    USAGE = 2
    CANCELED = 3  # canceled or rejected
    INPUT_REQUIRED = 4
    AUTH_REQUIRED = 5
    UNREACHABLE = 6  # no connection, DNS, TLS handshake, timed out, the stream broke off
    UNAUTHENTICATED = 7  # 401/403, gRPC UNAUTHENTICATED / PERMISSION_DENIED
    PROTOCOL = 8  # an A2A error reply, or an answer that is not A2A
    NOT_VERIFIED = 9  # --verify-card refused the card, or a download's SHA-256 or size
    REFUSED = 10  # unsafe: plaintext credentials after a TLS card, over --max-download, file://


# The task's last state, by its A2A name (TASK_STATE_...), and the exit it gives.
EXIT_OF_STATE_NAME: Mapping[str, Exit] = {
    "TASK_STATE_COMPLETED": Exit.COMPLETED,
    "TASK_STATE_FAILED": Exit.FAILED,
    "TASK_STATE_CANCELED": Exit.CANCELED,
    "TASK_STATE_REJECTED": Exit.CANCELED,
    "TASK_STATE_INPUT_REQUIRED": Exit.INPUT_REQUIRED,
    "TASK_STATE_AUTH_REQUIRED": Exit.AUTH_REQUIRED,
}

# Every way a stream (send, subscribe; a --no-stream answer alike) can end, and its exit
# status: the same on JSON-RPC, HTTP+JSON and gRPC. The help text and docs print this table.
STREAM_ENDINGS: tuple[tuple[str, Exit], ...] = (
    ("the task completed", Exit.COMPLETED),
    ("the task failed", Exit.FAILED),
    ("the task was canceled or rejected", Exit.CANCELED),
    (
        "the task needs input (input-required, an unanswered permission request)",
        Exit.INPUT_REQUIRED,
    ),
    ("the task needs authentication (auth-required)", Exit.AUTH_REQUIRED),
    (
        "the server ended the stream: it drains (SIGTERM) or is overloaded (gRPC "
        "UNAVAILABLE, an UNAVAILABLE error event on JSON-RPC and HTTP+JSON)",
        Exit.UNREACHABLE,
    ),
    (
        "the connection was lost, or the stream ended before the task settled",
        Exit.UNREACHABLE,
    ),
    ("no event for --idle-timeout, or the call took longer than --timeout", Exit.UNREACHABLE),
    (
        "credentials refused mid-way (401/403, UNAUTHENTICATED, PERMISSION_DENIED)",
        Exit.UNAUTHENTICATED,
    ),
    ("any other A2A error, or an event that is not A2A", Exit.PROTOCOL),
)
# Reasons (google.rpc.ErrorInfo, or the gRPC status name) that mean "try again later":
# the stream broke off, the task goes on; resume with `subscribe`.
RETRY_REASONS = frozenset({"UNAVAILABLE"})


def stream_table(width: int = 88) -> str:
    """STREAM_ENDINGS as indented lines, for the help text."""
    return "\n".join(
        textwrap.fill(what, width, initial_indent=f" {int(code):>2}  ", subsequent_indent=" " * 5)
        for what, code in STREAM_ENDINGS
    )


class CallError(Exception):
    """Ends the command with `code`; `message` is one line for stderr (never a credential).

    Messages quote what the agent said (its errors, ids, URLs), so the message is kept with
    its control characters escaped and its URLs' credentials hidden, whoever raised it."""

    def __init__(self, code: Exit, message: str) -> None:
        self.code = code
        self.message = printable(redact(message))
        super().__init__(self.message)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_reason(document: Any) -> str:
    """What an HTTP binding's error document says went wrong: its google.rpc.ErrorInfo
    reason (REST `error.details`, JSON-RPC `error.data`), else REST's `error.status`."""
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return ""
    for key in ("details", "data"):
        details = error.get(key)
        for detail in details if isinstance(details, list) else ():
            if (
                isinstance(detail, dict)
                and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo")
                and isinstance(detail.get("reason"), str)
            ):
                return str(detail["reason"])
    status = error.get("status")
    return status if isinstance(status, str) else ""


def _message_of(document: Any) -> str:
    error = document.get("error") if isinstance(document, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""


def classify(exc: BaseException, stream_error: Any = None) -> CallError:
    """What an error from the a2a-sdk client (or httpx, grpc) means for the exit code;
    STREAM_ERROR is the error event an HTTP stream ended with (the a2a-sdk keeps only its
    text), so a drain reads the same on every binding."""
    import grpc
    import httpx
    from a2a.client import A2AClientError, A2AClientTimeoutError, AgentCardResolutionError
    from a2a.utils.errors import A2AError, PushNotificationNotSupportedError
    from google.protobuf.json_format import ParseError

    if isinstance(exc, CallError):
        return exc
    if error_reason(stream_error) in RETRY_REASONS:
        return CallError(
            Exit.UNREACHABLE,
            f"interrupted: the server ended the stream ({error_reason(stream_error)}): "
            f"{_message_of(stream_error)}",
        )
    for cause in _causes(exc):
        if isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code in (401, 403):
            return CallError(
                Exit.UNAUTHENTICATED,
                f"not authenticated: HTTP {cause.response.status_code} from the agent "
                "(pass --bearer, --api-key or --basic, or their environment variables)",
            )
        if isinstance(cause, grpc.aio.AioRpcError):
            code = cause.code()
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return CallError(
                    Exit.UNAUTHENTICATED,
                    f"not authenticated: gRPC {code.name}: {cause.details()}",
                )
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return CallError(
                    Exit.UNREACHABLE, f"unreachable: gRPC {code.name}: {cause.details()}"
                )
        if isinstance(cause, httpx.TimeoutException | A2AClientTimeoutError | TimeoutError):
            return CallError(Exit.UNREACHABLE, "unreachable: timed out")
        if isinstance(cause, httpx.TransportError):
            return CallError(Exit.UNREACHABLE, f"unreachable: {type(cause).__name__}: {cause}")
    if isinstance(exc, AgentCardResolutionError) and exc.status_code in (401, 403):
        return CallError(Exit.UNAUTHENTICATED, f"not authenticated: {exc.message}")
    if isinstance(exc, PushNotificationNotSupportedError):
        return CallError(
            Exit.PROTOCOL,
            f"PushNotificationNotSupported: the agent takes no push notification configs "
            f"({exc.message})",
        )
    if isinstance(exc, A2AError | A2AClientError):
        name = type(exc).__name__.removesuffix("Error") or "A2A"
        return CallError(Exit.PROTOCOL, f"{name}: {getattr(exc, 'message', str(exc))}")
    if isinstance(exc, ParseError | ValueError):
        return CallError(Exit.PROTOCOL, f"not a valid A2A answer: {exc}")
    return CallError(Exit.PROTOCOL, f"{type(exc).__name__}: {exc}")
