"""Durable task store on SQLite (WAL), with group commit on the event loop.

Writes (`save`, `put_push_config`, `delete_push_config`, the purges) are queued and
committed together, in call order, in one transaction, by a callback on the event
loop that owns the store; each caller's coroutine returns only after its
transaction committed. A lone caller's write commits on the next loop iteration;
when independent callers write, commits wait for the next slot
(`commit_interval`, default 5 ms, after the last one; doubled while more of them
arrive than a slot gathers) so that all their writes share one transaction
(service.store.group_commit queues them, service.store.pacing decides when). That
is what makes the store cheap: a commit of 15 saves costs little more than a commit
of one, and no thread hand-off (and no fight for the GIL) sits on the path of a
request. A cancelled caller does not un-queue its write.

The loop never waits on a lock or on the disk: the writer does not wait when
another process holds the write lock (service.store.sqlite_writes), and every fsync
runs on a helper thread: WAL checkpoints (service.store.sqlite_checkpoint) and the
final close. A test traces the syscalls to hold this. Reads run on a separate
read-only connection in one reader thread (service.store.sqlite_reads).

`journal_mode=WAL` + `synchronous=NORMAL` (service.store.sqlite_schema): a commit is
in the WAL file (the OS page cache) when it returns, so it survives kill -9 of the
process; a power loss may drop the last transactions, which is outside our
durability bar.

SQLite errors are logged with their details (which may include file paths) and
surface to callers only as `RuntimeError("task store unavailable")`.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import service.store.sqlite_reads as reads
import service.store.sqlite_writes as writes
from gen import a2a_pb2 as pb
from service.protocol.timeutil import status_micros
from service.store.base import Scope, Snapshot, StoredEvent, artifacts_only, encoded
from service.store.pacing import DEFAULT_COMMIT_INTERVAL
from service.store.sql_reads import ReadQueries, SqlReads
from service.store.sqlite_checkpoint import Checkpoints
from service.store.sqlite_schema import (
    SNAPSHOT_EVERY,
    connect,
    migrate,
    page_token_key,
    restart_wal,
)

log = logging.getLogger(__name__)


def _crosses_multiple(events: list[StoredEvent]) -> bool:
    """Whether the save's sequence numbers reach the next multiple of SNAPSHOT_EVERY."""
    return events[-1].seq // SNAPSHOT_EVERY > (events[0].seq - 1) // SNAPSHOT_EVERY


