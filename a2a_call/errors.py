"""a2a-call's exit codes, and `CallError`, which every part of the CLI raises to end with one;
`classify` says what an error of the a2a-sdk client (or httpx, grpc) means for the exit code."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import grpc
import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError, AgentCardResolutionError
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseError

from a2a_call.safe import printable, redact


class Exit(enum.IntEnum):
    """The documented exit codes (docs/client.md)."""

    COMPLETED = 0
    FAILED = 1
    USAGE = 2
    CANCELED = 3  # canceled or rejected
    INPUT_REQUIRED = 4
    AUTH_REQUIRED = 5
    UNREACHABLE = 6  # no connection, DNS, TLS handshake, timed out
    UNAUTHENTICATED = 7  # 401/403, gRPC UNAUTHENTICATED / PERMISSION_DENIED
    PROTOCOL = 8  # an A2A error reply, or an answer that is not A2A
    NOT_VERIFIED = 9  # --verify-card refused the card, or a download's SHA-256 or size
    REFUSED = 10  # unsafe: plaintext credentials after a TLS card, over --max-download, file://


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


def classify(exc: BaseException) -> CallError:
    """What an error from the a2a-sdk client (or httpx, grpc) means for the exit code."""
    if isinstance(exc, CallError):
        return exc
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
    if isinstance(exc, A2AError | A2AClientError):
        name = type(exc).__name__.removesuffix("Error") or "A2A"
        return CallError(Exit.PROTOCOL, f"{name}: {getattr(exc, 'message', str(exc))}")
    if isinstance(exc, ParseError | ValueError):
        return CallError(Exit.PROTOCOL, f"not a valid A2A answer: {exc}")
    return CallError(Exit.PROTOCOL, f"{type(exc).__name__}: {exc}")
