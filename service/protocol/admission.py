"""The admission gate a drain closes: after it, new calls are refused with a retry hint."""

from __future__ import annotations

from service.protocol.errors import UnavailableError

REFUSED_MESSAGE = "The server is shutting down and takes no new calls; retry on another replica or after it restarts."
RETRY_AFTER_SECONDS = 1.0


class Gate:
    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def check(self) -> None:
        """Raise UnavailableError (gRPC UNAVAILABLE, HTTP 503 + Retry-After) once closed."""
        if self.closed:
            raise UnavailableError(REFUSED_MESSAGE, retry_after=RETRY_AFTER_SECONDS)
