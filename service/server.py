"""The composition root: builds config, store, engine, API, gRPC server (with
health and reflection) and, when enabled, the HTTP gateway; owns startup, drain
and shutdown. Nothing else constructs these parts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.agent import load_agent
from service.api import A2AApi
from service.card import CardBuilder, interface
from service.config import Settings
from service.engine import Engine
from service.grpc_servicer import SERVICE, make_servicer
from service.store import TaskStore, open_store

log = logging.getLogger("service")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def build_agent(settings: Settings):
    if settings.agent == "command":
        workspaces = f"{settings.data_dir}/workspaces"
        return load_agent("command", argv=settings.command, workspace_root=workspaces,
                          kill_grace_seconds=settings.command_grace_seconds)
    return load_agent(settings.agent)


@dataclass
class Service:
    settings: Settings
    store: TaskStore | None = None
    engine: Engine | None = None
    api: A2AApi | None = None
    cards: CardBuilder | None = None
    grpc_server: grpc.aio.Server | None = None
    health: HealthServicer | None = None
    grpc_port: int = 0
    http_port: int = 0
    _gateway_task: asyncio.Task | None = None
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        s = self.settings
        agent = build_agent(s)
        self.store = open_store(s.store_url)
        await self.store.open()
        self.engine = Engine(self.store, agent)
        lost = await self.engine.recover()
        if lost:
            log.warning("marked %d task(s) FAILED that were running when the server last stopped", lost)

        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        self.grpc_port = server.add_insecure_port(f"{s.host}:{s.grpc_port}")
        if not self.grpc_port:
            raise OSError(f"cannot listen for gRPC on {s.host}:{s.grpc_port}")
        self.cards = self._card_builder(agent)
        self.api = A2AApi(
            self.engine, self.cards,
            push_notifications=s.push_notifications,
            required_extensions=tuple(s.required_extensions),
        )
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(make_servicer(self.api), server)
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (SERVICE.full_name, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME),
            server,
        )
        await server.start()
        self.grpc_server = server
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC A2A service listening on %s:%d (store %s, agent %s)",
                 s.host, self.grpc_port, _safe_store(s.store_url), s.agent)

    def _card_builder(self, agent: object) -> CardBuilder:
        s = self.settings
        grpc_address = s.grpc_public_address or f"{_url_host(s.host)}:{self.grpc_port}"
        interfaces = [interface(grpc_address, "GRPC")]
        provider = None
        if s.provider_organization:
            provider = {"organization": s.provider_organization, "url": s.provider_url}
        return CardBuilder(
            name=s.name, description=s.description, version=s.version, agent=agent,
            interfaces=interfaces, push_notifications=s.push_notifications, provider=provider,
            documentation_url=s.documentation_url, skills=s.skills,
            input_modes=s.input_modes, output_modes=s.output_modes,
            extensions=[{"uri": u, "required": True} for u in s.required_extensions],
            extended_card=s.extended_card, extended_skills=s.extended_skills,
        )

    async def _set_health(self, status: int) -> None:
        assert self.health is not None
        for name in ("", SERVICE.full_name):
            await self.health.set(name, status)

    async def stop(self) -> None:
        """Drain: report NOT_SERVING, let in-flight calls finish (bounded), then close."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.health is not None:
            await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.grpc_server is not None:
            await self.grpc_server.stop(self.settings.drain_seconds)
        if self.engine is not None:
            await self.engine.close()
        if self.store is not None:
            await self.store.close()
        log.info("stopped")


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def _safe_store(url: str) -> str:
    """The store URL without credentials, for logs."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


async def serve(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM, then drain."""
    import signal

    service = Service(settings)
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"A2A service ready: grpc={service.grpc_port}", flush=True)
    await stop.wait()
    await service.stop()


__all__ = ["Service", "serve", "pb"]
