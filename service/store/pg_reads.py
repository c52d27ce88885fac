"""The PostgreSQL store's reads, each on a pooled connection.

`total_size` is COUNT(*) over the same index range as the page (index-only where
the visibility map allows), not a counter table: one counter row per scope would be
a lock every writer of that scope in every process queues on.
"""

from __future__ import annotations

from typing import Any

import asyncpg

import service.store.sql as sql
from gen import a2a_pb2 as pb
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery
from service.store.pg_schema import UNSETTLED_STATES

_GET = sql.get_task(sql.POSTGRES)
_GET_WITH_SEQ = sql.get_task(sql.POSTGRES, "snapshot, last_seq")
_GET_CONFIG = sql.get_config(sql.POSTGRES)


def page_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size)."""
    return sql.page_query(sql.POSTGRES, scope, query)


def count_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of total_size: the rows the filters match, ignoring paging."""
    return sql.count_rows_query(sql.POSTGRES, scope, query)


async def r_get(conn: asyncpg.Connection, scope: Scope, task_id: str) -> pb.Task | None:
    raw = await conn.fetchval(_GET, scope.tenant, scope.owner, task_id)
    return pb.Task.FromString(raw) if raw is not None else None


async def r_get_with_seq(
    conn: asyncpg.Connection, scope: Scope, task_id: str
) -> tuple[pb.Task, int] | None:
    row = await conn.fetchrow(_GET_WITH_SEQ, scope.tenant, scope.owner, task_id)
    return None if row is None else (pb.Task.FromString(row[0]), int(row[1]))


async def r_list(conn: asyncpg.Connection, scope: Scope, query: TaskQuery) -> TaskPage:
    text, params = page_query(scope, query)
    rows = await conn.fetch(text, *params)
    text, params = count_query(scope, query)
    total = await conn.fetchval(text, *params)
    return sql.task_page(rows, query.page_size, int(total))


async def r_events_after(
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


async def r_last_seq(conn: asyncpg.Connection, scope: Scope, task_id: str) -> int:
    found = await conn.fetchval(
        "SELECT max(seq) FROM a2a_events WHERE tenant = $1 AND owner = $2 AND task_id = $3",
        scope.tenant,
        scope.owner,
        task_id,
    )
    return int(found or 0)


async def r_unsettled(conn: asyncpg.Connection) -> list[tuple[Scope, pb.Task]]:
    rows = await conn.fetch(
        "SELECT tenant, owner, snapshot FROM a2a_tasks WHERE state = ANY($1::int[])",
        list(UNSETTLED_STATES),
    )
    return [(Scope(row[0], row[1]), pb.Task.FromString(row[2])) for row in rows]


async def r_get_config(
    conn: asyncpg.Connection, scope: Scope, task_id: str, config_id: str
) -> pb.TaskPushNotificationConfig | None:
    raw = await conn.fetchval(_GET_CONFIG, scope.tenant, scope.owner, task_id, config_id)
    return pb.TaskPushNotificationConfig.FromString(raw) if raw is not None else None


async def r_list_configs(
    conn: asyncpg.Connection, scope: Scope, task_id: str, page_size: int, after_id: str | None
) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
    text, params = sql.configs_page_query(sql.POSTGRES, scope, task_id, page_size, after_id)
    return sql.configs_page(await conn.fetch(text, *params), page_size)
