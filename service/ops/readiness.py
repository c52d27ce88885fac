"""Readiness: whether this replica can take calls now, as opposed to whether it is alive.

Liveness is the process answering at all. Readiness also needs the parts every call
depends on — the task store and, when configured, the event bus and the push queue —
to be reachable. The composition root fills a `Readiness` with one named check per part
(an async callable that raises when the part cannot be used; any store, bus or queue
implementation brings its own). A background loop runs the checks every `interval`
seconds, each bounded by `timeout`, and keeps the outcome, so a probe reads a flag
instead of doing I/O (probes cannot be used to load the store). A change is logged and
passed to `on_change` (gRPC health follows it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.ops.logs import REDACTOR
from service.setting import check_section, port, setting

log = logging.getLogger("service.readiness")

Check = Callable[[], Awaitable[object]]  # raises (or times out) when the part is unreachable
CHECK_INTERVAL_SECONDS = 2.0
CHECK_TIMEOUT_SECONDS = 2.0


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
        self, interval: float = CHECK_INTERVAL_SECONDS, timeout: float = CHECK_TIMEOUT_SECONDS
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.checks: dict[str, Check] = {}
        self.failing: dict[str, str] = {}  # part -> why (for the log; probes show only names)
        self._task: asyncio.Task[None] | None = None
        self._on_change: Callable[[bool], Awaitable[None]] | None = None

    def add(self, name: str, check: Check) -> None:
        """Require `name` to be reachable for the replica to be ready."""
        self.checks[name] = check

    @property
    def ready(self) -> bool:
        return not self.failing

    async def refresh(self) -> bool:
        """Run every check once (concurrently); True when all passed."""
        names = list(self.checks)
        results = await asyncio.gather(
            *(self._run(self.checks[name]) for name in names), return_exceptions=False
        )
        was = self.ready
        before = dict(self.failing)
        self.failing = {name: why for name, why in zip(names, results, strict=True) if why}
        for name, why in self.failing.items():
            if name not in before:
                log.warning("not ready: %s is unreachable (%s)", name, why)
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
    """Where the health probes are served besides the gateway ([Deployment](deployment.md))."""

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


def validate_probes(s: ProbeSettings) -> None:
    check_section(s, ProbeSettings)
    if s.probe_port >= 0 and not s.probe_host.strip():
        raise ValueError("probe_host: must name an address to listen on")
