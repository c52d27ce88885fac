"""uvicorn embedded in the service's own event loop.

The listening socket is bound first, so the real port (for `--http-port 0`) is
known before the agent card that advertises it is built. uvicorn does not
install signal handlers here: the composition root owns SIGINT/SIGTERM and
the drain order (health goes non-200, in-flight requests finish, then the
listener closes).

Connection limits (gateway.limits.connections, docs/operations.md): the listening
socket counts connections and refuses or evicts past the cap at accept time; the
protocol is uvicorn's httptools (llhttp) one with header and body deadlines; the keep-alive
timeout is uvicorn's.

WebSockets (`websocket`, gateway.transports.websocket): without it uvicorn upgrades
nothing; with it, the transport's protocol serves upgraded connections, and their tasks
(`upgraded`) are the transport's to drain, not counted as requests in flight here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

from gateway.limits.backoff import pause_after_refusals
from gateway.limits.connections import (
    ConnectionGuard,
    GuardedListener,
    guarded_protocol,
    quiet_aborted_uploads,
)
from service.net.limits import HttpLimits, http_limits
from service.ops import logflood

log = logging.getLogger("gateway")


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # signals belong to the process's composition root


def bind(
    host: str,
    port: int,
    factory: type[socket.socket] = socket.socket,
    reuse_port: bool = False,
) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one), made by `factory`;
    `reuse_port`: SO_REUSEPORT, so worker processes share the port (the kernel spreads
    new connections over them)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on such sockets, and
    # without it Nagle + delayed ACKs add ~40 ms to every keep-alive response.
    sock = factory(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    def __init__(self, host: str, port: int, reuse_port: bool = False) -> None:
        try:
            self.sock: GuardedListener = bind(host, port, GuardedListener, reuse_port)  # type: ignore[assignment]
        except OSError as exc:
            raise OSError(
                f"cannot listen for HTTP on {host}:{port} ({exc.strerror or exc})"
            ) from None
        self.port: int = self.sock.getsockname()[1]
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.guard: ConnectionGuard | None = None
        self._log_summaries: asyncio.TimerHandle | None = None
        self.upgraded: set[asyncio.Task[Any]] = set()  # tasks serving WebSockets

    async def start(
        self,
        app,
        *,
        log_level: str = "warning",
        graceful_seconds: float = 5.0,
        ssl: dict[str, Any] | None = None,
        settings: Any = None,
        websocket: dict[str, Any] | None = None,
    ) -> None:
        """`ssl`: uvicorn's ssl_* options (service.auth.TlsFiles.uvicorn_options) for HTTPS.
        `settings`: where the connection limits come from (service.net.limits.http_limits;
        default: their defaults). `websocket`: uvicorn's ws* options
        (WebSocketTransport.uvicorn_options); None: no upgrades."""
        limits = http_limits(settings) if settings is not None else HttpLimits()
        logflood.install()
        guard = ConnectionGuard(
            limits.max_connections, limits.header_timeout, limits.body_timeout, tls=bool(ssl)
        )
        guard.start(asyncio.get_running_loop())
        self.guard = self.sock.guard = guard
        self._summarise_logs()
        config = uvicorn.Config(
            quiet_aborted_uploads(pause_after_refusals(app)),
            lifespan="off",
            log_config=None,
            log_level=log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=max(graceful_seconds, 0.1),  # type: ignore[arg-type]  # float is fine
            server_header=False,
            # The socket's peer is the client (docs/operations.md, `client_address`): no
            # X-Forwarded-For is trusted, from loopback either (uvicorn's default), and the
            # middleware that would read it is one layer less on every request.
            proxy_headers=False,
            http=guarded_protocol(guard),
            **(websocket or {"ws": "none"}),
            timeout_keep_alive=limits.keepalive_timeout,  # type: ignore[arg-type]  # float is fine
            **(ssl or {}),
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise OSError("the HTTP server stopped during startup")
            await asyncio.sleep(0.005)

    def _summarise_logs(self) -> None:
        """Every minute: the summaries of repeated log records (service.ops.logflood)."""
        logflood.flush()
        self._log_summaries = asyncio.get_running_loop().call_later(60, self._summarise_logs)

    def in_flight(self) -> int:
        """Requests being handled now (streams included; not the WebSockets' tasks)."""
        if self._server is None:
            return 0
        upgraded = self.upgraded
        return sum(1 for task in self._server.server_state.tasks if task not in upgraded)

    async def drain(self, seconds: float) -> None:
        """Wait (at most `seconds`) until no request is in flight; keep accepting meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        # uvicorn offers no event for "no requests in flight"; poll its task set.
        while self.in_flight() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Close the listener, let open responses finish (bounded), then return."""
        if self._log_summaries is not None:
            self._log_summaries.cancel()
            self._log_summaries = None
        if self._server is None or self._task is None:
            self.sock.close()
            return
        self._server.should_exit = True
        try:
            await self._task
        except Exception:  # pragma: no cover - already logged by uvicorn
            log.exception("HTTP server stopped with an error")
        logflood.flush(everything=True)
