"""WAL checkpoints of the SQLite store, on a helper thread so the loop never fsyncs.

The writer connection never checkpoints (wal_autocheckpoint = 0). When the WAL has
grown past its mark, a checkpoint runs first beside the commits (a second read-only
connection, the pin, holds a read snapshot so that no commit on the loop can start
the WAL over, which would sync there), copying what was written before it; then once
more with commits paused (writes keep queueing, the event loop keeps serving), for
the few frames left, after which the WAL starts over and the first write into it
(which syncs its header) is made on the helper thread too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from service.store.sqlite_schema import restart_wal

log = logging.getLogger("service.store.sqlite")

_CHECKPOINT_BYTES = 16 * 1024 * 1024  # WAL size that triggers a checkpoint
_CHECKPOINT_CHECK_S = 0.25  # how often the WAL size is looked at (one stat call)


class Checkpoints:
    """The checkpoints of one open store; `resume` runs when paused commits may go on."""

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        pin: sqlite3.Connection,
        helper: ThreadPoolExecutor,
        loop: asyncio.AbstractEventLoop,
        resume: Callable[[], None],
    ) -> None:
        self._wal = path + "-wal"
        self._conn = conn  # copies the frames
        self._pin = pin  # holds a read snapshot while commits go on
        self._helper = helper
        self._loop = loop
        self._resume = resume
        self._copying: asyncio.Future[None] | None = None  # a checkpoint beside the commits
        self._paused: asyncio.Future[None] | None = None  # the short one with commits paused
        self._checked = 0.0
        self._open = True

    @property
    def pausing(self) -> bool:
        """Commits wait: the last frames are being checkpointed."""
        return self._paused is not None

    async def stop(self) -> None:
        """No new checkpoint; wait for the one running, if any."""
        self._open = False
        running = [f for f in (self._copying, self._paused) if f is not None]
        if running:
            await asyncio.wait(running)

    def maybe_start(self) -> None:
        """Start a checkpoint (on the helper thread) when the WAL has grown past its mark."""
        if not self._open or self._copying is not None or self._paused is not None:
            return
        now = self._loop.time()
        if now - self._checked < _CHECKPOINT_CHECK_S:
            return
        self._checked = now
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            return
        if size < _CHECKPOINT_BYTES:
            return
        self._copying = self._loop.run_in_executor(self._helper, self._checkpoint_sync, False)
        self._copying.add_done_callback(self._copy_done)

    def _checkpoint_sync(self, paused: bool) -> None:
        conn, pin = self._conn, self._pin
        started = time.monotonic()
        if paused:
            if pin.in_transaction:
                pin.execute("COMMIT")  # unpin: the WAL may start over now
        elif not pin.in_transaction:
            pin.execute("BEGIN")
            pin.execute("SELECT count(*) FROM sqlite_master").fetchall()  # takes the snapshot
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if paused and not busy and frames == copied:
            restart_wal(conn)
        log.debug(
            "task store: checkpoint%s copied %d of %d WAL frames in %.1f ms%s",
            " (commits paused)" if paused else "",
            copied,
            frames,
            1000 * (time.monotonic() - started),
            " (busy)" if busy else "",
        )

    @staticmethod
    def _report(fut: asyncio.Future[None]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            log.error(
                "task store: checkpoint failed: %s",
                "cancelled" if fut.cancelled() else fut.exception(),
            )

    def _copy_done(self, fut: asyncio.Future[None]) -> None:
        self._copying = None
        self._report(fut)
        if self._open:
            # No commit runs now (they run on this loop): pause them for the last frames.
            self._paused = self._loop.run_in_executor(self._helper, self._checkpoint_sync, True)
            self._paused.add_done_callback(self._paused_done)

    def _paused_done(self, fut: asyncio.Future[None]) -> None:
        self._paused = None
        self._report(fut)
        if self._open:
            self._resume()
