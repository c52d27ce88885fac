"""Connection limits of the HTTP listener (docs/operations.md, "Connection limits").

- **Cap.** Connections are counted from accept() to close, TLS handshakes included.
  Past `max_connections`, the oldest connection that is waiting for a request (it
  has not sent one yet, or is idle between keep-alive requests) is closed to make
  room; when none is, the new connection gets a fixed `503` with `Retry-After` and
  is closed at once, before any parsing, transport or task exists for it (over TLS
  it is closed without a word). This happens in the listening socket's accept(),
  which asyncio calls.
- **Deadlines.** A new connection's TLS handshake and first request headers must
  arrive within `header_timeout` of accept; a later request's headers within
  `header_timeout` of its first byte (the idle time before that is uvicorn's
  keep-alive timeout); a request body within `body_timeout` of its headers (else
  `408` and close). A connection upgraded to a WebSocket has none of these: it is
  no longer an HTTP exchange (its keep-alive is the WebSocket's pings). A timer exists only while something is awaited: one per
  connection until its first headers, none for a request that arrives whole.
- **Back-pressure after a refusal.** A connection answered `429` + `Retry-After` is not
  read again until the hint has passed (gateway.limits.backoff): the protocol keeps its
  `ConnectionBackoff`, hands it to each request in the ASGI scope, and pauses reading
  when the refusal is complete.
- **Aborted uploads.** A client that disconnects before its request body is complete
  ends the request quietly (`quiet_aborted_uploads`), instead of surfacing in the
  endpoint as an internal error with a traceback.

- **Header size.** A request line and headers larger than `MAX_HEADER_BYTES` (16 KiB, what
  h11 allowed) are answered `400` and the connection closed, before more is buffered.

The protocol is uvicorn's httptools (llhttp) one with these hooks (`guarded_protocol`):
llhttp parses a request in about a third of h11's CPU (docs/benchmarks.md).
"""

from __future__ import annotations

import _socket
import asyncio
import logging
import socket
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.limits.backoff import EXTENSION, ConnectionBackoff

log = logging.getLogger("gateway.connections")

RETRY_AFTER_SECONDS = 1
_BUSY_BODY = b"Too many connections; retry later.\n"
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Retry-After: " + str(RETRY_AFTER_SECONDS).encode() + b"\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n"
    b"Connection: close\r\n\r\n" + _BUSY_BODY
)
TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
MAX_HEADER_BYTES = 16 * 1024  # request line and headers, as counted by the parser callbacks
# Requests parsed behind one still being answered: llhttp parses all it is fed (h11 stopped at
# the first), and each queued request holds ~2 KiB of scope and cycle; past this, the
# connection is closed.
MAX_PIPELINED = 32
REFUSE_BATCH = 64  # refusals per accept() call; asyncio polls the listener again after
EVICTING_AT_MOST = 16  # evicted connections whose descriptor is not closed yet

_HEADERS, _BODY = "headers", "body"


class ConnectionGuard:
    """The counts and deadlines of one listener."""

    def __init__(
        self, cap: int, header_timeout: float, body_timeout: float, *, tls: bool = False
    ) -> None:
        self.cap = cap
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.tls = tls
        self.loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self.open = 0  # accepted sockets not yet closed
        self.evicting = 0  # ... of which evicted and about to close
        self.sockets: dict[
            int, CountedSocket
        ] = {}  # by descriptor, for the protocol to find its own
        self.waiting: dict[GuardedProtocol, None] = {}  # waiting for a request, oldest first
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self.backed_off = 0  # connections paused after a refusal (gateway.limits.backoff)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def admit(self) -> bool:
        """Whether a just-accepted connection may stay (evicting a waiting one if need be)."""
        if self.open - self.evicting < self.cap:
            return True
        if self.waiting and self.evicting < EVICTING_AT_MOST:
            next(iter(self.waiting)).evict()
            return True
        return False

    def refuse(self, fd: int) -> None:
        """Answer a connection past the cap with a fixed 503 (plain HTTP) and close it."""
        self.refused += 1
        sock = socket.socket(fileno=fd)
        try:
            if not self.tls:
                sock.setblocking(False)
                sock.send(BUSY_RESPONSE)
                try:  # read what already came, so closing sends FIN rather than RST
                    sock.recv(65536)
                except OSError:
                    pass
        except OSError:
            pass
        finally:
            sock.close()
        log.warning(
            "HTTP connection limit reached (%d open): new connections are refused with 503 "
            "(max_connections)",
            self.cap,
        )


