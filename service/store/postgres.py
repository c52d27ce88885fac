"""Durable task store on PostgreSQL (asyncpg), shared by every process of a cluster.

Why asyncpg: on this machine (16 concurrent callers, one upsert + one read per
call, each driver with its own connections) asyncpg cost the event loop ~200-240
µs of CPU per call against ~420 µs for psycopg 3 async, at ~1,600-2,000 calls/s
against ~950-1,150; the event loop's CPU is what a replica runs out of first.

The store is a composition: its connections (service.store.pg_conn: a LIFO queue,
re-made with back-off after an outage, which callers see as `UnavailableError`),
the group-committed writes and the fence between processes
(service.store.pg_writes), the reads (service.store.pg_reads), and the schema with
its migrations (service.store.pg_schema).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import asyncpg

import service.store.pg_reads as reads
import service.store.pg_writes as writes
from gen import a2a_pb2 as pb
from service.protocol.errors import UnavailableError
from service.protocol.timeutil import status_micros
from service.store.base import Scope, Snapshot, StoredEvent, encoded
from service.store.pacing import DEFAULT_COMMIT_INTERVAL
from service.store.pg_conn import (
    CONNECTION_ERRORS,
    Connections,
    connect,
    connect_failure,
    describe,
)
from service.store.pg_schema import migrate
from service.store.sql_reads import ReadQueries, SqlReads

log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 8  # connections per process: one writer's batches plus concurrent reads


class PostgresTaskStore(SqlReads):
    """Both seams (`TaskStore`, `PushConfigStore`) on one PostgreSQL database."""

    queries: ClassVar[ReadQueries] = reads  # run on a pooled connection (`_read`)

    def __init__(
        self,
        url: str,
        pool_size: int = DEFAULT_POOL_SIZE,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
    ) -> None:
        self._url = url
        self._size = max(2, pool_size)
        self._commit_interval = commit_interval
        self.page_token_key = b""  # set by open()
        self._open = False
        self._connections: Connections | None = None
        self._writer: writes.PgWriter | None = None
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Connect, migrate the schema (one process at a time), read the shared secrets.
        Raises RuntimeError naming what failed (no credentials)."""
        async with self._lock:
            if self._open:
                return
            try:
                first = await connect(self._url)
            except Exception as exc:
                raise RuntimeError(connect_failure(self._url, exc)) from None
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
                raise RuntimeError(f"PostgreSQL schema: {describe(exc)}") from None
            self._connections = Connections(self._url, self._size, first)
            loop = asyncio.get_running_loop()
            self._writer = writes.PgWriter(self._connections, self._commit_interval, loop)
            self._open = True

    async def close(self) -> None:
        """Commit what is queued, then close every connection. Cancelled, what did not
        commit fails ("task store is closed") and the store may be opened again."""
        async with self._lock:
            if not self._open:
                return
            self._open = False  # new calls fail from here on
            writer, connections = self._writer, self._connections
            assert writer is not None and connections is not None
            self._writer = self._connections = None
            try:
                await writer.drain()
            finally:
                await connections.close()

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

    def _conn(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A pooled connection for one read (or a purge), while the store is open."""
        if not self._open or self._connections is None:
            raise RuntimeError("task store is not open")
        return self._connections.conn()

    # ---------------------------------------------------------------- writes

    def _write(self, kind: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        if not self._open or self._writer is None:
            raise RuntimeError("task store is not open")
        return self._writer.submit(kind, args)

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
        snapshot: Snapshot | None = None,
        steady: bool = False,  # every save stores its snapshot here
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
            encoded(task, snapshot),
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

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        """The oldest finished tasks before `before_us`, with their events and push configs,
        in one transaction (pg_writes.w_purge_finished)."""
        purged: builtins.list[tuple[Scope, str]] = await self._read(
            writes.w_purge_finished, before_us, limit
        )
        return purged

    async def purge_orphans(self, limit: int) -> int:
        result: int = await self._read(writes.w_purge_orphans, limit)
        return result

    # ---------------------------------------------------------------- reads

    async def _read(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async with self._conn() as conn:
            try:
                return await fn(conn, *args)
            except CONNECTION_ERRORS:
                raise
            except asyncpg.PostgresError as exc:
                log.error("task store: read failed: %s", describe(exc))
                raise RuntimeError("task store unavailable") from None

    async def get_with_seq(self, scope: Scope, task_id: str) -> tuple[pb.Task, int] | None:
        """The snapshot and its last event's sequence, from one row (see SnapshotReader)."""
        found: tuple[pb.Task, int] | None = await self._read(reads.r_get_with_seq, scope, task_id)
        return found
