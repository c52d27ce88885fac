"""The composition root: from the loaded settings, builds store, engine, API, gRPC server (with
health and reflection) and, when enabled, the HTTP gateway; owns startup, drain
and shutdown. Nothing else constructs these parts.

Startup takes the data directory's lock before anything in it is opened (so
restart recovery never touches another live server's tasks); every startup
failure becomes one `StartupError` line naming the setting. Shutdown drains:
health goes non-serving at once, new calls are still taken for
`drain_grace_seconds` (load balancers notice), then refused with UNAVAILABLE /
503 + Retry-After; running turns get up to `drain_seconds`; then open streams
end with an UNAVAILABLE error that says they can be resumed, turns still running
are stopped and their tasks settle FAILED, and everything is committed before
the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import pathlib
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer
from starlette.types import ASGIApp

from gateway.app import build_app
from gateway.health import probe_app
from gateway.hsts import HstsMiddleware
from gateway.invoker import GatedInvoker, GrpcInvoker, InProcessInvoker, Invoker
from gateway.server import HttpServer
from gateway.telemetry import TelemetryMiddleware
from gateway.unknown_fields import REJECT
from gen import a2a_pb2 as pb
from service.agent import Agent, load_agent
from service.agents.command import program_environment
from service.api import A2AApi
from service.app.config import ConfigError, Settings, secret_files, secrets
from service.app.housekeeping import Housekeeping
from service.app.ownership import LOCK_FILE, InUseError, Ownership
from service.auth import Authenticator, TlsFiles
from service.auth.settings import advertised, authenticator_from, startup_warnings, tls_from
from service.calls.access import AccessLog
from service.calls.admission import admission
from service.calls.configured import load_interceptors
from service.calls.pipeline import Interceptor, Pipeline
from service.cards.card import CardBuilder, Cards, interface
from service.cards.signing import CardSigner, SignedCards, signer_from_settings
from service.engine.bus import EventBus
from service.engine.cluster import Cluster
from service.engine.files import FileArtifacts
from service.engine.limits import RateLimiter, Slots
from service.engine.peers import Peers
from service.engine.redis_bus import RedisBus
from service.engine.registry import Engine
from service.engine.retention import (
    PurgeHook,
    TaskRetention,
    parse_duration,
    purge_orphans,
    sweep_interval,
)
from service.engine.settings import open_bus, shares_ports
from service.grpc_binding import SERVICE, add_servicer, make_servicer
from service.inputs.policy import policy_from_settings
from service.inputs.workspace import StoreContextLookup
from service.net import logs
from service.net.limits import CallLimit, grpc_server_options, raise_nofile_limit
from service.net.readiness import Readiness, from_health
from service.permission.policy import policy_from_settings as permission_policy
from service.protocol.admission import Gate
from service.protocol.errors import UnavailableError
from service.push import PushNotifications
from service.push.dispatcher import ORPHAN_SECONDS
from service.store import Scope, Store, is_shared, open_store, redact_url
from service.store.blobs import LocalBlobStore
from service.telemetry.setup import Installed, start_metrics_listener
from service.telemetry.setup import install as install_telemetry

log = logging.getLogger("service")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"  # same messages as v1alpha, newer name
STREAM_SHUTDOWN_MESSAGE = (
    "The server is shutting down; this stream ended before its task did. Resume it with "
    "SubscribeToTask (on HTTP, send Last-Event-ID with the id of the last event received)."
)
RESPONSE_FLUSH_SECONDS = 2.0  # after the drain: time for answers already made to be written
# After SIGTERM, how long past `drain_seconds` closing the parts may take before the process
# gives up on the one that is stuck and exits 1 (naming it), rather than hang until a KILL.
STOP_OVERRUN_SECONDS = 8.0
ORPHAN_MARGIN_SECONDS = 10.0  # after max_turn_seconds: the failed turn's commit


class StartupError(Exception):
    """The service cannot start; the message names the setting and the cause, in one line."""


@contextlib.contextmanager
def _setting(key: str) -> Iterator[None]:
    """Turn a failure of one startup step into a StartupError naming `key`."""
    try:
        yield
    except (StartupError, ConfigError):
        raise
    except OSError as exc:
        raise StartupError(f"{key}: {_os_reason(exc)}") from exc
    except Exception as exc:
        raise StartupError(f"{key}: {exc}") from exc


def _os_reason(exc: OSError) -> str:
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def _bind_reason(host: str, port: int, reuse_port: bool = False) -> str:
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


def orphan_cursor_seconds(s: Settings) -> float:
    """How long a push cursor may wait for its new task to be stored. A task is stored at
    its agent's first event; with `max_turn_seconds` the first turn ends (FAILED if need
    be) within it, so a task still not stored a margin later never will be."""
    if s.max_turn_seconds > 0:
        return s.max_turn_seconds + ORPHAN_MARGIN_SECONDS
    return ORPHAN_SECONDS


def build_agent(settings: Settings) -> Agent:
    if settings.agent == "command":
        workspaces = f"{settings.data_dir}/workspaces"
        with _setting("command_env"):
            env = program_environment(settings.command_env, os.environ, secret_files(settings))
        return load_agent(
            "command",
            argv=settings.command,
            workspace_root=workspaces,
            output_root=f"{settings.data_dir}/outputs",
            kill_grace_seconds=settings.command_grace_seconds,
            approval=settings.command_approval,
            env=env,
        )
    return load_agent(settings.agent)


@dataclass
class Service:
    settings: Settings
    store: Store | None = None
    engine: Engine | None = None
    api: A2AApi | None = None
    cards: Cards | None = None
    grpc_server: grpc.aio.Server | None = None
    health: HealthServicer | None = None
    grpc_port: int = 0
    http_port: int = 0
    http: HttpServer | None = None
    invoker: Invoker | None = None
    push: PushNotifications | None = None
    files: FileArtifacts | None = None  # stored file artifacts (in-process mode)
    bus: EventBus | None = None
    peers: Peers | None = None  # several processes on a shared store and bus
    signer: CardSigner | None = None  # None: cards are not signed
    auth: Authenticator | None = None  # None: authentication is off
    tls: TlsFiles | None = None
    serving: bool = False  # what both health checks report
    readiness: Readiness = field(default_factory=Readiness)  # the parts calls need, checked
    access: AccessLog | None = None  # None: no access log
    pipeline: Pipeline | None = None  # what every call runs, on every binding (service.calls)
    rate_limit: RateLimiter | None = None  # rate_limit_per_principal (None: off)
    probes: HttpServer | None = None  # probe_port: /health, /health/live, /health/ready alone
    probe_port: int = 0
    gate: Gate = field(default_factory=Gate)  # closed: new calls are refused (draining)
    ownership: Ownership = field(default_factory=Ownership)
    # Retention: awaited with the (scope, task id)s of every purged batch, to release what
    # else is kept per task (e.g. stored files); the root or its caller adds to it.
    purge_hooks: list[PurgeHook] = field(default_factory=list)
    housekeeping: Housekeeping = field(default_factory=Housekeeping)
    telemetry: Installed | None = None  # None: telemetry is off (service/telemetry)
    _metrics_server: Any = None  # the /metrics listener on metrics_port
    _started: bool = False  # start() completed: there may be callers to drain
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)
    stop_phase: str = ""  # what stop() is doing now (named if it overruns)

    async def start(self) -> None:
        """Start everything or nothing: StartupError (or ConfigError) names what failed."""
        s = self.settings
        raise_nofile_limit()  # descriptors for the connection caps and the reserve
        logs.protect(secrets(s))  # no configured credential is ever written to the log
        self.access = AccessLog() if s.access_log else None
        try:
            self._claim_data()  # before anything in the data directory is opened
            try:  # unusable credentials or TLS files: before any listener
                self.auth = authenticator_from(s)
                self.tls = tls_from(s)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            for warning in startup_warnings(s, self.auth, self.tls):
                log.warning("%s", warning)
            if self.telemetry is None:  # tests pass one in, with in-memory exporters
                with _setting("telemetry"):  # before the parts that record into it are built
                    self.telemetry = install_telemetry(
                        s, service_name=s.name, service_version=s.version
                    )
            with _setting("agent"):
                agent = build_agent(s)
            if s.http_port >= 0:
                # Bound first: the agent card must advertise the real port (--http-port 0).
                with _setting("http_port"):
                    self.http = HttpServer(s.host, s.http_port, reuse_port=shares_ports(s))
                self.http_port = self.http.port
            if self.auth is not None and self.auth.jwt is not None:
                await self.auth.jwt.keys.prime()
            with _setting("call_interceptors"):
                configured = load_interceptors(s.call_interceptors)
            self.pipeline = self._pipeline(configured)
            if s.upstream:
                self.cards = self._cards(agent)
                self.invoker = GatedInvoker(GrpcInvoker(s.upstream, SERVICE), self.gate)
            else:
                await self._start_core(agent)
                assert self.api is not None
                self.invoker = InProcessInvoker(self.api, SERVICE)
            if self.http is not None:
                with _setting("http_port"):
                    await self._start_gateway()
            if s.probe_port >= 0:
                with _setting("probe_port"):
                    await self._start_probes()
            await self.readiness.start(self._readiness_changed)
            if s.metrics_endpoint and s.metrics_port:
                with _setting("metrics_port"):
                    self._metrics_server = start_metrics_listener(
                        self.telemetry, s.host, s.metrics_port
                    )
        except BaseException:
            await self.stop()
            raise
        self.serving = True
        self._started = True
        if self.health is not None:
            await self._readiness_changed(self.readiness.ready)

    def _check_readiness(self) -> None:
        """The readiness seam: one check per part every call needs. A store, bus or queue
        implementation is checked through its own seam's cheapest read, so any new one (a
        PostgreSQL store, a Redis bus) is covered once it is wired here."""
        store, push = self.store, self.push
        for name, part in (("store", store), ("bus", self.bus)):
            health = getattr(part, "health", None)  # a shared store or bus says what is down
            if health is not None:
                self.readiness.add(name, from_health(health))
            elif name == "store" and store is not None:
                self.readiness.add("store", lambda: store.get(Scope(), "readiness-check"))
        if push is not None:
            self.readiness.add(
                "push_queue", lambda: push.queue.cursors(("", "", "readiness-check"))
            )

    async def _readiness_changed(self, ready: bool) -> None:
        """gRPC health follows readiness while serving (the drain sets NOT_SERVING itself)."""
        if self.health is None or not self.serving or self._stopped.is_set():
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self._set_health(status)

    def _pipeline(self, configured: Sequence[Interceptor] = ()) -> Pipeline:
        """What every call runs on every binding: authentication, then (in-process) the drain
        gate, the caller's rate limit, the version and required extensions. A proxy checks
        only who calls: its upstream admits the call (its drain: GatedInvoker). `configured`
        (call_interceptors) run after those, in both."""
        s = self.settings
        if s.upstream:
            steps = admission(None, check_version=False)
        else:
            if s.rate_limit_per_principal:
                self.rate_limit = RateLimiter(s.rate_limit_per_principal, s.rate_limit_burst)
            steps = admission(self.gate, self.rate_limit, tuple(s.required_extensions))
        return Pipeline(
            authenticator=self.auth,
            interceptors=[*steps, *configured],
            access=self.access,
            telemetry=self.telemetry.telemetry if self.telemetry is not None else None,
            forward_credentials=bool(s.upstream),
        )

    async def _start_probes(self) -> None:
        """probe_port: the probes alone, plaintext, no client certificate (for kubelet and
        load balancers when mTLS is on)."""
        s = self.settings
        self.probes = HttpServer(s.probe_host, s.probe_port)
        self.probe_port = self.probes.port
        await self.probes.start(
            probe_app(lambda: self.serving, self.readiness),
            graceful_seconds=1.0,
            settings=s,
        )
        log.info("health probes (plaintext) listening on %s:%d", s.probe_host, self.probe_port)

    async def _start_gateway(self) -> None:
        s = self.settings
        assert self.http is not None and self.cards is not None and self.invoker is not None
        app: ASGIApp = build_app(
            invoker=self.invoker,
            service=SERVICE,
            card=self.cards.public_card(),
            is_serving=lambda: self.serving,
            card_max_age=s.card_max_age,
            keepalive_seconds=s.sse_keepalive_seconds,
            max_body_bytes=s.max_request_bytes,
            jwks=self.signer.jwks()
            if self.signer is not None and self.signer.keys and s.card_jwks_path
            else None,
            jwks_path=s.card_jwks_path,
            pipeline=self.pipeline,
            files=self.api,  # None in proxy mode: the files live with the upstream
            reject_unknown_fields=s.json_unknown_fields == REJECT,
            readiness=self.readiness,
            metrics=self.telemetry.metrics_text
            if self.telemetry is not None and s.metrics_endpoint and not s.metrics_port
            else None,
            rate_limit=self.rate_limit,
        )
        if self.telemetry is not None:
            app = TelemetryMiddleware(app, self.telemetry.telemetry)
        if self.tls is not None and s.tls_hsts_max_age_seconds > 0:
            app = HstsMiddleware(app, s.tls_hsts_max_age_seconds)  # outermost: every response
        level = "warning" if s.log_level.upper() in ("DEBUG", "INFO") else s.log_level
        await self.http.start(
            app,
            log_level=level,
            graceful_seconds=max(1.0, s.drain_seconds),
            ssl=self.tls.uvicorn_options() if self.tls is not None else None,
            settings=s,
        )
        mode = f"proxy to {s.upstream}" if s.upstream else "in-process"
        log.info(
            "HTTP gateway (JSON-RPC, REST, agent card) listening on %s:%d (%s%s)",
            s.host,
            self.http_port,
            mode,
            _security_note(self.auth, self.tls),
        )

    def _claim_data(self) -> None:
        """Lock the data directory (and a task database kept elsewhere) for this process,
        when this process will write there; InUseError names the owner."""
        s = self.settings
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
                self.ownership.claim(data_dir / LOCK_FILE, f"data directory {data_dir.resolve()}")
            if db is not None and not db_inside:
                self.ownership.claim(
                    db.with_name(db.name + ".lock"), f"task database {db.resolve()}"
                )
        except InUseError as exc:
            raise StartupError(f"{'data_dir' if uses_dir else 'store'}: {exc}") from None
        except OSError as exc:
            raise StartupError(
                f"data_dir: cannot create or lock {data_dir}: {exc.strerror or exc}"
            ) from None

    async def _start_core(self, agent: Agent) -> None:
        """Store, engine, API and the gRPC server (with health and reflection)."""
        s = self.settings
        with _setting("store"):
            self.store = open_store(s.store_url, s.store_commit_interval_ms)
            try:
                await self.store.open()
            except Exception as exc:
                raise StartupError(
                    f"store: cannot open {_safe_store(s.store_url)} ({exc})"
                ) from exc
        push_key = "push_redis_url" if s.push_queue == "redis-streams" else "push_queue"
        if s.push_notifications:
            with _setting(push_key):
                self.push = PushNotifications.from_settings(
                    s, self.store, s.data_dir, orphan_seconds=orphan_cursor_seconds(s)
                )
        blobs = self._blob_store()
        self.files = self._file_artifacts(blobs)
        # What a process killed mid-write left: half-written blobs, configs of tasks that
        # were never stored (a server from before they were written together).
        await blobs.sweep_tmp()
        with _setting("store"):
            await purge_orphans(self.store)
        with _setting("bus"):
            try:
                # In-process (one process), or Redis shared by every replica.
                self.bus = await open_bus(s)
            except RuntimeError as exc:
                raise StartupError(f"bus: cannot reach {_safe_store(s.bus)} ({exc})") from None
        if isinstance(self.bus, RedisBus):  # several processes behave as one
            self.peers = Peers(Cluster(self.bus, s.lease_seconds, s.bus_prefix))
        self.engine = Engine(
            self.store,
            agent,
            bus=self.bus,
            on_commit=self.push.on_commit if self.push else None,
            event_pace=s.store_commit_interval_ms / 1000,
            files=self.files,
            permissions=permission_policy(s),
            turns=Slots(
                s.max_concurrent_turns,
                s.max_concurrent_turns_per_principal,
                ("max_concurrent_turns", "max_concurrent_turns_per_principal"),
                "turns",
            ),
            inactivity_timeout=s.turn_inactivity_timeout_seconds,
            max_turn_seconds=s.max_turn_seconds,
            peers=self.peers,
        )
        if self.peers is not None:
            with _setting("bus"):
                await self.peers.start(self.engine)
        lost = await self.engine.recover()
        if lost:
            log.warning(
                "marked %d task(s) FAILED that were running when the server last stopped", lost
            )
        if self.push is not None:
            with _setting(push_key):
                await self.push.start()  # after recover: its events are pushed too
        self._check_readiness()

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
            reason = _bind_reason(s.host, s.grpc_port, shares_ports(s))
            if reason:
                raise StartupError(f"grpc_port: cannot listen on {address} ({reason})")
        try:
            if self.tls is not None:
                self.grpc_port = server.add_secure_port(address, self.tls.grpc_credentials())
            else:
                self.grpc_port = server.add_insecure_port(address)
        except RuntimeError:
            self.grpc_port = 0
        if not self.grpc_port:
            reason = (
                _bind_reason(s.host, s.grpc_port, shares_ports(s)) or "the port could not be bound"
            )
            raise StartupError(f"grpc_port: cannot listen on {address} ({reason})")
        self.cards = self._cards(agent)
        self.api = A2AApi(
            self.engine,
            self.cards,
            push_notifications=s.push_notifications,
            push=self.push,
            inputs=policy_from_settings(
                s,
                self.cards.public_card(),
                StoreContextLookup(self.engine),
                # every tenant's stored files too: no file:// part may read them
                denied=[s.data_dir, str(blobs.root), *secret_files(s)],
            ),
            streams=Slots(
                0,
                s.max_streams_per_principal,
                ("max_streams_per_principal", "max_streams_per_principal"),
                "streams",
            ),
        )
        assert self.pipeline is not None
        add_servicer(
            make_servicer(self.api, self.pipeline, CallLimit(s.grpc_max_concurrent_calls)), server
        )
        self.health = HealthServicer()
        add_servicer(self.health, server, service=health_pb2.DESCRIPTOR.services_by_name["Health"])
        _enable_reflection(
            server, (SERVICE.full_name, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        )
        with _setting("grpc_port"):
            await server.start()
        self.grpc_server = server
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)  # until all is up
        self._start_housekeeping(agent, blobs)
        if is_shared(s.store_url) and not s.file_artifact_dir:  # said once all else is up
            log.warning(
                "file_artifact_dir is not set: stored file artifacts are kept in %s on this "
                "host only, and a replica on another host answers 404 for them. Set "
                "file_artifact_dir to a directory every replica mounts (README: Scale-out).",
                blobs.root,
            )
        log.info(
            "gRPC A2A service listening on %s:%d (store %s, agent %s%s)",
            s.host,
            self.grpc_port,
            _safe_store(s.store_url),
            s.agent,
            _security_note(self.auth, self.tls),
        )

    def _http_base(self) -> str:
        """The base URL clients reach the HTTP gateway at ('' when there is none)."""
        s = self.settings
        if s.public_url:
            return s.public_url.rstrip("/")
        if self.http is None:
            return ""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{_url_host(s.host)}:{self.http_port}"

    def _file_artifacts(self, blobs: LocalBlobStore) -> FileArtifacts:
        s = self.settings
        return FileArtifacts(
            blobs,
            base_url=self._http_base(),
            max_file_bytes=s.file_artifact_max_bytes,
            max_turn_bytes=s.file_artifacts_max_bytes_per_turn,
            local_urls=s.file_artifact_local_urls,
        )

    def _blob_store(self) -> LocalBlobStore:
        """Where file artifacts' bytes go: file_artifact_dir, else DATA_DIR/files (with the
        memory store, whose tasks end with the process, a temporary directory)."""
        s = self.settings
        if s.file_artifact_dir:
            return LocalBlobStore(s.file_artifact_dir)
        if s.store_url.startswith("memory:"):
            return LocalBlobStore.temporary()
        return LocalBlobStore(pathlib.Path(s.data_dir) / "files")

    def _start_housekeeping(self, agent: Agent, blobs: LocalBlobStore) -> None:
        """Retention (task_retention) and idle-context eviction (context_idle_timeout)."""
        s = self.settings
        assert self.store is not None and self.engine is not None and self.api is not None
        engine = self.engine
        keep = parse_duration(s.task_retention, "task_retention")
        if keep:

            async def release_files(purged: list[tuple[Scope, str]]) -> None:
                for scope, task_id in purged:  # stored file artifacts go with their task
                    await engine.release_files(scope, task_id)

            retention = TaskRetention(
                self.store, keep, [release_files, *self.purge_hooks], leftovers=[blobs.sweep_tmp]
            )
            self.housekeeping.add("task retention", sweep_interval(keep), retention.sweep)
        idle = parse_duration(s.context_idle_timeout, "context_idle_timeout")
        if idle:
            inputs = self.api.inputs
            evict_workdirs = getattr(agent, "evict_idle_contexts", None)

            async def evict() -> None:
                if inputs is not None:
                    inputs.workspaces.evict_idle(idle)
                if evict_workdirs is not None:  # the command agent's context directories
                    await evict_workdirs(idle, engine.active_contexts())

            self.housekeeping.add("idle context eviction", sweep_interval(idle), evict)
        self.housekeeping.start()

    def _interfaces(self) -> list[pb.AgentInterface]:
        """What is really served, preferred first: JSON-RPC (what most clients try first),
        HTTP+JSON, then gRPC as bare host:port. In proxy mode gRPC is listed only when
        its public address is configured (the upstream may be private)."""
        s = self.settings
        interfaces = []
        if self.http is not None:
            base = self._http_base()
            interfaces += [interface(base, "JSONRPC"), interface(base, "HTTP+JSON")]
        if s.upstream:
            if s.grpc_public_address:
                interfaces.append(interface(s.grpc_public_address, "GRPC"))
        else:
            interfaces.append(
                interface(s.grpc_public_address or f"{_url_host(s.host)}:{self.grpc_port}", "GRPC")
            )
        return interfaces

    def _cards(self, agent: Agent) -> Cards:
        """The card builder; with card signing configured, its cards come out signed."""
        builder = self._card_builder(agent)
        base = next((i.url for i in self._interfaces() if i.protocol_binding == "JSONRPC"), "")
        self.signer = signer_from_settings(self.settings, base if self.http is not None else "")
        return builder if self.signer is None else SignedCards(builder, self.signer)

    def _card_builder(self, agent: Agent) -> CardBuilder:
        s = self.settings
        interfaces = self._interfaces()
        security = advertised(self.auth, self.tls)
        provider = None
        if s.provider_organization:
            provider = {"organization": s.provider_organization, "url": s.provider_url}
        return CardBuilder(
            name=s.name,
            description=s.description,
            version=s.version,
            agent=agent,
            interfaces=interfaces,
            push_notifications=s.push_notifications,
            provider=provider,
            documentation_url=s.documentation_url,
            skills=s.skills,
            input_modes=s.input_modes,
            output_modes=s.output_modes,
            extensions=[{"uri": u, "required": True} for u in s.required_extensions],
            extended_card=s.extended_card or s.extended_skills is not None,  # configured -> offered
            extended_skills=s.extended_skills,
            security_schemes=security.security_schemes() if security is not None else None,
            security_requirements=security.security_requirements()
            if security is not None
            else None,
        )

    async def _set_health(self, status: int) -> None:
        """The whole server ("") and the A2A service; the health service itself always
        answers, so a checker tells "not ready" from "not there"."""
        assert self.health is not None
        for name in ("", SERVICE.full_name):
            await self.health.set(name, status)

    async def stop(self) -> None:
        """Drain, then stop (see the module docstring for the order)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.serving = False
        self.stop_phase = "stopping the readiness checks"
        await self.readiness.stop()
        self.stop_phase = "stopping housekeeping"
        await self.housekeeping.stop()
        if self.health is not None:
            await self.health.enter_graceful_shutdown()  # every service name: NOT_SERVING
        loop = asyncio.get_running_loop()
        drain = self.settings.drain_seconds
        deadline = loop.time() + drain
        grace = min(self.settings.drain_grace_seconds, drain)
        self.stop_phase = "draining"
        if grace > 0 and self._started:
            await asyncio.sleep(grace)  # load balancers see the health change; calls still served
        self.gate.close()
        while self._busy() and loop.time() < deadline:  # noqa: ASYNC110 - no event covers both servers
            await asyncio.sleep(0.05)
        if isinstance(self.invoker, GatedInvoker):  # proxy mode: the relayed streams
            self.invoker.end_streams(UnavailableError(STREAM_SHUTDOWN_MESSAGE, retry_after=1))
        if self.engine is not None:
            ended = self.engine.end_streams(
                UnavailableError(STREAM_SHUTDOWN_MESSAGE, retry_after=1)
            )
            self.stop_phase = "stopping running turns"
            stopped = await self.engine.shutdown()
            if ended or stopped:
                log.info(
                    "shutdown: ended %d open stream(s); %d running task(s) stopped and marked FAILED",
                    ended,
                    stopped,
                )
        self.stop_phase = "writing the last answers"
        flushing = []
        if self.grpc_server is not None:
            flushing.append(self.grpc_server.stop(RESPONSE_FLUSH_SECONDS))
        if self.http is not None:
            flushing.append(self.http.drain(RESPONSE_FLUSH_SECONDS))
        await asyncio.gather(*flushing)
        self.stop_phase = "closing the listeners"
        if self.http is not None:
            await self.http.stop()
        if self.probes is not None:
            await self.probes.stop()
        if self.invoker is not None:
            await self.invoker.close()
        self.stop_phase = "stopping push delivery"
        if self.push is not None:
            await self.push.stop()
        self.stop_phase = "leaving the cluster"
        if self.peers is not None:
            await self.peers.cluster.stop()  # survivors need not wait a lease for our tasks
        self.stop_phase = "closing the bus"
        if isinstance(self.bus, RedisBus):
            await self.bus.close()
        self.stop_phase = "closing the task store"
        if self.store is not None:
            await self.store.close()
        if self.files is not None:
            await self.files.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        self.stop_phase = "flushing telemetry"
        if self.telemetry is not None:  # last: what the drain did is exported too
            await asyncio.to_thread(self.telemetry.shutdown)
        self.ownership.release()
        if self._started:
            log.info("stopped")

    async def dependency_problems(self) -> dict[str, str]:
        """What is down among the parts every call needs, by name (a fresh readiness check)."""
        await self.readiness.refresh()
        return dict(self.readiness.failing)

    def _busy(self) -> bool:
        """Work a drain waits for: running turns, and HTTP requests in flight."""
        if self.engine is not None and self.engine.busy():
            return True
        return self.http is not None and self.http.in_flight() > 0


