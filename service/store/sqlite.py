"""Durable task store on SQLite (WAL), with group commit.

Writes (`save`, `put_push_config`, `delete_push_config`) are queued to ONE
writer thread that drains the queue and commits everything pending in a single
transaction (group commit), then resolves each caller's future on its event
loop. A write's coroutine returns only after its transaction committed; the
queue is FIFO, so the order of calls is the order of commit. A caller that is
cancelled while waiting does not un-queue its write.

A batch first runs as a few multi-row statements (all saves at once, the last
snapshot of each task, every event). If anything in it fails, the transaction
is rolled back and the batch is replayed one call at a time, each inside its
own SAVEPOINT, so only the failing calls fail (e.g. a duplicate event
sequence) and the others still commit.

Reads run on a separate read-only connection in one reader thread. In WAL
mode readers never block the writer and see every committed transaction.

`journal_mode=WAL` + `synchronous=NORMAL`: a commit is in the WAL file (the OS
page cache) when it returns, so it survives kill -9 of the process; a power
loss may drop the last transactions, which is outside our durability bar.

Throughput knobs: a WAL checkpoint every ~40 MiB of WAL instead of SQLite's
default 4 MiB (each checkpoint fsyncs, on the writer thread), and database
pages read through mmap.

ListTasks is keyset-paged over one index per filter combination and its
`total_size` comes from counters (`task_counts`) that triggers on `tasks` keep
in the same transaction as the task rows, so neither grows with the number of
stored tasks; only a `status_after_us` filter falls back to COUNT(*) over the
index range.

SQLite errors are logged with their details (which may include file paths) and
surface to callers only as `RuntimeError("task store unavailable")`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gen import a2a_pb2 as pb
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery
from service.timeutil import status_micros

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_UNSETTLED = (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
_UNSETTLED_SQL = "state IN ({}, {})".format(*(int(s) for s in _UNSETTLED))

_MAX_BATCH = 1024  # operations per group-commit transaction
_BUSY_TIMEOUT_MS = 10_000
_WAL_AUTOCHECKPOINT_PAGES = 10_000
_MMAP_BYTES = 256 * 1024 * 1024  # read database pages through mmap (fewer syscalls)
_WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes the WAL file is truncated to after a checkpoint


def _count_change(row: str, sign: str) -> str:
    """Trigger statement: add or remove one task (`row` = NEW or OLD) in task_counts.

    Its keys are (any context, any state), (its context, any state), (any context,
    its state), (its context, its state); UNION drops the duplicates that appear
    when its context_id is '' or its state is 0.
    """
    keys = (
        f"SELECT '' AS c, 0 AS s UNION SELECT {row}.context_id, 0"
        f" UNION SELECT '', {row}.state UNION SELECT {row}.context_id, {row}.state"
    )
    return (
        "INSERT INTO task_counts (tenant, owner, context_id, state, n)"
        f" SELECT {row}.tenant, {row}.owner, k.c, k.s, {sign}1 FROM ({keys}) AS k WHERE true"
        f" ON CONFLICT (tenant, owner, context_id, state) DO UPDATE SET n = n {sign} 1"
    )


_SCHEMA_V1 = (
    # One row per task: the whole snapshot plus the columns ListTasks filters on.
    """CREATE TABLE IF NOT EXISTS tasks (
        tenant     TEXT    NOT NULL,
        owner      TEXT    NOT NULL,
        id         TEXT    NOT NULL,
        context_id TEXT    NOT NULL,
        state      INTEGER NOT NULL,
        status_us  INTEGER NOT NULL,
        snapshot   BLOB    NOT NULL,
        PRIMARY KEY (tenant, owner, id)
    )""",
    # One index per ListTasks filter combination; each ends in (status_us, id)
    # so the page is an ordered range scan with no sort and no filtering.
    "CREATE INDEX IF NOT EXISTS tasks_by_time ON tasks (tenant, owner, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_context"
    " ON tasks (tenant, owner, context_id, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (tenant, owner, state, status_us, id)",
    "CREATE INDEX IF NOT EXISTS tasks_by_context_state"
    " ON tasks (tenant, owner, context_id, state, status_us, id)",
    # Small partial index: only running tasks, read at startup by unsettled().
    f"CREATE INDEX IF NOT EXISTS tasks_unsettled ON tasks (state) WHERE {_UNSETTLED_SQL}",
    # Row counts for total_size, kept by triggers (below).
    # context_id '' = any context, state 0 = any state.
    """CREATE TABLE IF NOT EXISTS task_counts (
        tenant     TEXT    NOT NULL,
        owner      TEXT    NOT NULL,
        context_id TEXT    NOT NULL,
        state      INTEGER NOT NULL,
        n          INTEGER NOT NULL,
        PRIMARY KEY (tenant, owner, context_id, state)
    ) WITHOUT ROWID""",
    # task_counts follows every insert, state/context change and delete of a task,
    # inside the same statement (so inside the same transaction).
    f"""CREATE TRIGGER IF NOT EXISTS tasks_count_insert AFTER INSERT ON tasks BEGIN
        {_count_change("NEW", "+")};
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS tasks_count_update AFTER UPDATE OF context_id, state ON tasks
    WHEN OLD.context_id IS NOT NEW.context_id OR OLD.state IS NOT NEW.state BEGIN
        {_count_change("OLD", "-")};
        {_count_change("NEW", "+")};
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS tasks_count_delete AFTER DELETE ON tasks BEGIN
        {_count_change("OLD", "-")};
    END""",
    # Events in runs: one row per task per commit holds every event that commit
    # added (a turn's events usually share one), framed by _pack_events. A row is
    # keyed by its last sequence number; a re-used last number is rejected.
    """CREATE TABLE IF NOT EXISTS events (
        tenant    TEXT    NOT NULL,
        owner     TEXT    NOT NULL,
        task_id   TEXT    NOT NULL,
        last_seq  INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        payload   BLOB    NOT NULL,
        PRIMARY KEY (tenant, owner, task_id, last_seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS push_configs (
        tenant  TEXT NOT NULL,
        owner   TEXT NOT NULL,
        task_id TEXT NOT NULL,
        id      TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (tenant, owner, task_id, id)
    )""",
)

_UNAVAILABLE = "task store unavailable"


def _unavailable() -> RuntimeError:
    return RuntimeError(_UNAVAILABLE)


# ---------------------------------------------------------------- list queries


def _list_index(query: TaskQuery) -> str:
    if query.context_id and query.state:
        return "tasks_by_context_state"
    if query.context_id:
        return "tasks_by_context"
    if query.state:
        return "tasks_by_state"
    return "tasks_by_time"


def _list_where(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    where = ["tenant = ?", "owner = ?"]
    params: list[Any] = [scope.tenant, scope.owner]
    if query.context_id:
        where.append("context_id = ?")
        params.append(query.context_id)
    if query.state:
        where.append("state = ?")
        params.append(int(query.state))
    if query.status_after_us is not None:
        where.append("status_us > ?")
        params.append(int(query.status_after_us))
    return " AND ".join(where), params


def page_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size).

    Module level so the tests can check its query plan.
    """
    where, params = _list_where(scope, query)
    if query.cursor is not None:
        where += " AND (status_us, id) < (?, ?)"
        params += [int(query.cursor[0]), str(query.cursor[1])]
    sql = (
        f"SELECT snapshot, status_us, id FROM tasks INDEXED BY {_list_index(query)}"
        f" WHERE {where} ORDER BY status_us DESC, id DESC LIMIT ?"
    )
    params.append(max(query.page_size, 0) + 1)
    return sql, params


def count_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of total_size: a counter lookup, or COUNT(*) over the
    index range when `status_after_us` is set."""
    if query.status_after_us is None:
        return (
            "SELECT n FROM task_counts"
            " WHERE tenant = ? AND owner = ? AND context_id = ? AND state = ?",
            [scope.tenant, scope.owner, query.context_id or "", int(query.state or 0)],
        )
    where, params = _list_where(scope, query)
    return f"SELECT COUNT(*) FROM tasks INDEXED BY {_list_index(query)} WHERE {where}", params


# ------------------------------------------------------- writer-thread bodies
#
# Everything here runs on the writer thread inside the batch transaction.
# Every sqlite3 call releases and re-takes the GIL, which the event loop thread
# holds most of the time under load, so a batch is written with as few calls
# as possible: multi-row VALUES, and task_counts kept by triggers, not Python.

_TASK_UPSERT = (
    "INSERT INTO tasks (tenant, owner, id, context_id, state, status_us, snapshot)"
    " VALUES {values}"
    " ON CONFLICT (tenant, owner, id) DO UPDATE SET context_id = excluded.context_id,"
    " state = excluded.state, status_us = excluded.status_us, snapshot = excluded.snapshot"
)
_EVENT_INSERT = (
    "INSERT INTO events (tenant, owner, task_id, last_seq, first_seq, payload) VALUES {values}"
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _pack_events(events: list[tuple[int, bytes]]) -> bytes:
    """(seq, serialized StreamResponse) pairs as varint seq, varint length, bytes."""
    return b"".join(_varint(seq) + _varint(len(payload)) + payload for seq, payload in events)


def _unpack_events(blob: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(blob):
        numbers = []
        for _ in range(2):
            value = shift = 0
            while True:
                byte = blob[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            numbers.append(value)
        seq, length = numbers
        out.append((seq, blob[pos : pos + length]))
        pos += length
    return out
_MAX_ROWS = 64  # rows per statement; 64 sizes x 2 statements fit the statement cache
_sql_cache: dict[tuple[str, int], str] = {}


def _insert(conn: sqlite3.Connection, template: str, width: int, rows: list[tuple]) -> None:
    """`rows` through multi-row VALUES statements of at most _MAX_ROWS rows."""
    for i in range(0, len(rows), _MAX_ROWS):
        chunk = rows[i : i + _MAX_ROWS]
        sql = _sql_cache.get((template, len(chunk)))
        if sql is None:
            row = "(" + ", ".join("?" * width) + ")"
            sql = template.format(values=", ".join([row] * len(chunk)))
            _sql_cache[(template, len(chunk))] = sql
        conn.execute(sql, [value for r in chunk for value in r])


def _w_save_many(conn: sqlite3.Connection, saves: list[tuple]) -> None:
    """All `save` calls of a batch at once: the last snapshot of each task (earlier
    ones would be overwritten in the same transaction anyway) and every event."""
    latest: dict[tuple[str, str, str], tuple] = {}
    runs: dict[tuple[str, str, str], list[tuple[int, bytes]]] = {}
    for args in saves:
        key = (args[0], args[1], args[2])
        latest[key] = args[:7]
        if args[7]:
            runs.setdefault(key, []).extend(args[7])
    _insert(conn, _TASK_UPSERT, 7, list(latest.values()))
    if runs:
        rows = [(*key, evs[-1][0], evs[0][0], _pack_events(evs)) for key, evs in runs.items()]
        _insert(conn, _EVENT_INSERT, 6, rows)


def _w_save(
    conn: sqlite3.Connection,
    tenant: str,
    owner: str,
    task_id: str,
    context_id: str,
    state: int,
    status_us: int,
    snapshot: bytes,
    events: list[tuple[int, bytes]],
) -> None:
    """One `save` (when a batch is replayed call by call)."""
    _w_save_many(conn, [(tenant, owner, task_id, context_id, state, status_us, snapshot, events)])


def _w_put_config(
    conn: sqlite3.Connection, tenant: str, owner: str, task_id: str, config_id: str, payload: bytes
) -> None:
    conn.execute(
        "INSERT INTO push_configs (tenant, owner, task_id, id, payload) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET payload = excluded.payload",
        (tenant, owner, task_id, config_id, payload),
    )


def _w_delete_config(
    conn: sqlite3.Connection, tenant: str, owner: str, task_id: str, config_id: str
) -> bool:
    cur = conn.execute(
        "DELETE FROM push_configs WHERE tenant = ? AND owner = ? AND task_id = ? AND id = ?",
        (tenant, owner, task_id, config_id),
    )
    return cur.rowcount > 0


# ------------------------------------------------------- reader-thread bodies


def _r_get(conn: sqlite3.Connection, scope: Scope, task_id: str) -> pb.Task | None:
    row = conn.execute(
        "SELECT snapshot FROM tasks WHERE tenant = ? AND owner = ? AND id = ?",
        (scope.tenant, scope.owner, task_id),
    ).fetchone()
    return pb.Task.FromString(row[0]) if row is not None else None


def _r_list(conn: sqlite3.Connection, scope: Scope, query: TaskQuery) -> TaskPage:
    page_sql, page_params = page_query(scope, query)
    count_sql, count_params = count_query(scope, query)
    conn.execute("BEGIN")  # one snapshot for the page and its total
    try:
        rows = conn.execute(page_sql, page_params).fetchall()
        counted = conn.execute(count_sql, count_params).fetchone()
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    total = counted[0] if counted is not None else 0
    size = max(query.page_size, 0)
    page = rows[:size]
    more = len(rows) > size
    next_cursor = (page[-1][1], page[-1][2]) if more and page else None
    return TaskPage([pb.Task.FromString(r[0]) for r in page], total, next_cursor)


def _r_events_after(
    conn: sqlite3.Connection, scope: Scope, task_id: str, seq: int
) -> list[StoredEvent]:
    rows = conn.execute(
        "SELECT payload FROM events WHERE tenant = ? AND owner = ? AND task_id = ?"
        " AND last_seq > ? ORDER BY last_seq",
        (scope.tenant, scope.owner, task_id, seq),
    ).fetchall()
    return [
        StoredEvent(s, pb.StreamResponse.FromString(p))
        for (blob,) in rows
        for s, p in _unpack_events(blob)
        if s > seq
    ]


def _r_last_seq(conn: sqlite3.Connection, scope: Scope, task_id: str) -> int:
    row = conn.execute(
        "SELECT MAX(last_seq) FROM events WHERE tenant = ? AND owner = ? AND task_id = ?",
        (scope.tenant, scope.owner, task_id),
    ).fetchone()
    return row[0] if row is not None and row[0] is not None else 0


def _r_unsettled(conn: sqlite3.Connection) -> list[tuple[Scope, pb.Task]]:
    rows = conn.execute(
        f"SELECT tenant, owner, snapshot FROM tasks WHERE {_UNSETTLED_SQL}"
    ).fetchall()
    return [(Scope(t, o), pb.Task.FromString(s)) for t, o, s in rows]


def _r_get_config(
    conn: sqlite3.Connection, scope: Scope, task_id: str, config_id: str
) -> pb.TaskPushNotificationConfig | None:
    row = conn.execute(
        "SELECT payload FROM push_configs WHERE tenant = ? AND owner = ? AND task_id = ?"
        " AND id = ?",
        (scope.tenant, scope.owner, task_id, config_id),
    ).fetchone()
    return pb.TaskPushNotificationConfig.FromString(row[0]) if row is not None else None


def _r_list_configs(
    conn: sqlite3.Connection, scope: Scope, task_id: str, page_size: int, after_id: str | None
) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
    sql = "SELECT id, payload FROM push_configs WHERE tenant = ? AND owner = ? AND task_id = ?"
    params: list[Any] = [scope.tenant, scope.owner, task_id]
    if after_id is not None:
        sql += " AND id > ?"
        params.append(after_id)
    size = max(page_size, 0)
    sql += " ORDER BY id LIMIT ?"
    params.append(size + 1)
    rows = conn.execute(sql, params).fetchall()
    page = rows[:size]
    more = len(rows) > size
    found = [pb.TaskPushNotificationConfig.FromString(p) for _, p in page]
    return found, (page[-1][0] if more and page else None)


# -------------------------------------------------------------------- helpers


def _settle(items: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """Runs on the caller's event loop: resolve the futures of one batch."""
    for fut, result, exc in items:
        if fut.done():  # the caller was cancelled; its write committed anyway
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)


def _connect(path: str, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        isolation_level=None,  # autocommit; transactions are explicit
        check_same_thread=False,  # opened here, then used by exactly one worker thread
        timeout=_BUSY_TIMEOUT_MS / 1000,
        cached_statements=256,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA cache_size = -32000")  # 32 MiB
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
        if writer:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("task store: journal_mode is %s, not WAL", mode)
            conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoint (copy the WAL back into the database, with fsyncs) every
            # ~40 MiB of WAL instead of every 4 MiB: far fewer stalls of the writer.
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_AUTOCHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        else:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process?
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this code ({SCHEMA_VERSION})"
            )
        if version < 1:
            for stmt in _SCHEMA_V1:
                conn.execute(stmt)
        # Later versions: `if version < 2: ...` here.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_STOP = object()

_Op = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, asyncio.Future]


