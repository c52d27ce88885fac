"""The push queue seam: durable delivery jobs, leased one lane at a time.

A job is one notification: one task event for one push config. Jobs of the same
(task, config) form a *lane* and are handed out in sequence order, one at a time:
the next job of a lane is leased only after the previous one was acknowledged or
dead-lettered, and a job waiting for its retry time holds its lane. Lanes are
independent, so a slow or failing receiver delays only its own lanes.

The queue also keeps the dispatcher's *cursors*: per (task, config) the last
event sequence turned into jobs. `enqueue` moves a cursor with compare-and-set,
so after a crash the dispatcher re-reads the store from the cursor and nothing
committed is lost (at least once), while concurrent dispatchers enqueue nothing
twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Protocol

TaskKey = tuple[str, str, str]  # (tenant, owner, task_id)
CursorKey = tuple[str, str, str, str]  # (tenant, owner, task_id, config_id)


def lane_of(tenant: str, owner: str, task_id: str, config_id: str) -> str:
    raw = "\x1f".join((tenant, owner, task_id, config_id)).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def task_hash(task: TaskKey) -> str:
    return hashlib.sha256("\x1f".join(task).encode()).hexdigest()[:32]


@dataclass(slots=True)
class Job:
    id: str
    tenant: str
    owner: str
    task_id: str
    config_id: str
    seq: int
    body: str  # the StreamResponse as ProtoJSON
    created_at: float  # epoch seconds; the age limit counts from here
    due_at: float  # not handed out before this time
    attempts: int = 0
    last_error: str = ""
    replay: bool = False  # re-enqueued by an operator from the dead-letter store
    trace: str = ""  # W3C traceparent of the turn that committed the event ('' = none)

    @property
    def lane(self) -> str:
        return lane_of(self.tenant, self.owner, self.task_id, self.config_id)

    @property
    def idempotency_key(self) -> str:
        """Stable per notification: receivers drop repeats with it (ids never contain '/')."""
        return f"{self.task_id}/{self.seq}/{self.config_id}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Job:
        return cls(**json.loads(text))

    @classmethod
    def new(cls, cursor: CursorKey, seq: int, body: str, now: float, trace: str = "") -> Job:
        tenant, owner, task_id, config_id = cursor
        job_id = f"{lane_of(*cursor)}-{seq:012d}"
        return cls(job_id, tenant, owner, task_id, config_id, seq, body, now, now, trace=trace)


@dataclass(slots=True)
class Lease:
    """A job handed to one worker; `token` identifies this hand-out (stale ones are ignored)."""

    job: Job
    token: str


@dataclass(slots=True)
class DeadJob:
    id: str  # the dead-letter entry's id (what `replay` takes)
    job: Job
    error: str
    failed_at: float


@dataclass(frozen=True, slots=True)
class CursorMove:
    key: CursorKey
    expected: int  # the cursor's current value; the move fails if it changed
    new: int


class PushQueue(Protocol):
    async def open(self) -> None:
        """Connect / recover: jobs in flight when a previous worker died become leasable."""

    async def close(self) -> None: ...

    async def enqueue(self, jobs: list[Job], cursor: CursorMove | None = None) -> bool:
        """Durably add jobs of ONE lane (in sequence order) and move the cursor, atomically
        where the backend can. False (nothing added) when the cursor did not match."""

    async def lease(self, limit: int) -> list[Lease]:
        """Up to `limit` due jobs, at most one per lane, each the head of its lane."""

    async def ack(self, lease: Lease) -> None:
        """Delivered: remove the job; its lane moves on."""

    async def retry(self, lease: Lease, job: Job) -> None:
        """Not delivered yet: keep `job` (updated attempts / due_at / last_error) at the
        head of its lane until `job.due_at`."""

    async def release(self, lease: Lease, due_at: float) -> None:
        """Hand the job back unchanged (no attempt counted), leasable again at `due_at`."""

    async def dead(self, lease: Lease, job: Job, error: str) -> None:
        """Give up: move the job to the dead-letter store; its lane moves on."""

    async def list_dead(self, limit: int = 100) -> list[DeadJob]: ...

    async def replay_dead(self, ids: list[str] | None = None) -> int:
        """Re-enqueue dead jobs (all when `ids` is None) with fresh attempts; returns how many."""

    async def wait(self, max_seconds: float) -> None:
        """Sleep until work may be available (new job, freed lane, due retry) or timeout."""

    async def cursors(self, task: TaskKey) -> dict[str, int]:
        """config id -> last enqueued sequence, for one task."""

    async def cursor_tasks(self) -> list[TaskKey]:
        """Every task with at least one cursor (startup reconciliation)."""

    async def start_cursor(self, key: CursorKey, seq: int) -> None:
        """Create the cursor at `seq` unless it exists (durably)."""

    async def drop_cursor(self, key: CursorKey) -> None: ...
