"""Retention: finished tasks older than `task_retention` are purged, in batches.

A task is finished when its state is terminal (COMPLETED, FAILED, CANCELED,
REJECTED); its age is the time since its last status, which for a finished task is
when it finished. Tasks that are working, or paused waiting for input, are kept
however old. The store deletes each batch (the task, its events, its push configs,
its ListTasks counters) in one transaction (`TaskStore.purge_finished`); between
batches the loop serves everything else, so a large purge never stalls it.

Anything else kept per task (stored file artifacts, say) is released by the purge
hooks the composition root registers: each is awaited with the (scope, task id)
pairs of every purged batch. A hook that fails is logged; the purge goes on.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from service.protocol.timeutil import now_micros
from service.setting import setting
from service.store import Scope, TaskStore

log = logging.getLogger("service.retention")

PURGE_BATCH = 256  # tasks per purge transaction (bounds how long one holds the loop)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", re.IGNORECASE)

# Called after each purged batch with its (scope, task id) pairs.
PurgeHook = Callable[[list[tuple[Scope, str]]], Awaitable[None]]


@dataclass
class RetentionSettings:
    """What is kept how long ([Operations: limits and retention](operations.md#limits-and-retention)). Durations: a number of seconds,
    or a number with s, m, h or d ("90s", "15m", "12h", "30d"); "" or 0 = kept forever."""

    task_retention: str = setting(
        "",
        "finished tasks (`COMPLETED`, `FAILED`, `CANCELED`, `REJECTED`) whose last status is older than this are deleted with their events and push configs: seconds, or `90s`, `15m`, `12h`, `30d`; empty or `0` = kept forever",
        shown="off",
    )
    context_idle_timeout: str = setting(
        "",
        "a context unused this long loses its bookkeeping: the `command` agent's directory under DATA_DIR/workspaces and the remembered working directory (also a turn's output directory a crash left under DATA_DIR/outputs); same format; off = kept",
        shown="off",
    )


def parse_duration(text: str, key: str) -> float:
    """Seconds of a duration setting (0 = off), or ValueError naming `key`."""
    if not text.strip():
        return 0.0
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ValueError(
            f"{key}: expected a duration like 3600, 90s, 15m, 12h or 30d (0 or empty = off), "
            f"got {text!r}"
        )
    seconds = float(found.group(1)) * _UNITS[(found.group(2) or "s").lower()]
    if seconds > 100 * 365 * 86400:
        raise ValueError(f"{key}: at most 100 years, got {text!r}")
    return seconds


def validate_retention(s: RetentionSettings) -> None:
    parse_duration(s.task_retention, "task_retention")
    parse_duration(s.context_idle_timeout, "context_idle_timeout")


def sweep_interval(seconds: float) -> float:
    """How often a job with this horizon looks: a tenth of it, between 0.2 s and 5 min."""
    return min(max(seconds / 10, 0.2), 300.0)


class TaskRetention:
    """Purges finished tasks older than `max_age` seconds from `store`, batch by batch."""

    def __init__(
        self,
        store: TaskStore,
        max_age: float,
        hooks: Sequence[PurgeHook] = (),
        batch: int = PURGE_BATCH,
        leftovers: Sequence[Callable[[], Awaitable[int]]] = (),
    ) -> None:
        self.store = store
        self.max_age = max_age
        self.hooks = list(hooks)  # the root may add more (e.g. the file store's release)
        self.batch = batch
        # What a crash can leave behind outside the tasks (half-written files): each call
        # removes what is stale now and says how much.
        self.leftovers = list(leftovers)

    async def sweep(self) -> int:
        """Purge everything due now; returns how many tasks were purged."""
        before_us = now_micros() - int(self.max_age * 1_000_000)
        total = 0
        while True:
            purged = await self.store.purge_finished(before_us, self.batch)
            total += len(purged)
            for hook in self.hooks if purged else ():
                try:
                    await hook(purged)
                except Exception:
                    log.exception("retention: a purge hook failed for %d task(s)", len(purged))
            if len(purged) < self.batch:
                break
            await asyncio.sleep(0)  # everything else runs between batches
        if total:
            log.info("retention: purged %d finished task(s) older than %g s", total, self.max_age)
        await purge_orphans(self.store, self.batch)
        for sweep in self.leftovers:
            removed = await sweep()
            if removed:
                log.info("retention: removed %d leftover(s) of a crash", removed)
        return total


async def purge_orphans(store: TaskStore, batch: int = PURGE_BATCH) -> int:
    """Delete push configs whose task is not stored, batch by batch; returns how many."""
    total = 0
    while True:
        gone = await store.purge_orphans(batch)
        total += gone
        if gone < batch:
            break
        await asyncio.sleep(0)
    if total:
        log.info("retention: deleted %d push config(s) of tasks that were never stored", total)
    return total
