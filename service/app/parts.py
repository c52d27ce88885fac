"""The service's parts, each an async context manager built from its settings: entering one
starts the part, leaving it closes the part. `Service.start` enters them in order on one
`AsyncExitStack`, so a startup that fails closes what was opened and a stop closes
everything in exactly the reverse order (after the drain, `service/app/drain.py`).

Every startup failure becomes one `StartupError` line naming the setting (`setting`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import pathlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Generic, TypeVar

import grpc

from gateway.health import probe_app
from gateway.invoker import Invoker
from gateway.server import HttpServer
from gateway.transports.redis_streams import RedisStreamsTransport
from gateway.transports.stdio import Pipes, StdioTransport
from gateway.transports.unix import UnixSocketTransport
from gateway.transports.websocket import WebSocketTransport
from service.agent import Agent
from service.app.config import ConfigError, Settings
from service.app.drain import RESPONSE_FLUSH_SECONDS
from service.app.housekeeping import Housekeeping
from service.app.ownership import LOCK_FILE, InUseError, Ownership
from service.app.workers import WORKER_ENV
from service.auth import TlsFiles
from service.engine.bus import EventBus
from service.engine.cluster import Cluster
from service.engine.files import FileArtifacts
from service.engine.limits import Slots
from service.engine.peers import Peers
from service.engine.redis_bus import RedisBus
from service.engine.registry import Engine
from service.engine.settings import ClusterSettings, open_bus, shares_ports
from service.net.limits import grpc_server_options
from service.net.redis_streams import public_url
from service.ops.looplag import LoopLag
from service.ops.readiness import Readiness
from service.permission.policy import policy_from_settings as permission_policy
from service.push import PushNotifications
from service.store import Store, open_store, redact_url
from service.store.blobs import LocalBlobStore
from service.telemetry import gather
from service.telemetry.settings import TelemetrySettings
from service.telemetry.setup import Installed, start_metrics_listener
from service.telemetry.setup import install as install_telemetry

log = logging.getLogger("service")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

T = TypeVar("T")


class StartupError(Exception):
    """The service cannot start; the message names the setting and the cause, in one line."""


@contextlib.contextmanager
def setting(key: str) -> Iterator[None]:
    """Turn a failure of one startup step into a StartupError naming `key`."""
    try:
        yield
    except (StartupError, ConfigError):
        raise
    except OSError as exc:
        raise StartupError(f"{key}: {os_reason(exc)}") from exc
    except Exception as exc:
        raise StartupError(f"{key}: {exc}") from exc


def os_reason(exc: OSError) -> str:
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


class Handoff(Generic[T]):
    """A part built before its place in the shutdown order (the HTTP socket, bound first so
    the card can name its port; push, built before the engine that reports commits to it).
    Entered where it is built, it closes the part there if startup fails before `place`;
    `place(stack)` moves the close to that point of the stack."""

    def __init__(self, part: T, close: Callable[[], Awaitable[object]]) -> None:
        self.part = part
        self._held = AsyncExitStack()
        self._held.push_async_callback(close)

    async def __aenter__(self) -> Handoff[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._held.aclose()

    def place(self, stack: AsyncExitStack) -> None:
        stack.push_async_exit(self._held.pop_all())


# ---------------------------------------------------------------- before anything else


@asynccontextmanager
async def data_claimed(s: Settings, ownership: Ownership) -> AsyncIterator[None]:
    """Lock the data directory (and a task database kept elsewhere) for this process, when
    this process will write there: before anything in it is opened, so restart recovery
    never touches another live server's tasks. InUseError names the owner."""
    try:
        _claim(s, ownership)
        yield
    finally:
        ownership.release()


def _claim(s: Settings, ownership: Ownership) -> None:
    if s.upstream:
        return  # proxy mode keeps no state
    data_dir = pathlib.Path(s.data_dir)
    db = (
        pathlib.Path(s.store_url[len("sqlite:") :].removeprefix("//"))
        if s.store_url.startswith("sqlite:")
        else None
    )
    db_inside = db is not None and db.parent.resolve() == data_dir.resolve()
    uses_dir = (
        db_inside
        or s.agent == "command"
        or (s.push_notifications and (s.push_queue == "local-file" or not s.push_secret_keys))
    )
    try:
        if uses_dir:
            ownership.claim(data_dir / LOCK_FILE, f"data directory {data_dir.resolve()}")
        if db is not None and not db_inside:
            ownership.claim(db.with_name(db.name + ".lock"), f"task database {db.resolve()}")
    except InUseError as exc:
        raise StartupError(f"{'data_dir' if uses_dir else 'store'}: {exc}") from None
    except OSError as exc:
        raise StartupError(
            f"data_dir: cannot create or lock {data_dir}: {exc.strerror or exc}"
        ) from None


