"""The write queue both durable stores share: writes wait here for a group commit.

A write is queued with its caller's future, before any await, so call order is commit
order. When the queue asks the pacer (service.store.pacing) and it says "now" or "in
so many seconds", the store's `start` callback runs then; the store takes a batch
from the front of the queue, commits it its own way (SQLite: synchronously on the
loop; PostgreSQL: as a task, one on the wire at a time) and settles the batch's
futures here. While the store says it is `held` (a checkpoint pauses commits, the
write lock is busy, a commit is on the wire), a write only queues: the end of that
state starts the next commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from service.store.pacing import CommitPacer

# (what to write, its arguments, the caller's future)
Op = tuple[Any, tuple[Any, ...], "asyncio.Future[Any]"]
# What one write came to: (result, None) or (None, the error its caller gets)
Outcome = tuple[Any, BaseException | None]


def settle(batch: list[Op], outcomes: list[Outcome]) -> None:
    """Resolve the futures of one batch (on the caller's event loop)."""
    for (_, _, fut), (result, exc) in zip(batch, outcomes, strict=True):
        if fut.done():  # the caller was cancelled; its write committed anyway
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)


class GroupCommit:
    """Queued writes and when the next commit of them starts."""

    def __init__(
        self, interval: float, start: Callable[[], None], held: Callable[[], bool]
    ) -> None:
        self._interval = interval
        self._start = start  # the store's "commit the front of the queue now"
        self._held = held  # a commit will be started by something else
        self.pacer = CommitPacer(interval)
        self.pending: list[Op] = []
        self._handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def reset(self, loop: asyncio.AbstractEventLoop) -> None:
        """A fresh queue and pacer for a store (re)opened on `loop`."""
        self.cancel()
        self._loop = loop
        self.pending = []
        self.pacer = CommitPacer(self._interval)

    @property
    def scheduled(self) -> bool:
        """A commit is due at a set time (or on the next loop iteration)."""
        return self._handle is not None

    def submit(self, kind: Any, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Queue one write; its future settles when its batch has committed (or failed)."""
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        self.pending.append((kind, args, fut))  # before any await: call order = commit order
        self.pace()
        return fut

    def pace(self) -> None:
        """Ask the pacer when the queue's next commit starts, unless the store is held."""
        if self._held():
            return
        assert self._loop is not None
        when = self.pacer.on_write(self._loop.time(), len(self.pending), self.scheduled)
        if when is not None:
            self.schedule(when)

    def schedule(self, wait: float) -> None:
        """Start a commit in `wait` seconds (0: on the next loop iteration)."""
        assert self._loop is not None
        self.cancel()
        if wait > 0:
            self._handle = self._loop.call_later(wait, self._due)
        else:
            self._handle = self._loop.call_soon(self._due)

    def cancel(self) -> None:
        """Drop the scheduled start, if any."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def take(self, size: int) -> list[Op]:
        """The first `size` queued writes, taken off the queue."""
        batch = self.pending[:size]
        del self.pending[:size]
        return batch

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Every write still queued fails, each with an `error()` of its own (closing)."""
        left, self.pending = self.pending, []
        settle(left, [(None, error()) for _ in left])

    def _due(self) -> None:
        self._handle = None
        self._start()
