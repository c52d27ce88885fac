"""The scale-out settings: the shared event bus, worker processes, and how long a dead
process's tasks wait for recovery (ValueError naming the key; the configuration reports
it as a ConfigError)."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.bus import EventBus, InProcessBus
from service.store import redact_url

BUS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass
class ClusterSettings:
    """Several processes as one service (README "Scale-out")."""

    bus: str = ""  # "" = in-process (one process); redis://host:6379/0 = shared by every replica
    bus_prefix: str = "a2a"  # Redis key and channel prefix (one per cluster)
    workers: int = 1  # `serve --workers N`: processes on this host sharing the ports
    lease_seconds: float = 10.0  # a process silent this long is dead; survivors recover its tasks


def validate_cluster(s: ClusterSettings) -> None:
    if s.bus and not s.bus.startswith(BUS_SCHEMES):
        raise ValueError(
            f"bus: expected redis://HOST:PORT/DB (or rediss://, unix://), got {redact_url(s.bus)!r}"
        )
    if not s.bus_prefix or any(c in s.bus_prefix for c in " \t\n"):
        raise ValueError("bus_prefix: must be a non-empty word (the cluster's Redis prefix)")
    if not 1 <= s.workers <= 256:
        raise ValueError(f"workers: must be between 1 and 256, got {s.workers}")
    if not 1 <= s.lease_seconds <= 3600:
        raise ValueError(
            f"lease_seconds: must be between 1 and 3600 (seconds), got {s.lease_seconds}"
        )


def shares_ports(s: ClusterSettings) -> bool:
    """Whether this process binds its ports with SO_REUSEPORT (a `--workers` child)."""
    return s.workers > 1


async def open_bus(s: ClusterSettings) -> EventBus:
    """The in-process bus, or a connected `RedisBus` (RuntimeError says what is unreachable)."""
    if not s.bus:
        return InProcessBus()
    from service.engine.redis_bus import RedisBus

    bus = RedisBus(s.bus, prefix=s.bus_prefix)
    await bus.open()
    return bus
