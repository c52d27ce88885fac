"""The table of live runs: one `TaskRun` per task this process is working on, loading a
stored task into its run, and the turn slots the runs hold.

A run is registered while it has an agent coroutine or events to commit, and dropped
once idle (the store would otherwise hand a stale snapshot to the next loader). A turn
left waiting in ctx.ask() longer than `park_after` is parked: its coroutine is cancelled
and the run dropped, so a paused task costs this process nothing; the task stays as
stored (interrupted), and its answer starts a new turn, as after a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, ValuesView

from gen import a2a_pb2 as pb
from service.engine.bus import EventBus
from service.engine.files import FileArtifacts
from service.engine.limits import Slots
from service.engine.run import TaskRun
from service.protocol.errors import TaskNotFoundError
from service.store import Scope, StoredEvent, TaskStore


class Runs:
    def __init__(
        self,
        store: TaskStore,
        bus: EventBus,
        on_commit: Callable[[Scope, str, list[StoredEvent]], None] | None,
        event_pace: float,
        files: FileArtifacts | None,
        turns: Slots | None,
        park_after: float = 0.0,
    ) -> None:
        self.store = store
        self.bus = bus
        self.on_commit = on_commit
        self.event_pace = event_pace
        self.files = files
        # Turns at work at once (all, per owner): a turn holds a slot from its start (or
        # resumption) until its agent ends or pauses in ctx.ask().
        self.turns = turns if turns is not None and turns.enabled else None
        # Seconds a turn may wait in ctx.ask() before it is parked (0: never): its coroutine
        # is released and the run dropped; the answer starts a new turn (paused_turn_idle_seconds).
        self.park_after = park_after
        self._live: dict[tuple[Scope, str], TaskRun] = {}

    # ---- the table -----------------------------------------------------------

    def get(self, scope: Scope, task_id: str) -> TaskRun | None:
        return self._live.get((scope, task_id))

    def __contains__(self, key: tuple[Scope, str]) -> bool:
        return key in self._live

    def __len__(self) -> int:
        return len(self._live)

    def values(self) -> ValuesView[TaskRun]:
        return self._live.values()

    def new(
        self,
        scope: Scope,
        task_id: str,
        context_id: str,
        task: pb.Task | None,
        first_message: pb.Message | None = None,
    ) -> TaskRun:
        run = TaskRun(
            store=self.store,
            bus=self.bus,
            scope=scope,
            task_id=task_id,
            context_id=context_id,
            task=task,
            first_message=first_message,
            on_idle=self._forget,
            on_commit=self.on_commit,
            pace=self.event_pace,
            files=self.files,
            on_pause=self._paused if self.turns is not None or self.park_after > 0 else None,
        )
        self._live[(scope, task_id)] = run
        return run

    def _forget(self, run: TaskRun) -> None:
        """Unregister a run that is idle: no agent, nothing waiting to be committed."""
        key = (run.scope, run.task_id)
        if self._live.get(key) is run and not run.agent_alive and run.idle:
            del self._live[key]

    async def load(self, scope: Scope, task_id: str) -> TaskRun:
        """The live run of a stored task, loading it from the store if needed."""
        key = (scope, task_id)
        run = self._live.get(key)
        if run is not None:
            if run.ready is not None:
                await asyncio.shield(run.ready)
            if self._live.get(key) is run:
                return run
            return await self.load(scope, task_id)
        run = self.new(scope, task_id, "", None)  # context and task come from the store
        run.loading()
        try:
            task = await self.store.get(scope, task_id)
            if task is None:
                raise TaskNotFoundError(f"Task {task_id} not found.")
            seq = await self.store.last_seq(scope, task_id)
        except BaseException as exc:
            del self._live[key]
            run.load_failed(exc)
            raise
        run.loaded(task, seq)
        return run

    def release(self, run: TaskRun) -> None:
        """Drop a run that has no agent coroutine and nothing left to do."""
        if not run.agent_alive:
            self._forget(run)

    def _paused(self, run: TaskRun) -> None:
        """The turn's agent waits in ctx.ask(): its slot is free, and it is parked if the
        answer has not come within `park_after` (the run's `next_input` cancels the timer)."""
        self.free_slot(run)
        if self.park_after > 0:
            loop = asyncio.get_running_loop()
            run.park_handle = loop.call_later(self.park_after, run.park)

    # ---- turn slots ----------------------------------------------------------

    def take_slot(self, owner: str) -> None:
        """A turn of `owner` starts: refused (OverloadedError) past the turn limits."""
        if self.turns is not None:
            self.turns.take(owner)

    def give_slot(self, owner: str) -> None:
        """A slot taken with `take_slot` that no run came to hold."""
        if self.turns is not None:
            self.turns.give(owner)

    def free_slot(self, run: TaskRun) -> None:
        """The turn's agent ended or paused in ctx.ask(): its concurrency slot is free."""
        if run.holds_slot and self.turns is not None:
            run.holds_slot = False
            self.turns.give(run.scope.owner)

    # ---- views -----------------------------------------------------------------

    def live_keys(self) -> list[str]:
        """Bus keys of the tasks whose agent coroutine runs here (working or paused) and
        whose owner is recorded (see TaskRun.claim)."""
        return [run.key for run in self._live.values() if run.agent_alive and run.owned]

    def active_contexts(self) -> set[str]:
        """Contexts with a task live in this process (their bookkeeping is in use)."""
        return {run.context_id for run in self._live.values()}

    def busy(self) -> bool:
        """Whether any turn is still at work: an agent running (not paused for input), or
        events not yet committed. What a drain waits for."""
        for run in self._live.values():
            if run.agent_alive and run.input_waiter is None:
                return True
            if not run.idle:
                return True
        return False
