"""The HTTP client for callbacks, pinned to checked addresses.

Every POST first runs the callback policy (`ssrf.py`), which resolves the host
and checks every address. The connection pool's network backend then connects
only to those addresses (read from a context variable set around the request),
never resolving the name again, so there is no window in which a changed DNS
answer could point the connection elsewhere. The URL keeps its host name, so
the `Host` header, TLS SNI and certificate checks are for the name. Redirects
are never followed (httpcore has no redirect logic), and at most 64 KiB of a
response body is read.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore

from service.push.ssrf import CallbackPolicy, Target

MAX_RESPONSE_BYTES = 64 * 1024

_PINNED: contextvars.ContextVar[Target | None] = contextvars.ContextVar("push_pinned_target", default=None)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to the checked addresses of the request being sent."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109 (httpcore's API)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = _PINNED.get()
        if target is None or host.lower().strip("[]") != target.host or port != target.port:
            raise httpcore.ConnectError(f"refusing an unchecked connection to {host}:{port}")
        error: Exception | None = None
        for address in target.addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not callback targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names


class CallbackClient:
    def __init__(self, policy: CallbackPolicy, *, timeout: float = 10.0, max_connections: int = 64) -> None:
        self.policy = policy
        self.timeout = timeout
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=30.0,
            retries=0,
            network_backend=PinnedBackend(),
        )

    async def post(self, url: str, headers: list[tuple[str, str]], body: bytes) -> Reply:
        """POST to a checked, pinned address. Raises CallbackRefused (policy), TimeoutError
        or httpcore errors (network)."""
        target = await self.policy.check(url)
        token = _PINNED.set(target)
        t = self.timeout
        try:
            async with asyncio.timeout(t):
                async with self._pool.stream(
                    "POST", url, headers=headers, content=body,
                    extensions={"timeout": {"connect": t, "read": t, "write": t, "pool": t}},
                ) as response:
                    read = 0
                    async for chunk in response.aiter_stream():
                        read += len(chunk)
                        if read >= MAX_RESPONSE_BYTES:
                            break
                    return Reply(response.status, {k.decode("latin-1").lower(): v.decode("latin-1")
                                                   for k, v in response.headers})
        finally:
            _PINNED.reset(token)

    async def close(self) -> None:
        await self._pool.aclose()