class SqliteTaskStore(SqlReads):
    """`TaskStore` on one SQLite file in WAL mode; see the module docstring."""

    queries: ClassVar[ReadQueries] = reads  # run on the reader thread (`_read`)

    def __init__(self, path: str, commit_interval: float = DEFAULT_COMMIT_INTERVAL) -> None:
        self._path = path
        self._commit_interval = commit_interval
        self._lock = asyncio.Lock()
        self._open = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0  # the thread of that loop
        self._writer: writes.SqliteWriter | None = None
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._helper: ThreadPoolExecutor | None = None  # checkpoints, closing the writer
        # Checkpoints, on the helper thread: `_cconn` copies, `_pin` holds a read snapshot
        # while commits go on, so that no commit on the loop can start the WAL over.
        self._cconn: sqlite3.Connection | None = None
        self._pin: sqlite3.Connection | None = None
        self.page_token_key = b""  # set by open()

    # ------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        async with self._lock:
            if self._open:
                return
            try:
                wconn, rconn, cconn, pin = await asyncio.to_thread(self._open_sync)
            except (sqlite3.Error, OSError) as exc:
                # Startup reports it as one line naming the store setting.
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise RuntimeError(f"{writes.UNAVAILABLE}: {reason}") from None
            loop = self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()
            self._wconn, self._rconn, self._cconn, self._pin = wconn, rconn, cconn, pin
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store-read")
            self._helper = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="task-store-checkpoint"
            )
            checkpoints = Checkpoints(self._path, cconn, pin, self._helper, loop, self._resume)
            self._writer = writes.SqliteWriter(wconn, self._commit_interval, checkpoints, loop)
            self._open = True

    def _resume(self) -> None:
        if self._open and self._writer is not None:
            self._writer.resume()

    def _open_sync(self) -> tuple[sqlite3.Connection, ...]:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        opened: list[sqlite3.Connection] = []
        try:
            wconn = connect(self._path, writer=True)
            opened.append(wconn)
            migrate(wconn)  # may wait for another process: this is a helper thread
            self.page_token_key = page_token_key(wconn)
            restart_wal(wconn)
            wconn.execute("PRAGMA busy_timeout = 0")  # from now on it runs on the event loop
            opened.append(connect(self._path, writer=False))  # reads
            opened.append(connect(self._path, writer=True))  # checkpoints
            opened.append(connect(self._path, writer=False))  # the pin
        except BaseException:
            for conn in opened:
                conn.close()
            raise
        return tuple(opened)

    async def close(self) -> None:
        """Commit everything queued, stop the threads, close the connections."""
        async with self._lock:
            if not self._open:
                return
            self._open = False  # new calls fail from here on
            writer = self._writer
            assert writer is not None
            try:
                await writer.drain()
            finally:
                # Also when close() itself is cancelled: nothing hangs, the store reopens.
                wconn, rconn, cconn, pin = self._wconn, self._rconn, self._cconn, self._pin
                reader, helper = self._reader, self._helper
                assert wconn and rconn and cconn and pin and reader and helper
                self._wconn = self._rconn = self._cconn = self._pin = None
                self._reader = self._helper = None
                self._writer = None
                loop = asyncio.get_running_loop()
                # On the helper thread: after any checkpoint still running there, and the
                # last close may checkpoint (with fsync), which must not run on the loop.
                await loop.run_in_executor(helper, pin.close)  # ends its read, if any
                await loop.run_in_executor(helper, cconn.close)
                await loop.run_in_executor(helper, wconn.close)
                await loop.run_in_executor(reader, rconn.close)
                reader.shutdown(wait=True)
                helper.shutdown(wait=True)

    # ---------------------------------------------------------------- writes

    def _write(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future[Any]:
        if not self._open or self._writer is None:
            raise RuntimeError("task store is not open")
        # Its loop running on this thread is the running loop (one a thread at a time); asked
        # so, not with asyncio.get_running_loop(), a getpid() system call per write on 3.11.
        loop = self._loop
        if loop is None or self._thread != threading.get_ident() or not loop.is_running():
            raise RuntimeError(
                "the task store is used from another event loop than the one that opened it"
            )
        return self._writer.submit(fn, args)

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
        snapshot: Snapshot | None = None,
        steady: bool = False,
    ) -> None:
        # Serialized now, so later mutations of `task` by the caller are not stored. A
        # steady save between two multiples of SNAPSHOT_EVERY keeps the stored snapshot:
        # only its events are written (None), and reads apply them (sqlite_reads).
        keep = steady and bool(events) and events[0].seq > 1 and not _crosses_multiple(events)
        args = (
            scope.tenant,
            scope.owner,
            task.id,
            task.context_id,
            int(task.status.state),
            status_micros(task),
            None if keep else encoded(task, snapshot),
            [(e.seq, e.event.SerializeToString()) for e in events],
            [(c.task_id, c.id, c.SerializeToString()) for c in configs],
            artifacts_only(events),
        )
        await self._write(writes.w_save, args)

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        args = (scope.tenant, scope.owner, config.task_id, config.id, config.SerializeToString())
        await self._write(writes.w_put_config, args)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        args = (scope.tenant, scope.owner, task_id, config_id)
        deleted: bool = await self._write(writes.w_delete_config, args)
        return deleted

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        # A write like any other: it shares the group commit, in call order.
        keys = await self._write(writes.w_purge, (before_us, limit))
        return [(Scope(tenant, owner), task_id) for tenant, owner, task_id in keys]

    async def purge_orphans(self, limit: int) -> int:
        result: int = await self._write(writes.w_purge_orphans, (limit,))
        return result

    # ----------------------------------------------------------------- reads

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self._open:
            raise RuntimeError("task store is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._reader, fn, self._rconn, *args)
        except sqlite3.Error:
            log.exception("task store: read %s failed", fn.__name__)
            raise writes.unavailable() from None
