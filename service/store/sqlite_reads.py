"""The SQLite store's reads: bodies that run on its reader thread, on a read-only
connection (in WAL mode readers never block the writer and see every committed
transaction).

ListTasks is keyset-paged over one index per filter combination (service.store.sql)
and its `total_size` comes from counters (`task_counts`) that the writer keeps in the
same transaction as the task rows, so neither grows with the number of stored tasks;
only a `status_after_us` filter falls back to COUNT(*) over the index range.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import service.store.sql as sql
from gen import a2a_pb2 as pb
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery
from service.store.event_blob import unpack_events
from service.store.sqlite_schema import UNSETTLED_SQL

_GET = sql.get_task(sql.SQLITE)
_GET_CONFIG = sql.get_config(sql.SQLITE)


def page_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size).

    Module level so the tests can check its query plan.
    """
    return sql.page_query(sql.SQLITE, scope, query)


def count_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of total_size: a counter lookup, or COUNT(*) over the
    index range when `status_after_us` is set."""
    if query.status_after_us is None:
        return (
            "SELECT n FROM task_counts"
            " WHERE tenant = ? AND owner = ? AND context_id = ? AND state = ?",
            [scope.tenant, scope.owner, query.context_id or "", int(query.state or 0)],
        )
    return sql.count_rows_query(sql.SQLITE, scope, query)


def r_get(conn: sqlite3.Connection, scope: Scope, task_id: str) -> pb.Task | None:
    row = conn.execute(_GET, (scope.tenant, scope.owner, task_id)).fetchone()
    return pb.Task.FromString(row[0]) if row is not None else None


def r_list(conn: sqlite3.Connection, scope: Scope, query: TaskQuery) -> TaskPage:
    page_sql, page_params = page_query(scope, query)
    count_sql, count_params = count_query(scope, query)
    conn.execute("BEGIN")  # one snapshot for the page and its total
    try:
        rows = conn.execute(page_sql, page_params).fetchall()
        counted = conn.execute(count_sql, count_params).fetchone()
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    return sql.task_page(rows, query.page_size, counted[0] if counted is not None else 0)


def r_events_after(
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
        for s, p in unpack_events(blob)
        if s > seq
    ]


def r_last_seq(conn: sqlite3.Connection, scope: Scope, task_id: str) -> int:
    row = conn.execute(
        "SELECT MAX(last_seq) FROM events WHERE tenant = ? AND owner = ? AND task_id = ?",
        (scope.tenant, scope.owner, task_id),
    ).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def r_unsettled(conn: sqlite3.Connection) -> list[tuple[Scope, pb.Task]]:
    rows = conn.execute(f"SELECT tenant, owner, snapshot FROM tasks WHERE {UNSETTLED_SQL}")
    return [(Scope(t, o), pb.Task.FromString(s)) for t, o, s in rows.fetchall()]


def r_get_config(
    conn: sqlite3.Connection, scope: Scope, task_id: str, config_id: str
) -> pb.TaskPushNotificationConfig | None:
    row = conn.execute(_GET_CONFIG, (scope.tenant, scope.owner, task_id, config_id)).fetchone()
    return pb.TaskPushNotificationConfig.FromString(row[0]) if row is not None else None


def r_list_configs(
    conn: sqlite3.Connection, scope: Scope, task_id: str, page_size: int, after_id: str | None
) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
    text, params = sql.configs_page_query(sql.SQLITE, scope, task_id, page_size, after_id)
    return sql.configs_page(conn.execute(text, params).fetchall(), page_size)
