"""Readiness: whether this replica can take calls now, as opposed to whether it is alive.

Liveness is the process answering at all. Readiness also needs the parts every call
depends on — the task store and, when configured, the event bus and the push queue —
to be reachable. The composition root fills a `Readiness` with one named check per part
(an async callable that raises when the part cannot be used; any store, bus or queue
implementation brings its own). A background loop runs the checks every `interval`
seconds, each bounded by `timeout`, and keeps the outcome, so a probe reads a flag
instead of doing I/O (probes cannot be used to load the store). A change is logged and
passed to `on_change` (gRPC health follows it).

A part shared by every replica (a PostgreSQL store, the Redis bus, a `redis-streams`
push queue) is added as `shared`: when it is down it is down for every replica at once,
so taking this replica out of rotation routes nothing to a healthier one, it only turns
a partial outage (calls that do not need the part still succeed) into a full one.
`readiness_shared_dependencies` decides: `ignore` (the default) keeps the replica ready
and reports the part as `degraded`; `fail` makes it unready like a local part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.ops.logs import REDACTOR
from service.ops.looplag import LoopLag
from service.setting import check_section, one_of, port, setting

log = logging.getLogger("service.readiness")

Check = Callable[[], Awaitable[object]]  # raises (or times out) when the part is unreachable
CHECK_INTERVAL_SECONDS = 2.0
CHECK_TIMEOUT_SECONDS = 2.0
SHARED_POLICIES = ("ignore", "fail")


class Unreachable(Exception):
    """Raised by a check whose part says what is down (the message is shown as is)."""


def from_health(health: Callable[[], Awaitable[str | None]]) -> Check:
    """A check from a part's `health()` (None when fine, else what is wrong): a shared
    store or bus reports its own reason."""

    async def check() -> None:
        problem = await health()
        if problem:
            raise Unreachable(problem)

    return check


class Readiness:
    def __init__(
        self,
        interval: float = CHECK_INTERVAL_SECONDS,
        timeout: float = CHECK_TIMEOUT_SECONDS,
        shared_policy: str = "fail",
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.shared_policy = shared_policy  # "fail" or "ignore" (readiness_shared_dependencies)
        self.checks: dict[str, Check] = {}
        self.shared: set[str] = set()  # parts every replica shares
        self.failing: dict[str, str] = {}  # part -> why (for the log; probes show only names)
        self._ready = True
        self._task: asyncio.Task[None] | None = None
        self._on_change: Callable[[bool], Awaitable[None]] | None = None
        # The event loop's lag, and the lag past which new streams are refused (0: never):
        # shown by `/health/ready` while they are (the replica stays ready for the rest).
        self.loop_lag: LoopLag | None = None
        self.stream_refusal_lag_ms = 0.0

    def add(self, name: str, check: Check, *, shared: bool = False) -> None:
        """Require `name` to be reachable for the replica to be ready (`shared`: a part
        every replica uses, which counts only under the `fail` policy)."""
        self.checks[name] = check
        if shared:
            self.shared.add(name)

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def degraded(self) -> list[str]:
        """Unreachable shared parts that do not count against readiness (`ignore`)."""
        if self.shared_policy != "ignore":
            return []
        return sorted(name for name in self.failing if name in self.shared)

    @property
    def refusing_streams(self) -> float | None:
        """The loop's lag in ms while new streams are refused for it, else None."""
        meter, limit = self.loop_lag, self.stream_refusal_lag_ms
        if meter is None or not limit:
            return None
        lag = meter.lag_ms()
        return lag if lag > limit else None

    def _counts(self, name: str) -> bool:
        return self.shared_policy != "ignore" or name not in self.shared

    async def refresh(self) -> bool:
        """Run every check once (concurrently); True when all passed."""
        names = list(self.checks)
        results = await asyncio.gather(
            *(self._run(self.checks[name]) for name in names), return_exceptions=False
        )
        was = self.ready
        before = dict(self.failing)
        self.failing = {name: why for name, why in zip(names, results, strict=True) if why}
        self._ready = not any(self._counts(name) for name in self.failing)
        for name, why in self.failing.items():
            if name in before:
                continue
            if self._counts(name):
                log.warning("not ready: %s is unreachable (%s)", name, why)
            else:
                log.warning(
                    "degraded: %s is unreachable (%s); still ready, as every replica shares "
                    "it (readiness_shared_dependencies = ignore)",
                    name,
                    why,
                )
        for name in before:
            if name not in self.failing:
                log.info("ready again: %s is reachable", name)
        if was != self.ready and self._on_change is not None:
            await self._on_change(self.ready)
        return self.ready

    async def _run(self, check: Check) -> str:
        try:
            await asyncio.wait_for(check(), self.timeout)
        except TimeoutError:
            return f"no answer within {self.timeout:g} s"
        except Unreachable as exc:  # the part said what is down
            return REDACTOR.untrusted(str(exc))[:300]
        except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
            return REDACTOR.untrusted(f"{type(exc).__name__}: {exc}")[:300]
        return ""

    async def start(self, on_change: Callable[[bool], Awaitable[None]] | None = None) -> None:
        """Check once now, then every `interval` seconds until `stop`."""
        self._on_change = on_change
        await self.refresh()
        if self.checks and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception:  # pragma: no cover - a check's bug must not end the loop
                log.exception("readiness check failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


@dataclass
class ProbeSettings:
    """Where the health probes are served besides the gateway, and what readiness needs ([Deployment](deployment.md), [Operations: readiness](operations.md#readiness))."""

    probe_port: int = setting(
        -1,
        "a separate plaintext HTTP listener serving only `/health`, `/health/live` "
        "and `/health/ready` (no TLS, no client certificate, no auth): for probes when "
        "mTLS is on; `0` picks a free port, `-1` = off",
        check=port("0-65535, or -1 for none", low=-1),
    )
    probe_host: str = setting(
        "127.0.0.1",
        "address of the `probe_port` listener (loopback by default; the pod IP for kubelet probes)",
    )
    readiness_shared_dependencies: str = setting(
        "ignore",
        "whether a part every replica shares (a PostgreSQL store, the Redis bus, a "
        "`redis-streams` push queue) being unreachable makes `/health/ready` 503 and gRPC "
        "health NOT_SERVING: `ignore` (the replica stays ready and `/health/ready` lists it "
        "as `degraded`: unready on every replica at once would be a full outage) or `fail`; "
        "local parts (SQLite, `local-file`) always count",
        check=one_of(SHARED_POLICIES, "ignore or fail"),
    )


def validate_probes(s: ProbeSettings) -> None:
    check_section(s, ProbeSettings)
    if s.probe_port >= 0 and not s.probe_host.strip():
        raise ValueError("probe_host: must name an address to listen on")
