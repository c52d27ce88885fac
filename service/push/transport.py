"""The HTTP client for callbacks, pinned to checked addresses.

Every POST first runs the callback policy (`ssrf.py`), which resolves the host and
checks every address; the connection is then opened to one of those addresses
itself (never resolving the name again), so there is no window in which a changed
DNS answer could point it elsewhere. The `Host` header, TLS SNI and the certificate
check use the name from the URL. HTTP/1.1 framing is h11's; connections are kept
alive per (scheme, host, port, address). Redirects are never followed and at most
64 KiB of a response body is read.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import h11

from service.push.ssrf import CallbackPolicy, Target

MAX_RESPONSE_BYTES = 64 * 1024
KEEPALIVE_SECONDS = 30.0
MAX_IDLE_PER_ORIGIN = 16
READ_SIZE = 65536
_SAFE = "/%:@!$&'()*+,;=-._~?"  # kept as is in path and query; the rest is percent-encoded

PoolKey = tuple[str, str, int, str]  # scheme, host, port, address


class TransportError(Exception):
    """The exchange failed below HTTP semantics (protocol violation, connection closed)."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        self.reusable = False

    async def exchange(self, request: h11.Request, body: bytes) -> Reply:
        conn = self.h11
        self.writer.write(
            conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        )
        await self.writer.drain()
        response: h11.Response | None = None
        read = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await self.reader.read(READ_SIZE))
                continue
            if isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                read += len(event.data)
                if read > MAX_RESPONSE_BYTES:
                    break  # enough: the connection is not reused
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        if response is None:
            raise TransportError("the connection closed before a response")
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self.reusable = True
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
        return Reply(response.status_code, headers)

    def close(self) -> None:
        self.writer.close()


class CallbackClient:
    def __init__(
        self, policy: CallbackPolicy, *, timeout: float = 10.0, max_connections: int = 64
    ) -> None:
        self.policy = policy
        self.timeout = timeout
        self.max_idle = min(max_connections, MAX_IDLE_PER_ORIGIN)
        self._ssl = ssl.create_default_context()
        self._idle: dict[PoolKey, list[_Connection]] = {}

    async def post(self, url: str, headers: list[tuple[str, str]], body: bytes) -> Reply:
        """POST to a checked, pinned address. Raises CallbackRefused (policy), TimeoutError,
        OSError (network, TLS) or TransportError."""
        target = await self.policy.check(url)
        request = _request(target, headers, len(body))
        async with asyncio.timeout(self.timeout):
            conn, reused = await self._acquire(target)
            try:
                reply = await conn.exchange(request, body)
            except (OSError, TransportError, h11.ProtocolError) as exc:
                conn.close()
                if not reused:
                    raise _transport_error(exc) from None
                # A kept-alive connection the receiver had closed meanwhile: once more, fresh.
                conn, _ = await self._acquire(target, fresh=True)
                try:
                    reply = await conn.exchange(request, body)
                except (OSError, TransportError, h11.ProtocolError) as again:
                    conn.close()
                    raise _transport_error(again) from None
            except BaseException:
                conn.close()
                raise
        self._release(target, conn)
        return reply

    async def _acquire(self, target: Target, fresh: bool = False) -> tuple[_Connection, bool]:
        now = time.monotonic()
        for address in () if fresh else target.addresses:
            idle = self._idle.get(_key(target, address), [])
            while idle:
                conn = idle.pop()
                if now - conn.idle_since < KEEPALIVE_SECONDS and not conn.reader.at_eof():
                    return conn, True
                conn.close()
        error: OSError | None = None
        for address in target.addresses:  # connect to a checked address, nothing else
            try:
                reader, writer = await asyncio.open_connection(
                    address,
                    target.port,
                    ssl=self._ssl if target.scheme == "https" else None,
                    server_hostname=target.host if target.scheme == "https" else None,
                )
                return _Connection(reader, writer), False
            except OSError as exc:
                error = exc
        assert error is not None
        raise error

    def _release(self, target: Target, conn: _Connection) -> None:
        if not conn.reusable:
            conn.close()
            return
        conn.reusable = False
        conn.idle_since = time.monotonic()
        peer = conn.writer.get_extra_info("peername")
        key = _key(target, peer[0] if peer else target.addresses[0])
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self.max_idle:
            conn.close()
        else:
            idle.append(conn)

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _key(target: Target, address: str) -> PoolKey:
    return target.scheme, target.host, target.port, address


def _transport_error(exc: BaseException) -> BaseException:
    return exc if isinstance(exc, (OSError, TransportError)) else TransportError(str(exc))


def _request(target: Target, headers: list[tuple[str, str]], length: int) -> h11.Request:
    parts = urlsplit(target.url)
    path = quote(parts.path or "/", safe=_SAFE) + (
        f"?{quote(parts.query, safe=_SAFE)}" if parts.query else ""
    )
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    authority = host if target.port == default else f"{host}:{target.port}"
    return h11.Request(
        method="POST",
        target=path,
        headers=[("Host", authority), ("Content-Length", str(length)), *headers],
    )
