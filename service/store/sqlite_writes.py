"""The SQLite store's writes: the statements of each kind of write, and the writer that
commits the queued ones in batches on the event loop (service.store.group_commit).

A batch first runs as a few multi-row statements (all saves at once, the last
snapshot of each task, every event). If anything in it fails, the transaction is
rolled back and the batch is replayed one call at a time, each inside its own
SAVEPOINT, so only the failing calls fail (e.g. a duplicate event sequence) and the
others still commit. The writer connection does not wait when another process holds
the write lock: the batch stays queued and is retried with back-off for up to 10 s,
then everything queued fails.

Every sqlite3 call releases and re-takes the GIL (grpc's poller thread may take it in
between), so a batch is written with as few calls as possible: multi-row VALUES,
task_counts changed once per batch by the sum of its changes.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import service.store.sql as sql
from service.store.event_blob import pack_events
from service.store.group_commit import GroupCommit, Op, Outcome, settle
from service.store.sqlite_checkpoint import Checkpoints
from service.store.sqlite_schema import BUSY_TIMEOUT_S, FINISHED_SQL
from service.telemetry import hub

log = logging.getLogger("service.store.sqlite")

UNAVAILABLE = "task store unavailable"

_MAX_BATCH = 512  # operations per transaction (bounds how long one commit holds the loop)
_BUSY_TIMEOUT_S = BUSY_TIMEOUT_S  # how long queued writes wait for another process's lock
_BUSY_RETRY_S = (0.001, 0.05)  # first and longest pause between attempts


def unavailable() -> RuntimeError:
    return RuntimeError(UNAVAILABLE)


# ---------------------------------------------------------------- write bodies
#
# Everything here runs on the event loop inside the batch transaction.

_TASK_INSERT = (
    "INSERT INTO tasks (tenant, owner, id, context_id, state, status_us, snapshot, snapshot_seq)"
    " VALUES {values}"
)
_TASK_UPSERT = (
    _TASK_INSERT
    + " ON CONFLICT (tenant, owner, id) DO UPDATE SET context_id = excluded.context_id,"
    " state = excluded.state, status_us = excluded.status_us, snapshot = excluded.snapshot,"
    " snapshot_seq = excluded.snapshot_seq"
)
_EVENT_INSERT = (
    "INSERT INTO events (tenant, owner, task_id, last_seq, first_seq, payload) VALUES {values}"
)
_COUNT_ADD = (
    "INSERT INTO task_counts (tenant, owner, context_id, state, n) VALUES {values}"
    " ON CONFLICT (tenant, owner, context_id, state) DO UPDATE SET n = n + excluded.n"
)
# What the batch's tasks were before it (a join on the primary key: `IN (VALUES ...)`
# would scan the table).
_STORED_STATES = (
    "SELECT t.tenant, t.owner, t.id, t.context_id, t.state, t.status_us FROM (VALUES {values})"
    " AS k JOIN tasks AS t ON t.tenant = k.column1 AND t.owner = k.column2 AND t.id = k.column3"
)
# A task whose indexed columns stay as they are (an artifact chunk, most events of a
# stream): only its snapshot changes, and no index entry is rewritten.
_SNAPSHOT_UPDATE = (
    "UPDATE tasks SET snapshot = ?, snapshot_seq = ? WHERE tenant = ? AND owner = ? AND id = ?"
)
# The same for a task whose saves carry only artifact events (`steady`): its stored
# columns are taken to be these, no SELECT reads them first; a row that differs after all
# (or is missing) is left as it is and takes the general path.
_SNAPSHOT_IF_SAME = _SNAPSHOT_UPDATE + " AND context_id = ? AND state = ? AND status_us = ?"
_PUT_CONFIG = sql.put_config(sql.SQLITE)
_DELETE_CONFIG = sql.delete_config(sql.SQLITE)

_MAX_ROWS = 64  # rows per statement; 64 sizes x 5 statements fit the statement cache
_sql_cache: dict[tuple[str, int], str] = {}

_TaskKey = tuple[str, str, str]  # (tenant, owner, task id)


def _each_chunk(
    conn: sqlite3.Connection, template: str, width: int, rows: list[tuple[Any, ...]]
) -> Iterator[sqlite3.Cursor]:
    """`template` run over `rows` as multi-row VALUES of at most _MAX_ROWS rows each."""
    for i in range(0, len(rows), _MAX_ROWS):
        chunk = rows[i : i + _MAX_ROWS]
        text = _sql_cache.get((template, len(chunk)))
        if text is None:
            row = "(" + ", ".join("?" * width) + ")"
            text = template.format(values=", ".join([row] * len(chunk)))
            _sql_cache[(template, len(chunk))] = text
        yield conn.execute(text, [value for r in chunk for value in r])


def _insert(
    conn: sqlite3.Connection, template: str, width: int, rows: list[tuple[Any, ...]]
) -> None:
    for _ in _each_chunk(conn, template, width, rows):
        pass


def _count_keys(context_id: str, state: int) -> set[tuple[str, int]]:
    """The task_counts rows one task is counted in: any/its context x any/its state
    (a set: '' context or state 0 would name the same row twice)."""
    return {("", 0), (context_id, 0), ("", state), (context_id, state)}


def _stored_columns(
    conn: sqlite3.Connection, latest: dict[_TaskKey, tuple[Any, ...]], created: set[_TaskKey]
) -> dict[_TaskKey, tuple[str, int, int]]:
    """(context, state, status_us) of the batch's tasks as stored before it (none for the
    `created` ones, nor for tasks not stored yet)."""
    return {
        (tenant, owner, task_id): (context_id, state, status_us)
        for cursor in _each_chunk(conn, _STORED_STATES, 3, [k for k in latest if k not in created])
        for tenant, owner, task_id, context_id, state, status_us in cursor
    }


def _count_changes(
    latest: dict[_TaskKey, tuple[Any, ...]], before: dict[_TaskKey, tuple[str, int, int]]
) -> list[tuple[Any, ...]]:
    """task_counts rows to add to, from each task's stored (context, state) before this
    batch to its last one in it; changes to one row are summed."""
    delta: dict[tuple[str, str, str, int], int] = {}
    for key, row in latest.items():
        now, stored = (row[3], row[4]), before.get(key)
        was = None if stored is None else stored[:2]
        if now == was:
            continue
        changes = [(now, 1)] if was is None else [(was, -1), (now, 1)]
        for (context_id, state), sign in changes:
            for c, st in _count_keys(context_id, state):
                full = (key[0], key[1], c, st)
                delta[full] = delta.get(full, 0) + sign
    return [(*full, n) for full, n in delta.items() if n]


def _w_save_many(conn: sqlite3.Connection, saves: list[tuple[Any, ...]]) -> None:
    """All `save` calls of a batch at once: the last snapshot of each task (earlier
    ones would be overwritten in the same transaction anyway), every event, and the
    counters' net change.

    A task whose events here start at 1 is being created (the engine numbers a
    task's events from its creation): it is inserted, not upserted, and has no
    earlier state to look up. Should it exist after all, the insert fails and the
    batch is replayed call by call, so the counters never count a task twice.

    A task whose saves here are all steady (artifact events only) gets its snapshot in one
    conditional UPDATE, with no SELECT of what it was: its indexed columns and counts
    stand. Only if that row differs (or is not there) does it take the general path.

    A save without a snapshot (SqliteTaskStore.save kept the stored one) adds only its
    events. A stored snapshot records the sequence of the last event it holds
    (`snapshot_seq`; NULL for a save without events: it holds all of them), so that reads
    apply the events stored after it (sqlite_reads)."""
    latest: dict[_TaskKey, tuple[Any, ...]] = {}
    runs: dict[_TaskKey, list[tuple[int, bytes]]] = {}
    steady: dict[_TaskKey, bool] = {}  # every save of the task in the batch is steady
    for args in saves:
        key = (args[0], args[1], args[2])
        if args[6] is not None:
            latest[key] = (*args[:7], args[7][-1][0] if args[7] else None)
        steady[key] = steady.get(key, True) and args[9]
        if args[7]:
            runs.setdefault(key, []).extend(args[7])
    created = {key for key, evs in runs.items() if evs[0][0] == 1}
    for key, alone in steady.items():
        row = latest.get(key)
        if alone and row is not None and key not in created:
            if conn.execute(_SNAPSHOT_IF_SAME, (row[6], row[7], *key, *row[3:6])).rowcount:
                del latest[key]  # stored: its columns and counts stay as they are
    before = _stored_columns(conn, latest, created)
    counts = _count_changes(latest, before)
    if counts:
        _insert(conn, _COUNT_ADD, 5, counts)
    if created:
        _insert(conn, _TASK_INSERT, 8, [row for key, row in latest.items() if key in created])
    if len(created) < len(latest):
        changed, same = [], []
        for key, row in latest.items():
            if key in created:
                continue
            if before.get(key) == (row[3], row[4], row[5]):
                same.append((row[6], row[7], *key))
            else:
                changed.append(row)
        if changed:
            _insert(conn, _TASK_UPSERT, 8, changed)
        if same:
            conn.executemany(_SNAPSHOT_UPDATE, same)
    if runs:
        rows = [(*key, evs[-1][0], evs[0][0], pack_events(evs)) for key, evs in runs.items()]
        _insert(conn, _EVENT_INSERT, 6, rows)
    for args in saves:  # push configs that go with a task's first events (rare)
        for task_id, config_id, payload in args[8]:
            w_put_config(conn, args[0], args[1], task_id, config_id, payload)


def w_save(
    conn: sqlite3.Connection,
    tenant: str,
    owner: str,
    task_id: str,
    context_id: str,
    state: int,
    status_us: int,
    snapshot: bytes | None,
    events: list[tuple[int, bytes]],
    configs: list[tuple[str, str, bytes]],
    steady: bool,
) -> None:
    """One `save` (when a batch is replayed call by call). `steady`: its events are all
    artifact updates, so the task's state and status time are likely as stored."""
    save = (tenant, owner, task_id, context_id, state, status_us, snapshot, events, configs, steady)
    _w_save_many(conn, [save])


def w_put_config(
    conn: sqlite3.Connection, tenant: str, owner: str, task_id: str, config_id: str, payload: bytes
) -> None:
    conn.execute(_PUT_CONFIG, (tenant, owner, task_id, config_id, payload))


def w_delete_config(
    conn: sqlite3.Connection, tenant: str, owner: str, task_id: str, config_id: str
) -> bool:
    cur = conn.execute(_DELETE_CONFIG, (tenant, owner, task_id, config_id))
    return cur.rowcount > 0


def w_purge(conn: sqlite3.Connection, before_us: int, limit: int) -> list[tuple[str, str, str]]:
    """Retention: up to `limit` finished tasks older than `before_us`, oldest first, with
    their events, push configs and counts (counter rows that reach 0 go too)."""
    rows = conn.execute(
        "SELECT tenant, owner, id, context_id, state FROM tasks INDEXED BY tasks_finished"
        f" WHERE {FINISHED_SQL} AND status_us < ? ORDER BY status_us LIMIT ?",
        (int(before_us), max(int(limit), 0)),
    ).fetchall()
    if not rows:
        return []
    delta: dict[tuple[str, str, str, int], int] = {}
    for tenant, owner, _, context_id, state in rows:
        for c, st in _count_keys(context_id, state):
            full = (tenant, owner, c, st)
            delta[full] = delta.get(full, 0) - 1
    _insert(conn, _COUNT_ADD, 5, [(*full, n) for full, n in delta.items()])
    conn.executemany(
        "DELETE FROM task_counts WHERE tenant = ? AND owner = ? AND context_id = ? AND state = ?"
        " AND n <= 0",
        list(delta),
    )
    keys = [(tenant, owner, task_id) for tenant, owner, task_id, _, _ in rows]
    conn.executemany("DELETE FROM tasks WHERE tenant = ? AND owner = ? AND id = ?", keys)
    conn.executemany("DELETE FROM events WHERE tenant = ? AND owner = ? AND task_id = ?", keys)
    conn.executemany(
        "DELETE FROM push_configs WHERE tenant = ? AND owner = ? AND task_id = ?", keys
    )
    return keys


def w_purge_orphans(conn: sqlite3.Connection, limit: int) -> int:
    """Push configs whose task is not stored (at most `limit`)."""
    cur = conn.execute(
        "DELETE FROM push_configs WHERE rowid IN (SELECT c.rowid FROM push_configs AS c"
        " WHERE NOT EXISTS (SELECT 1 FROM tasks AS t"
        " WHERE t.tenant = c.tenant AND t.owner = c.owner AND t.id = c.task_id) LIMIT ?)",
        (max(int(limit), 0),),
    )
    return cur.rowcount


def _is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the write lock (SQLITE_BUSY and its extended codes)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


# ---------------------------------------------------------------- the writer


class SqliteWriter:
    """Commits the queued writes of one open store on its event loop."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        commit_interval: float,
        checkpoints: Checkpoints,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._conn = conn
        self._commits = GroupCommit(commit_interval, self.flush_soon, self.held)
        self._commits.reset(loop)
        self._checkpoints = checkpoints
        self._busy_since: float | None = None  # the write lock is held elsewhere since
        self._busy_pause = _BUSY_RETRY_S[0]

    def submit(self, write: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Queue `write(conn, *args)` for the next group commit."""
        return self._commits.submit(write, args)

    def held(self) -> bool:
        """Commits wait for the end of a checkpoint, or for the retry timer."""
        return self._checkpoints.pausing or self._busy_since is not None

    def flush_soon(self) -> None:
        """Commit the first batch now (the group commit's start), and schedule the next."""
        commits = self._commits
        if not self._checkpoints.pausing and commits.pending and self._flush():
            self._checkpoints.maybe_start()
        if commits.pending and not commits.scheduled and not self._checkpoints.pausing:
            # More than one batch was queued, or the write lock was busy.
            commits.schedule(self._busy_pause if self._busy_since is not None else 0)

    def resume(self) -> None:
        """The paused checkpoint ended: commit what queued meanwhile."""
        if self._commits.pending and not self._commits.scheduled:
            self._commits.schedule(0)

    async def drain(self) -> None:
        """Commit everything queued (closing); what cannot commit fails, also when this
        is cancelled, so no caller hangs."""
        self._commits.cancel()
        try:
            await self._checkpoints.stop()
            while self._commits.pending:
                if not self._flush():  # the write lock is held elsewhere: wait and retry
                    await asyncio.sleep(self._busy_pause)
        finally:
            self._commits.fail_all(lambda: RuntimeError("task store is closed"))
            self._busy_since, self._busy_pause = None, _BUSY_RETRY_S[0]

    def _flush(self) -> bool:
        """Commit the first batch of queued writes and settle their futures. False when
        another process holds the write lock (the batch stays queued)."""
        commits = self._commits
        loop = asyncio.get_running_loop()
        batch = commits.pending[:_MAX_BATCH]
        tel = hub.current
        started = time.perf_counter() if tel is not None else 0.0
        outcomes = self._commit_batch(self._conn, batch)
        if tel is not None and outcomes is not None:
            tel.committed(time.perf_counter() - started, len(batch))
        if outcomes is None:
            now = loop.time()
            if self._busy_since is None:
                self._busy_since = now
                log.warning("task store: the database is locked by another process; writes wait")
            elif now - self._busy_since < _BUSY_TIMEOUT_S:
                self._busy_pause = min(self._busy_pause * 2, _BUSY_RETRY_S[1])
            else:
                # Fail everything queued now, not one batch per 10 s.
                batch = list(commits.pending)
                log.error(
                    "task store: the database stayed locked for %.0f s; %d write(s) failed",
                    _BUSY_TIMEOUT_S,
                    len(batch),
                )
                outcomes = [(None, unavailable()) for _ in batch]
            if outcomes is None:
                return False
        self._busy_since, self._busy_pause = None, _BUSY_RETRY_S[0]
        commits.take(len(batch))
        commits.pacer.on_commit(loop.time(), len(batch))
        settle(batch, outcomes)
        return True

    def _commit_batch(self, conn: sqlite3.Connection, batch: list[Op]) -> list[Outcome] | None:
        """One transaction for the batch; None when the write lock is busy."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                return None
            log.error("task store: cannot start a write transaction: %s", exc)
            return [(None, unavailable()) for _ in batch]
        try:
            try:
                return _run_fast(conn, batch)
            except Exception as exc:
                # Some call failed: undo the whole attempt and redo the batch with one
                # savepoint per call, so only the failing calls fail.
                log.debug("task store: batch of %d failed (%s); replaying it", len(batch), exc)
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as again:
                    if _is_busy(again):  # another process got in between: retry it all later
                        return None
                    raise
                return _run_isolated(conn, batch)
        except Exception:  # the database (or a bug here): fail the batch, keep serving
            log.exception("task store: commit of %d writes failed", len(batch))
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except Exception:
                log.exception("task store: rollback failed")
            return [(None, unavailable()) for _ in batch]


def _run_fast(conn: sqlite3.Connection, batch: list[Op]) -> list[Outcome]:
    """The common case, every call succeeds: all saves at once, no savepoints."""
    results: list[Outcome] = [(None, None)] * len(batch)
    saves = [args for fn, args, _ in batch if fn is w_save]
    if saves:
        _w_save_many(conn, saves)
    if len(saves) < len(batch):
        for i, (fn, args, _) in enumerate(batch):
            if fn is not w_save:  # push configs (another table): in call order
                results[i] = (fn(conn, *args), None)
    conn.execute("COMMIT")
    return results


def _run_isolated(conn: sqlite3.Connection, batch: list[Op]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for fn, args, _ in batch:
        write: Callable[..., Any] = fn
        conn.execute("SAVEPOINT op")
        try:
            result = write(conn, *args)
        except Exception as exc:
            # If the savepoint cannot be rolled back, the outer handler fails the batch.
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
            if isinstance(exc, sqlite3.Error):
                log.error("task store: write %s failed: %s", write.__name__, exc)
                exc = unavailable()
            outcomes.append((None, exc))  # a non-SQLite error is a bug: pass it on
            continue
        conn.execute("RELEASE op")
        outcomes.append((result, None))
    conn.execute("COMMIT")
    return outcomes
