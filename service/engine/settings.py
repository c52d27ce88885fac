"""The scale-out settings: the shared event bus, worker processes, and how long a dead
process's tasks wait for recovery (ValueError naming the key; the configuration reports
it as a ConfigError)."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.engine.bus import EventBus, InProcessBus
from service.store import redact_url

BUS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass
class ClusterSettings:
    """Several processes as one service (README "Scale-out")."""

    bus: str = field(
        default="",
        metadata={
            "help": "event bus shared by several processes: `redis://HOST:6379/0` (also `rediss://`, `unix://`); needs a PostgreSQL store",
            "default": "(in-process)",
        },
    )
    bus_prefix: str = field(
        default="a2a",
        metadata={
            "help": "prefix of the bus's Redis channels and keys (one per cluster sharing a Redis)"
        },
    )
    workers: int = field(
        default=1,
        metadata={
            "help": "processes on this host sharing the gRPC and HTTP ports (SO_REUSEPORT); more than 1 needs a PostgreSQL `store` and a Redis `bus`"
        },
    )
    lease_seconds: float = field(
        default=10.0,
        metadata={
            "help": "a process that has not renewed its presence for this long is dead; a survivor moves its unsettled tasks to `FAILED` within about 1.25 × this"
        },
    )


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
