"""TaskRun: the single writer of one task while it is live in this process.

Every change an agent (or the engine) makes becomes the next numbered event.
Events are applied to the in-memory snapshot at once, then committed to the
store in batches by one flusher, and only then published to subscribers, in
sequence order. A turn "settles" when a committed event puts the task in a
terminal or interrupted state (or the agent answered with a direct message);
the task's bus topic closes only when the task is over (terminal).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from gen import a2a_pb2 as pb
from service.agent import NAMESPACE, FileSource, metadata_struct
from service.engine.bus import EventBus
from service.engine.chunks import Chunks
from service.engine.files import FileArtifacts
from service.permission.envelope import namespace_of
from service.protocol.errors import InternalError, InvalidAgentResponseError, UnavailableError
from service.protocol.states import SETTLED, TERMINAL, state_name
from service.protocol.timeutil import micros_to_timestamp, now_micros
from service.store import Scope, StoredEvent, TaskStore, WriteConflict
from service.store.base import artifacts_only
from service.telemetry import hub

log = logging.getLogger("service.run")

SNAPSHOT_SEQ = 0  # sequence of synthetic events that are never stored (direct replies)
COMMIT_RETRY_SECONDS = (
    0.05,
    2.0,
)  # pause before retrying a commit the store refused: first, longest


def task_key(scope: Scope, task_id: str) -> str:
    """The bus topic of a task: unique across tenants and owners."""
    return f"{scope.tenant}\x00{scope.owner}\x00{task_id}"


class TaskRun:
    # Defaults every run starts with, set on the class: a new run (one per send) stores
    # only what differs.
    turn_file_bytes: int = 0  # stored by the current turn, for its limit
    ready: asyncio.Future[None] | None = None  # set while the task is being loaded
    turn: asyncio.Future[pb.Message | None] | None = None  # result: direct reply or None
    agent_task: asyncio.Task[None] | None = None
    input_waiter: asyncio.Future[pb.Message] | None = None
    cancel_requested: bool = False
    direct_reply: pb.Message | None = None
    _flushing: bool = False  # a flush loop is draining _pending right now
    _kick_scheduled: bool = False
    _drained: asyncio.Future[None] | None = None  # resolved when a flush loop ends
    # Set while the store does not take this run's commits (what waiters are told); the
    # events stay queued and are retried. `broken`: the run stopped for good.
    failed_commit: BaseException | None = None
    broken: bool = False
    _give_up: asyncio.Future[None] | None = None
    # Push configs stored in the same write as the task's first events (Engine.send).
    first_commit_configs: tuple[pb.TaskPushNotificationConfig, ...] = ()
    _commit_signal: asyncio.Future[None] | None = None
    _last_save: float = float("-inf")  # see `_pace` in __init__
    _lingering: asyncio.Future[None] | None = None
    # Turn limits and the stall watchdog (service.engine.limits, .watchdog): when the
    # agent last emitted, whether this turn holds a concurrency slot, why the engine
    # stopped the agent (None: it did not); the pause hook (ctx.ask()) is `_on_pause`.
    watched: bool = False  # last_activity is kept only while a watchdog looks at it
    last_activity: float = 0.0
    holds_slot: bool = False
    stop_reason: str | None = None
    watch_handle: asyncio.TimerHandle | None = None
    # Parking (Runs.park_after): the timer that parks this turn while it waits in
    # ctx.ask(), and whether the agent's CancelledError is that parking (not a cancel).
    park_handle: asyncio.TimerHandle | None = None
    parking: bool = False
    trace: hub.Turn | None = None  # the running turn's span (telemetry on)
    # Several processes (service.engine.peers): `claim` records this process as the
    # task's owner; a new task's turn makes it at its first commit, if its agent still
    # runs then (a turn over by then needs no owner: nobody saw it working). `owned`:
    # recorded, by that or by taking the task for a follow-up (released at the end).
    claim: Callable[[], None] | None = None
    owned: bool = False
    # Changes to the snapshot that no event tells of (service metadata): counted, and the
    # count the store last took, so that a save after one is never `steady`.
    _quiet_changes: int = 0
    _quiet_changes_saved: int = 0

    def __init__(
        self,
        *,
        store: TaskStore,
        bus: EventBus,
        scope: Scope,
        task_id: str,
        context_id: str,
        task: pb.Task | None = None,
        first_message: pb.Message | None = None,
        seq: int = 0,
        on_idle: Callable[[TaskRun], None] | None = None,
        on_commit: Callable[[Scope, str, list[StoredEvent]], None] | None = None,
        pace: float = 0.0,
        files: FileArtifacts | None = None,
        on_pause: Callable[[TaskRun], None] | None = None,
    ) -> None:
        self.store = store
        self.files = files  # None: this server stores no file artifacts
        self.bus = bus
        self.scope = scope
        self.task_id = task_id
        self.context_id = context_id
        self._task = task  # None until the first non-reply emission materializes it
        self._chunks = Chunks()  # parts appended to its artifacts, not yet merged into it
        self.seq = seq
        self.key = task_key(scope, task_id)
        self.first_message = first_message  # a new task's history starts with it
        self._pending: list[StoredEvent] = []
        self._on_idle = on_idle
        self._on_commit = on_commit  # e.g. push delivery: sees every committed batch, in order
        self.committed_seq = seq
        # While the agent is still emitting, a commit waits until `pace` after the
        # previous one, so a chatty agent's events share commits (a lone streaming
        # agent is what the store's own pacing cannot see: one writer, many events).
        self._pace = pace
        self._on_pause = on_pause
        # Kept, not asked for on every event: on Python 3.11 each asyncio.get_running_loop()
        # is a getpid() system call (its fork check), several per event otherwise.
        self._loop = asyncio.get_running_loop()

    # ---- state -----------------------------------------------------------

    @property
    def task(self) -> pb.Task | None:
        """The whole snapshot (the appended chunks merged in first: reading it costs them
        their arena memory again, so the per-event path keeps to `_task`)."""
        if self._chunks and self._task is not None:
            self._chunks.merge_into(self._task)
        return self._task

    @task.setter
    def task(self, task: pb.Task | None) -> None:
        self._chunks.clear()
        self._task = task

    @property
    def state(self) -> int:
        return self._task.status.state if self._task is not None else pb.TASK_STATE_SUBMITTED

    @property
    def settled(self) -> bool:
        return self.direct_reply is not None or (self._task is not None and self.state in SETTLED)

    @property
    def agent_alive(self) -> bool:
        return self.agent_task is not None and not self.agent_task.done()

    @property
    def idle(self) -> bool:
        """Nothing emitted that is not yet committed."""
        return not self._pending and not self._flushing

    # ---- lifecycle, as the engine drives it ---------------------------------

    def loading(self) -> None:
        """The task is being read from the store; others wait for `ready`."""
        self.ready = self._loop.create_future()

    def loaded(self, task: pb.Task, seq: int) -> None:
        """The stored task and its latest event: this run continues from there."""
        self.task = task
        self.context_id = task.context_id
        self.seq = self.committed_seq = seq
        if self.ready is not None:
            self.ready.set_result(None)
            self.ready = None

    def load_failed(self, exc: BaseException) -> None:
        assert self.ready is not None
        if isinstance(exc, asyncio.CancelledError):
            # The loading caller went away; others waiting on the load simply retry it.
            self.ready.set_result(None)
        else:
            self.ready.set_exception(exc)
            self.ready.exception()  # mark retrieved

    def start_agent(self, turn: Coroutine[Any, Any, None]) -> None:
        self.agent_task = self._loop.create_task(turn)

    def agent_ended(self) -> None:
        self.agent_task = None

    async def stop_agent(self, *, cancel: bool) -> None:
        """Cancel the agent coroutine and wait until it ended; `cancel`: the caller canceled
        the task (else the server is stopping)."""
        agent_task = self.agent_task
        if agent_task is None:
            return
        self.cancel_requested = cancel
        agent_task.cancel()
        await asyncio.wait([agent_task])

    def resume(self, message: pb.Message) -> None:
        """Hand a follow-up to the agent paused in `next_input`."""
        assert self.input_waiter is not None
        self.input_waiter.set_result(message)

    def start_turn(self) -> asyncio.Future[pb.Message | None]:
        self._resolve_turn(None)  # a previous turn's waiter is never left behind
        self.turn = self._loop.create_future()
        self.turn_file_bytes = 0
        return self.turn

    # ---- emissions (synchronous: applied now, committed by the flusher) ----

    def materialize(self) -> None:
        """Create the task (SUBMITTED) from the first message; event 1 is its snapshot."""
        if self._task is not None:
            return
        if self.direct_reply is not None:
            raise InvalidAgentResponseError("The agent already answered with a direct message.")
        task = pb.Task(id=self.task_id, context_id=self.context_id)
        task.status.state = pb.TASK_STATE_SUBMITTED
        micros_to_timestamp(now_micros(), task.status.timestamp)
        if self.first_message is not None:
            task.history.append(self.first_message)
        self.task = task
        event = pb.StreamResponse()
        event.task.CopyFrom(task)
        self._queue(event)

    def status(
        self, state: pb.TaskState, message: pb.Message | None, metadata: dict[str, Any] | None
    ) -> None:
        self._check_open()
        if state in (pb.TASK_STATE_UNSPECIFIED, pb.TASK_STATE_SUBMITTED):
            raise InvalidAgentResponseError(f"An agent cannot set the state {state_name(state)}.")
        self.materialize()
        self._set_status(state, message, metadata)

    def artifact(
        self, artifact: pb.Artifact, append: bool, last_chunk: bool, metadata: dict[str, Any] | None
    ) -> None:
        self._check_open()
        self.materialize()
        self._ensure_working()
        task = self._task
        assert task is not None
        index = next(
            (i for i, a in enumerate(task.artifacts) if a.artifact_id == artifact.artifact_id),
            None,
        )
        if index is not None and append:
            self._chunks.append(index, artifact)  # kept encoded until the task is read
        elif index is not None:
            self._chunks.drop(index)
            task.artifacts[index].CopyFrom(artifact)
        else:
            task.artifacts.append(artifact)
        event, update = self._update_event("artifact_update", metadata)
        update.artifact.CopyFrom(artifact)
        update.append = append
        update.last_chunk = last_chunk
        self._queue(event)
        if self.trace is not None:
            self.trace.artifact(artifact.artifact_id, last_chunk, self.seq)

    async def store_file(
        self, source: FileSource, filename: str, media_type: str | None
    ) -> pb.Part:
        """Store a file artifact's bytes (before its artifact is emitted); the url part."""
        self._check_open()
        if self.files is None:
            raise InvalidAgentResponseError("This server does not store file artifacts.")
        part, size = await self.files.store(
            self.scope, self.task_id, source, filename, media_type, self.turn_file_bytes
        )
        self.turn_file_bytes += size
        return part

    def reply(self, message: pb.Message) -> None:
        """A direct answer: a Message and no task, if nothing else was emitted yet."""
        self._check_open()
        if self._task is not None:
            # The task already exists (follow-up turn, or returnImmediately): the reply completes it.
            self._set_status(pb.TASK_STATE_COMPLETED, message, None)
            return
        message.ClearField("task_id")
        self.direct_reply = message
        event = pb.StreamResponse()
        event.message.CopyFrom(message)
        self.bus.publish(self.key, [StoredEvent(SNAPSHOT_SEQ, event)])
        self._resolve_turn(message)

    def accept_follow_up(self, message: pb.Message) -> None:
        """A caller's message resumes an interrupted task: history + WORKING."""
        assert self.task is not None
        self.task.history.append(message)
        self._set_status(pb.TASK_STATE_WORKING, None, None)

    def force_state(self, state: pb.TaskState, text: str) -> None:
        """Engine-made terminal state (cancel, failure, restart recovery)."""
        if self.broken or self.direct_reply is not None:
            return
        if self._task is not None and self.state in TERMINAL:
            return
        self.materialize()
        msg = pb.Message(message_id=f"{self.task_id}-{self.seq + 1}", role=pb.ROLE_AGENT)
        msg.task_id, msg.context_id = self.task_id, self.context_id
        msg.parts.add(text=text)
        self._set_status(state, msg, None)

    def service_metadata(self) -> dict[str, Any]:
        """This service's namespace of the task's own metadata, as plain data."""
        return namespace_of(self._task, NAMESPACE)

    def set_service_metadata(self, values: dict[str, Any]) -> None:
        """Replace that namespace in the snapshot; the next commit stores it."""
        self._check_open()
        self.materialize()
        assert self._task is not None
        if values:
            self._task.metadata[NAMESPACE] = values
        elif NAMESPACE in self._task.metadata.fields:
            del self._task.metadata.fields[NAMESPACE]
        self._quiet_changes += 1  # no event tells of it: the next save is not steady

    def _check_open(self) -> None:
        if self.broken:
            raise UnavailableError("This task can no longer be stored here.", retry_after=1.0)
        if self.direct_reply is not None:
            raise InvalidAgentResponseError("The agent already answered with a direct message.")
        if self._task is not None and self.state in TERMINAL:
            raise InvalidAgentResponseError(
                f"The task is already {state_name(self.state)}; no further events are allowed."
            )

    def _ensure_working(self) -> None:
        if self.state != pb.TASK_STATE_WORKING:
            self._set_status(pb.TASK_STATE_WORKING, None, None)

    def _set_status(
        self, state: pb.TaskState, message: pb.Message | None, metadata: dict[str, Any] | None
    ) -> None:
        assert self._task is not None
        status = self._task.status
        status.Clear()
        status.state = state
        micros_to_timestamp(now_micros(), status.timestamp)
        if message is not None:
            status.message.CopyFrom(message)
            self._task.history.append(message)
        event, update = self._update_event("status_update", metadata)
        update.status.CopyFrom(status)
        self._queue(event)
        if self.trace is not None:
            self.trace.status(state_name(state), self.seq)
        if state in TERMINAL and hub.current is not None:
            hub.current.task_ended(state_name(state))

    def _update_event(
        self, kind: str, metadata: dict[str, Any] | None
    ) -> tuple[pb.StreamResponse, Any]:
        """A StreamResponse whose `kind` update names this task and carries `metadata`."""
        event = pb.StreamResponse()
        update = getattr(event, kind)
        update.task_id = self.task_id
        update.context_id = self.context_id
        meta = metadata_struct(metadata)
        if meta is not None:
            update.metadata.CopyFrom(meta)
        return event, update

    def _queue(self, event: pb.StreamResponse) -> None:
        if self.watched:
            self.last_activity = self._loop.time()
        self.seq += 1
        self._pending.append(StoredEvent(self.seq, event))
        if not self._kick_scheduled and not self._flushing:
            # Commit soon, but not now: events emitted back to back share one commit, and
            # when the turn ends first, finish() flushes inline without a task of its own.
            self._kick_scheduled = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._pending and not self._flushing:
            self._loop.create_task(self._flush())

    # ---- commit & publish --------------------------------------------------

    async def _flush(self) -> None:
        """Drain _pending: commit each batch, then publish it. One loop at a time."""
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._pending and not self.broken:
                if self._pace and self.agent_alive and self.input_waiter is None:
                    await self._linger()
                batch, self._pending = self._pending, []
                assert self._task is not None
                if self.claim is not None:
                    claim, self.claim = self.claim, None
                    if self.agent_alive:
                        claim()  # queued on the bus before this commit's events
                        self.owned = True
                if not await self._commit(batch):
                    return
                self.committed_seq = batch[-1].seq
                self._last_save = self._loop.time()
                if self._commit_signal is not None and not self._commit_signal.done():
                    self._commit_signal.set_result(None)
                self.bus.publish(self.key, batch)
                if self._on_commit is not None:
                    self._on_commit(self.scope, self.task_id, batch)
                if self.state in SETTLED and not self._pending:
                    self._resolve_turn(None)
        finally:
            self._flushing = False
            if self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
            self._drained = None

    async def _commit(self, batch: list[StoredEvent]) -> bool:
        """Store `batch` (extended by what is emitted while it waits): a task's log never
        skips a number. A store that is away (UnavailableError) is retried until it takes
        the commit or the retries are given up; then, as on any other failure, the events
        that were not stored are dropped and the next one reuses their numbers. False when
        `batch` was not stored."""
        assert self._task is not None
        todo = list(batch)  # the part not stored yet (an ambiguous commit may store a prefix)
        pause = COMMIT_RETRY_SECONDS[0]
        while True:
            if self._pending:  # emitted meanwhile: it joins this commit, with its snapshot
                batch += self._pending
                todo += self._pending
                self._pending = []
            trace = self.trace
            started = time.perf_counter() if trace is not None else 0.0
            try:
                # save() serializes before it yields, so later mutations cannot leak in.
                # With chunks kept encoded (service.engine.chunks), the stored snapshot is
                # composed from them: `snapshot`, given only then, and only if the store
                # asks for it (one that keeps its snapshot for a steady save does not).
                extra: dict[str, Any] = {}
                if self._chunks:
                    extra["snapshot"] = partial(self._chunks.serialize, self._task)
                if self.first_commit_configs:
                    extra["configs"] = self.first_commit_configs
                changes = self._quiet_changes
                # Chunks alone never change the state or status time (the first chunk of a
                # turn moves the task to WORKING with an event of its own).
                if artifacts_only(todo) and changes == self._quiet_changes_saved:
                    extra["steady"] = True
                await self.store.save(self.scope, self._task, todo, **extra)
            except Exception as exc:
                if trace is not None:
                    trace.committed(len(todo), time.perf_counter() - started, failed=True)
                if isinstance(exc, WriteConflict):
                    left = await self._unstored(todo)
                    if left is None:
                        self._break(exc)
                        return False
                    if left is not todo:  # a commit whose answer was lost had gone through
                        if not left:
                            break
                        todo = left
                        continue
                    exc = UnavailableError("The task store is unreachable.", retry_after=1.0)
                self._commit_stalled(exc)
                if not isinstance(exc, UnavailableError) or not await self._retry_pause(pause):
                    self._rewind(todo, exc)
                    return False
                pause = min(pause * 2, COMMIT_RETRY_SECONDS[1])
                continue
            if trace is not None:
                trace.committed(len(todo), time.perf_counter() - started)
            self._quiet_changes_saved = changes
            break
        self.first_commit_configs = ()
        if self.failed_commit is not None:
            log.warning("task %s: the store took its events again; nothing was lost", self.task_id)
            self.failed_commit = None
        return True

    async def _unstored(self, todo: list[StoredEvent]) -> list[StoredEvent] | None:
        """After WriteConflict: `todo` without the events the store already has from us (a
        commit whose answer was lost), or None when another writer stored any of them. On a
        failed read, `todo` itself (the caller treats it as the store being away)."""
        try:
            stored = await self.store.events_after(self.scope, self.task_id, todo[0].seq - 1)
        except Exception:
            return todo
        mine = {e.seq: e.event for e in todo}
        kept = 0
        for event in stored:
            if mine.get(event.seq) != event.event:
                return None  # not ours: a sequence we did not write, or other content
            kept += 1
        return todo[kept:]

    def _commit_stalled(self, exc: BaseException) -> None:
        """The store did not take a commit: everyone waiting on this turn learns it now."""
        if self.failed_commit is not None:
            return
        log.error("commit failed for task %s", self.task_id, exc_info=exc)
        # A store that is down says so (UNAVAILABLE: retry); anything else is ours.
        self.failed_commit = (
            exc
            if isinstance(exc, UnavailableError)
            else InternalError("The task could not be stored.")
        )
        self._resolve_turn(None, error=self.failed_commit)
        # Its streams end now too, whether or not the agent is still running.
        self.bus.close_topic(self.key, self.failed_commit)
        if self._commit_signal is not None and not self._commit_signal.done():
            self._commit_signal.set_result(None)

    async def _retry_pause(self, seconds: float) -> bool:
        """Wait before the next attempt; False when the retries are given up."""
        if self._give_up is None:
            self._give_up = self._loop.create_future()
        if not self._give_up.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._give_up), seconds)
            except TimeoutError:
                pass
        return not self._give_up.done()

    def _rewind(self, todo: list[StoredEvent], exc: BaseException) -> None:
        """Drop what the store did not take; the next event reuses the first free number."""
        lost = len(todo) + len(self._pending)
        self._pending = []
        self.seq = self.committed_seq
        log.error("task %s: %d event(s) were not stored (%s)", self.task_id, lost, exc)

    def give_up_commits(self) -> None:
        """Shutdown: a commit waiting for the store to come back is not tried again."""
        if self._give_up is None:
            self._give_up = self._loop.create_future()
        if not self._give_up.done():
            self._give_up.set_result(None)

    async def abandon_uncommitted(self, seq: int) -> bool:
        """Stop retrying what the store has not taken and drop it; False when event `seq` was
        stored after all (by the attempt that was on its way)."""
        self.give_up_commits()
        try:
            await self.flushed()
        except Exception:
            pass
        self._give_up = None
        return self.committed_seq < seq

    def _break(self, exc: BaseException) -> None:
        """Another writer stored events of this task: this run stops (its agent too) rather
        than write past them; the store keeps the task as that writer left it."""
        self.broken = True
        lost = len(self._pending) + self.seq - self.committed_seq
        self._pending = []
        log.error(
            "task %s: %d event(s) not stored: another writer has the task (%s)",
            self.task_id,
            lost,
            exc,
        )
        error = self.failed_commit or InternalError("The task could not be stored.")
        self.failed_commit = error
        self._resolve_turn(None, error=error)
        self.bus.close_topic(self.key, error)
        if self._commit_signal is not None and not self._commit_signal.done():
            self._commit_signal.set_result(None)
        if self.agent_task is not None and not self.agent_task.done():
            self.agent_task.cancel()

    async def _linger(self) -> None:
        """Wait until `pace` after the previous commit, or until the turn ends."""
        loop = self._loop
        wait = self._last_save + self._pace - loop.time()
        if wait <= 0:
            return
        self._lingering = loop.create_future()
        timer = loop.call_later(wait, self._end_linger)
        try:
            await self._lingering
        finally:
            timer.cancel()
            self._lingering = None

    def _end_linger(self) -> None:
        if self._lingering is not None and not self._lingering.done():
            self._lingering.set_result(None)

    async def committed(self, seq: int) -> None:
        """Wait until event `seq` is durable (not for later events to be emitted)."""
        while self.committed_seq < seq:
            if self.failed_commit is not None:
                raise self.failed_commit
            if self._commit_signal is None or self._commit_signal.done():
                self._commit_signal = self._loop.create_future()
            await asyncio.shield(self._commit_signal)

    async def flushed(self) -> None:
        """Return when everything emitted so far is committed (flushing inline if idle)."""
        while self._pending or self._flushing:
            if self._flushing:
                if self._drained is None:
                    self._drained = self._loop.create_future()
                await asyncio.shield(self._drained)
            else:
                await self._flush()
        if self.failed_commit is not None:
            raise self.failed_commit

    def _resolve_turn(self, reply: pb.Message | None, error: BaseException | None = None) -> None:
        if self.turn is not None and not self.turn.done():
            if error is not None:
                self.turn.set_exception(error)
                self.turn.exception()  # nobody may be waiting (returnImmediately): not an unhandled error
            else:
                self.turn.set_result(reply)

    # ---- agent-facing waits ----------------------------------------------

    async def next_input(self) -> pb.Message:
        self.input_waiter = self._loop.create_future()
        if self._on_pause is not None:
            self._on_pause(self)  # waiting for the caller: not at work, not stalled; parkable
        try:
            return await self.input_waiter
        finally:
            self.input_waiter = None
            if self.park_handle is not None:
                self.park_handle.cancel()
                self.park_handle = None

    def park(self) -> None:
        """Release the agent coroutine paused in `next_input`: it is cancelled (its cleanup
        runs) and the task stays as stored, interrupted; the caller's answer starts a new
        turn, as after a restart. No-op unless the agent still waits for that answer."""
        self.park_handle = None
        waiter = self.input_waiter
        if waiter is None or waiter.done() or self.agent_task is None or self.agent_task.done():
            return
        self.parking = True
        self.agent_task.cancel()

    # ---- end of life --------------------------------------------------------

    async def finish(self) -> None:
        """After the agent coroutine ended: commit everything, wake waiters, unregister."""
        turn = self.turn
        self._end_linger()  # the agent is done: what it emitted last commits now
        try:
            await self.flushed()
        except BaseException:  # already logged by the flusher
            pass
        if self.turn is not turn or self.agent_alive:
            return  # a follow-up started a new turn meanwhile; it owns the run now
        self._resolve_turn(self.direct_reply)
        if self.direct_reply is not None or self.state in TERMINAL:
            # The task is over: every stream of it ends. A paused task's topic stays open, so
            # its subscribers hear the turn a follow-up starts (a new run, the same topic).
            self.bus.close_topic(self.key)
        if self._on_idle is not None:
            self._on_idle(self)