def _enable_reflection(server: grpc.aio.Server, service_names: tuple[str, ...]) -> None:
    """Server reflection under both names: v1alpha (grpcurl, older tools) and v1 (newer
    tools). The two protocols have identical messages, so one servicer serves both."""
    names = (*service_names, reflection.SERVICE_NAME, REFLECTION_V1)
    servicer = ReflectionServicer(names)
    reflection.enable_server_reflection(names, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": handler}),)
    )


def _security_note(auth: Authenticator | None, tls: TlsFiles | None) -> str:
    schemes = ", ".join(auth.security_schemes()) if auth is not None else "off"
    transport = ("mTLS" if tls.mutual else "TLS") if tls is not None else "plaintext"
    return f"; auth {schemes}; {transport}"


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


_safe_store = redact_url  # the store (or bus) URL without credentials, for logs


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM, then drain. StartupError/ConfigError: nothing is left running."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    service = Service(settings)
    await service.start()
    # What startup made (modules, descriptors, the agent) lives as long as the process: out
    # of the collector's sight, full collections scan only what requests leave behind.
    # Telemetry's spans wait up to a second for export and so reach the oldest generation;
    # full collections of the whole heap then cost ~0.2 ms per request at ~500 req/s.
    gc.freeze()
    http = f" http={service.http_port}" if service.http is not None else ""
    # One write: workers share the pipe, and print() writes the line and its end apart.
    sys.stdout.write(f"A2A service ready: grpc={service.grpc_port}{http}\n")
    sys.stdout.flush()
    await stop.wait()
    limit = settings.drain_seconds + STOP_OVERRUN_SECONDS
    try:
        await asyncio.wait_for(service.stop(), limit)
    except TimeoutError:
        # Waiting longer helps nobody (an orchestrator would KILL us anyway); what was
        # acknowledged is committed, a stuck close can only lose what was not.
        log.error(
            "shutdown: still %s %.0f s after it began; exiting without waiting further",
            service.stop_phase,
            limit,
        )
        logging.shutdown()
        os._exit(1)
    abandoned = len(service.engine.abandoned) if service.engine is not None else 0
    if abandoned:
        # Everything is committed and closed; the event loop's last step would wait for
        # these forever (they ignore cancellation), so the process ends without it.
        log.warning("stopped; %d abandoned agent coroutine(s) left behind", abandoned)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)


__all__ = ["Service", "StartupError", "serve", "pb"]
