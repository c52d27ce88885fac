"""JSON-RPC over WebSocket on the HTTP listener (`websocket_path`): one request per text
frame in, one answer frame per text frame out, each socket serving its requests
concurrently (session.Conversation; answers carry their request's id).

The handshake: service parameters may come once per socket in its headers (A2A-Version,
A2A-Extensions, the credential headers the card declares); a request's own
`serviceParameters` win. Credentials sent there are checked before the upgrade: wrong
ones are answered `401` with the HTTP bindings' challenges and no socket is opened; they
are then sent on with every request (so an expiring token expires on the socket too).
No credentials: each request carries its own.

The wire (uvicorn's sans-I/O protocol over the `websockets` package, `protocol()`):
pings every `websocket_ping_seconds`, a peer that does not answer in time is closed; no
compression. A message over `max_request_bytes` is refused from its frame header, never
held whole: the -32600 error frame (id null, naming the limit), then close 1009 (the
rest of that message cannot be skipped, so the socket cannot go on).

The drain: new handshakes are answered 503 once the gate closes; open streams end with
the resumable error (the engine does that); every socket is closed (1001) after its last
answer is written. An upgraded connection leaves the HTTP listener's header and body
deadlines behind (gateway.limits.connections); it still counts against its
`max_connections`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame as WireFrame
from websockets.frames import Opcode

from gateway.transports.session import (
    FORWARDED,
    Conversation,
    Frame,
    FramedJsonRpc,
    Link,
)
from service.auth.schemes import call_metadata
from service.calls.pipeline import CallerUnknown

log = logging.getLogger("service")

TRANSPORT = "websocket"  # the access log's binding
GOING_AWAY = 1001  # the server is draining
TOO_BIG = 1009
NOT_UTF8 = 1007
LINGER_SECONDS = 2.0  # after refusing a message: how long its rest is read and dropped
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'
DRAINING_BODY = b'{"error":"The server is shutting down; connect to another replica."}'

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class RefusingProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol; a message too large gets the JSON-RPC error
    frame before the close (1009), and the rest of it is read and dropped for a moment
    rather than left unread (closing with unread data would reset the connection, and the
    peer could lose the answer)."""

    refusal: bytes = b""  # the error frame's payload (set on the subclass, `protocol()`)
    linger: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self.linger is not None:  # refused: what still comes is dropped
            with contextlib.suppress(Exception):
                self.conn.receive_data(data)
            return
        super().data_received(data)

    def send_receive_event_to_app(self) -> None:
        """A text message that is not UTF-8 closes the socket (1007, as RFC 6455 asks)
        with one log line, where uvicorn would log a traceback."""
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                log.info("websocket: a text frame that is not UTF-8; closing the socket (1007)")
                self.conn.send_close(NOT_UTF8, "text frames must be UTF-8")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

    def handle_parser_exception(self) -> None:
        if not isinstance(self.conn.parser_exc, PayloadTooBig) or self.close_sent:
            super().handle_parser_exception()
            return
        self.transport.write(WireFrame(Opcode.TEXT, self.refusal).serialize(mask=False))
        self.transport.write(b"".join(self.conn.data_to_send()))  # the close frame (1009)
        self.close_sent = True
        self.queue.put_nowait({"type": "websocket.disconnect", "code": TOO_BIG, "reason": ""})
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.linger is not None:
            self.linger.cancel()
        super().connection_lost(exc)


def protocol(refusal: Frame) -> type[RefusingProtocol]:
    """The protocol class uvicorn instantiates per upgraded connection."""
    return type("RefusingProtocol", (RefusingProtocol,), {"refusal": refusal.payload})


