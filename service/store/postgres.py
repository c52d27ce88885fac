"""Durable task store on PostgreSQL (asyncpg), shared by every process of a cluster.

Why asyncpg: on this machine (16 concurrent callers, one upsert + one read per
call, each driver with its own connections) asyncpg cost the event loop ~200-240
µs of CPU per call against ~420 µs for psycopg 3 async, at ~1,600-2,000 calls/s
against ~950-1,150; the event loop's CPU is what a replica runs out of first.
(asyncpg's own Pool added ~150 µs per acquire here, so the store keeps its
connections in a plain queue.)

Writes are group-committed: one commit on the wire at a time, taking
everything queued when it starts, paced as SQLite's are (service.store.pacing,
`store_commit_interval_ms`): a lone caller's write commits at once; when
independent callers write, a commit starts at most once per slot (5 ms) so
their writes share it. Without the pacing a commit took whatever had queued
during the last round trip: on an idle 2-core host, 64 callers made batches of
~2 saves, and the asyncpg statement's fixed cost (~150 µs of loop CPU) then
capped one process at ~1,800 SendMessage/s; paced, ~12 saves share a commit
and the same process serves ~2,500/s, as many as on SQLite. Two commits in
flight made batches half as large and cost 15-40% more CPU per save for no
steady gain, so `_MAX_INFLIGHT` is 1 (the dispatcher supports more). The
saves of a batch are one statement (a data-modifying CTE over `unnest`
arrays): the last snapshot of each task and every event, atomically, in one
round trip. Push-config writes in the batch join it in one transaction. If a
batch fails, each of its writes is retried alone, so only the failing ones
fail. Writes of one task commit in call order (a commit never starts with a
task another unfinished commit writes); a caller that awaited one write before
the next always sees them commit in that order.

The fence between processes: an event's (task, seq) is the table's key, so two
writers that append the same sequence number to one task cannot both commit;
the loser gets `WriteConflict` and its snapshot is not written either (same
statement). A snapshot never moves back to an older `last_seq`.

`total_size` is COUNT(*) over the same index range as the page (index-only
where the visibility map allows), not a counter table: one counter row per
scope would be a lock every writer of that scope in every process queues on.

When PostgreSQL cannot be reached, calls fail at once with `UnavailableError`
(UNAVAILABLE / 503, "the task store (PostgreSQL) is unreachable"); broken
connections are dropped and re-made on later calls, at most one attempt per
back-off step (0.1 s doubling to 5 s), so an outage neither hangs callers nor
floods the server with connects. Details (host names, SQL) go to the log only
at the operator's level.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from gen import a2a_pb2 as pb
from service.protocol.errors import UnavailableError
from service.protocol.timeutil import status_micros
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery, WriteConflict
from service.store.pacing import DEFAULT_COMMIT_INTERVAL, CommitPacer
from service.store.pg_schema import FINISHED_STATES, UNSETTLED_STATES, migrate

log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 8  # connections per process: one writer's batches plus concurrent reads
_MAX_BATCH = 512  # writes per commit
_MAX_INFLIGHT = 1  # commits on the wire at once (measured: 2 cost 15-40% more CPU per save)
_CONNECT_TIMEOUT_S = 5.0
_COMMAND_TIMEOUT_S = 30.0  # no statement hangs a caller forever
_BACKOFF_S = (0.1, 5.0)  # first and longest pause between reconnect attempts

UNREACHABLE = "The task store (PostgreSQL) is unreachable; try again later."

# Errors that mean "the database is not there right now", not "this call is wrong".
_CONNECTION_ERRORS = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    # A connection whose server ended it while idle can be caught between states before
    # it notices ("another operation is in progress"): as good as lost.
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
    asyncpg.exceptions.InsufficientPrivilegeError,
)


def _unreachable() -> UnavailableError:
    return UnavailableError(UNREACHABLE, retry_after=1.0)


# ------------------------------------------------------------------ statements

_SAVE_MANY = """
WITH snapshots AS (
    INSERT INTO a2a_tasks (tenant, owner, id, context_id, state, status_us, last_seq, snapshot)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[],
                         $6::bigint[], $7::bigint[], $8::bytea[])
    ON CONFLICT (tenant, owner, id) DO UPDATE SET
        context_id = excluded.context_id, state = excluded.state,
        status_us = excluded.status_us, snapshot = excluded.snapshot,
        last_seq = greatest(a2a_tasks.last_seq, excluded.last_seq)
    WHERE a2a_tasks.last_seq <= excluded.last_seq OR excluded.last_seq = 0
    RETURNING 1
)
INSERT INTO a2a_events (tenant, owner, task_id, seq, payload)
SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::bigint[], $13::bytea[])
"""

_PUT_CONFIG = """
INSERT INTO a2a_push_configs (tenant, owner, task_id, id, payload) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, owner, task_id, id) DO UPDATE SET payload = excluded.payload
"""
_DELETE_CONFIG = (
    "DELETE FROM a2a_push_configs WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4"
)


def _list_where(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    where = ["tenant = $1", "owner = $2"]
    params: list[Any] = [scope.tenant, scope.owner]
    if query.context_id:
        params.append(query.context_id)
        where.append(f"context_id = ${len(params)}")
    if query.state:
        params.append(int(query.state))
        where.append(f"state = ${len(params)}")
    if query.status_after_us is not None:
        params.append(int(query.status_after_us))
        where.append(f"status_us > ${len(params)}")
    return " AND ".join(where), params


def page_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size)."""
    where, params = _list_where(scope, query)
    if query.cursor is not None:
        params += [int(query.cursor[0]), str(query.cursor[1])]
        where += f" AND (status_us, id) < (${len(params) - 1}, ${len(params)})"
    params.append(max(query.page_size, 0) + 1)
    sql = (
        f"SELECT snapshot, status_us, id FROM a2a_tasks WHERE {where}"
        f" ORDER BY status_us DESC, id DESC LIMIT ${len(params)}"
    )
    return sql, params