@asynccontextmanager
async def telemetry_installed(
    s: TelemetrySettings, given: Installed | None, name: str, version: str
) -> AsyncIterator[Installed | None]:
    """Telemetry as configured (`given`: tests pass one in, with in-memory exporters); shut
    down last of the parts, so what the drain did is exported too."""
    installed = given
    if installed is None:
        with setting("telemetry"):
            installed = install_telemetry(s, service_name=name, service_version=version)
    try:
        yield installed
    finally:
        if installed is not None:
            await asyncio.to_thread(installed.shutdown, s.telemetry_shutdown_seconds)


@asynccontextmanager
async def loop_lag_measured(meter: LoopLag) -> AsyncIterator[LoopLag]:
    """The event loop's lag meter, waking on its timer until the service is closed."""
    meter.start()
    try:
        yield meter
    finally:
        meter.stop()


def http_bound(s: Settings) -> Handoff[HttpServer]:
    """The HTTP socket, bound before the gateway starts: the agent card must advertise the
    real port (--http-port 0). Its close moves to where the gateway starts."""
    with setting("http_port"):
        http = HttpServer(s.host, s.http_port, reuse_port=shares_ports(s))
    return Handoff(http, http.stop)


# ---------------------------------------------------------------- in-process mode


@asynccontextmanager
async def store_opened(s: Settings) -> AsyncIterator[Store]:
    with setting("store"):
        store = open_store(s.store_url, s.store_commit_interval_ms)
        try:
            await store.open()
        except Exception as exc:
            raise StartupError(f"store: cannot open {redact_url(s.store_url)} ({exc})") from exc
    try:
        yield store
    finally:
        await store.close()


def push_built(s: Settings, store: Store, orphan_seconds: float) -> Handoff[PushNotifications]:
    """Push notifications, built before the engine (which reports its commits to them) and
    started after recovery (so its events are pushed too): their close moves to the start."""
    with setting(push_setting(s)):
        push = PushNotifications.from_settings(s, store, s.data_dir, orphan_seconds=orphan_seconds)
    return Handoff(push, push.stop)


def push_setting(s: Settings) -> str:
    """The setting a push startup failure names."""
    return "push_redis_url" if s.push_queue == "redis-streams" else "push_queue"


def blob_store(s: Settings) -> LocalBlobStore:
    """Where file artifacts' bytes go: file_artifact_dir, else DATA_DIR/files (with the
    memory store, whose tasks end with the process, a temporary directory)."""
    if s.file_artifact_dir:
        return LocalBlobStore(s.file_artifact_dir)
    if s.store_url.startswith("memory:"):
        return LocalBlobStore.temporary()
    return LocalBlobStore(pathlib.Path(s.data_dir) / "files")


@asynccontextmanager
async def file_artifacts(
    s: Settings, blobs: LocalBlobStore, base_url: str
) -> AsyncIterator[FileArtifacts]:
    """Stored file artifacts (their URLs from the HTTP base); closing removes a temporary
    blob directory."""
    files = FileArtifacts(
        blobs,
        base_url=base_url,
        max_file_bytes=s.file_artifact_max_bytes,
        max_turn_bytes=s.file_artifacts_max_bytes_per_turn,
        local_urls=s.file_artifact_local_urls,
    )
    try:
        yield files
    finally:
        await files.close()


@asynccontextmanager
async def bus_opened(s: ClusterSettings) -> AsyncIterator[EventBus]:
    """In-process (one process), or Redis shared by every replica."""
    with setting("bus"):
        try:
            bus = await open_bus(s)
        except RuntimeError as exc:
            raise StartupError(f"bus: cannot reach {redact_url(s.bus)} ({exc})") from None
    try:
        yield bus
    finally:
        if isinstance(bus, RedisBus):
            await bus.close()


