"""The seam between the engine and the other processes of a cluster.

`Elsewhere` is what the engine needs from them (service.engine.peers implements it over
Redis); `Here` is the single process, where nobody else runs a task. `Local` is what
they need from this process's engine in turn: a forwarded call runs the same engine
methods here, so the engine stays the one source of the protocol's rules. Each side
sees the other only through these protocols, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable
from typing import Protocol

from gen import a2a_pb2 as pb
from service.agent import Caller
from service.engine.bus import EventBus, Subscription
from service.engine.run import TaskRun
from service.engine.turn import Turn
from service.protocol.states import SETTLED
from service.store import Scope, StoredEvent, TaskStore


class Local(Protocol):
    """This process's engine, as the other processes' forwarded calls need it."""

    @property
    def store(self) -> TaskStore: ...

    @property
    def bus(self) -> EventBus: ...

    def live_keys(self) -> list[str]:
        """Bus keys of the tasks whose agent coroutine runs here and whose owner is recorded."""
        ...

    async def recover_task(self, scope: Scope, task: pb.Task) -> None:
        """Move one task nobody runs any more to FAILED."""

    def live_events(
        self, scope: Scope, task_id: str, sub: Subscription, seen: int
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of the task after `seen` (stored ones first), until a settling one."""
        ...

    def follow_remote(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        after_seq: int | None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of a task another process runs, snapshot first."""
        ...

    def send(self, scope: Scope, message: pb.Message, caller: Caller) -> Awaitable[Turn]:
        """Start or resume a turn here (a follow-up forwarded by another process)."""
        ...

    async def cancel(self, scope: Scope, task_id: str) -> pb.Task:
        """Cancel a task here (forwarded by another process)."""
        ...

    async def get(self, scope: Scope, task_id: str) -> pb.Task:
        """The task as this process knows it."""
        ...


class Elsewhere(Protocol):
    """The other processes of a cluster, as the engine needs them."""

    def claim_new(self, key: str) -> None:
        """A new task's turn starts here."""

    def release(self, key: str) -> None:
        """The task's agent coroutine ended here."""

    async def take(self, key: str) -> str | None:
        """Own the task unless a live process does (returns that process's id)."""

    async def sweep(self, at_start: bool = False) -> int:
        """Recover the tasks of dead processes; returns how many."""
        ...

    async def cancel_elsewhere(self, scope: Scope, task_id: str) -> pb.Task | None:
        """Cancel on the process that runs it; None: nobody else does."""

    async def resume_elsewhere(
        self, owner: str, run: TaskRun, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        """Hand a follow-up to the turn paused on process `owner`."""
        ...


class Here:
    """One process on its own store: every task is ours, and at startup every unsettled
    task was the previous process's, which is gone. None of its coroutines suspends, so
    taking this path adds no await point to the engine's checks."""

    def __init__(self, local: Local) -> None:
        self.local = local

    def claim_new(self, key: str) -> None:
        pass

    def release(self, key: str) -> None:
        pass

    async def take(self, key: str) -> str | None:
        return None

    async def sweep(self, at_start: bool = False) -> int:
        if not at_start:
            return 0
        lost = await self.local.store.unsettled()
        for scope, task in lost:
            await self.local.recover_task(scope, task)
        return len(lost)

    async def cancel_elsewhere(self, scope: Scope, task_id: str) -> pb.Task | None:
        return None

    async def resume_elsewhere(
        self, owner: str, run: TaskRun, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        raise AssertionError(f"no other process runs task {run.task_id}")  # take said so
