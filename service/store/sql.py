"""SQL both durable stores build alike: ListTasks pages, push configs, page results.

The two databases differ here only in a `Dialect`: table names, placeholder style
(`?` for sqlite3, `$1, $2, ...` for asyncpg) and whether a query names the index
it must use (SQLite's `INDEXED BY`, so that a page is always a range scan; the
PostgreSQL planner picks the same indexes on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gen import a2a_pb2 as pb
from service.store.base import Scope, TaskPage, TaskQuery


@dataclass(frozen=True)
class Dialect:
    """What the SQL of one database looks like."""

    prefix: str  # of every table name
    numbered: bool  # placeholders are $1, $2, ... (else ?)
    index_hints: bool  # a ListTasks query names its index

    def table(self, name: str) -> str:
        return self.prefix + name

    def param(self, position: int) -> str:
        """The placeholder of the `position`th parameter (from 1)."""
        return f"${position}" if self.numbered else "?"

    def params(self, first: int, count: int) -> str:
        return ", ".join(self.param(first + i) for i in range(count))

    def upsert(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        """One row inserted, or the columns outside `key` updated where it exists."""
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
        return (
            f"INSERT INTO {self.table(table)} ({', '.join(columns)})"
            f" VALUES ({self.params(1, len(columns))})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
        )


SQLITE = Dialect(prefix="", numbered=False, index_hints=True)
POSTGRES = Dialect(prefix="a2a_", numbered=True, index_hints=False)


# ---------------------------------------------------------------- ListTasks


def list_index(query: TaskQuery) -> str:
    """The index (without the table prefix) that serves the query's filters in order."""
    if query.context_id and query.state:
        return "tasks_by_context_state"
    if query.context_id:
        return "tasks_by_context"
    if query.state:
        return "tasks_by_state"
    return "tasks_by_time"


def _tasks_from(dialect: Dialect, query: TaskQuery) -> str:
    hint = f" INDEXED BY {dialect.table(list_index(query))}" if dialect.index_hints else ""
    return dialect.table("tasks") + hint


def _list_where(dialect: Dialect, scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    params: list[Any] = [scope.tenant, scope.owner]
    where = [f"tenant = {dialect.param(1)}", f"owner = {dialect.param(2)}"]
    if query.context_id:
        params.append(query.context_id)
        where.append(f"context_id = {dialect.param(len(params))}")
    if query.state:
        params.append(int(query.state))
        where.append(f"state = {dialect.param(len(params))}")
    if query.status_after_us is not None:
        params.append(int(query.status_after_us))
        where.append(f"status_us > {dialect.param(len(params))}")
    return " AND ".join(where), params


def page_query(
    dialect: Dialect, scope: Scope, query: TaskQuery, more_columns: str = ""
) -> tuple[str, list[Any]]:
    """SQL + parameters of one ListTasks page (one row more than the page size): newest
    first, keyset-paged after the cursor's (status_us, id); each row (snapshot, status_us,
    id) and then `more_columns` (", a, b"), which a store reads for itself."""
    where, params = _list_where(dialect, scope, query)
    if query.cursor is not None:
        params += [int(query.cursor[0]), str(query.cursor[1])]
        where += f" AND (status_us, id) < ({dialect.params(len(params) - 1, 2)})"
    params.append(max(query.page_size, 0) + 1)
    sql = (
        f"SELECT snapshot, status_us, id{more_columns} FROM {_tasks_from(dialect, query)}"
        f" WHERE {where}"
        f" ORDER BY status_us DESC, id DESC LIMIT {dialect.param(len(params))}"
    )
    return sql, params


def count_rows_query(dialect: Dialect, scope: Scope, query: TaskQuery) -> tuple[str, list[Any]]:
    """SQL + parameters of COUNT(*) over the rows the filters match (the page's index
    range, ignoring paging)."""
    where, params = _list_where(dialect, scope, query)
    return f"SELECT count(*) FROM {_tasks_from(dialect, query)} WHERE {where}", params


def task_page(rows: Sequence[Sequence[Any]], page_size: int, total: int) -> TaskPage:
    """A page from `page_query`'s rows (snapshot, status_us, id): the extra row, if
    any, says there is a next page, whose cursor is the page's last row."""
    page = rows[: max(page_size, 0)]
    more = len(rows) > len(page)
    next_cursor = (page[-1][1], page[-1][2]) if more and page else None
    return TaskPage([pb.Task.FromString(row[0]) for row in page], int(total), next_cursor)


# ---------------------------------------------------------------- push configs

_CONFIG_KEY = ("tenant", "owner", "task_id", "id")


def put_config(dialect: Dialect) -> str:
    """Insert or replace one push config: (tenant, owner, task_id, id, payload)."""
    return dialect.upsert("push_configs", (*_CONFIG_KEY, "payload"), _CONFIG_KEY)


def _config_where(dialect: Dialect) -> str:
    return " AND ".join(f"{c} = {dialect.param(i)}" for i, c in enumerate(_CONFIG_KEY, 1))


def delete_config(dialect: Dialect) -> str:
    """Delete one push config: (tenant, owner, task_id, id)."""
    return f"DELETE FROM {dialect.table('push_configs')} WHERE {_config_where(dialect)}"


def get_config(dialect: Dialect) -> str:
    """One push config's payload: (tenant, owner, task_id, id)."""
    return f"SELECT payload FROM {dialect.table('push_configs')} WHERE {_config_where(dialect)}"


def get_task(dialect: Dialect, columns: str = "snapshot") -> str:
    """`columns` of one task: (tenant, owner, id)."""
    return (
        f"SELECT {columns} FROM {dialect.table('tasks')}"
        f" WHERE tenant = {dialect.param(1)} AND owner = {dialect.param(2)}"
        f" AND id = {dialect.param(3)}"
    )


def configs_page_query(
    dialect: Dialect, scope: Scope, task_id: str, page_size: int, after_id: str | None
) -> tuple[str, list[Any]]:
    """SQL + parameters of one page of a task's push configs (one row more than the page
    size), by id, after `after_id`."""
    params: list[Any] = [scope.tenant, scope.owner, task_id]
    sql = (
        f"SELECT id, payload FROM {dialect.table('push_configs')}"
        f" WHERE tenant = {dialect.param(1)} AND owner = {dialect.param(2)}"
        f" AND task_id = {dialect.param(3)}"
    )
    if after_id is not None:
        params.append(after_id)
        sql += f" AND id > {dialect.param(len(params))}"
    params.append(max(page_size, 0) + 1)
    sql += f" ORDER BY id LIMIT {dialect.param(len(params))}"
    return sql, params


def configs_page(
    rows: Sequence[Sequence[Any]], page_size: int
) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
    """A page from `configs_page_query`'s rows (id, payload) and the id to continue after."""
    page = rows[: max(page_size, 0)]
    more = len(rows) > len(page)
    configs = [pb.TaskPushNotificationConfig.FromString(row[1]) for row in page]
    return configs, (page[-1][0] if more and page else None)
