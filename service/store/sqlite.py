"""Durable task store on SQLite (WAL), with group commit on the event loop.

Writes (`save`, `put_push_config`, `delete_push_config`) are queued and
committed together, in call order, in one transaction, by a callback on the
event loop that owns the store; each caller's coroutine returns only after its
transaction committed. A lone caller's write commits on the next loop
iteration; when independent callers write, commits wait for the next slot
(`commit_interval`, default 5 ms, after the last one; doubled while more of
them arrive than a slot gathers) so that all their writes share one
transaction (service.store.pacing decides which case it is). That is
what makes the store cheap: a commit of 15 saves costs little more than a
commit of one, and no thread hand-off (and no fight for the GIL) sits on the
path of a request. A cancelled caller does not un-queue its write.

A batch first runs as a few multi-row statements (all saves at once, the last
snapshot of each task, every event). If anything in it fails, the transaction
is rolled back and the batch is replayed one call at a time, each inside its
own SAVEPOINT, so only the failing calls fail (e.g. a duplicate event
sequence) and the others still commit.

The loop never waits on a lock or on the disk: the writer connection does not
wait when another process holds the write lock (writes are retried with
back-off for up to 10 s, then everything queued fails), and every fsync runs
on a helper thread: WAL checkpoints run there, first beside the commits and
then, for the few frames left, with commits paused (so each one finishes and
the WAL file starts over instead of growing), followed by the first write
into the fresh WAL (which syncs its header); so does the final close. A test
traces the syscalls to hold this.

Reads run on a separate read-only connection in one reader thread. In WAL
mode readers never block the writer and see every committed transaction.

`journal_mode=WAL` + `synchronous=NORMAL`: a commit is in the WAL file (the OS
page cache) when it returns, so it survives kill -9 of the process; a power
loss may drop the last transactions, which is outside our durability bar.

ListTasks is keyset-paged over one index per filter combination and its
`total_size` comes from counters (`task_counts`) that each batch changes in the
same transaction as the task rows (by the net change of its tasks' context and
state: one primary-key lookup per task it updates, none for a new one, and one
statement; a save costs 10-20% less than with the per-row triggers of schema
1), so neither grows with the number of stored tasks; only a `status_after_us`
filter falls back to COUNT(*) over the index range.

SQLite errors are logged with their details (which may include file paths) and
surface to callers only as `RuntimeError("task store unavailable")`.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gen import a2a_pb2 as pb
from service.protocol.states import TERMINAL
from service.protocol.timeutil import status_micros
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery
from service.store.pacing import DEFAULT_COMMIT_INTERVAL, CommitPacer
from service.telemetry import hub

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3

_UNSETTLED = (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
_UNSETTLED_SQL = "state IN ({}, {})".format(*(int(s) for s in _UNSETTLED))
_FINISHED_SQL = "state IN ({})".format(", ".join(str(int(s)) for s in sorted(TERMINAL)))
# Schema 3: finished tasks by age, for retention (purge_finished); small, partial.
_FINISHED_INDEX = (
    f"CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (status_us) WHERE {_FINISHED_SQL}"
)

_MAX_BATCH = 512  # operations per transaction (bounds how long one commit holds the loop)
_BUSY_TIMEOUT_S = 10.0  # how long writes wait for another process's write lock
_BUSY_RETRY_S = (0.001, 0.05)  # first and longest pause between attempts
_CHECKPOINT_BYTES = 16 * 1024 * 1024  # WAL size that triggers a checkpoint
_CHECKPOINT_CHECK_S = 0.25  # how often the WAL size is looked at (one stat call)
_MMAP_BYTES = 256 * 1024 * 1024  # read database pages through mmap (fewer syscalls)
# When the WAL starts over its file is cut back to this size, below the checkpoint
# mark (else the file's size would keep calling for checkpoints).
_WAL_SIZE_LIMIT = 4 * 1024 * 1024


_SCHEMA = (
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
    # Row counts for total_size, kept by the writer in the same transaction as the
    # rows (_w_save_many). context_id '' = any context, state 0 = any state.
    """CREATE TABLE IF NOT EXISTS task_counts (
        tenant     TEXT    NOT NULL,
        owner      TEXT    NOT NULL,
        context_id TEXT    NOT NULL,
        state      INTEGER NOT NULL,
        n          INTEGER NOT NULL,
        PRIMARY KEY (tenant, owner, context_id, state)
    ) WITHOUT ROWID""",
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

_V1_TRIGGERS = ("tasks_count_insert", "tasks_count_update", "tasks_count_delete")

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


# ---------------------------------------------------------------- write bodies
#
# Everything here runs on the event loop inside the batch transaction. Every
# sqlite3 call releases and re-takes the GIL (grpc's poller thread may take it
# in between), so a batch is written with as few calls as possible: multi-row
# VALUES, task_counts changed once per batch by the sum of its changes.

_TASK_INSERT = (
    "INSERT INTO tasks (tenant, owner, id, context_id, state, status_us, snapshot) VALUES {values}"
)
_TASK_UPSERT = (
    _TASK_INSERT
    + " ON CONFLICT (tenant, owner, id) DO UPDATE SET context_id = excluded.context_id,"
    " state = excluded.state, status_us = excluded.status_us, snapshot = excluded.snapshot"
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
    "SELECT t.tenant, t.owner, t.id, t.context_id, t.state FROM (VALUES {values}) AS k"
    " JOIN tasks AS t ON t.tenant = k.column1 AND t.owner = k.column2 AND t.id = k.column3"
)


_ONE_BYTE = [bytes((v,)) for v in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
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


_MAX_ROWS = 64  # rows per statement; 64 sizes x 5 statements fit the statement cache
_sql_cache: dict[tuple[str, int], str] = {}


def _each_chunk(
    conn: sqlite3.Connection, template: str, width: int, rows: list[tuple]
) -> Iterator[sqlite3.Cursor]:
    """`template` run over `rows` as multi-row VALUES of at most _MAX_ROWS rows each."""
    for i in range(0, len(rows), _MAX_ROWS):
        chunk = rows[i : i + _MAX_ROWS]
        sql = _sql_cache.get((template, len(chunk)))
        if sql is None:
            row = "(" + ", ".join("?" * width) + ")"
            sql = template.format(values=", ".join([row] * len(chunk)))
            _sql_cache[(template, len(chunk))] = sql
        yield conn.execute(sql, [value for r in chunk for value in r])


def _insert(conn: sqlite3.Connection, template: str, width: int, rows: list[tuple]) -> None:
    for _ in _each_chunk(conn, template, width, rows):
        pass


def _count_keys(context_id: str, state: int) -> set[tuple[str, int]]:
    """The task_counts rows one task is counted in: any/its context x any/its state
    (a set: '' context or state 0 would name the same row twice)."""
    return {("", 0), (context_id, 0), ("", state), (context_id, state)}


def _count_changes(
    conn: sqlite3.Connection, latest: dict[tuple[str, str, str], tuple], created: set
) -> list[tuple[str, str, str, int, int]]:
    """task_counts rows to add to, from each task's stored (context, state) before this
    batch (none for the `created` ones) to its last one in it; changes to one row are
    summed."""
    before = {
        (tenant, owner, task_id): (context_id, state)
        for cursor in _each_chunk(conn, _STORED_STATES, 3, [k for k in latest if k not in created])
        for tenant, owner, task_id, context_id, state in cursor
    }
    delta: dict[tuple[str, str, str, int], int] = {}
    for key, row in latest.items():
        now, was = (row[3], row[4]), before.get(key)
        if now == was:
            continue
        changes = [(now, 1)] if was is None else [(was, -1), (now, 1)]
        for (context_id, state), sign in changes:
            for c, st in _count_keys(context_id, state):
                full = (key[0], key[1], c, st)
                delta[full] = delta.get(full, 0) + sign
    return [(*full, n) for full, n in delta.items() if n]


def _w_save_many(conn: sqlite3.Connection, saves: list[tuple]) -> None:
    """All `save` calls of a batch at once: the last snapshot of each task (earlier
    ones would be overwritten in the same transaction anyway), every event, and the
    counters' net change.

    A task whose events here start at 1 is being created (the engine numbers a
    task's events from its creation): it is inserted, not upserted, and has no
    earlier state to look up. Should it exist after all, the insert fails and the
    batch is replayed call by call, so the counters never count a task twice."""
    latest: dict[tuple[str, str, str], tuple] = {}
    runs: dict[tuple[str, str, str], list[tuple[int, bytes]]] = {}
    for args in saves:
        key = (args[0], args[1], args[2])
        latest[key] = args[:7]
        if args[7]:
            runs.setdefault(key, []).extend(args[7])
    created = {key for key, evs in runs.items() if evs[0][0] == 1}
    counts = _count_changes(conn, latest, created)
    if counts:
        _insert(conn, _COUNT_ADD, 5, counts)
    if created:
        _insert(conn, _TASK_INSERT, 7, [row for key, row in latest.items() if key in created])
    if len(created) < len(latest):
        _insert(conn, _TASK_UPSERT, 7, [row for key, row in latest.items() if key not in created])
    if runs:
        rows = [(*key, evs[-1][0], evs[0][0], _pack_events(evs)) for key, evs in runs.items()]
        _insert(conn, _EVENT_INSERT, 6, rows)
    for args in saves:  # push configs that go with a task's first events (rare)
        for task_id, config_id, payload in args[8]:
            _w_put_config(conn, args[0], args[1], task_id, config_id, payload)


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
    configs: list[tuple[str, str, bytes]],
) -> None:
    """One `save` (when a batch is replayed call by call)."""
    _w_save_many(
        conn, [(tenant, owner, task_id, context_id, state, status_us, snapshot, events, configs)]
    )


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


def _w_purge(conn: sqlite3.Connection, before_us: int, limit: int) -> list[tuple[str, str, str]]:
    """Retention: up to `limit` finished tasks older than `before_us`, oldest first, with
    their events, push configs and counts (counter rows that reach 0 go too)."""
    rows = conn.execute(
        "SELECT tenant, owner, id, context_id, state FROM tasks INDEXED BY tasks_finished"
        f" WHERE {_FINISHED_SQL} AND status_us < ? ORDER BY status_us LIMIT ?",
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


def _w_purge_orphans(conn: sqlite3.Connection, limit: int) -> int:
    """Push configs whose task is not stored (at most `limit`)."""
    cur = conn.execute(
        "DELETE FROM push_configs WHERE rowid IN (SELECT c.rowid FROM push_configs AS c"
        " WHERE NOT EXISTS (SELECT 1 FROM tasks AS t"
        " WHERE t.tenant = c.tenant AND t.owner = c.owner AND t.id = c.task_id) LIMIT ?)",
        (max(int(limit), 0),),
    )
    return cur.rowcount


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
    busy_ms = int(_BUSY_TIMEOUT_S * 1000)  # the store sets the writer's to 0 once it is open
    conn = sqlite3.connect(
        path,
        isolation_level=None,  # autocommit; transactions are explicit
        check_same_thread=False,  # opened on a helper thread, used by one thread at a time
        timeout=busy_ms / 1000,
        cached_statements=384,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        conn.execute("PRAGMA cache_size = -32000")  # 32 MiB
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
        if writer:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("task store: journal_mode is %s, not WAL", mode)
            conn.execute("PRAGMA synchronous = NORMAL")
            # No checkpoint inside COMMIT (it would fsync on the event loop): the store
            # runs them on a helper thread (SqliteTaskStore._maybe_checkpoint).
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        else:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _page_token_key(conn: sqlite3.Connection) -> bytes:
    """This database's secret for ListTasks page tokens: made once, kept in the file, so
    tokens stay valid across restarts (and for every process on the same file)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS store_secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
    )
    conn.execute(
        "INSERT OR IGNORE INTO store_secrets VALUES ('page_token_key', ?)", (os.urandom(32),)
    )
    conn.commit()
    return bytes(
        conn.execute("SELECT value FROM store_secrets WHERE name = 'page_token_key'").fetchone()[0]
    )


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
            for stmt in _SCHEMA:
                conn.execute(stmt)
        if version < 2:
            # Version 1 kept task_counts with triggers (exact, so the counts carry over);
            # the writer now does it once per batch, which costs less.
            for trigger in _V1_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        if version < 3:
            conn.execute(_FINISHED_INDEX)
        # Later versions: `if version < 4: ...` here.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_Op = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future]


