"""The task store seam: what the engine needs from durable storage.

Everything is scoped: a task belongs to one (tenant, owner) pair and is
invisible from any other. Tasks are stored as whole `Task` snapshots plus the
numbered events that produced them (for stream resume): the `TaskStore` seam.
Push configs are a seam of their own (`PushConfigStore`); the stores here offer
both, so configs share the tasks' durability.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gen import a2a_pb2 as pb


class Scope(NamedTuple):
    """Who may see a task: the tenant it was created under and its owner.
    (A named tuple: one is made per request, and it keys dictionaries.)"""

    tenant: str = ""
    owner: str = ""


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """A ListTasks page request, already validated by the engine."""

    context_id: str = ""
    state: int = 0  # pb.TaskState; 0 = any
    status_after_us: int | None = None  # only tasks whose status timestamp is strictly later
    page_size: int = 50
    cursor: tuple[int, str] | None = None  # (status_us, task_id) of the last row already returned


@dataclass(frozen=True, slots=True)
class TaskPage:
    tasks: list[pb.Task]
    total_size: int  # rows matching the filters, ignoring paging
    next_cursor: tuple[int, str] | None  # None on the last page


class WriteConflict(RuntimeError):
    """A save lost to another writer of the same task (a store shared by several processes
    holds the line: two writers cannot both append one sequence number)."""


class StoredEvent(NamedTuple):
    """One numbered event of a task (several per turn: a tuple is the cheapest record)."""

    seq: int
    event: pb.StreamResponse


def artifacts_only(events: Sequence[StoredEvent]) -> bool:
    """Whether `events` are all artifact updates (and there is one): a streaming agent's
    chunks, which leave a task's state and status time as they were."""
    for stored in events:
        if not stored.event.HasField("artifact_update"):
            return False
    return bool(events)


# A task already encoded, or how to encode it (called at most once, before `save` first
# yields): a store that keeps its stored snapshot for a save does not pay for the encoding.
Snapshot = bytes | Callable[[], bytes]


def encoded(task: pb.Task, snapshot: Snapshot | None) -> bytes:
    """The bytes a save stores: `snapshot`'s, else `task` encoded."""
    if snapshot is None:
        whole: bytes = task.SerializeToString()
        return whole
    return snapshot if isinstance(snapshot, bytes) else snapshot()


class TaskStore(Protocol):
    """Task snapshots, their numbered events, and the queries over them."""

    # Secret (32 bytes, valid after open()) that makes ListTasks page tokens tamper-evident;
    # every process on the same durable store sees the same one.
    page_token_key: bytes

    async def open(self) -> None:
        """Create schema / connections. Idempotent."""

    async def close(self) -> None: ...

    async def save(
        self,
        scope: Scope,
        task: pb.Task,
        events: list[StoredEvent],
        configs: Sequence[pb.TaskPushNotificationConfig] = (),
        snapshot: Snapshot | None = None,
        steady: bool = False,
    ) -> None:
        """Insert or replace the task snapshot and append its new events, atomically; with
        `configs`, also put those push configs in the same write (a new task's configs go
        with its first events, so no config exists without its task).

        `snapshot`: the whole task encoded (or how to encode it), when the caller has it so
        (a live run keeps the chunks appended to its artifacts encoded,
        service.engine.chunks); it is what is stored, and `task` then only gives the row's
        columns (id, context, status) and may lack those chunks.

        `steady`: the caller vouches that `events` are all artifact updates and that the
        stored row's context, state and status time stay as they are (a streaming agent's
        chunks). A store may then keep the snapshot it has and store only the events, as
        long as every read applies them (service.store.replay): SQLite writes the snapshot
        of such saves once every SNAPSHOT_EVERY events.

        Returns only after the write is durable (survives kill -9 of this process).
        Order of calls is order of commit.
        """

    async def get(self, scope: Scope, task_id: str) -> pb.Task | None: ...

    async def list(self, scope: Scope, query: TaskQuery) -> TaskPage:
        """Newest status timestamp first, then task id descending."""

    async def events_after(
        self, scope: Scope, task_id: str, seq: int
    ) -> builtins.list[StoredEvent]:
        """Stored events of a task with sequence number > seq, in order."""

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        """Highest stored event sequence of the task (0 when none)."""

    async def unsettled(self) -> builtins.list[tuple[Scope, pb.Task]]:
        """Tasks in SUBMITTED or WORKING state: after a restart nobody runs them."""

    async def purge_finished(self, before_us: int, limit: int) -> builtins.list[tuple[Scope, str]]:
        """Retention: delete at most `limit` tasks in a terminal state (COMPLETED, FAILED,
        CANCELED, REJECTED: `service.protocol.states.TERMINAL`) whose status timestamp is earlier than
        `before_us` (microseconds since the epoch), each with its events and push configs,
        and keep `total_size` counts right; return the (scope, task id) pairs deleted.

        One call is one atomic, durable write, quick enough to run while the store
        serves (the caller repeats it until fewer than `limit` come back). Which old
        tasks go first is up to the store. Tasks in any other state are never deleted."""

    async def purge_orphans(self, limit: int) -> int:
        """Delete at most `limit` push configs whose task is not stored (left by a server
        from before configs were written with their task's first events); returns how many.
        Like purge_finished, one quick atomic write."""


class PushConfigStore(Protocol):
    """Push notification configs of tasks, scoped like the tasks."""

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        """Insert or replace by (task_id, id)."""

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None: ...

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[builtins.list[pb.TaskPushNotificationConfig], str | None]:
        """Ordered by config id; returns (configs, last id when more follow else None)."""

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool: ...


class Store(TaskStore, PushConfigStore, Protocol):
    """What `open_store` gives: both seams on one durable store (one file, one commit log)."""


class SnapshotReader(Protocol):
    """Optional: a store that reads a snapshot and the sequence of its last event together
    (one row), for a follower that must continue exactly after the snapshot."""

    async def get_with_seq(self, scope: Scope, task_id: str) -> tuple[pb.Task, int] | None: ...


async def snapshot_with_seq(
    store: TaskStore, scope: Scope, task_id: str
) -> tuple[pb.Task, int] | None:
    """The task and its last event's sequence: in one read where the store offers it, else
    the sequence first (so the snapshot is at least as new; a follower then skips nothing)."""
    reader = getattr(store, "get_with_seq", None)
    if reader is not None:
        found: tuple[pb.Task, int] | None = await reader(scope, task_id)
        return found
    seq = await store.last_seq(scope, task_id)
    task = await store.get(scope, task_id)
    return None if task is None else (task, seq)
