"""The SQLite store's reads: bodies that run on its reader thread, on a read-only
connection (in WAL mode readers never block the writer and see every committed
transaction).

A running task's snapshot may be older than its last events (a streaming agent's
chunks are stored as events, the snapshot once every SNAPSHOT_EVERY of them): every
read of such a row applies the chunks stored after it (service.store.replay), in the
same read transaction.

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
from service.store.replay import apply_artifact_updates
from service.store.sqlite_schema import UNSETTLED_SQL

_GET = sql.get_task(sql.SQLITE, "snapshot, state, snapshot_seq")
_RUNNING = (int(pb.TASK_STATE_SUBMITTED), int(pb.TASK_STATE_WORKING))
_GET_CONFIG = sql.get_config(sql.SQLITE)


def page_query(scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size).

    Module level so the tests can check its query plan.
    """
    return sql.page_query(sql.SQLITE, scope, query, ", state, snapshot_seq")


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


def _may_lag(state: int, snapshot_seq: int | None) -> bool:
    """Whether events may be stored after a row's snapshot: only a running task's steady
    saves keep the snapshot it has (sqlite.SqliteTaskStore.save)."""
    return snapshot_seq is not None and state in _RUNNING


def _caught_up(conn: sqlite3.Connection, scope: Scope, task: pb.Task, seq: int) -> pb.Task:
    """`task` (its snapshot holds events up to `seq`) with the chunks stored after it."""
    later = r_events_after(conn, scope, task.id, seq)
    return apply_artifact_updates(task, (stored.event for stored in later)) if later else task


def r_get(conn: sqlite3.Connection, scope: Scope, task_id: str) -> pb.Task | None:
    key = (scope.tenant, scope.owner, task_id)
    row = conn.execute(_GET, key).fetchone()
    if row is None or not _may_lag(row[1], row[2]):
        return pb.Task.FromString(row[0]) if row is not None else None
    conn.execute("BEGIN")  # the row and the events after its snapshot, as of one moment
    try:
        row = conn.execute(_GET, key).fetchone()
        if row is None:
            return None
        task = pb.Task.FromString(row[0])
        return _caught_up(conn, scope, task, row[2]) if _may_lag(row[1], row[2]) else task
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def r_list(conn: sqlite3.Connection, scope: Scope, query: TaskQuery) -> TaskPage:
    page_sql, page_params = page_query(scope, query)
    count_sql, count_params = count_query(scope, query)
    conn.execute("BEGIN")  # one snapshot for the page, its total and the events applied
    try:
        rows = conn.execute(page_sql, page_params).fetchall()
        counted = conn.execute(count_sql, count_params).fetchone()
        page = sql.task_page(rows, query.page_size, counted[0] if counted is not None else 0)
        for task, row in zip(page.tasks, rows, strict=False):
            if _may_lag(row[3], row[4]):
                _caught_up(conn, scope, task, row[4])
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    return page


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
    conn.execute("BEGIN")
    try:
        rows = conn.execute(
            f"SELECT tenant, owner, snapshot, state, snapshot_seq FROM tasks WHERE {UNSETTLED_SQL}"
        ).fetchall()
        found = []
        for tenant, owner, snapshot, state, seq in rows:
            scope, task = Scope(tenant, owner), pb.Task.FromString(snapshot)
            found.append(
                (scope, _caught_up(conn, scope, task, seq) if _may_lag(state, seq) else task)
            )
        return found
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


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
