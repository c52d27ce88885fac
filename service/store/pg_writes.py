"""The PostgreSQL store's writes: the statements, and the writer that group-commits the
queued ones (service.store.group_commit), one commit on the wire at a time.

Paced as SQLite's are (service.store.pacing, `store_commit_interval_ms`): a lone
caller's write commits at once; when independent callers write, a commit starts at
most once per slot (5 ms) so their writes share it. Without the pacing a commit took
whatever had queued during the last round trip: on an idle 2-core host, 64 callers
made batches of ~2 saves, and the asyncpg statement's fixed cost (~150 µs of loop
CPU) then capped one process at ~1,800 SendMessage/s; paced, ~12 saves share a
commit and the same process serves ~2,500/s, as many as on SQLite. Two commits in
flight made batches half as large and cost 15-40% more CPU per save for no steady
gain, so `_MAX_INFLIGHT` is 1 (the dispatcher supports more). The saves of a batch
are one statement (a data-modifying CTE over `unnest` arrays): the last snapshot of
each task and every event, atomically, in one round trip. Push-config writes in the
batch join it in one transaction. If a batch fails, each of its writes is retried
alone, so only the failing ones fail. Writes of one task commit in call order (a
commit never starts with a task another unfinished commit writes); a caller that
awaited one write before the next always sees them commit in that order.

The fence between processes: an event's (task, seq) is the table's key, so two
writers that append the same sequence number to one task cannot both commit; the
loser gets `WriteConflict` and its snapshot is not written either (same statement).
A snapshot never moves back to an older `last_seq`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

import service.store.sql as sql
from service.protocol.errors import UnavailableError
from service.store.base import Scope, WriteConflict
from service.store.group_commit import GroupCommit, Op, Outcome, settle
from service.store.pg_conn import CONNECTION_ERRORS, Connections, describe
from service.store.pg_schema import FINISHED_STATES

log = logging.getLogger("service.store.postgres")

_MAX_BATCH = 512  # writes per commit
_MAX_INFLIGHT = 1  # commits on the wire at once (measured: 2 cost 15-40% more CPU per save)

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

_PUT_CONFIG = sql.put_config(sql.POSTGRES)
_DELETE_CONFIG = sql.delete_config(sql.POSTGRES)


class PgWriter:
    """Commits the queued writes of one open store: `save` / `put` / `delete` ops."""

    def __init__(
        self, connections: Connections, commit_interval: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._connections = connections
        self._writing: set[asyncio.Task[None]] = set()  # commits on the wire
        self._busy_keys: set[tuple[str, str, str]] = set()  # tasks those commits write
        self._closing = False
        self.commits = GroupCommit(commit_interval, self._dispatch, self._held)
        self.commits.reset(loop)

    def submit(self, kind: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Queue one write (args start with tenant, owner, task id) for a group commit."""
        return self.commits.submit(kind, args)

    def _held(self) -> bool:
        return len(self._writing) >= _MAX_INFLIGHT  # the end of a commit paces the next

    async def drain(self) -> None:
        """Commit what is queued, unpaced (closing); what did not commit fails, also when
        this is cancelled, so no caller hangs."""
        self._closing = True
        self.commits.cancel()
        try:
            while self._writing or self.commits.pending:
                if not self._writing:
                    self._dispatch()
                    if not self._writing:
                        break
                await asyncio.wait(list(self._writing))
        finally:
            self.commits.fail_all(lambda: RuntimeError("task store is closed"))

    def _dispatch(self) -> None:
        """Start commits while fewer than _MAX_INFLIGHT are on the wire: each takes the
        queued writes, in order, up to the first one whose task an unfinished commit
        writes (so one task's writes commit in call order, one commit at a time)."""
        self.commits.cancel()
        loop = asyncio.get_running_loop()
        while self.commits.pending and len(self._writing) < _MAX_INFLIGHT:
            size = 0
            keys: set[tuple[str, str, str]] = set()
            for _, args, _ in self.commits.pending:
                key = args[:3]  # (tenant, owner, task_id) of every kind of write
                if key in self._busy_keys or size >= _MAX_BATCH:
                    break
                size += 1
                keys.add(key)
            if not size:
                return
            batch = self.commits.take(size)
            self.commits.pacer.on_commit(loop.time(), size)  # slots count from a commit's start
            self._busy_keys |= keys
            task = loop.create_task(self._commit_and_settle(batch, keys))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _commit_and_settle(self, batch: list[Op], keys: set[tuple[str, str, str]]) -> None:
        try:
            settle(batch, await self._commit(batch))
        except asyncio.CancelledError:  # the loop is going away: no caller waits forever
            settle(batch, [(None, RuntimeError("task store is closed")) for _ in batch])
            raise
        finally:
            self._busy_keys -= keys
            current = asyncio.current_task()
            if current is not None:
                self._writing.discard(current)  # before dispatching: this slot is free
            if self.commits.pending:
                if self._closing:
                    self._dispatch()  # no more waiting
                else:
                    self.commits.pace()

    async def _commit(self, batch: list[Op]) -> list[Outcome]:
        try:
            async with self._connections.conn() as conn:
                try:
                    return await _run_batch(conn, batch)
                except CONNECTION_ERRORS:
                    raise
                except asyncpg.PostgresError as exc:
                    if len(batch) == 1:
                        return [(None, _write_error(batch[0][0], exc))]
                    log.debug("task store: batch of %d failed (%s); one by one", len(batch), exc)
                outcomes: list[Outcome] = []
                for op in batch:
                    try:
                        outcomes += await _run_batch(conn, [op])
                    except CONNECTION_ERRORS:
                        raise
                    except asyncpg.PostgresError as exc:
                        outcomes.append((None, _write_error(op[0], exc)))
                return outcomes
        except UnavailableError as exc:
            return [(None, exc) for _ in batch]
        except Exception:  # a bug here: fail the batch, keep serving
            log.exception("task store: commit of %d writes failed", len(batch))
            return [(None, RuntimeError("task store unavailable")) for _ in batch]


async def _run_batch(conn: asyncpg.Connection, batch: list[Op]) -> list[Outcome]:
    """Every write of the batch, committed together: saves as one statement; push-config
    writes join it in one transaction."""
    saves = [args for kind, args, _ in batch if kind == "save"]
    others = [(i, kind, args) for i, (kind, args, _) in enumerate(batch) if kind != "save"]
    # Push configs that go with a task's first events (TaskStore.save `configs`).
    configs = [(args[0], args[1], *config) for args in saves for config in args[9]]
    results: list[Outcome] = [(None, None)] * len(batch)
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
    log.error("task store: write %s failed: %s", kind, describe(exc))
    return RuntimeError("task store unavailable")


# ---------------------------------------------------------------- retention

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


async def w_purge_finished(
    conn: asyncpg.Connection, before_us: int, limit: int
) -> list[tuple[Scope, str]]:
    """One transaction: the oldest finished tasks before `before_us` with their events and
    push configs. Rows another process is purging at the same moment are skipped (SKIP
    LOCKED), so several replicas may run retention at once. ListTasks counts with
    COUNT(*), so there is no counter to adjust."""
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


async def w_purge_orphans(conn: asyncpg.Connection, limit: int) -> int:
    """Push configs whose task is not stored (at most `limit`)."""
    status = await conn.execute(_PURGE_ORPHANS, max(limit, 0))
    return int(status.split()[-1])
