"""The dispatcher: committed task events -> delivery jobs, without gaps, across crashes.

The engine calls `on_commit` after each committed batch (synchronously, in
sequence order); that only schedules a *catch-up* of the task. A catch-up reads
the task's cursors (per config: the last sequence already turned into jobs),
takes the events after the lowest one (from the batch just committed when it
covers them, else from the store) and enqueues one job per event and config,
moving the cursor in the same step. One catch-up per task runs at a time.

So nothing depends on the in-memory call: if the process dies between the
commit and the enqueue, the cursor still points before the event, and the
look over every cursor (`reconcile`) that `start` runs, and every process
repeats each `push_reconcile_seconds`, finds it in the store: also when that
process never comes back and another one must deliver. A cursor is created
(durably) before its config is stored (a new task's config is stored with its
first events) and dropped after a terminal event was enqueued, when its config
is deleted, or when its task was never stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.protocol.states import TERMINAL
from service.push.queue_base import CursorKey, CursorMove, Job, PushQueue, TaskKey
from service.store import Scope, Store, StoredEvent
from service.telemetry import hub

log = logging.getLogger("service.push")

RETRY_FAILED_SECONDS = 2.0
# A cursor whose task is not stored this long after it was first seen so belongs to a task
# that never will be (its process stopped first, or the agent answered with a message).
# A new task is stored at its agent's first event, so with max_turn_seconds the root makes
# this that bound plus a margin.
ORPHAN_SECONDS = 24 * 3600.0


def event_json(event: pb.StreamResponse) -> str:
    return json.dumps(json_format.MessageToDict(event), separators=(",", ":"))


def is_final(event: pb.StreamResponse) -> bool:
    """No event can follow this one (the task reached a terminal state)."""
    kind = event.WhichOneof("payload")
    if kind == "status_update":
        return event.status_update.status.state in TERMINAL
    if kind == "task":
        return event.task.status.state in TERMINAL
    return False


class Dispatcher:
    def __init__(
        self,
        store: Store,
        queue: PushQueue,
        *,
        parallel: int = 16,
        reconcile_seconds: float = 0.0,
        orphan_seconds: float = ORPHAN_SECONDS,
    ) -> None:
        self.store = store  # the plain store: only ids and events are read here
        self.queue = queue
        self.reconcile_seconds = reconcile_seconds  # 0: only at start
        self.orphan_seconds = orphan_seconds
        self._orphans: dict[CursorKey, float] = {}  # cursor -> when first seen without task
        self._reconciler: asyncio.Task[None] | None = None
        self._started = False
        self._stopping = False
        self._dirty: set[TaskKey] = set()  # poked before start
        self._hints: dict[TaskKey, list[StoredEvent]] = {}
        self._running: dict[TaskKey, asyncio.Task[None]] = {}
        self._again: set[TaskKey] = set()
        self._known: set[CursorKey] = set()  # cursors whose config is known to be stored
        self._later: set[asyncio.TimerHandle] = set()
        self._parallel = asyncio.Semaphore(parallel)

    # ---- inputs ----------------------------------------------------------------

    def on_commit(self, scope: Scope, task_id: str, batch: list[StoredEvent]) -> None:
        """Engine hook: must not block or raise."""
        try:
            self.poke((scope.tenant, scope.owner, task_id), batch)
        except Exception:
            log.exception(
                "push dispatcher: cannot schedule task %s (recovered at next start)", task_id
            )

    def poke(self, key: TaskKey, batch: list[StoredEvent] | None = None) -> None:
        if self._stopping:
            return
        if batch:
            self._hints.setdefault(key, []).extend(batch)
        if not self._started:
            self._dirty.add(key)
            return
        if key in self._running:
            self._again.add(key)
            return
        self._running[key] = asyncio.get_running_loop().create_task(self._run(key))

    def config_known(self, key: CursorKey, known: bool) -> None:
        (self._known.add if known else self._known.discard)(key)

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Look over every cursor once (see `reconcile`), then take the engine's pokes."""
        await self.reconcile()
        self._started = True
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            self.poke(key)
        if self.reconcile_seconds > 0:
            self._reconciler = asyncio.get_running_loop().create_task(
                self._reconcile_every(self.reconcile_seconds), name="push-reconcile"
            )

    async def reconcile(self) -> None:
        """Every cursor: catch up its task when the store has events past it (committed by a
        process that stopped before enqueueing them), drop it when its task is over and
        enqueued. A cursor whose task or config is not stored may belong to a task another
        process is creating right now: it is dropped only once it has been seen so for
        `orphan_seconds` (a task that was never stored, or a config never finished)."""
        now = time.monotonic()
        orphans: dict[CursorKey, float] = {}
        for key in await self.queue.cursor_tasks():
            scope, task_id = Scope(key[0], key[1]), key[2]
            task = await self.store.get(scope, task_id)
            last = await self.store.last_seq(scope, task_id) if task is not None else 0
            behind = False
            for config_id, seq in (await self.queue.cursors(key)).items():
                cursor = (*key, config_id)
                if task is not None and task.status.state in TERMINAL and seq >= last:
                    await self.queue.drop_cursor(cursor)
                    self._known.discard(cursor)
                    continue
                if task is None or (
                    cursor not in self._known
                    and await self.store.get_push_config(scope, task_id, config_id) is None
                ):
                    since = self._orphans.get(cursor, now)
                    if now - since >= self.orphan_seconds:
                        log.info("push: dropped the cursor of task %s (never stored)", task_id)
                        await self.queue.drop_cursor(cursor)
                        self._known.discard(cursor)
                    else:
                        orphans[cursor] = since
                    continue
                self._known.add(cursor)
                behind = behind or seq < last
            if behind:
                self.poke(key)
        self._orphans = orphans

    async def _reconcile_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store or the queue is away: next round
                log.warning("push dispatcher: looking over the cursors failed (%s)", exc)

    async def stop(self) -> None:
        self._stopping = True
        if self._reconciler is not None:
            self._reconciler.cancel()
            await asyncio.gather(self._reconciler, return_exceptions=True)
        for handle in self._later:
            handle.cancel()
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=5.0)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until no catch-up is running (tests, benchmarks)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    # ---- catch-up ----------------------------------------------------------------

    async def _run(self, key: TaskKey) -> None:
        try:
            while True:
                hints = self._hints.pop(key, [])
                self._again.discard(key)
                async with self._parallel:
                    await self._catch_up(key, hints)
                if key not in self._again or self._stopping:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error(
                "push dispatcher: catching up task %s failed (%s); retrying in %.0f s",
                key[2],
                exc,
                RETRY_FAILED_SECONDS,
            )
            self._retry_later(key)
        finally:
            self._running.pop(key, None)

    def _retry_later(self, key: TaskKey) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            self.poke(key)

        handle = loop.call_later(RETRY_FAILED_SECONDS, fire)
        self._later.add(handle)

    async def _catch_up(self, key: TaskKey, hints: list[StoredEvent]) -> None:
        cursors = await self.queue.cursors(key)
        if not cursors:
            return
        scope, task_id = Scope(key[0], key[1]), key[2]
        ready: dict[str, int] = {}
        for config_id, seq in cursors.items():
            cursor = (*key, config_id)
            if cursor not in self._known:
                if await self.store.get_push_config(scope, task_id, config_id) is None:
                    continue  # being created (its poke follows) or being deleted
                self._known.add(cursor)
            ready[config_id] = seq
        if not ready:
            return
        low = min(ready.values())
        if hints and hints[0].seq <= low + 1:
            events = [e for e in hints if e.seq > low]
        else:
            events = await self.store.events_after(scope, task_id, low)
        if not events:
            return
        now = time.time()
        # The turn whose commit scheduled this catch-up: each delivery continues its trace.
        trace = hub.traceparent() if hub.current is not None else ""
        bodies: dict[int, str] = {}
        for config_id, seq in ready.items():
            new = [e for e in events if e.seq > seq]
            if not new:
                continue
            cursor = (*key, config_id)
            jobs = []
            for e in new:
                body = bodies.get(e.seq)
                if body is None:
                    body = bodies[e.seq] = event_json(e.event)
                jobs.append(Job.new(cursor, e.seq, body, now, trace))
            if not await self.queue.enqueue(jobs, CursorMove(cursor, seq, new[-1].seq)):
                self._again.add(key)  # moved elsewhere meanwhile: read the cursors again
                continue
            if is_final(new[-1].event):
                await self.queue.drop_cursor(cursor)
                self._known.discard(cursor)
