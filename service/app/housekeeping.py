"""Background jobs of a running service (retention, idle eviction), each on its own timer.

A job runs once at start and then every `interval` seconds; a failure is logged and
the job runs again next time. Jobs are plain coroutines on the service's event loop:
each must do its work in short steps (the retention purge goes batch by batch), so
requests are served between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("service.housekeeping")

Job = Callable[[], Awaitable[object]]


class Housekeeping:
    def __init__(self) -> None:
        self._jobs: list[tuple[str, float, Job]] = []
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, name: str, interval: float, job: Job) -> None:
        self._jobs.append((name, interval, job))

    @property
    def jobs(self) -> dict[str, float]:
        """Each job's name and interval (seconds)."""
        return {name: interval for name, interval, _ in self._jobs}

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(*job)) for job in self._jobs]

    async def stop(self) -> None:
        """Cancel the jobs (a purge batch already sent to the store still commits)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @staticmethod
    async def _run(name: str, interval: float, job: Job) -> None:
        while True:
            try:
                await job()
            except Exception:
                log.exception("housekeeping: %s failed; it runs again in %g s", name, interval)
            await asyncio.sleep(interval)
