"""The reads of both durable stores, as `TaskStore` methods.

SQLite and PostgreSQL each keep their read queries in a module of functions named
alike (`sqlite_reads`, `pg_reads`: `r_get(conn, scope, task_id)`, ...); what differs
is how one runs — on the reader thread (SQLite) or on a pooled connection
(PostgreSQL) — which each store says in its `_read`. These methods name the query
and its result type once for both.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from gen import a2a_pb2 as pb
from service.store.base import Scope, StoredEvent, TaskPage, TaskQuery


class ReadQueries(Protocol):
    """A store's reads module (its functions take the connection first)."""

    r_get: Callable[..., Any]
    r_list: Callable[..., Any]
    r_events_after: Callable[..., Any]
    r_last_seq: Callable[..., Any]
    r_unsettled: Callable[..., Any]
    r_get_config: Callable[..., Any]
    r_list_configs: Callable[..., Any]


class SqlReads:
    """Mixed into a store class that sets `queries` and implements `_read`."""

    queries: ClassVar[ReadQueries]

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    async def get(self, scope: Scope, task_id: str) -> pb.Task | None:
        found: pb.Task | None = await self._read(self.queries.r_get, scope, task_id)
        return found

    async def list(self, scope: Scope, query: TaskQuery) -> TaskPage:
        page: TaskPage = await self._read(self.queries.r_list, scope, query)
        return page

    async def events_after(
        self, scope: Scope, task_id: str, seq: int
    ) -> builtins.list[StoredEvent]:
        found: builtins.list[StoredEvent] = await self._read(
            self.queries.r_events_after, scope, task_id, seq
        )
        return found

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        seq: int = await self._read(self.queries.r_last_seq, scope, task_id)
        return seq

    async def unsettled(self) -> builtins.list[tuple[Scope, pb.Task]]:
        found: builtins.list[tuple[Scope, pb.Task]] = await self._read(self.queries.r_unsettled)
        return found

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        found: pb.TaskPushNotificationConfig | None = await self._read(
            self.queries.r_get_config, scope, task_id, config_id
        )
        return found

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[builtins.list[pb.TaskPushNotificationConfig], str | None]:
        found: tuple[builtins.list[pb.TaskPushNotificationConfig], str | None] = await self._read(
            self.queries.r_list_configs, scope, task_id, page_size, after_id
        )
        return found