@asynccontextmanager
async def engine_and_peers(
    s: Settings,
    store: Store,
    agent: Agent,
    bus: EventBus,
    push: PushNotifications | None,
    files: FileArtifacts,
) -> AsyncIterator[tuple[Engine, Peers | None]]:
    """The engine and, with a Redis bus, the peers (several processes behave as one).
    Leaving the cluster on close: survivors need not wait a lease for our tasks. Its turns
    are stopped earlier, by the drain."""
    peers = None
    if isinstance(bus, RedisBus):  # built first: the engine is given them
        peers = Peers(Cluster(bus, s.lease_seconds, s.bus_prefix))
    engine = Engine(
        store,
        agent,
        bus=bus,
        on_commit=push.on_commit if push else None,
        event_pace=s.store_commit_interval_ms / 1000,
        files=files,
        permissions=permission_policy(s),
        turns=Slots(
            s.max_concurrent_turns,
            s.max_concurrent_turns_per_principal,
            ("max_concurrent_turns", "max_concurrent_turns_per_principal"),
            "turns",
        ),
        inactivity_timeout=s.turn_inactivity_timeout_seconds,
        max_turn_seconds=s.max_turn_seconds,
        peers=peers,
        first_event_grace=s.first_event_grace_ms / 1000,
        park_after=s.paused_turn_idle_seconds,
    )
    try:
        if peers is not None:
            with setting("bus"):
                await peers.start(engine)
        yield engine, peers
    finally:
        if peers is not None:
            await peers.cluster.stop()


def grpc_bound(s: Settings, tls: TlsFiles | None) -> tuple[grpc.aio.Server, int]:
    """The gRPC server with its port bound (services are added, then `grpc_serving`)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", s.max_request_bytes),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 1 if shares_ports(s) else 0),  # --workers
            # connection limits, keepalive, idle and age (service/net/limits.py)
            *grpc_server_options(s),
        ]
    )
    address = f"{s.host}:{s.grpc_port}"
    if s.grpc_port:  # find a taken port here: grpc would log its own error lines first
        reason = bind_reason(s.host, s.grpc_port, shares_ports(s))
        if reason:
            raise StartupError(f"grpc_port: cannot listen on {address} ({reason})")
    try:
        if tls is not None:
            port = server.add_secure_port(address, tls.grpc_credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        reason = bind_reason(s.host, s.grpc_port, shares_ports(s)) or "the port could not be bound"
        raise StartupError(f"grpc_port: cannot listen on {address} ({reason})")
    return server, port


def bind_reason(host: str, port: int, reuse_port: bool = False) -> str:
    """Why gRPC could not listen on host:port ('' if a bind works): grpc itself only says
    "Failed to bind", so try the bind here (`reuse_port`: as a worker sharing it)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind(infos[0][4])
    except OSError as exc:
        return exc.strerror or os.strerror(exc.errno or errno.EADDRINUSE)
    return ""


@asynccontextmanager
async def grpc_serving(server: grpc.aio.Server) -> AsyncIterator[grpc.aio.Server]:
    """Serving gRPC; the drain stops it first (answers already made get written), so its
    close here only matters when startup fails after it started."""
    with setting("grpc_port"):
        await server.start()
    try:
        yield server
    finally:
        await server.stop(RESPONSE_FLUSH_SECONDS)


@asynccontextmanager
async def housekeeping_running(housekeeping: Housekeeping) -> AsyncIterator[Housekeeping]:
    """Retention and idle-context eviction on their timers (the drain stops them first)."""
    housekeeping.start()
    try:
        yield housekeeping
    finally:
        await housekeeping.stop()


# ---------------------------------------------------------------- both modes


@asynccontextmanager
async def stdio_claimed() -> AsyncIterator[Pipes]:
    """stdin and stdout taken for the stdio transport, first of all (nothing else may write
    to stdout from here on: descriptor 1 is stderr until the very end)."""
    with setting("stdio"):
        pipes = Pipes.claim()
    try:
        yield pipes
    finally:
        pipes.release()


@asynccontextmanager
async def stdio_serving(transport: StdioTransport) -> AsyncIterator[StdioTransport]:
    """Requests read from stdin; at close (after the drain) what is unanswered is stopped."""
    transport.start()
    log.info("JSON-RPC on stdin/stdout (answers on stdout, the log on stderr)")
    try:
        yield transport
    finally:
        await transport.close()


