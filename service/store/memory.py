"""In-memory task store for tests and benchmarks: same contract, no durability."""

from __future__ import annotations

import builtins
import os
from collections.abc import Sequence

from gen import a2a_pb2 as pb
from service.protocol.states import TERMINAL
from service.protocol.timeutil import status_micros
from service.store.base import Scope, Snapshot, StoredEvent, TaskPage, TaskQuery, encoded

_UNSETTLED = (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)


class MemoryTaskStore:
    def __init__(self) -> None:
        self._tasks: dict[tuple[Scope, str], bytes] = {}
        self._events: dict[tuple[Scope, str], list[StoredEvent]] = {}
        self._configs: dict[tuple[Scope, str], dict[str, bytes]] = {}
        self.page_token_key = os.urandom(32)  # tokens die with the store, as the tasks do

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
        snapshot: Snapshot | None = None,
        steady: bool = False,  # every save stores its snapshot here
    ) -> None:
        key = (scope, task.id)
        self._tasks[key] = encoded(task, snapshot)
        if events:
            self._events.setdefault(key, []).extend(events)
        for config in configs:
            await self.put_push_config(scope, config)

    async def get(self, scope: Scope, task_id: str) -> pb.Task | None:
        raw = self._tasks.get((scope, task_id))
        return pb.Task.FromString(raw) if raw is not None else None

    async def list(self, scope: Scope, query: TaskQuery) -> TaskPage:
        rows = []
        for (s, task_id), raw in self._tasks.items():
            if s != scope:
                continue
            task = pb.Task.FromString(raw)
            if query.context_id and task.context_id != query.context_id:
                continue
            if query.state and task.status.state != query.state:
                continue
            ts = status_micros(task)
            if query.status_after_us is not None and ts <= query.status_after_us:
                continue
            rows.append((ts, task_id, task))
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
        total = len(rows)
        if query.cursor is not None:
            rows = [r for r in rows if (r[0], r[1]) < query.cursor]
        page = rows[: query.page_size]
        more = len(rows) > query.page_size
        next_cursor = (page[-1][0], page[-1][1]) if more and page else None
        return TaskPage([r[2] for r in page], total, next_cursor)

    async def events_after(
        self, scope: Scope, task_id: str, seq: int
    ) -> builtins.list[StoredEvent]:
        return [e for e in self._events.get((scope, task_id), []) if e.seq > seq]

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        events = self._events.get((scope, task_id))
        return events[-1].seq if events else 0

    async def unsettled(self) -> builtins.list[tuple[Scope, pb.Task]]:
        found = []
        for (scope, _), raw in self._tasks.items():
            task = pb.Task.FromString(raw)
            if task.status.state in _UNSETTLED:
                found.append((scope, task))
        return found

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        purged: list[tuple[Scope, str]] = []
        for key, raw in self._tasks.items():
            if len(purged) >= limit:
                break
            task = pb.Task.FromString(raw)
            if task.status.state in TERMINAL and status_micros(task) < before_us:
                purged.append(key)
        for key in purged:
            del self._tasks[key]
            self._events.pop(key, None)
            self._configs.pop(key, None)
        return purged

    async def purge_orphans(self, limit: int) -> int:
        doomed = [key for key in self._configs if key not in self._tasks][: max(limit, 0)]
        for key in doomed:
            del self._configs[key]
        return len(doomed)

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        self._configs.setdefault((scope, config.task_id), {})[config.id] = (
            config.SerializeToString()
        )

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        raw = self._configs.get((scope, task_id), {}).get(config_id)
        return pb.TaskPushNotificationConfig.FromString(raw) if raw is not None else None

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[builtins.list[pb.TaskPushNotificationConfig], str | None]:
        configs = self._configs.get((scope, task_id), {})
        ids = sorted(i for i in configs if after_id is None or i > after_id)
        page = ids[:page_size]
        more = len(ids) > page_size
        found = [pb.TaskPushNotificationConfig.FromString(configs[i]) for i in page]
        return found, (page[-1] if more and page else None)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        return self._configs.get((scope, task_id), {}).pop(config_id, None) is not None