class _Socket:
    """One open socket: its sender and its requests."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.conversation: Conversation | None = None
        self.closing = False

    async def write(self, frame: Frame) -> None:
        try:
            await self.send({"type": "websocket.send", "text": frame.payload.decode()})
        except OSError as exc:  # uvicorn's "client disconnected"
            raise ConnectionError(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        with contextlib.suppress(Exception):
            await self.send({"type": "websocket.close", "code": code, "reason": reason})


class WebSocketTransport:
    """The sockets at `path` of the HTTP app (`wrap`), and their drain hooks."""

    def __init__(
        self,
        rpc: FramedJsonRpc,
        path: str,
        *,
        max_in_flight: int,
        ping_seconds: float,
        ping_timeout_seconds: float,
        handlers: set[asyncio.Task[Any]] | None = None,
    ) -> None:
        self.rpc = rpc
        self.path = path
        self.max_in_flight = max_in_flight
        self.ping_seconds = ping_seconds
        self.ping_timeout_seconds = ping_timeout_seconds
        self.accepting = True
        self.sockets: set[_Socket] = set()
        # the tasks serving sockets (shared with the HTTP server, which leaves them to us)
        self.handlers: set[asyncio.Task[Any]] = handlers if handlers is not None else set()

    def uvicorn_options(self) -> dict[str, Any]:
        """uvicorn's ws_* options for this transport."""
        return {
            "ws": protocol(self.rpc.too_large()),
            "ws_max_size": self.rpc.max_frame_bytes,
            "ws_ping_interval": self.ping_seconds or None,
            "ws_ping_timeout": self.ping_timeout_seconds or None,
            "ws_per_message_deflate": False,
        }

    def wrap(self, app: App) -> App:
        """`app` with WebSocket connections at `path` served here (any other WebSocket goes
        to `app`, which refuses it)."""

        async def routed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "websocket" and scope["path"] == self.path:
                await self.serve(scope, receive, send)
            else:
                await app(scope, receive, send)

        return routed

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            if (await receive())["type"] != "websocket.connect":
                return
            link = await self._handshake(scope, send)
            if link is None:
                return
            await send({"type": "websocket.accept"})
            await self._converse(link, receive, send)
        except OSError:
            pass  # the peer is gone
        finally:
            self.handlers.discard(task)

    async def _handshake(self, scope: Scope, send: Send) -> Link | None:
        """The socket's Link, or None once refused (503 while draining, 401)."""
        if not self.accepting:
            await _deny(send, 503, DRAINING_BODY, [(b"retry-after", b"1")])
            return None
        pipeline = self.rpc.pipeline
        keys = pipeline.credential_keys
        wanted = FORWARDED | keys
        pairs = [
            (name, raw_value.decode("latin-1"))
            for raw_name, raw_value in scope["headers"]
            if (name := raw_name.decode("latin-1").lower()) in wanted
        ]
        parameters = {name: value for name, value in pairs}
        credentials = call_metadata((n, v) for n, v in pairs if n in keys)
        if credentials:
            try:
                await pipeline.authenticate(None, credentials)
            except CallerUnknown:
                challenges = pipeline.authenticator.challenges() if pipeline.authenticator else []
                headers = [(b"www-authenticate", c.encode("latin-1")) for c in challenges]
                await _deny(
                    send, 401, UNAUTHORIZED_BODY, [(b"cache-control", b"no-store")] + headers
                )
                return None
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else ""
        return Link(TRANSPORT, client=peer, parameters=parameters)

    async def _converse(self, link: Link, receive: Receive, send: Send) -> None:
        sock = _Socket(send)
        conversation = Conversation(self.rpc, link, sock.write, max_in_flight=self.max_in_flight)
        sock.conversation = conversation
        self.sockets.add(sock)
        try:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    break  # websocket.disconnect: the peer (or the server) closed it
                text = message.get("text")
                raw = text.encode() if text is not None else message.get("bytes") or b""
                conversation.received(raw)
        finally:
            self.sockets.discard(sock)
            await conversation.close()

    def in_flight(self) -> int:
        return sum(len(s.conversation.calls) for s in self.sockets if s.conversation is not None)

    def stop_accepting(self) -> None:
        self.accepting = False

    async def finish(self, seconds: float) -> None:
        """Wait (at most `seconds`) for every request received so far to be answered, then
        close every socket (1001)."""
        waiting = [s.conversation.finish() for s in self.sockets if s.conversation is not None]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), seconds)
        await self.close()

    async def close(self) -> None:
        """Close every socket (what is unanswered is stopped) and wait for their handlers."""
        self.accepting = False
        for sock in list(self.sockets):
            await sock.close(GOING_AWAY, "the server is shutting down")
        handlers = list(self.handlers)
        if handlers:
            _, pending = await asyncio.wait(handlers, timeout=LINGER_SECONDS)
            for task in pending:
                task.cancel()


async def _deny(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """Refuse the handshake with an HTTP response (no socket is opened)."""
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})
