"""The composition root: from the loaded settings, builds store, engine, API, gRPC server (with
health and reflection) and, when enabled, the HTTP gateway; owns startup, drain
and shutdown. Nothing else constructs these parts.

Each part is an async context manager built from its settings (service/app/parts.py).
`Service.start` enters them, in order, on one `AsyncExitStack`: startup takes the data
directory's lock before anything in it is opened (so restart recovery never touches
another live server's tasks), and installs telemetry before anything that records into
it is built; every startup failure becomes one `StartupError` line naming the setting,
and closes what was opened. `Service.stop` closes the stack: first the drain, whose order
is deliberate (service/app/drain.py: health NOT_SERVING, a grace period, new calls
refused, running turns get up to `drain_seconds`, open streams end resumable, turns still
running are stopped and their tasks settle FAILED, the last answers written), then every
part in reverse start order, so start and stop cannot drift.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2
from starlette.types import ASGIApp

from gateway.app import build_app
from gateway.hsts import HstsMiddleware
from gateway.invoker import GatedInvoker, GrpcInvoker, InProcessInvoker, Invoker
from gateway.server import HttpServer
from gateway.telemetry import TelemetryMiddleware
from gateway.transports import grpc_envelope
from gateway.transports.grpc_envelope import JsonRpcEnvelopeServicer
from gateway.transports.redis_streams import RedisStreamsTransport
from gateway.transports.session import FramedJsonRpc, binding_uri
from gateway.transports.stdio import Pipes, StdioTransport
from gateway.transports.unix import PeerPrincipals, UnixSocketTransport
from gateway.transports.websocket import WebSocketTransport
from gateway.unknown_fields import REJECT
from gen import a2a_pb2 as pb
from service.agent import Agent, load_agent
from service.agents.command import program_environment
from service.api import A2AApi
from service.app import parts
from service.app.config import ConfigError, Settings, secret_files, secrets
from service.app.deployment_warnings import deployment_warnings
from service.app.drain import Draining, drain
from service.app.housekeeping import Housekeeping
from service.app.memory import HeapTrim
from service.app.ownership import Ownership
from service.app.parts import StartupError, setting
from service.auth import Authenticator, TlsFiles
from service.auth.settings import advertised, authenticator_from, startup_warnings, tls_from
from service.calls.access import AccessLog
from service.calls.admission import admission
from service.calls.configured import load_interceptors
from service.calls.pipeline import Interceptor, Pipeline
from service.cards.card import CardBuilder, Cards, interface
from service.cards.signing import CardSigner, SignedCards, signer_from_settings
from service.engine.bus import EventBus
from service.engine.files import FileArtifacts
from service.engine.limits import RateLimiter, Slots
from service.engine.peers import Peers
from service.engine.registry import Engine
from service.engine.retention import (
    PurgeHook,
    TaskRetention,
    parse_duration,
    purge_orphans,
    sweep_interval,
)
from service.grpc_binding import SERVICE, add_servicer, make_servicer
from service.grpc_v03 import SERVICE as V03_SERVICE
from service.grpc_v03 import make_v03_servicer
from service.inputs.policy import part_limits, policy_from_settings
from service.inputs.workspace import StoreContextLookup
from service.net.limits import CallLimit, connection_cap, raise_nofile_limit
from service.net.local import peer_principals, socket_mode
from service.net.redis_streams import public_url
from service.ops import logs
from service.ops.looplag import LoopLag
from service.ops.readiness import Readiness, from_health
from service.protocol.admission import Gate
from service.protocol.params import V03_VERSION
from service.push import PushNotifications
from service.push.dispatcher import ORPHAN_SECONDS
from service.store import Scope, Store, is_shared, redact_url
from service.store.blobs import LocalBlobStore
from service.telemetry.setup import Installed

log = logging.getLogger("service")

READY = "A2A service ready:"  # the start of the line `serve` announces readiness with
# The asyncio servicers, as the packages publish them (health.aio, reflection.aio).
HealthServicer = health.aio.HealthServicer
ReflectionServicer = reflection.aio.ReflectionServicer

# The A2A services on the gRPC server: 1.0 and v0.3 (service/grpc_v03.py).
A2A_SERVICE_NAMES = (SERVICE.full_name, V03_SERVICE.full_name)
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"  # same messages as v1alpha, newer name
# After SIGTERM, how long past `drain_seconds` closing the parts may take before the process
# gives up on the one that is stuck and exits 1 (naming it), rather than hang until a KILL.
STOP_OVERRUN_SECONDS = 8.0
ORPHAN_MARGIN_SECONDS = 10.0  # after max_turn_seconds: the failed turn's commit
# Young collections every 10,000 net allocations instead of 700: a send allocates a few
# hundred short-lived objects (protobuf wrappers, dicts, coroutines) that die with it, so
# at the default the collector ran several times per request to find nothing to free.
GC_YOUNG_THRESHOLD = 10_000


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
        with setting("command_env"):
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
    health: Any = None  # a health.aio.HealthServicer once gRPC serves
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
    loop_lag: LoopLag = field(default_factory=LoopLag)  # how late the event loop runs
    ownership: Ownership = field(default_factory=Ownership)
    # Retention: awaited with the (scope, task id)s of every purged batch, to release what
    # else is kept per task (e.g. stored files); the root or its caller adds to it.
    purge_hooks: list[PurgeHook] = field(default_factory=list)
    housekeeping: Housekeeping = field(default_factory=Housekeeping)
    telemetry: Installed | None = None  # None: telemetry is off (service/telemetry)
    stdio: StdioTransport | None = None  # `stdio`: JSON-RPC on stdin/stdout
    unix: UnixSocketTransport | None = None  # `unix_socket`: JSON-RPC on a unix socket
    envelope: JsonRpcEnvelopeServicer | None = None  # `grpc_jsonrpc`: JSON-RPC inside gRPC
    websocket: WebSocketTransport | None = None  # `websocket_path`: on the HTTP listener
    framed: FramedJsonRpc | None = None  # the one JSON-RPC of the transports of our own
    redis_streams: RedisStreamsTransport | None = None  # `redis_streams_url`
    # Set when the service's input is over (end of stdin): `serve` stops as on SIGTERM.
    input_ended: asyncio.Event = field(default_factory=asyncio.Event)
    _parts: AsyncExitStack = field(default_factory=AsyncExitStack)  # what start() opened
    _started: bool = False  # start() completed: there may be callers to drain
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)
    stop_phase: str = ""  # what stop() is doing now (named if it overruns)

    async def start(self) -> None:
        """Start everything or nothing: StartupError (or ConfigError) names what failed."""
        s = self.settings
        raise_nofile_limit()  # descriptors for the connection caps and the reserve
        logs.protect(secrets(s))  # no configured credential is ever written to the log
        self.access = AccessLog() if s.access_log else None
        self.readiness.shared_policy = s.readiness_shared_dependencies
        self.readiness.loop_lag = self.loop_lag
        self.readiness.stream_refusal_lag_ms = s.stream_refusal_lag_ms
        try:
            await self._enter_parts(self._parts)
        except BaseException:
            await self.stop()
            raise
        self.serving = True
        self._started = True
        if self.health is not None:
            await self._readiness_changed(self.readiness.ready)

    async def _enter_parts(self, stack: AsyncExitStack) -> None:
        """The start order; closing `stack` undoes it in reverse (after the drain)."""
        s = self.settings
        stack.callback(self._said_stopped)  # the very last line
        # stdio: stdout is the answers' alone before anything else could write to it
        pipes = await stack.enter_async_context(parts.stdio_claimed()) if s.stdio else None
        await stack.enter_async_context(parts.data_claimed(s, self.ownership))
        try:  # unusable credentials or TLS files: before any listener
            self.auth = authenticator_from(s)
            self.tls = tls_from(s)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for warning in [*startup_warnings(s, self.auth, self.tls), *deployment_warnings(s)]:
            log.warning("%s", warning)
        # Telemetry before anything that records into it is built: it is handed to the call
        # pipeline and the gateway below, and the engine, push and store read `hub.current`.
        telemetry = await stack.enter_async_context(
            parts.telemetry_installed(s, self.telemetry, s.name, s.version)
        )
        self.telemetry = telemetry
        if telemetry is not None:
            telemetry.telemetry.agent = s.name
            telemetry.telemetry.dependencies = self._dependencies_up
            telemetry.telemetry.loop_lag = self.loop_lag.lag_ms
        stack.callback(self._phase, "flushing telemetry")
        if telemetry is not None and s.metrics_endpoint and parts.metrics_shared():
            await stack.enter_async_context(parts.worker_metrics_serving(telemetry))
        with setting("agent"):
            agent = build_agent(s)
        http = None
        if s.http_port >= 0:  # bound first: the agent card must advertise the real port
            http = await stack.enter_async_context(parts.http_bound(s))
            self.http, self.http_port = http.part, http.part.port
        if self.auth is not None and self.auth.jwt is not None:
            await self.auth.jwt.keys.prime()
        with setting("call_interceptors"):
            configured = load_interceptors(s.call_interceptors)
        self.pipeline = self._pipeline(telemetry, configured)
        if s.upstream:
            self.cards = self._cards(agent)
            upstream = GatedInvoker(GrpcInvoker(s.upstream, SERVICE), self.gate)
            self.invoker = await stack.enter_async_context(parts.invoker_open(upstream))
        else:
            await self._enter_core(stack, agent)
            assert self.api is not None
            in_process = InProcessInvoker(self.api, SERVICE)
            self.invoker = await stack.enter_async_context(parts.invoker_open(in_process))
        if http is not None:
            http.place(stack)
            with setting("http_port"):
                await self._start_gateway(http.part, telemetry)
            if self.websocket is not None:
                await stack.enter_async_context(
                    parts.websocket_serving(self.websocket, self._websocket_url())
                )
        await self._enter_transports(stack, pipes)
        if s.probe_port >= 0:
            probes = parts.probes_serving(s, lambda: self.serving, self.readiness)
            self.probes = await stack.enter_async_context(probes)
            self.probe_port = self.probes.port
        await stack.enter_async_context(
            parts.readiness_checked(self.readiness, self._readiness_changed)
        )
        if s.metrics_endpoint and s.metrics_port and not parts.metrics_shared():
            await stack.enter_async_context(
                parts.metrics_listening(telemetry, s.host, s.metrics_port)
            )
        # Last: what startup itself took (imports, migrations) is not lag in serving calls.
        await stack.enter_async_context(parts.loop_lag_measured(self.loop_lag))
        stack.callback(self._phase, "closing the listeners")  # right after the drain

    async def _enter_core(self, stack: AsyncExitStack, agent: Agent) -> None:
        """In-process mode: store, push, file artifacts, bus, engine (and peers), recovery,
        push delivery, the API and the gRPC server (with health and reflection), housekeeping."""
        s = self.settings
        self.store = store = await stack.enter_async_context(parts.store_opened(s))
        pushing = None
        if s.push_notifications:
            pushing = await stack.enter_async_context(
                parts.push_built(s, store, orphan_cursor_seconds(s))
            )
            self.push = pushing.part
        blobs = parts.blob_store(s)
        self.files = await stack.enter_async_context(
            parts.file_artifacts(s, blobs, self._http_base())
        )
        stack.callback(self._phase, "closing the task store")
        # What a process killed mid-write left: half-written blobs, configs of tasks that
        # were never stored (a server from before they were written together).
        await blobs.sweep_tmp()
        with setting("store"):
            await purge_orphans(store)
        self.bus = await stack.enter_async_context(parts.bus_opened(s))
        stack.callback(self._phase, "closing the bus")
        engine, self.peers = await stack.enter_async_context(
            parts.engine_and_peers(s, store, agent, self.bus, self.push, self.files)
        )
        self.engine = engine
        stack.callback(self._phase, "leaving the cluster")
        lost = await engine.recover()
        if lost:
            log.warning(
                "marked %d task(s) FAILED that were running when the server last stopped", lost
            )
        if pushing is not None:
            pushing.place(stack)  # stopped before the cluster is left and the bus closed
            with setting(parts.push_setting(s)):
                await pushing.part.start()  # after recover: its events are pushed too
            stack.callback(self._phase, "stopping push delivery")
        self._check_readiness()
        if s.grpc_port < 0:  # gRPC off: the API serves the other bindings alone
            self.cards = self._cards(agent)
            self.api = self._api(engine, self.cards, blobs)
        else:
            await self._enter_grpc(stack, agent, engine, blobs)
        self._housekeeping_jobs(agent, blobs)
        await stack.enter_async_context(parts.housekeeping_running(self.housekeeping))
        if is_shared(s.store_url) and not s.file_artifact_dir:  # said once all else is up
            log.warning(
                "file_artifact_dir is not set: stored file artifacts are kept in %s on this "
                "host only, and a replica on another host answers 404 for them. Set "
                "file_artifact_dir to a directory every replica mounts (docs/scale-out.md).",
                blobs.root,
            )
        if self.grpc_server is not None:
            log.info(
                "gRPC A2A service listening on %s:%d (store %s, agent %s%s)",
                s.host,
                self.grpc_port,
                _safe_store(s.store_url),
                s.agent,
                _security_note(self.auth, self.tls),
            )

    async def _enter_grpc(
        self, stack: AsyncExitStack, agent: Agent, engine: Engine, blobs: LocalBlobStore
    ) -> None:
        """The gRPC server: the port bound (before the card names it), the A2A services of
        both versions, health and reflection."""
        s = self.settings
        server, self.grpc_port = parts.grpc_bound(s, self.tls)
        self.cards = self._cards(agent)
        self.api = self._api(engine, self.cards, blobs)
        assert self.pipeline is not None
        calls = CallLimit(s.grpc_max_concurrent_calls)  # one limit for both versions
        add_servicer(make_servicer(self.api, self.pipeline, calls), server, parts=part_limits(s))
        add_servicer(
            make_v03_servicer(self.api, self.pipeline, calls),
            server,
            V03_SERVICE,
            pipelined=True,
            parts=part_limits(s),
        )
        if s.grpc_jsonrpc:  # JSON-RPC inside gRPC, over the API in process
            self.envelope = JsonRpcEnvelopeServicer(
                self._framed(InProcessInvoker(self.api, SERVICE))
            )
            add_servicer(self.envelope, server, grpc_envelope.SERVICE, pipelined=False)
        self.health = HealthServicer()
        add_servicer(self.health, server, service=health_pb2.DESCRIPTOR.services_by_name["Health"])
        _enable_reflection(
            server,
            (
                *self._grpc_service_names(),
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            ),
        )
        self.grpc_server = await stack.enter_async_context(parts.grpc_serving(server))
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)  # until all is up

    async def _enter_transports(self, stack: AsyncExitStack, pipes: Pipes | None) -> None:
        """The JSON-RPC transports of our own that are configured (gateway/transports)."""
        s = self.settings
        if pipes is None and not s.unix_socket and not s.redis_streams_url:
            return
        assert self.invoker is not None
        framed = self._framed(self.invoker)
        if pipes is not None:
            stdio = StdioTransport(
                framed,
                pipes,
                max_in_flight=s.stdio_max_in_flight,
                on_end=self.input_ended.set,
                end_seconds=s.drain_seconds,
            )
            self.stdio = await stack.enter_async_context(parts.stdio_serving(stdio))
        if s.unix_socket:
            named, any_peer = peer_principals(s.unix_socket_peer_principals)
            mode = socket_mode(s.unix_socket_mode)
            assert mode is not None  # checked with the settings
            unix = UnixSocketTransport(
                framed,
                s.unix_socket,
                mode=mode,
                peers=PeerPrincipals(named, any_peer) if named or any_peer else None,
                max_in_flight=s.unix_socket_max_in_flight,
                max_connections=connection_cap(s),
            )
            self.unix = await stack.enter_async_context(parts.unix_socket_serving(unix))
        if s.redis_streams_url:
            streams = RedisStreamsTransport(
                framed,
                s.redis_streams_url,
                stream=s.redis_streams_request_stream,
                group=s.redis_streams_group,
                max_in_flight=s.redis_streams_max_in_flight,
                reclaim_seconds=s.redis_streams_reclaim_seconds,
                reply_maxlen=s.redis_streams_reply_maxlen,
                reply_ttl_seconds=s.redis_streams_reply_ttl_seconds,
            )
            self.redis_streams = await stack.enter_async_context(
                parts.redis_streams_serving(streams)
            )

    def _api(self, engine: Engine, cards: Cards, blobs: LocalBlobStore) -> A2AApi:
        s = self.settings
        return A2AApi(
            engine,
            cards,
            push_notifications=s.push_notifications,
            push=self.push,
            inputs=policy_from_settings(
                s,
                cards.public_card(),
                StoreContextLookup(engine),
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

    async def _start_gateway(self, http: HttpServer, telemetry: Installed | None) -> None:
        s = self.settings
        level = "warning" if s.log_level.upper() in ("DEBUG", "INFO") else s.log_level
        app = self._gateway_app(telemetry)
        options = None
        if s.websocket_path:  # served by the same listener, before the HTTP routes
            assert self.invoker is not None
            self.websocket = WebSocketTransport(
                self._framed(self.invoker),
                s.websocket_path,
                max_in_flight=s.websocket_max_in_flight,
                ping_seconds=s.websocket_ping_seconds,
                ping_timeout_seconds=s.websocket_ping_timeout_seconds,
                handlers=http.upgraded,
            )
            app, options = self.websocket.wrap(app), self.websocket.uvicorn_options()
        await http.start(
            app,
            log_level=level,
            graceful_seconds=max(1.0, s.drain_seconds),
            ssl=self.tls.uvicorn_options() if self.tls is not None else None,
            settings=s,
            websocket=options,
        )
        mode = f"proxy to {s.upstream}" if s.upstream else "in-process"
        log.info(
            "HTTP gateway (JSON-RPC, REST, agent card) listening on %s:%d (%s%s)",
            s.host,
            self.http_port,
            mode,
            _security_note(self.auth, self.tls),
        )

    def _check_readiness(self) -> None:
        """The readiness seam: one check per part every call needs. A store, bus or queue
        implementation is checked through its own seam's cheapest read, so any new one (a
        PostgreSQL store, a Redis bus) is covered once it is wired here."""
        s = self.settings
        store, push = self.store, self.push
        for name, part in (("store", store), ("bus", self.bus)):
            health = getattr(part, "health", None)  # a shared store or bus says what is down
            if health is not None:
                shared = name == "bus" or is_shared(s.store_url)
                self.readiness.add(name, from_health(health), shared=shared)
            elif name == "store" and store is not None:
                self.readiness.add(
                    "store",
                    lambda: store.get(Scope(), "readiness-check"),
                    shared=is_shared(s.store_url),
                )
        if push is not None:
            self.readiness.add(
                "push_queue",
                lambda: push.queue.cursors(("", "", "readiness-check")),
                shared=s.push_queue == "redis-streams",
            )

    def _dependencies_up(self) -> dict[str, int]:
        """Each checked store, bus and queue: 1 if it answered the last check, else 0."""
        failing = self.readiness.failing
        return {name: 0 if name in failing else 1 for name in self.readiness.checks}

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

    def _pipeline(
        self, telemetry: Installed | None, configured: Sequence[Interceptor] = ()
    ) -> Pipeline:
        """What every call runs on every binding: authentication, then (in-process) the drain
        gate, the refusal of new streams while the loop lags, the caller's rate limit, the
        version and required extensions. A proxy checks who calls and refuses new streams
        while its own loop lags: its upstream admits the call (its drain: GatedInvoker). `telemetry` is
        installed by then: the pipeline records every call into it. `configured`
        (call_interceptors) run after those, in both."""
        s = self.settings
        lag, lag_ms = self.loop_lag, s.stream_refusal_lag_ms
        if s.upstream:
            steps = admission(None, check_version=False, loop_lag=lag, stream_refusal_lag_ms=lag_ms)
        else:
            if s.rate_limit_per_principal:
                self.rate_limit = RateLimiter(s.rate_limit_per_principal, s.rate_limit_burst)
            steps = admission(
                self.gate,
                self.rate_limit,
                tuple(s.required_extensions),
                compat_v03=s.compat_v03,
                loop_lag=lag,
                stream_refusal_lag_ms=lag_ms,
            )
        return Pipeline(
            authenticator=self.auth,
            interceptors=[*steps, *configured],
            access=self.access,
            telemetry=telemetry.telemetry if telemetry is not None else None,
            forward_credentials=bool(s.upstream),
        )

    def _gateway_app(self, telemetry: Installed | None) -> ASGIApp:
        """The HTTP bindings' app over the invoker (telemetry's middleware around it when on,
        HSTS outermost with TLS)."""
        s = self.settings
        assert self.cards is not None and self.invoker is not None
        app: ASGIApp = build_app(
            invoker=self.invoker,
            service=SERVICE,
            card=self.cards.public_card(),
            is_serving=lambda: self.serving,
            card_max_age=s.card_max_age,
            keepalive_seconds=s.sse_keepalive_seconds,
            max_body_bytes=s.max_request_bytes,
            part_limits=part_limits(s),
            jwks=self.signer.jwks()
            if self.signer is not None and self.signer.keys and s.card_jwks_path
            else None,
            jwks_path=s.card_jwks_path,
            pipeline=self.pipeline,
            compat_v03=s.compat_v03,
            files=self.api,  # None in proxy mode: the files live with the upstream
            reject_unknown_fields=s.json_unknown_fields == REJECT,
            readiness=self.readiness,
            metrics=parts.metrics_render(s, telemetry),
            rate_limit=self.rate_limit,
        )
        if telemetry is not None:
            app = TelemetryMiddleware(app, telemetry.telemetry)
        if self.tls is not None and s.tls_hsts_max_age_seconds > 0:
            app = HstsMiddleware(app, s.tls_hsts_max_age_seconds)  # outermost: every response
        return app

    def _http_base(self) -> str:
        """The base URL clients reach the HTTP gateway at ('' when there is none)."""
        s = self.settings
        if s.public_url:
            return s.public_url.rstrip("/")
        if self.http is None:
            return ""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{_url_host(s.host)}:{self.http_port}"

    def _websocket_url(self) -> str:
        """The WebSocket transport's URL: the HTTP base with ws(s):// and the path."""
        base = self._http_base()
        scheme, sep, rest = base.partition("://")
        ws_scheme = {"https": "wss", "http": "ws"}.get(scheme.lower(), scheme)
        return f"{ws_scheme}{sep}{rest}{self.settings.websocket_path}" if sep else ""

    def _housekeeping_jobs(self, agent: Agent, blobs: LocalBlobStore) -> None:
        """Retention (task_retention), idle-context eviction (context_idle_timeout) and the
        C heap's trim (heap_trim_seconds)."""
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
        trim = HeapTrim.load() if s.heap_trim_seconds else None
        if trim is not None:
            self.housekeeping.add("heap trim", s.heap_trim_seconds, trim)

    def _interfaces(self) -> list[pb.AgentInterface]:
        """What is really served, preferred first: JSON-RPC (what most clients try first),
        HTTP+JSON, then gRPC as bare host:port. In proxy mode gRPC is listed only when
        its public address is configured (the upstream may be private). With `compat_v03`
        the same bindings follow once more with `protocolVersion` 0.3 (1.0 clients prefer
        1.0 entries; v0.3 clients read the card's v0.3 members, service/cards/v03.py)."""
        s = self.settings
        places: list[tuple[str, str]] = []
        if self.http is not None:
            base = self._http_base()
            places += [(base, "JSONRPC"), (base, "HTTP+JSON")]
        if s.upstream:
            if s.grpc_public_address:
                places.append((s.grpc_public_address, "GRPC"))
        elif s.grpc_port >= 0:
            places.append(
                (s.grpc_public_address or f"{_url_host(s.host)}:{self.grpc_port}", "GRPC")
            )
        interfaces = [interface(url, binding) for url, binding in places]
        if s.compat_v03:
            interfaces += [interface(url, binding, version=V03_VERSION) for url, binding in places]
        return interfaces + self._transport_interfaces()

    def _transport_interfaces(self) -> list[pb.AgentInterface]:
        """The JSON-RPC transports of our own that are on (gateway/transports), each under
        its binding URI (`binding_uri`), after the standard bindings. stdio's URL is
        `stdio:` (its card is read over stdio with GetExtendedAgentCard, or elsewhere
        as a note that the agent runs as a subprocess too); the unix socket's is `unix:`
        and the socket's absolute path; the WebSocket's the HTTP base as `ws://` (`wss://`)
        with its path; Redis Streams' is the Redis URL without its credentials (the
        request stream is named in docs, not in the URL: redis-py would read a query
        parameter as a connection option)."""
        s = self.settings
        places: list[tuple[str, str]] = []
        if s.stdio:
            places.append(("stdio:", "stdio"))
        if s.unix_socket:
            places.append(("unix:" + os.path.abspath(s.unix_socket), "unix"))
        if s.grpc_jsonrpc and not s.upstream and s.grpc_port >= 0:
            grpc_url = s.grpc_public_address or f"{_url_host(s.host)}:{self.grpc_port}"
            places.append((grpc_url, grpc_envelope.TRANSPORT))
        if s.websocket_path and self.http is not None:
            places.append((self._websocket_url(), "websocket"))
        if s.redis_streams_url:
            places.append((public_url(s.redis_streams_url), "redis-streams"))
        return [interface(url, binding_uri(name)) for url, name in places]

    def _framed(self, invoker: Invoker) -> FramedJsonRpc:
        """JSON-RPC for the transports of our own, over the invoker and the call pipeline:
        built once (by the first transport that needs it), shared by them all."""
        s = self.settings
        assert self.pipeline is not None
        if self.framed is not None:
            return self.framed
        self.framed = FramedJsonRpc(
            invoker,
            SERVICE,
            self.pipeline,
            max_frame_bytes=s.max_request_bytes,
            part_limits=part_limits(s),
            reject_unknown_fields=s.json_unknown_fields == REJECT,
        )
        return self.framed

    def _grpc_service_names(self) -> tuple[str, ...]:
        """The services of ours on the gRPC server (reflection lists them, health names them)."""
        if self.envelope is None:
            return A2A_SERVICE_NAMES
        return (*A2A_SERVICE_NAMES, grpc_envelope.SERVICE_NAME)

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
        """The whole server ("") and our services on it; the health service itself always
        answers, so a checker tells "not ready" from "not there"."""
        assert self.health is not None
        for name in ("", *self._grpc_service_names()):
            await self.health.set(name, status)

    async def stop(self) -> None:
        """The drain (service/app/drain.py), then every part closed in reverse start order."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.serving = False
        s = self.settings
        draining = Draining(
            drain_seconds=s.drain_seconds,
            grace_seconds=s.drain_grace_seconds,
            served=self._started,
            readiness=self.readiness,
            housekeeping=self.housekeeping,
            gate=self.gate,
            health=self.health,
            engine=self.engine,
            invoker=self.invoker,
            grpc_server=self.grpc_server,
            http=self.http,
            phase=self._phase,
            transports=[
                t
                for t in (self.stdio, self.unix, self.envelope, self.websocket, self.redis_streams)
                if t is not None
            ],
        )
        self._parts.push_async_callback(drain, draining)  # pushed last: it runs first
        await self._parts.aclose()

    def _phase(self, name: str) -> None:
        self.stop_phase = name

    def _said_stopped(self) -> None:
        if self._started:
            log.info("stopped")

    async def dependency_problems(self) -> dict[str, str]:
        """What is down among the parts every call needs, by name (a fresh readiness check)."""
        await self.readiness.refresh()
        return dict(self.readiness.failing)


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


def ready_line(service: Service) -> tuple[str, dict[str, Any]]:
    """`A2A service ready: grpc=PORT http=PORT grpc-jsonrpc unix redis-streams stdio` (each
    part only when it serves; `grpc=off` with gRPC turned off) and its fields for a JSON
    record."""
    fields: dict[str, Any] = {}
    words = ["grpc=off"]
    if service.settings.grpc_port >= 0:  # proxy mode says grpc=0, as it always did
        words = [f"grpc={service.grpc_port}"]
        fields["grpc_port"] = service.grpc_port
    if service.http is not None:
        words.append(f"http={service.http_port}")
        fields["http_port"] = service.http_port
    if service.envelope is not None:
        words.append("grpc-jsonrpc")
        fields["grpc_jsonrpc"] = True
    if service.unix is not None:
        words.append("unix")
        fields["unix_socket"] = True
    if service.redis_streams is not None:
        words.append("redis-streams")
        fields["redis_streams"] = True
    if service.stdio is not None:
        words.append("stdio")
        fields["stdio"] = True
    return f"{READY} {' '.join(words)}", fields


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM (or the end of stdin with `stdio`), then drain.
    StartupError/ConfigError: nothing is left running."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    service = Service(settings, input_ended=stop)  # stdio's end of input stops it too
    await service.start()
    # What startup made (modules, descriptors, the agent) lives as long as the process: out
    # of the collector's sight, full collections scan only what requests leave behind.
    # Telemetry's spans wait up to a second for export and so reach the oldest generation;
    # full collections of the whole heap then cost ~0.2 ms per request at ~500 req/s.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    # On stdout, where supervisors and tests wait for it (stderr with stdio: stdout is the
    # answers'); a JSON record when the log is JSON.
    ready, fields = ready_line(service)
    logs.announce(ready, fields, sys.stderr if settings.stdio else None)
    await stop.wait()
    limit = settings.drain_seconds + STOP_OVERRUN_SECONDS
    # Not cancelled when it overruns: a cancelled stack would go on closing the other parts
    # (and move `stop_phase` past the step that is stuck) before the process could exit.
    stopping = asyncio.ensure_future(service.stop())
    done, _ = await asyncio.wait({stopping}, timeout=limit)
    if not done:
        # Waiting longer helps nobody (an orchestrator would KILL us anyway); what was
        # acknowledged is committed, a stuck close can only lose what was not.
        log.error(
            "shutdown: still %s %.0f s after it began; exiting without waiting further",
            service.stop_phase,
            limit,
        )
        logging.shutdown()
        os._exit(1)
    stopping.result()  # what stopping raised, if anything
    abandoned = len(service.engine.abandoned) if service.engine is not None else 0
    if abandoned:
        # Everything is committed and closed; the event loop's last step would wait for
        # these forever (they ignore cancellation), so the process ends without it.
        log.warning("stopped; %d abandoned agent coroutine(s) left behind", abandoned)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)


__all__ = ["Service", "StartupError", "serve", "pb"]