@asynccontextmanager
async def unix_socket_serving(transport: UnixSocketTransport) -> AsyncIterator[UnixSocketTransport]:
    """The socket file made and listening; at close its connections are closed and the
    file removed."""
    with setting("unix_socket"):
        await transport.start()
    log.info("JSON-RPC on unix socket %s (mode %04o)", transport.path, transport.mode)
    try:
        yield transport
    finally:
        await transport.close()


@asynccontextmanager
async def websocket_serving(
    transport: WebSocketTransport, url: str
) -> AsyncIterator[WebSocketTransport]:
    """The WebSocket transport (served by the HTTP listener); at close its sockets are
    closed (1001) before the listener stops."""
    log.info("JSON-RPC over WebSocket at %s", url)
    try:
        yield transport
    finally:
        await transport.close()


@asynccontextmanager
async def redis_streams_serving(
    transport: RedisStreamsTransport,
) -> AsyncIterator[RedisStreamsTransport]:
    """The consumer group joined and reading; at close what is unanswered stays pending
    for another replica."""
    where = public_url(transport.url)
    with setting("redis_streams_url"):
        try:
            await transport.start()
        except RuntimeError as exc:
            raise StartupError(f"redis_streams_url: cannot use {where} ({exc})") from None
    log.info(
        "JSON-RPC on Redis Streams %s: stream %s, group %s, consumer %s",
        where,
        transport.stream,
        transport.group,
        transport.consumer,
    )
    try:
        yield transport
    finally:
        await transport.close()


@asynccontextmanager
async def invoker_open(invoker: Invoker) -> AsyncIterator[Invoker]:
    """What the gateway calls: the API in process, or the upstream (its channel closed)."""
    try:
        yield invoker
    finally:
        await invoker.close()


@asynccontextmanager
async def probes_serving(
    s: Settings, is_serving: Callable[[], bool], readiness: Readiness
) -> AsyncIterator[HttpServer]:
    """probe_port: the probes alone, plaintext, no client certificate (for kubelet and load
    balancers when mTLS is on)."""
    with setting("probe_port"):
        probes = HttpServer(s.probe_host, s.probe_port)
    try:
        with setting("probe_port"):
            await probes.start(probe_app(is_serving, readiness), graceful_seconds=1.0, settings=s)
        log.info("health probes (plaintext) listening on %s:%d", s.probe_host, probes.port)
        yield probes
    finally:
        await probes.stop()


@asynccontextmanager
async def readiness_checked(
    readiness: Readiness, on_change: Callable[[bool], Awaitable[None]]
) -> AsyncIterator[Readiness]:
    """The readiness checks, once now and then on their loop (the drain stops them first)."""
    try:
        await readiness.start(on_change)
        yield readiness
    finally:
        await readiness.stop()


@asynccontextmanager
async def metrics_listening(
    installed: Installed | None, host: str, port: int
) -> AsyncIterator[None]:
    """Prometheus text on its own plaintext listener (`metrics_port`)."""
    with setting("metrics_port"):
        server: Any = start_metrics_listener(installed, host, port)
    try:
        yield
    finally:
        server.shutdown()


def metrics_shared() -> bool:
    """In a worker of --workers with metrics on: its metrics are read by every scrape of the
    service (service/telemetry/gather.py) and the parent owns `metrics_port`."""
    return bool(os.environ.get(gather.DIR_ENV)) and bool(os.environ.get(WORKER_ENV))


def metrics_render(s: Settings, installed: Installed | None) -> Callable[[], bytes] | None:
    """What the gateway's GET /metrics serves: this process's metrics, or under --workers
    every worker's, labelled `worker`; None when metrics are off or on `metrics_port`."""
    if installed is None or not s.metrics_endpoint or s.metrics_port:
        return None
    if metrics_shared():
        return gather.Workers(os.environ[gather.DIR_ENV], s.workers).render
    return installed.metrics_text


@asynccontextmanager
async def worker_metrics_serving(installed: Installed) -> AsyncIterator[None]:
    """A worker's own metrics on its private socket, for the scrapes of the whole service."""
    path = gather.socket_path(os.environ[gather.DIR_ENV], os.environ[WORKER_ENV])
    with setting("metrics_endpoint"):
        own = gather.OwnText(path, installed.metrics_text)
    try:
        yield
    finally:
        own.close()