def count_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of total_size: the rows the filters match, ignoring paging."""
    where, params = _list_where(scope, query)
    return f"SELECT count(*) FROM a2a_tasks WHERE {where}", params


# ------------------------------------------------------------------ the store

_Op = tuple[str, tuple[Any, ...], "asyncio.Future[Any]"]  # (kind, args, caller's future)


class PostgresTaskStore:
    """Both seams (`TaskStore`, `PushConfigStore`) on one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        pool_size: int = DEFAULT_POOL_SIZE,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
    ) -> None:
        self._url = url
        self._size = max(2, pool_size)
        self.page_token_key = b""  # set by open()
        self._open = False
        self._idle: asyncio.Queue[asyncpg.Connection | None] | None = None  # None = make one
        self._pending: list[_Op] = []
        self._writing: set[asyncio.Task[None]] = set()  # commits on the wire
        self._busy_keys: set[tuple[str, str, str]] = set()  # tasks those commits write
        self._pacer = CommitPacer(commit_interval)
        self._next_commit: asyncio.Handle | None = None  # the pacer's scheduled dispatch
        self._next_connect = 0.0  # loop time before which no reconnect is tried
        self._backoff = _BACKOFF_S[0]
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Connect, migrate the schema (one process at a time), read the shared secrets.
        Raises RuntimeError naming what failed (no credentials)."""
        async with self._lock:
            if self._open:
                return
            try:
                first = await self._connect()
            except Exception as exc:
                raise RuntimeError(f"PostgreSQL unreachable: {_describe(exc)}") from None
            try:
                await migrate(first)
                await first.execute(
                    "INSERT INTO a2a_secrets (name, value) VALUES ('page_token_key', $1)"
                    " ON CONFLICT (name) DO NOTHING",
                    os.urandom(32),
                )
                self.page_token_key = await first.fetchval(
                    "SELECT value FROM a2a_secrets WHERE name = 'page_token_key'"
                )
            except Exception as exc:
                await first.close()
                raise RuntimeError(f"PostgreSQL schema: {_describe(exc)}") from None
            # Last in, first out: the connection used last (its statements prepared, its
            # caches warm) serves the next call; more connect only as concurrency needs.
            self._idle = asyncio.LifoQueue()
            for _ in range(self._size - 1):
                self._idle.put_nowait(None)  # connected on first use
            self._idle.put_nowait(first)
            self._open = True

    async def close(self) -> None:
        """Commit what is queued, then close every connection."""
        async with self._lock:
            if not self._open:
                return
            self._open = False
            if self._next_commit is not None:
                self._next_commit.cancel()
                self._next_commit = None
            while self._writing or self._pending:  # what is queued commits now, unpaced
                if not self._writing:
                    self._dispatch()
                    if not self._writing:
                        break
                await asyncio.wait(list(self._writing))
            left, self._pending = self._pending, []
            for _, _, fut in left:
                if not fut.done():
                    fut.set_exception(RuntimeError("task store is closed"))
            assert self._idle is not None
            idle, self._idle = self._idle, None
            closing = []
            for _ in range(self._size):
                conn = await idle.get()
                if conn is not None:
                    closing.append(conn.close(timeout=2))
            await asyncio.gather(*closing, return_exceptions=True)

    async def health(self) -> str | None:
        """None when PostgreSQL answers, else what is wrong (for readiness)."""
        try:
            async with self._conn() as conn:
                await conn.fetchval("SELECT 1", timeout=2)
        except UnavailableError:
            return "PostgreSQL unreachable"
        except RuntimeError as exc:
            return str(exc)
        return None

    # ---------------------------------------------------------------- connections

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self._url, timeout=_CONNECT_TIMEOUT_S, command_timeout=_COMMAND_TIMEOUT_S
        )

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection for one operation; connection failures become UnavailableError and
        the broken connection is dropped (re-made later, with back-off)."""
        if not self._open or self._idle is None:
            raise RuntimeError("task store is not open")
        idle = self._idle
        conn = await idle.get()
        try:
            if conn is None or conn.is_closed():
                conn = await self._reconnect()
            yield conn
        except _CONNECTION_ERRORS as exc:
            log.warning("task store: PostgreSQL connection lost (%s)", _describe(exc))
            if conn is not None:
                conn.terminate()
            conn = None
            raise _unreachable() from None
        except asyncio.CancelledError:
            # Cancelled mid-statement (a caller's timeout): the connection may still be busy
            # with it, so it is not handed to the next caller; a new one is made on demand.
            if conn is not None:
                conn.terminate()
            conn = None
            raise
        finally:
            idle.put_nowait(conn if conn is not None and not conn.is_closed() else None)

    async def _reconnect(self) -> asyncpg.Connection:
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_connect:
            raise _unreachable()
        try:
            conn = await self._connect()
        except Exception as exc:
            self._next_connect = loop.time() + self._backoff
            self._backoff = min(self._backoff * 2, _BACKOFF_S[1])
            log.warning("task store: cannot reach PostgreSQL (%s)", _describe(exc))
            raise _unreachable() from None
        if self._backoff > _BACKOFF_S[0]:
            log.info("task store: PostgreSQL reachable again")
        self._backoff = _BACKOFF_S[0]
        self._next_connect = 0.0
        return conn

    # ---------------------------------------------------------------- writes

    def _write(self, kind: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        if not self._open:
            raise RuntimeError("task store is not open")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((kind, args, fut))  # before any await: call order = commit order
        self._pace()
        return fut

    def _pace(self) -> None:
        """Schedule the next commit when the pacer says (while one is on the wire, its end
        does this)."""
        if len(self._writing) >= _MAX_INFLIGHT:
            return
        loop = asyncio.get_running_loop()
        scheduled = self._next_commit is not None
        when = self._pacer.on_write(loop.time(), len(self._pending), scheduled)
        if when is None:
            return
        if self._next_commit is not None:
            self._next_commit.cancel()
        if when > 0:
            self._next_commit = loop.call_later(when, self._dispatch)
        else:
            self._next_commit = loop.call_soon(self._dispatch)

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
    ) -> None:
        # Serialized now, so later changes to `task` by the caller are not stored.
        args = (
            scope.tenant,
            scope.owner,
            task.id,
            task.context_id,
            int(task.status.state),
            status_micros(task),
            events[-1].seq if events else 0,
            task.SerializeToString(),
            [(e.seq, e.event.SerializeToString()) for e in events],
            [(c.task_id, c.id, c.SerializeToString()) for c in configs],
        )
        await self._write("save", args)

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        args = (scope.tenant, scope.owner, config.task_id, config.id, config.SerializeToString())
        await self._write("put", args)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        result: bool = await self._write("delete", (scope.tenant, scope.owner, task_id, config_id))
        return result

    def _dispatch(self) -> None:
        """Start commits while fewer than _MAX_INFLIGHT are on the wire: each takes the
        queued writes, in order, up to the first one whose task an unfinished commit
        writes (so one task's writes commit in call order, one commit at a time)."""
        if self._next_commit is not None:
            self._next_commit.cancel()
            self._next_commit = None
        loop = asyncio.get_running_loop()
        while self._pending and len(self._writing) < _MAX_INFLIGHT:
            batch: list[_Op] = []
            keys: set[tuple[str, str, str]] = set()
            for op in self._pending:
                key = op[1][:3]  # (tenant, owner, task_id) of every kind of write
                if key in self._busy_keys or len(batch) >= _MAX_BATCH:
                    break
                batch.append(op)
                keys.add(key)
            if not batch:
                return
            del self._pending[: len(batch)]
            self._pacer.on_commit(loop.time(), len(batch))  # slots count from a commit's start
            self._busy_keys |= keys
            task = loop.create_task(self._commit_and_settle(batch, keys))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _commit_and_settle(self, batch: list[_Op], keys: set[tuple[str, str, str]]) -> None:
        try:
            outcomes = await self._commit(batch)
            for (_, _, fut), (result, exc) in zip(batch, outcomes, strict=True):
                if fut.done():
                    continue
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
        finally:
            self._busy_keys -= keys
            current = asyncio.current_task()
            if current is not None:
                self._writing.discard(current)  # before dispatching: this slot is free
            if self._pending:
                if self._open:
                    self._pace()
                else:
                    self._dispatch()  # closing: no more waiting

    async def _commit(self, batch: list[_Op]) -> list[tuple[Any, BaseException | None]]:
        try:
            async with self._conn() as conn:
                try:
                    return await _run_batch(conn, batch)
                except _CONNECTION_ERRORS:
                    raise
                except asyncpg.PostgresError as exc:
                    if len(batch) == 1:
                        return [(None, _write_error(batch[0][0], exc))]
                    log.debug("task store: batch of %d failed (%s); one by one", len(batch), exc)
                outcomes: list[tuple[Any, BaseException | None]] = []
                for op in batch:
                    try:
                        outcomes += await _run_batch(conn, [op])
                    except _CONNECTION_ERRORS:
                        raise
                    except asyncpg.PostgresError as exc:
                        outcomes.append((None, _write_error(op[0], exc)))
                return outcomes
        except UnavailableError as exc:
            return [(None, exc) for _ in batch]
        except Exception:  # a bug here: fail the batch, keep serving
            log.exception("task store: commit of %d writes failed", len(batch))
            return [(None, RuntimeError("task store unavailable")) for _ in batch]

    # ---------------------------------------------------------------- reads

    async def _read(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async with self._conn() as conn:
            try:
                return await fn(conn, *args)
            except _CONNECTION_ERRORS:
                raise
            except asyncpg.PostgresError as exc:
                log.error("task store: read failed: %s", _describe(exc))
                raise RuntimeError("task store unavailable") from None

    async def get(self, scope: Scope, task_id: str) -> pb.Task | None:
        return await self._read(_r_get, scope, task_id)

    async def list(self, scope: Scope, query: TaskQuery) -> TaskPage:
        return await self._read(_r_list, scope, query)

    async def get_with_seq(self, scope: Scope, task_id: str) -> tuple[pb.Task, int] | None:
        """The snapshot and its last event's sequence, from one row (see SnapshotReader)."""
        return await self._read(_r_get_with_seq, scope, task_id)

    async def events_after(
        self, scope: Scope, task_id: str, seq: int
    ) -> builtins.list[StoredEvent]:
        return await self._read(_r_events_after, scope, task_id, seq)

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        return await self._read(_r_last_seq, scope, task_id)

    async def unsettled(self) -> builtins.list[tuple[Scope, pb.Task]]:
        return await self._read(_r_unsettled)

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        """One transaction: the oldest finished tasks before `before_us` with their events and
        push configs. Rows another process is purging at the same moment are skipped (SKIP
        LOCKED), so several replicas may run retention at once. ListTasks counts with
        COUNT(*), so there is no counter to adjust."""
        return await self._read(_w_purge_finished, before_us, limit)

    async def purge_orphans(self, limit: int) -> int:
        result: int = await self._read(_w_purge_orphans, limit)
        return result

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        return await self._read(_r_get_config, scope, task_id, config_id)

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[builtins.list[pb.TaskPushNotificationConfig], str | None]:
        return await self._read(_r_list_configs, scope, task_id, page_size, after_id)


# ------------------------------------------------------------------ bodies


_PURGE_FINISHED = """
WITH doomed AS (
    SELECT tenant, owner, id FROM a2a_tasks
    WHERE state = ANY($1::int[]) AND status_us < $2
    ORDER BY status_us
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM a2a_events e USING doomed d
    WHERE e.tenant = d.tenant AND e.owner = d.owner AND e.task_id = d.id
), configs AS (
    DELETE FROM a2a_push_configs c USING doomed d
    WHERE c.tenant = d.tenant AND c.owner = d.owner AND c.task_id = d.id
)
DELETE FROM a2a_tasks t USING doomed d
WHERE t.tenant = d.tenant AND t.owner = d.owner AND t.id = d.id
RETURNING t.tenant, t.owner, t.id
"""


async def _w_purge_finished(
    conn: asyncpg.Connection, before_us: int, limit: int
) -> list[tuple[Scope, str]]:
    async with conn.transaction():
        rows = await conn.fetch(_PURGE_FINISHED, list(FINISHED_STATES), before_us, limit)
    return [(Scope(r["tenant"], r["owner"]), r["id"]) for r in rows]


_PURGE_ORPHANS = """
DELETE FROM a2a_push_configs WHERE ctid IN (
    SELECT c.ctid FROM a2a_push_configs c
    WHERE NOT EXISTS (
        SELECT 1 FROM a2a_tasks t
        WHERE t.tenant = c.tenant AND t.owner = c.owner AND t.id = c.task_id
    )
    LIMIT $1
)
"""


async def _w_purge_orphans(conn: asyncpg.Connection, limit: int) -> int:
    status = await conn.execute(_PURGE_ORPHANS, max(limit, 0))
    return int(status.split()[-1])


async def _run_batch(
    conn: asyncpg.Connection, batch: list[_Op]
) -> list[tuple[Any, BaseException | None]]:
    """Every write of the batch, committed together: saves as one statement; push-config
    writes join it in one transaction."""
    saves = [args for kind, args, _ in batch if kind == "save"]
    others = [(i, kind, args) for i, (kind, args, _) in enumerate(batch) if kind != "save"]
    # Push configs that go with a task's first events (TaskStore.save `configs`).
    configs = [(args[0], args[1], *config) for args in saves for config in args[9]]
    results: list[tuple[Any, BaseException | None]] = [(None, None)] * len(batch)
    if not others and not configs:
        await conn.execute(_SAVE_MANY, *_save_columns(saves))
        return results
    async with conn.transaction():
        if saves:
            await conn.execute(_SAVE_MANY, *_save_columns(saves))
        for row in configs:
            await conn.execute(_PUT_CONFIG, *row)
        for i, kind, args in others:
            if kind == "put":
                await conn.execute(_PUT_CONFIG, *args)
            else:
                status = await conn.execute(_DELETE_CONFIG, *args)
                results[i] = (status != "DELETE 0", None)
    return results


def _save_columns(saves: list[tuple[Any, ...]]) -> list[list[Any]]:
    """The unnest arrays of _SAVE_MANY: the last snapshot of each task (one statement may
    not update a row twice), and every event."""
    latest: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    events: list[tuple[str, str, str, int, bytes]] = []
    for args in saves:
        key = (args[0], args[1], args[2])
        previous = latest.get(key)
        row = args[:8]
        if previous is not None and row[6] == 0:  # a snapshot without events keeps the seq
            row = (*row[:6], previous[6], row[7])
        latest[key] = row
        events += [(*key, seq, payload) for seq, payload in args[8]]
    task_columns = [list(column) for column in zip(*latest.values(), strict=True)]
    event_columns = [list(column) for column in zip(*events, strict=True)] or [[]] * 5
    return task_columns + event_columns


def _write_error(kind: str, exc: asyncpg.PostgresError) -> BaseException:
    if kind == "save" and isinstance(exc, asyncpg.exceptions.UniqueViolationError):
        return WriteConflict("another writer already stored these events of the task")
    log.error("task store: write %s failed: %s", kind, _describe(exc))
    return RuntimeError("task store unavailable")


def _describe(exc: BaseException) -> str:
    """An exception for a log line or a startup error: its kind and message, no traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _r_get(conn: asyncpg.Connection, scope: Scope, task_id: str) -> pb.Task | None:
    raw = await conn.fetchval(
        "SELECT snapshot FROM a2a_tasks WHERE tenant = $1 AND owner = $2 AND id = $3",
        scope.tenant,
        scope.owner,
        task_id,
    )
    return pb.Task.FromString(raw) if raw is not None else None


async def _r_get_with_seq(
    conn: asyncpg.Connection, scope: Scope, task_id: str
) -> tuple[pb.Task, int] | None:
    row = await conn.fetchrow(
        "SELECT snapshot, last_seq FROM a2a_tasks WHERE tenant = $1 AND owner = $2 AND id = $3",
        scope.tenant,
        scope.owner,
        task_id,
    )
    return None if row is None else (pb.Task.FromString(row[0]), int(row[1]))


async def _r_list(conn: asyncpg.Connection, scope: Scope, query: TaskQuery) -> TaskPage:
    sql, params = page_query(scope, query)
    rows = await conn.fetch(sql, *params)
    sql, params = count_query(scope, query)
    total = await conn.fetchval(sql, *params)
    page = rows[: max(query.page_size, 0)]
    more = len(rows) > len(page)
    tasks = [pb.Task.FromString(row[0]) for row in page]
    next_cursor = (page[-1][1], page[-1][2]) if more and page else None
    return TaskPage(tasks, int(total), next_cursor)


async def _r_events_after(
    conn: asyncpg.Connection, scope: Scope, task_id: str, seq: int
) -> list[StoredEvent]:
    rows = await conn.fetch(
        "SELECT seq, payload FROM a2a_events"
        " WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND seq > $4 ORDER BY seq",
        scope.tenant,
        scope.owner,
        task_id,
        seq,
    )
    return [StoredEvent(row[0], pb.StreamResponse.FromString(row[1])) for row in rows]


async def _r_last_seq(conn: asyncpg.Connection, scope: Scope, task_id: str) -> int:
    found = await conn.fetchval(
        "SELECT max(seq) FROM a2a_events WHERE tenant = $1 AND owner = $2 AND task_id = $3",
        scope.tenant,
        scope.owner,
        task_id,
    )
    return int(found or 0)


async def _r_unsettled(conn: asyncpg.Connection) -> list[tuple[Scope, pb.Task]]:
    rows = await conn.fetch(
        "SELECT tenant, owner, snapshot FROM a2a_tasks WHERE state = ANY($1::int[])",
        list(UNSETTLED_STATES),
    )
    return [(Scope(row[0], row[1]), pb.Task.FromString(row[2])) for row in rows]


async def _r_get_config(
    conn: asyncpg.Connection, scope: Scope, task_id: str, config_id: str
) -> pb.TaskPushNotificationConfig | None:
    raw = await conn.fetchval(
        "SELECT payload FROM a2a_push_configs"
        " WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND id = $4",
        scope.tenant,
        scope.owner,
        task_id,
        config_id,
    )
    return pb.TaskPushNotificationConfig.FromString(raw) if raw is not None else None


async def _r_list_configs(
    conn: asyncpg.Connection, scope: Scope, task_id: str, page_size: int, after_id: str | None
) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
    rows = await conn.fetch(
        "SELECT id, payload FROM a2a_push_configs"
        " WHERE tenant = $1 AND owner = $2 AND task_id = $3 AND ($4::text IS NULL OR id > $4)"
        " ORDER BY id LIMIT $5",
        scope.tenant,
        scope.owner,
        task_id,
        after_id,
        max(page_size, 0) + 1,
    )
    page = rows[: max(page_size, 0)]
    more = len(rows) > len(page)
    configs = [pb.TaskPushNotificationConfig.FromString(row[1]) for row in page]
    return configs, (page[-1][0] if more and page else None)