class CountedSocket(socket.socket):
    """An accepted connection, counted until its descriptor is closed."""

    __slots__ = ("_guard", "_timer", "protocol")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard: ConnectionGuard | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.protocol: GuardedProtocol | None = None

    def track(self, guard: ConnectionGuard) -> None:
        assert guard.loop is not None
        self._guard = guard
        guard.open += 1
        guard.sockets[self.fileno()] = self
        # TLS handshake and first request headers: one deadline from accept.
        self._timer = guard.loop.call_later(guard.header_timeout, self._late)

    def first_headers_arrived(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _late(self) -> None:
        self._timer = None
        guard = self._guard
        if guard is None:
            return
        if self.protocol is not None:
            self.protocol.close_late()
        else:  # still in the TLS handshake: end it from below (the descriptor stays asyncio's)
            guard.timed_out += 1
            try:
                self.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _real_close(self, _ss: Any = _socket.socket) -> None:
        guard = self._guard
        if guard is not None:
            self._guard = None
            guard.open -= 1
            guard.sockets.pop(self.fileno(), None)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self.protocol = None
        super()._real_close()  # type: ignore[misc]  # CPython's private close hook, not in typeshed


class GuardedListener(socket.socket):
    """The listening socket: its accept() (called by asyncio) counts, evicts and refuses."""

    __slots__ = ("guard",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard: ConnectionGuard | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        guard = self.guard
        if guard is None:
            return super().accept()
        for _ in range(REFUSE_BATCH):
            # socket.socket's private accept: (fd, address); BlockingIOError when none is waiting
            fd, address = self._accept()  # type: ignore[attr-defined]
            if guard.admit():
                conn = CountedSocket(self.family, self.type, self.proto, fileno=fd)
                conn.track(guard)
                return conn, address
            guard.refuse(fd)
        raise BlockingIOError  # asyncio comes back on the next poll


class HeadersTooLarge(Exception):
    """Raised from a parser callback: llhttp stops and uvicorn answers 400 and closes."""


class TooManyPipelined(Exception):
    """Raised from a parser callback: more requests queued behind the one answered than
    MAX_PIPELINED."""


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guard's deadlines and eviction (see the module doc)."""

    guard: ConnectionGuard  # set on the per-listener subclass (guarded_protocol)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counted: CountedSocket | None = None
        self._phase: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._evicted = False
        self._backoff = ConnectionBackoff()
        self._paused: asyncio.TimerHandle | None = None  # reading resumes when it fires
        self._parsing: str | None = _HEADERS  # what the parser takes in next: headers or a body
        self._header_bytes = 0  # this request's line and headers, as the callbacks saw them
        self._unparsed_header_bytes = 0  # bytes fed since, while its headers were incomplete
        self._messages = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        counted = self.guard.sockets.get(sock.fileno()) if sock is not None else None
        if counted is not None:
            counted.protocol = self
            self._counted = counted
        self._phase = _HEADERS
        self.guard.waiting[self] = None

    def data_received(self, data: bytes) -> None:
        messages = self._messages
        super().data_received(data)
        if self._parsing is _HEADERS and messages == self._messages:
            # All of it belongs to headers not complete yet (a header is seen by the callbacks
            # only once complete): bounded too, so one endless header line cannot pile up.
            self._unparsed_header_bytes += len(data)
            if self._unparsed_header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                self.send_400_response("Request headers too large.")
        self._follow(True)

    # llhttp's callbacks, for the phase and the header size
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._parsing = _HEADERS
        self._header_bytes = self._unparsed_header_bytes = 0
        self._messages += 1

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADER_BYTES:
            raise HeadersTooLarge

    def on_headers_complete(self) -> None:
        if len(self.pipeline) >= MAX_PIPELINED:
            raise TooManyPipelined
        super().on_headers_complete()
        self._parsing = _BODY
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            # The request's application task has not started yet: it finds the backoff.
            self.scope.setdefault("extensions", {})[EXTENSION] = self._backoff  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._parsing = None

    def send_400_response(self, msg: str) -> None:
        """A bad request behind one still being answered (llhttp parses pipelined bytes as
        they come) ends the connection without a word: a 400 written now would land in the
        middle of the answer in flight."""
        cycle = self.cycle
        if self.pipeline or (cycle is not None and not cycle.response_complete):
            self.transport.close()
            return
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        pause = self._backoff.pause()
        if pause and not self.transport.is_closing():
            # A refusal went out: read nothing more (pipelined requests wait in uvicorn's
            # queue, the rest in the kernel) until the pause is over; uvicorn goes on then.
            self.flow.pause_reading()
            self._enter(None)
            self.guard.waiting[self] = None  # evictable, like one waiting for a request
            self.guard.backed_off += 1
            self._paused = self.loop.call_later(pause, self._resume)
            return
        self._response_done()

    def _resume(self) -> None:
        self._paused = None
        self.guard.waiting.pop(self, None)
        self._response_done()

    def _response_done(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._follow(False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        self._enter(None)
        if self._evicted:
            self._evicted = False
            self.guard.evicting -= 1
        self._counted = None
        super().connection_lost(exc)

    # --------------------------------------------------------------- phases and timers

    def _follow(self, got_data: bool) -> None:
        """Track what the connection waits for after the parser has taken what came."""
        if self.transport.get_protocol() is not self:  # upgraded (WebSocket): no deadlines
            self._enter(None)
            return
        phase = self._request_phase()
        if phase is not self._phase:
            self._enter(phase)
        if (
            phase is _HEADERS
            and got_data
            and self._timer is None
            and (self._counted is None or self._counted._timer is None)
        ):
            # Part of a later request's headers came: the rest has header_timeout.
            self._timer = self.loop.call_later(self.guard.header_timeout, self.close_late)

    def _request_phase(self) -> str | None:
        """Headers while no request is in hand (idle, or part of the next one came), body while
        one arrives, None while a request is answered or more wait in uvicorn's queue."""
        if self.pipeline:
            return None
        if self._parsing is _BODY:
            return _BODY
        busy = self.cycle is not None and not self.cycle.response_complete
        return None if busy else _HEADERS

    def _enter(self, phase: str | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if phase is _HEADERS:
            self.guard.waiting[self] = None
        else:
            self.guard.waiting.pop(self, None)
            if self._counted is not None:
                self._counted.first_headers_arrived()
            if phase is _BODY:
                self._timer = self.loop.call_later(self.guard.body_timeout, self._body_late)
        self._phase = phase

    def close_late(self) -> None:
        """Headers did not arrive in time: close (nothing is being answered)."""
        self._timer = None
        if not self.transport.is_closing():
            self.guard.timed_out += 1
            self.transport.close()

    def _body_late(self) -> None:
        """A body did not arrive in time: 408 if nothing was answered yet, then close; the
        application sees a disconnect and its further sends are dropped."""
        self._timer = None
        if self.transport.is_closing():
            return
        self.guard.timed_out += 1
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_started:
                self.transport.write(TIMEOUT_RESPONSE)
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def evict(self) -> None:
        """Close this waiting connection to make room for a new one."""
        self._enter(None)
        self._evicted = True
        self.guard.evicting += 1
        self.guard.evicted += 1
        self.transport.abort()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to `guard`."""
    return type("GuardedProtocol", (GuardedProtocol,), {"guard": guard})


# ------------------------------------------------------------------- aborted uploads


class ClientGone(BaseException):
    """Raised into the application when the client left before its body was complete.

    A BaseException, like cancellation: the endpoints' `except Exception` must not turn
    it into an internal error; `quiet_aborted_uploads` catches it."""


def quiet_aborted_uploads(app: Any) -> Any:
    """ASGI wrapper: a disconnect before the request body is complete ends the request
    without an error log (nothing can be answered anyway)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        body_done = False

        async def receive_body() -> dict[str, Any]:
            nonlocal body_done
            message: dict[str, Any] = await receive()
            kind = message["type"]
            if kind == "http.request":
                if not message.get("more_body", False):
                    body_done = True
            elif kind == "http.disconnect" and not body_done:
                raise ClientGone
            return message

        try:
            await app(scope, receive_body, send)
        except ClientGone:
            log.info(
                "request ended before its body was complete (client gone or body timeout): %s %r",
                scope.get("method", "?"),
                scope.get("path", "?")[:100],
            )

    return guarded
