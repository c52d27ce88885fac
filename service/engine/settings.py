"""The scale-out settings: the shared event bus, worker processes, and how long a dead
process's tasks wait for recovery (ValueError naming the key; the configuration reports
it as a ConfigError)."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.bus import EventBus, InProcessBus
from service.setting import SECONDS, between, check_section, rule, setting
from service.store import redact_url

BUS_SCHEMES = ("redis://", "rediss://", "unix://")


def _bus_url(url: str) -> str | None:
    """What is wrong with a bus URL (its password hidden), or None."""
    if url and not url.startswith(BUS_SCHEMES):
        return f"expected redis://HOST:PORT/DB (or rediss://, unix://), got {redact_url(url)!r}"
    return None


@dataclass
class ClusterSettings:
    """Several processes as one service ([Scale-out](scale-out.md))."""

    bus: str = setting(
        "",
        "event bus shared by several processes: `redis://HOST:6379/0` (also `rediss://`, `unix://`); needs a PostgreSQL store",
        shown="(in-process)",
        check=_bus_url,
    )
    bus_prefix: str = setting(
        "a2a",
        "prefix of the bus's Redis channels and keys (one per cluster sharing a Redis)",
        check=rule(
            lambda v: bool(v) and not any(c in v for c in " \t\n"),
            "must be a non-empty word (the cluster's Redis prefix)",
        ),
    )
    workers: int = setting(
        1,
        "processes on this host sharing the gRPC and HTTP ports (SO_REUSEPORT); more than 1 needs a PostgreSQL `store` and a Redis `bus`",
        check=between(1, 256),
    )
    lease_seconds: float = setting(
        10.0,
        "a process that has not renewed its presence for this long is dead; a survivor moves its unsettled tasks to `FAILED` within about 1.25 × this",
        check=between(1, 3600, SECONDS),
    )


def validate_cluster(s: ClusterSettings) -> None:
    check_section(s, ClusterSettings)


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