def _restart_wal(conn: sqlite3.Connection) -> None:
    """Write one frame now (on a helper thread), so that the first write into a fresh
    WAL, which syncs the WAL header and trims the file, is not a commit on the loop."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:  # e.g. another process writes: its commit restarts the WAL
        log.debug("task store: WAL restart skipped: %s", exc)
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the write lock (SQLITE_BUSY and its extended codes)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


class SqliteTaskStore:
    """`TaskStore` on one SQLite file in WAL mode; see the module docstring."""

    def __init__(self, path: str, commit_interval: float = DEFAULT_COMMIT_INTERVAL) -> None:
        self._path = path
        self._commit_interval = commit_interval
        self._pacer = CommitPacer(commit_interval)
        self._lock = asyncio.Lock()
        self._open = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._helper: ThreadPoolExecutor | None = None  # checkpoints, closing the writer
        self._pending: list[_Op] = []
        self._flush_handle: asyncio.Handle | None = None
        self._busy_since: float | None = None
        self._busy_pause = _BUSY_RETRY_S[0]
        # Checkpoints, on the helper thread: `_cconn` copies, `_pin` holds a read snapshot
        # while commits go on, so that no commit on the loop can start the WAL over.
        self._cconn: sqlite3.Connection | None = None
        self._pin: sqlite3.Connection | None = None
        self._copying: asyncio.Future | None = None  # a checkpoint beside the commits
        self._checkpoint: asyncio.Future | None = None  # the short one with commits paused
        self._wal_checked = 0.0
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
                raise RuntimeError(f"{_UNAVAILABLE}: {reason}") from None
            self._loop = asyncio.get_running_loop()
            self._wconn, self._rconn, self._cconn, self._pin = wconn, rconn, cconn, pin
            self._pending = []
            self._pacer = CommitPacer(self._commit_interval)
            self._flush_handle = self._checkpoint = self._copying = self._busy_since = None
            self._busy_pause = _BUSY_RETRY_S[0]
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store-read")
            self._helper = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="task-store-checkpoint"
            )
            self._open = True

    def _open_sync(self) -> tuple[sqlite3.Connection, ...]:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        opened: list[sqlite3.Connection] = []
        try:
            wconn = _connect(self._path, writer=True)
            opened.append(wconn)
            _migrate(wconn)  # may wait for another process: this is a helper thread
            self.page_token_key = _page_token_key(wconn)
            _restart_wal(wconn)
            wconn.execute("PRAGMA busy_timeout = 0")  # from now on it runs on the event loop
            opened.append(_connect(self._path, writer=False))  # reads
            opened.append(_connect(self._path, writer=True))  # checkpoints
            opened.append(_connect(self._path, writer=False))  # the pin
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
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush_handle = None
            try:
                running = [f for f in (self._copying, self._checkpoint) if f is not None]
                if running:
                    await asyncio.wait(running)
                while self._pending:
                    if not self._flush():  # the write lock is held elsewhere: wait and retry
                        await asyncio.sleep(self._busy_pause)
            finally:
                # Also when close() itself is cancelled: what did not commit fails, nothing hangs.
                left, self._pending = self._pending, []
                _settle([(fut, None, RuntimeError("task store is closed")) for _, _, fut in left])
                self._busy_since, self._busy_pause = None, _BUSY_RETRY_S[0]
                wconn, rconn, cconn, pin = self._wconn, self._rconn, self._cconn, self._pin
                reader, helper = self._reader, self._helper
                assert wconn and rconn and cconn and pin and reader and helper
                self._wconn = self._rconn = self._cconn = self._pin = None
                self._reader = self._helper = None
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

    def _write(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future:
        if not self._open:
            raise RuntimeError("task store is not open")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            raise RuntimeError(
                "the task store is used from another event loop than the one that opened it"
            )
        fut = loop.create_future()
        self._pending.append((fn, args, fut))  # before any await: call order = commit order
        if self._checkpoint is not None or self._busy_since is not None:
            return fut  # the end of the checkpoint, or the retry timer, flushes
        when = self._pacer.on_write(loop.time(), len(self._pending), self._flush_handle is not None)
        if when is not None:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
            self._schedule(when)
        return fut

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
    ) -> None:
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
            [(c.task_id, c.id, c.SerializeToString()) for c in configs],
        )
        await self._write(_w_save, args)

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        args = (scope.tenant, scope.owner, config.task_id, config.id, config.SerializeToString())
        await self._write(_w_put_config, args)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        return await self._write(_w_delete_config, (scope.tenant, scope.owner, task_id, config_id))

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        # A write like any other: it shares the group commit, in call order.
        keys = await self._write(_w_purge, (before_us, limit))
        return [(Scope(tenant, owner), task_id) for tenant, owner, task_id in keys]

    async def purge_orphans(self, limit: int) -> int:
        result: int = await self._write(_w_purge_orphans, (limit,))
        return result

    def _schedule(self, wait: float) -> None:
        assert self._loop is not None
        if wait > 0:
            self._flush_handle = self._loop.call_later(wait, self._flush_soon)
        else:
            self._flush_handle = self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_handle = None
        if self._checkpoint is None and self._pending and self._flush():
            self._maybe_checkpoint()
        if self._pending and self._flush_handle is None and self._checkpoint is None:
            # More than one batch was queued, or the write lock was busy.
            self._schedule(self._busy_pause if self._busy_since is not None else 0)

    def _flush(self) -> bool:
        """Commit the first batch of queued writes and settle their futures. False when
        another process holds the write lock (the batch stays queued)."""
        assert self._wconn is not None and self._loop is not None
        batch = self._pending[:_MAX_BATCH]
        tel = hub.current
        started = time.perf_counter() if tel is not None else 0.0
        outcomes = self._commit_batch(self._wconn, batch)
        if tel is not None and outcomes is not None:
            tel.committed(time.perf_counter() - started, len(batch))
        if outcomes is None:
            now = self._loop.time()
            if self._busy_since is None:
                self._busy_since = now
                log.warning("task store: the database is locked by another process; writes wait")
            elif now - self._busy_since < _BUSY_TIMEOUT_S:
                self._busy_pause = min(self._busy_pause * 2, _BUSY_RETRY_S[1])
            else:
                # Fail everything queued now, not one batch per 10 s.
                batch = list(self._pending)
                log.error(
                    "task store: the database stayed locked for %.0f s; %d write(s) failed",
                    _BUSY_TIMEOUT_S,
                    len(batch),
                )
                outcomes = [(None, _unavailable()) for _ in batch]
            if outcomes is None:
                return False
        self._busy_since, self._busy_pause = None, _BUSY_RETRY_S[0]
        del self._pending[: len(batch)]
        self._pacer.on_commit(self._loop.time(), len(batch))
        _settle(
            [(fut, result, exc) for (_, _, fut), (result, exc) in zip(batch, outcomes, strict=True)]
        )
        return True

    def _commit_batch(
        self, conn: sqlite3.Connection, batch: list[_Op]
    ) -> list[tuple[Any, BaseException | None]] | None:
        """One transaction for the batch; None when the write lock is busy."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                return None
            log.error("task store: cannot start a write transaction: %s", exc)
            return [(None, _unavailable()) for _ in batch]
        try:
            try:
                return self._run_fast(conn, batch)
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
                return self._run_isolated(conn, batch)
        except Exception:  # the database (or a bug here): fail the batch, keep serving
            log.exception("task store: commit of %d writes failed", len(batch))
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except Exception:
                log.exception("task store: rollback failed")
            return [(None, _unavailable()) for _ in batch]

    @staticmethod
    def _run_fast(
        conn: sqlite3.Connection, batch: list[_Op]
    ) -> list[tuple[Any, BaseException | None]]:
        """The common case, every call succeeds: all saves at once, no savepoints."""
        results: list[tuple[Any, BaseException | None]] = [(None, None)] * len(batch)
        saves = [args for fn, args, _ in batch if fn is _w_save]
        if saves:
            _w_save_many(conn, saves)
        if len(saves) < len(batch):
            for i, (fn, args, _) in enumerate(batch):
                if fn is not _w_save:  # push configs (another table): in call order
                    results[i] = (fn(conn, *args), None)
        conn.execute("COMMIT")
        return results

    @staticmethod
    def _run_isolated(
        conn: sqlite3.Connection, batch: list[_Op]
    ) -> list[tuple[Any, BaseException | None]]:
        outcomes: list[tuple[Any, BaseException | None]] = []
        for fn, args, _ in batch:
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

    # ------------------------------------------------------------ checkpoints

    def _maybe_checkpoint(self) -> None:
        """Checkpoint on the helper thread when the WAL has grown past its mark.

        First beside the commits (the pin's read snapshot keeps them from starting
        the WAL over, which would sync on the loop), copying what was written before
        it; then once more with commits paused (writes keep queueing, the event loop
        keeps serving), for the few frames left, after which the WAL starts over.
        """
        assert self._loop is not None and self._helper is not None
        if self._copying is not None or self._checkpoint is not None:
            return
        now = self._loop.time()
        if now - self._wal_checked < _CHECKPOINT_CHECK_S:
            return
        self._wal_checked = now
        try:
            size = os.stat(self._path + "-wal").st_size
        except OSError:
            return
        if size < _CHECKPOINT_BYTES:
            return
        self._copying = self._loop.run_in_executor(self._helper, self._checkpoint_sync, False)
        self._copying.add_done_callback(self._copy_done)

    def _checkpoint_sync(self, paused: bool) -> None:
        conn, pin = self._cconn, self._pin
        assert conn is not None and pin is not None
        started = time.monotonic()
        if paused:
            if pin.in_transaction:
                pin.execute("COMMIT")  # unpin: the WAL may start over now
        elif not pin.in_transaction:
            pin.execute("BEGIN")
            pin.execute("SELECT count(*) FROM sqlite_master").fetchall()  # takes the snapshot
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if paused and not busy and frames == copied:
            _restart_wal(conn)
        log.debug(
            "task store: checkpoint%s copied %d of %d WAL frames in %.1f ms%s",
            " (commits paused)" if paused else "",
            copied,
            frames,
            1000 * (time.monotonic() - started),
            " (busy)" if busy else "",
        )

    @staticmethod
    def _report_checkpoint(fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            log.error(
                "task store: checkpoint failed: %s",
                "cancelled" if fut.cancelled() else fut.exception(),
            )

    def _copy_done(self, fut: asyncio.Future) -> None:
        self._copying = None
        self._report_checkpoint(fut)
        if self._open and self._loop is not None and self._helper is not None:
            # No commit runs now (they run on this loop): pause them for the last frames.
            self._checkpoint = self._loop.run_in_executor(self._helper, self._checkpoint_sync, True)
            self._checkpoint.add_done_callback(self._checkpoint_done)

    def _checkpoint_done(self, fut: asyncio.Future) -> None:
        self._checkpoint = None
        self._report_checkpoint(fut)
        if self._open and self._pending and self._flush_handle is None:
            self._schedule(0)

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

    async def events_after(
        self, scope: Scope, task_id: str, seq: int
    ) -> builtins.list[StoredEvent]:
        return await self._read(_r_events_after, scope, task_id, seq)

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        return await self._read(_r_last_seq, scope, task_id)

    async def unsettled(self) -> builtins.list[tuple[Scope, pb.Task]]:
        return await self._read(_r_unsettled)

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        return await self._read(_r_get_config, scope, task_id, config_id)

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[builtins.list[pb.TaskPushNotificationConfig], str | None]:
        return await self._read(_r_list_configs, scope, task_id, page_size, after_id)