class SqliteTaskStore:
    """`TaskStore` on one SQLite file in WAL mode; see the module docstring."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = asyncio.Lock()
        self._open = False
        self._queue: queue.SimpleQueue[_Op | object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._rconn: sqlite3.Connection | None = None
        self._reader: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        async with self._lock:
            if self._open:
                return
            try:
                wconn, rconn = await asyncio.to_thread(self._open_sync)
            except (sqlite3.Error, OSError) as exc:
                log.error("task store: cannot open the database file %s: %s", Path(self._path).name, type(exc).__name__)
                raise _unavailable() from None
            self._rconn = rconn
            self._queue = queue.SimpleQueue()
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store-read")
            self._writer = threading.Thread(
                target=self._writer_main,
                args=(wconn, self._queue),
                name="task-store-write",
                daemon=True,
            )
            self._writer.start()
            self._open = True

    def _open_sync(self) -> tuple[sqlite3.Connection, sqlite3.Connection]:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        wconn = _connect(self._path, writer=True)
        try:
            _migrate(wconn)
            rconn = _connect(self._path, writer=False)
        except BaseException:
            wconn.close()
            raise
        return wconn, rconn

    async def close(self) -> None:
        """Commit everything queued, stop both threads, close the connections."""
        async with self._lock:
            if not self._open:
                return
            self._open = False  # new calls fail from here on
            writer, reader, rconn = self._writer, self._reader, self._rconn
            self._queue.put(_STOP)
            assert writer is not None and reader is not None and rconn is not None
            await asyncio.to_thread(writer.join)
            await asyncio.get_running_loop().run_in_executor(reader, rconn.close)
            reader.shutdown(wait=True)
            self._writer = self._reader = None
            self._rconn = None

    # ---------------------------------------------------------------- writes

    def _write(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future:
        if not self._open:
            raise RuntimeError("task store is not open")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put((fn, args, loop, fut))  # before any await: call order = commit order
        return fut

    async def save(self, scope: Scope, task: pb.Task, events: list[StoredEvent]) -> None:
        # Serialized now, so later mutations of `task` by the caller are not stored.
        args = (
            scope.tenant,
            scope.owner,
            task.id,
            task.context_id,
            int(task.status.state),
            status_micros(task),
            task.SerializeToString(),
            [(e.seq, e.event.SerializeToString()) for e in events],
        )
        await self._write(_w_save, args)

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        args = (scope.tenant, scope.owner, config.task_id, config.id, config.SerializeToString())
        await self._write(_w_put_config, args)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        return await self._write(_w_delete_config, (scope.tenant, scope.owner, task_id, config_id))

    def _writer_main(self, conn: sqlite3.Connection, q: queue.SimpleQueue) -> None:
        try:
            stopping = False
            while not stopping:
                item = q.get()
                batch: list[_Op] = []
                while True:
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)  # type: ignore[arg-type]
                    if len(batch) >= _MAX_BATCH:
                        break
                    try:
                        item = q.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    self._commit_batch(conn, batch)
            # Anything queued after close() began (another thread/loop racing it).
            late: list[_Op] = []
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    late.append(item)  # type: ignore[arg-type]
            if late:
                self._dispatch(late, [(None, RuntimeError("task store is closed"))] * len(late))
        finally:
            try:
                conn.close()
            except sqlite3.Error:
                log.exception("task store: closing the writer connection failed")

    def _commit_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        try:
            try:
                outcomes = self._run_fast(conn, batch)
            except Exception as exc:
                # Some call failed: undo the whole attempt and redo the batch with one
                # savepoint per call, so only the failing calls fail.
                log.debug("task store: batch of %d failed (%s); replaying it", len(batch), exc)
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                outcomes = self._run_isolated(conn, batch)
        except Exception:  # the database (or a bug here): fail the batch, keep the thread
            log.exception("task store: commit of %d writes failed", len(batch))
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except Exception:
                log.exception("task store: rollback failed")
            outcomes = [(None, _unavailable()) for _ in batch]
        self._dispatch(batch, outcomes)

    @staticmethod
    def _run_fast(conn: sqlite3.Connection, batch: list[_Op]) -> list[tuple[Any, None]]:
        """The common case, every call succeeds: all saves at once, no savepoints."""
        results: list[tuple[Any, None]] = [(None, None)] * len(batch)
        conn.execute("BEGIN IMMEDIATE")
        saves = [args for fn, args, _, _ in batch if fn is _w_save]
        if saves:
            _w_save_many(conn, saves)
        if len(saves) < len(batch):
            for i, (fn, args, _, _) in enumerate(batch):
                if fn is not _w_save:  # push configs (another table): in call order
                    results[i] = (fn(conn, *args), None)
        conn.execute("COMMIT")
        return results

    @staticmethod
    def _run_isolated(
        conn: sqlite3.Connection, batch: list[_Op]
    ) -> list[tuple[Any, BaseException | None]]:
        outcomes: list[tuple[Any, BaseException | None]] = []
        conn.execute("BEGIN IMMEDIATE")
        for fn, args, _, _ in batch:
            conn.execute("SAVEPOINT op")
            try:
                result = fn(conn, *args)
            except Exception as exc:
                # If the savepoint cannot be rolled back, the outer handler fails the batch.
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                if isinstance(exc, sqlite3.Error):
                    log.error("task store: write %s failed: %s", fn.__name__, exc)
                    exc = _unavailable()
                outcomes.append((None, exc))  # a non-SQLite error is a bug: pass it on
                continue
            conn.execute("RELEASE op")
            outcomes.append((result, None))
        conn.execute("COMMIT")
        return outcomes

    @staticmethod
    def _dispatch(batch: list[_Op], outcomes: list[tuple[Any, BaseException | None]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for (_, _, loop, fut), (result, exc) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(loop, []).append((fut, result, exc))
        for loop, items in by_loop.items():  # one wake-up per loop per batch
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # that loop is closed; nobody is waiting any more
                pass

    # ----------------------------------------------------------------- reads

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self._open:
            raise RuntimeError("task store is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._reader, fn, self._rconn, *args)
        except sqlite3.Error:
            log.exception("task store: read %s failed", fn.__name__)
            raise _unavailable() from None

    async def get(self, scope: Scope, task_id: str) -> pb.Task | None:
        return await self._read(_r_get, scope, task_id)

    async def list(self, scope: Scope, query: TaskQuery) -> TaskPage:
        return await self._read(_r_list, scope, query)

    async def events_after(self, scope: Scope, task_id: str, seq: int) -> list[StoredEvent]:
        return await self._read(_r_events_after, scope, task_id, seq)

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        return await self._read(_r_last_seq, scope, task_id)

    async def unsettled(self) -> list[tuple[Scope, pb.Task]]:
        return await self._read(_r_unsettled)

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        return await self._read(_r_get_config, scope, task_id, config_id)

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
        return await self._read(_r_list_configs, scope, task_id, page_size, after_id)
