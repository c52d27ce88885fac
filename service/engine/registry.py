"""The task engine: protocol rules for messages, tasks, cancellation and streams.

Transport-free: takes and returns generated messages, raises A2AError. One
TaskRun per live task is the only writer of that task in this process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from gen import a2a_pb2 as pb
from service.agent import Agent, Caller, TurnContext
from service.engine.bus import RESYNC, EventBus, Subscription
from service.engine.files import FileArtifacts, StoredFile
from service.engine.limits import Slots
from service.engine.permission import acknowledge, answer_for, not_recorded, record
from service.engine.run import TaskRun, task_key
from service.engine.stream import EventStream
from service.engine.watchdog import TurnWatchdog
from service.permission.policy import ASK, PermissionPolicy
from service.protocol.errors import (
    A2AError,
    InternalError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    internal_error,
    invalid_field,
)
from service.protocol.ids import uuid7
from service.protocol.states import INTERRUPTED, SETTLED, TERMINAL, ends_stream, state_name
from service.protocol.views import (  # noqa: F401 - encode_cursor: the token format, for tools
    check_page_size,
    decode_cursor,
    encode_cursor,
    shape_task,
    status_after,
)
from service.store import Scope, StoredEvent, TaskQuery, TaskStore, snapshot_with_seq
from service.telemetry import hub, names

log = logging.getLogger("service.engine")

RESTART_MESSAGE = "The server stopped while this task was running; the turn was lost. Send a new message to retry."
ABANDON_AFTER_SECONDS = 2.0  # a stalled turn's agent, once cancelled, has this long to end
SHUTDOWN_MESSAGE = (
    "The server shut down while this task was running; the turn was stopped. "
    "Send a new message to retry."
)


@dataclass
class Turn:
    """A started turn: its run, its outcome future, and (for streams) its subscription."""

    run: TaskRun
    outcome: asyncio.Future[pb.Message | None]
    events: AsyncIterator[pb.StreamResponse] | None = None
    remote: bool = False  # the turn runs on another process (`run` is a detached copy)


class Elsewhere(Protocol):
    """The other processes of a cluster, as the engine needs them (service.engine.peers)."""

    def claim_new(self, key: str) -> None:
        """A new task's turn starts here."""

    def release(self, key: str) -> None:
        """The task's agent coroutine ended here."""

    async def take(self, key: str) -> str | None:
        """Own the task unless a live process does (returns that process's id)."""

    async def sweep(self, at_start: bool = False) -> int:
        """Recover the tasks of dead processes; returns how many."""

    async def cancel_elsewhere(self, scope: Scope, task_id: str) -> pb.Task | None:
        """Cancel on the process that runs it; None: nobody else does."""

    async def resume_elsewhere(
        self, owner: str, run: TaskRun, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        """Hand a follow-up to the turn paused on process `owner`."""
        ...


class Engine:
    def __init__(
        self,
        store: TaskStore,
        agent: Agent,
        bus: EventBus,
        on_commit: Callable[[Scope, str, list[StoredEvent]], None] | None = None,
        event_pace: float = 0.0,
        files: FileArtifacts | None = None,
        permissions: PermissionPolicy = ASK,
        turns: Slots | None = None,
        inactivity_timeout: float = 0.0,
        max_turn_seconds: float = 0.0,
    ) -> None:
        self.store = store
        self.files = files  # stored file artifacts (None: ctx.file_artifact is refused)
        self.agent = agent
        self.bus = bus  # chosen by the composition root (in-process for one replica)
        self.on_commit = on_commit  # called synchronously after each committed batch of events
        self.event_pace = event_pace  # see TaskRun: seconds of a running agent's events per commit
        self.permissions = permissions  # who decides ctx.request_permission (permission_mode)
        self._runs: dict[tuple[Scope, str], TaskRun] = {}
        # Turns at work at once (all, per owner): a turn holds a slot from its start (or
        # resumption) until its agent ends or pauses in ctx.ask().
        self.turns = turns if turns is not None and turns.enabled else None
        self.watchdog = TurnWatchdog(inactivity_timeout, max_turn_seconds, self._stalled)
        self._stopping: set[asyncio.Task[None]] = set()  # stalled agents being stopped
        # Agent coroutines that ignored their cancellation after a stall: still running,
        # no longer waited for (the process exits without them).
        self.abandoned: set[asyncio.Task[None]] = set()
        # Several processes on one store and bus (service.engine.peers); None: one process.
        self.peers: Elsewhere | None = None

    # ---- startup -----------------------------------------------------------

    async def recover(self) -> int:
        """Tasks that were running when the process died are FAILED with a clear message.
        (Several processes: only those whose process is gone, see Peers.sweep.)"""
        if self.peers is not None:
            return await self.peers.sweep(at_start=True)
        lost = await self.store.unsettled()
        for scope, task in lost:
            await self.recover_task(scope, task)
        return len(lost)

    async def recover_task(self, scope: Scope, task: pb.Task) -> None:
        """Move one task nobody runs any more to FAILED (the restart message)."""
        run = self._new_run(scope, task.id, task.context_id, task)
        run.loaded(task, await self.store.last_seq(scope, task.id))
        run.force_state(pb.TASK_STATE_FAILED, RESTART_MESSAGE)
        await run.finish()

    def live_keys(self) -> list[str]:
        """Bus keys of the tasks whose agent coroutine runs here (working or paused) and
        whose owner is recorded (see TaskRun.claim)."""
        return [run.key for run in self._runs.values() if run.agent_alive and run.owned]

    # ---- runs ----------------------------------------------------------------

    def _new_run(
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
            on_pause=self._free_slot if self.turns is not None else None,
        )
        self._runs[(scope, task_id)] = run
        return run

    def _forget(self, run: TaskRun) -> None:
        """Unregister a run that is idle: no agent, nothing waiting to be committed (the
        store would otherwise hand a stale snapshot to the next loader)."""
        if self._runs.get((run.scope, run.task_id)) is run and not run.agent_alive and run.idle:
            del self._runs[(run.scope, run.task_id)]

    async def _claim(self, scope: Scope, task_id: str) -> TaskRun:
        """The live run of a stored task, loading it from the store if needed."""
        key = (scope, task_id)
        run = self._runs.get(key)
        if run is not None:
            if run.ready is not None:
                await asyncio.shield(run.ready)
            if self._runs.get(key) is run:
                return run
            return await self._claim(scope, task_id)
        run = self._new_run(scope, task_id, "", None)  # context and task come from the store
        run.loading()
        try:
            task = await self.store.get(scope, task_id)
            if task is None:
                raise TaskNotFoundError(f"Task {task_id} not found.")
            seq = await self.store.last_seq(scope, task_id)
        except BaseException as exc:
            del self._runs[key]
            run.load_failed(exc)
            raise
        run.loaded(task, seq)
        return run

    def _release(self, run: TaskRun) -> None:
        """Drop a run that has no agent coroutine and nothing left to do."""
        if not run.agent_alive:
            self._forget(run)

    # ---- SendMessage / SendStreamingMessage ----------------------------------

    async def send(
        self,
        scope: Scope,
        message: pb.Message,
        caller: Caller,
        *,
        return_immediately: bool = False,
        stream: bool = False,
        before_start: Callable[[str], Awaitable[Sequence[pb.TaskPushNotificationConfig]]]
        | None = None,
    ) -> Turn:
        """Start a new task's turn or resume an interrupted task. The agent is already running
        when this returns; with `stream`, `Turn.events` yields the turn's events.

        `before_start(task_id)`, for a new task: what must happen before its agent may run;
        it returns the push configs to store with the task's first events. If it fails,
        nothing runs."""
        if message.task_id:
            return await self._follow_up(scope, message, caller, stream)
        if self.turns is not None:
            self.turns.take(scope.owner)  # refused before anything exists
        try:
            return await self._new_task(
                scope, message, caller, return_immediately, stream, before_start
            )
        except BaseException:
            if self.turns is not None:
                self.turns.give(scope.owner)
            raise

    async def _new_task(
        self,
        scope: Scope,
        message: pb.Message,
        caller: Caller,
        return_immediately: bool,
        stream: bool,
        before_start: Callable[[str], Awaitable[Sequence[pb.TaskPushNotificationConfig]]] | None,
    ) -> Turn:
        context_id = message.context_id or uuid7()
        task_id = uuid7()
        configs = tuple(await before_start(task_id)) if before_start is not None else ()
        message.context_id = context_id
        message.task_id = task_id
        run = self._new_run(scope, task_id, context_id, None, first_message=message)
        run.first_commit_configs = configs
        run.holds_slot = self.turns is not None
        turn = Turn(run, run.start_turn())
        if stream:  # subscribe before anything can be emitted
            turn.events = EventStream(self._follow(run, self.bus.subscribe(run.key), None, 0, None))
        if return_immediately:
            run.materialize()
        ctx = TurnContext(
            run,
            message=message,
            task_id=task_id,
            context_id=context_id,
            task=None,
            caller=caller,
            permissions=self.permissions,
        )
        if self.peers is not None:
            run.claim = partial(self.peers.claim_new, run.key)
        self._start_agent(run, ctx)
        return turn

    async def _follow_up(
        self, scope: Scope, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        while True:
            run = await self._claim(scope, message.task_id)
            assert run.task is not None
            if message.context_id and message.context_id != run.context_id:
                self._release(run)
                raise invalid_field(
                    "message.contextId",
                    f"does not match the context of task {run.task_id}; omit it or send {run.context_id}",
                )
            state = run.state
            if state in TERMINAL:
                self._release(run)
                raise UnsupportedOperationError(
                    f"Task {run.task_id} is {state_name(state)} and accepts no more messages; "
                    "start a new task (you may reuse the contextId)."
                )
            if state not in INTERRUPTED:
                self._release(run)
                raise UnsupportedOperationError("Task is already working.")
            paused = run.input_waiter is not None and not run.input_waiter.done()
            if run.agent_alive and not paused:
                # The previous turn settled but its agent is still winding down: let it end.
                assert run.agent_task is not None  # agent_alive says so
                await asyncio.wait([run.agent_task])
                continue
            if not run.idle:
                await run.flushed()  # the interrupted state is committed before the next turn
                continue
            if self.peers is not None and not run.agent_alive:
                other = await self.peers.take(run.key)
                if other is not None:  # the paused turn lives on another process
                    self._release(run)
                    return await self.peers.resume_elsewhere(other, run, message, caller, stream)
                run.owned = True
            break
        try:  # an answer to a pending permission request must match it (nothing changes if not)
            answer = answer_for(run, message)
        except BaseException:
            self._release(run)
            raise
        if self.turns is not None:
            try:
                self.turns.take(scope.owner)
            except BaseException:
                self._release(run)
                raise
            run.holds_slot = True
        message.context_id = run.context_id
        turn = Turn(run, run.start_turn())
        previous = pb.Task()
        previous.CopyFrom(run.task)
        if answer is not None:
            record(run, answer, caller)
        run.accept_follow_up(message)
        if stream:
            turn.events = self.subscribe_run(run)
        if answer is not None:
            ack = acknowledge(run, answer)
            try:  # the decision is acted on only once its audit record is durable
                await run.committed(ack)
            except A2AError:
                # Not stored, or not yet: what is not stored by now is dropped, and without
                # a durable record the decision is not acted on.
                if await run.abandon_uncommitted(ack):
                    turn.outcome = await not_recorded(run, answer, previous, message)
                    self._free_slot(run)  # no agent was started to give it back
                    return turn
            if run.state in TERMINAL:  # canceled while the record was being committed
                self._free_slot(run)
                return turn
        if paused:
            run.resume(message)  # the paused agent coroutine continues
            self.watchdog.watch(run)
        else:
            ctx = TurnContext(
                run,
                message=message,
                task_id=run.task_id,
                context_id=run.context_id,
                task=previous,
                caller=caller,
                permissions=self.permissions,
                resumed_decision=answer.decided(resumed=True) if answer is not None else None,
            )
            self._start_agent(run, ctx)
        return turn

    def _start_agent(self, run: TaskRun, ctx: TurnContext) -> None:
        run.start_agent(self._drive(run, ctx, hub.current))
        self.watchdog.watch(run)

    def _free_slot(self, run: TaskRun) -> None:
        """The turn's agent ended or paused in ctx.ask(): its concurrency slot is free."""
        if run.holds_slot and self.turns is not None:
            run.holds_slot = False
            self.turns.give(run.scope.owner)

    def _stalled(self, run: TaskRun, reason: str) -> None:
        """The watchdog found the turn stalled: stop its agent; the task fails with `reason`."""
        log.warning("task %s: %s", run.task_id, reason)
        run.stop_reason = reason
        stopping = asyncio.get_running_loop().create_task(self._stop_stalled(run, reason))
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    async def _stop_stalled(self, run: TaskRun, reason: str) -> None:
        """Cancel a stalled turn's agent; one that does not end within ABANDON_AFTER_SECONDS
        (it swallows its cancellation) is abandoned: the task fails now and the turn's slot
        is free, whatever its coroutine goes on doing (it can no longer emit)."""
        agent_task = run.agent_task
        if agent_task is None:
            return
        agent_task.cancel()
        await asyncio.wait([agent_task], timeout=ABANDON_AFTER_SECONDS)
        if agent_task.done() or run.agent_task is not agent_task:
            return
        log.error(
            "task %s: the agent ignored its cancellation for %g s; its turn is abandoned "
            "(the coroutine still runs, but can no longer change the task)",
            run.task_id,
            ABANDON_AFTER_SECONDS,
        )
        self.abandoned.add(agent_task)
        agent_task.add_done_callback(self.abandoned.discard)
        run.agent_ended()
        self._free_slot(run)
        run.watched = False
        run.force_state(pb.TASK_STATE_FAILED, reason)
        run.stop_reason = None
        await run.finish()
        if self.peers is not None and run.owned:
            run.owned = False
            self.peers.release(run.key)

    async def _drive(self, run: TaskRun, ctx: TurnContext, tel: hub.Telemetry | None) -> None:
        """Run the agent's turn to its end and commit it. With telemetry on, inside the
        turn's span (a child of the call that started it, and the current span while the
        agent runs, so an agent's own spans nest under it): the task's events on it, its
        final state, and `a2a.tasks.active` while it runs. One coroutine, not a traced one
        around an untraced one: each resumption of the turn would pass through both."""
        turn = token = None
        if tel is not None:
            turn = tel.turn(run.task_id, run.context_id, ctx.caller.principal)
            run.trace = turn
            tel.tasks_active += 1
            token = hub.enter(turn)  # the agent's own spans nest under the turn
        try:
            try:
                await self.agent.run(ctx)
            except asyncio.CancelledError:
                if run.stop_reason is not None:
                    run.force_state(pb.TASK_STATE_FAILED, run.stop_reason)
                elif run.cancel_requested:
                    run.force_state(pb.TASK_STATE_CANCELED, "The task was canceled.")
                else:
                    self._stopped_by_shutdown(run)
            except Exception as exc:  # the agent broke: the task fails, the server keeps serving
                ref = internal_error(exc, f"agent turn of task {run.task_id}").metadata["ref"]
                run.force_state(pb.TASK_STATE_FAILED, f"The agent failed (ref {ref}).")
            else:
                if not run.settled:
                    run.status(pb.TASK_STATE_COMPLETED, None, None)
            finally:
                run.stop_reason = None  # a stall stops this turn only
                self._free_slot(run)
                if run.watch_handle is not None:
                    run.watch_handle.cancel()
                    run.watch_handle = None
                run.watched = False
            run.agent_ended()
            run.claim = None  # over before its first commit: nobody needs to find its owner
            await run.finish()
            if self.peers is not None and run.owned and not run.agent_alive:
                run.owned = False
                self.peers.release(run.key)
        finally:
            if turn is not None:
                assert tel is not None  # a turn span only with telemetry
                hub.leave(token)
                tel.tasks_active -= 1
                if run.trace is turn:
                    run.trace = None
                if run.task is not None:
                    turn.attributes[names.STATE] = state_name(run.state)
                turn.end()

    async def wait(self, turn: Turn) -> pb.Message | pb.Task:
        """Outcome of a blocking send: the direct reply or the settled task."""
        # Not shielded: if this caller goes away, cancelling the outcome future harms nobody.
        reply = await turn.outcome
        if reply is not None:
            return reply
        run = turn.run
        if turn.remote:
            return await self.get(run.scope, run.task_id)
        if run.task is None:
            raise InternalError("The turn ended without a task.")
        return run.task

    async def accepted(self, run: TaskRun) -> pb.Task:
        """For returnImmediately: the task as soon as its creation (event 1) is committed."""
        await run.committed(1)
        assert run.task is not None
        return run.task

    # ---- SubscribeToTask -----------------------------------------------------

    async def subscribe(
        self, scope: Scope, task_id: str, after_seq: int | None = None
    ) -> AsyncIterator[pb.StreamResponse]:
        """SubscribeToTask: the task's events until it is terminal, across pauses and the
        turns follow-ups start. With `after_seq` (a resumed stream), replay stored events
        after it instead of starting with the Task snapshot."""
        run = self._runs.get((scope, task_id))
        if run is None:
            if getattr(self.bus, "shared", False):
                found = await self.store.get(scope, task_id)
                if found is None:
                    raise TaskNotFoundError(f"Task {task_id} not found.")
                if found.status.state not in SETTLED:
                    # Another process runs it: its events reach us through the shared bus.
                    return await self._subscribe_remote(scope, task_id, after_seq)
            # Nobody runs it here (e.g. paused between turns): load it, so the snapshot and
            # the subscription are taken together; the subscription is to the task's topic,
            # which the run a follow-up creates publishes to, so the run can go again.
            run = await self._claim(scope, task_id)
            try:
                return self._subscribe_task(run, after_seq)
            finally:
                self._release(run)
        if run.ready is not None:
            await asyncio.shield(run.ready)
        if run.task is None:  # a direct-reply turn: there is no task
            raise TaskNotFoundError(f"Task {task_id} not found.")
        return self._subscribe_task(run, after_seq)

    def _subscribe_task(
        self, run: TaskRun, after_seq: int | None
    ) -> AsyncIterator[pb.StreamResponse]:
        """The protocol's checks for SubscribeToTask, then the live subscription."""
        assert run.task is not None
        state = run.task.status.state
        if state in TERMINAL and after_seq is None:
            raise UnsupportedOperationError(
                f"Task {run.task_id} is {state_name(state)}; there is nothing to subscribe to."
            )
        if after_seq is not None and after_seq > run.seq:
            raise invalid_field(
                "Last-Event-ID",
                f"is past the task's latest event ({run.seq}); resume from an id you received",
            )
        return self.subscribe_run(run, after_seq, until=TERMINAL)

    async def _subscribe_remote(
        self, scope: Scope, task_id: str, after_seq: int | None
    ) -> AsyncIterator[pb.StreamResponse]:
        """SubscribeToTask of a task another process runs (shared bus): until terminal."""
        if after_seq is not None:
            latest = await self.store.last_seq(scope, task_id)
            if after_seq > latest:
                raise invalid_field(
                    "Last-Event-ID",
                    f"is past the task's latest event ({latest}); resume from an id you received",
                )
        sub = self.bus.subscribe(task_key(scope, task_id))
        return EventStream(self.follow_remote(scope, task_id, sub, after_seq, until=TERMINAL))

    async def follow_remote(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        after_seq: int | None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of a task another process runs: the committed snapshot (or the stored
        events after the resume point), then live ones from the bus, gaps filled from the
        store, until one puts the task in a state of `until`. Subscribed before the store
        is read: nothing falls between."""
        try:
            if after_seq is None:
                found = await snapshot_with_seq(self.store, scope, task_id)
                if found is None:
                    raise TaskNotFoundError(f"Task {task_id} not found.")
                task, seen = found
                first = pb.StreamResponse(task=task)
                yield StoredEvent(seen, first)
                if ends_stream(first, until):
                    return
            else:
                seen = after_seq
            async for stored in self._live(scope, task_id, sub, seen, catch_up=True, until=until):
                yield stored
        finally:
            sub.close()

    def live_events(
        self, scope: Scope, task_id: str, sub: Subscription, seen: int
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of the task after `seen` (stored ones first), until a settling one."""
        return self._live(scope, task_id, sub, seen, catch_up=True)

    async def _live(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        seen: int,
        *,
        catch_up: bool,
        until: frozenset[int] = SETTLED,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Bus events after `seen`, each once, until one puts the task in a state of `until`.
        A RESYNC from the bus or a jump in the sequence reads what was missed from the store
        (`catch_up`: once before the first live event too)."""
        async for stored in _with_first(sub.events(), RESYNC if catch_up else None):
            if stored.seq < 0 or stored.seq > seen + 1:
                for missed in await self.store.events_after(scope, task_id, seen):
                    seen = missed.seq
                    yield missed
                    if ends_stream(missed.event, until):
                        return
                if stored.seq < 0:
                    continue
            if stored.seq and stored.seq <= seen:
                continue  # already covered by the snapshot, the replay or a catch-up
            seen = max(seen, stored.seq)
            yield stored
            if ends_stream(stored.event, until):
                return

    def subscribe_run(
        self,
        run: TaskRun,
        after_seq: int | None = None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncIterator[pb.StreamResponse]:
        """Live events of a task, ending after a state in `until`: SETTLED for one turn's
        stream (SendStreamingMessage), TERMINAL for SubscribeToTask. Snapshot (or resume
        point) and subscription are taken together, synchronously, so no event falls
        between them."""
        assert run.task is not None
        sub = self.bus.subscribe(run.key)
        # A terminal task whose last event the resume point already covers has nothing left.
        over = run.seq if run.state in until else None
        if after_seq is not None:
            return EventStream(self._follow(run, sub, None, after_seq, after_seq, until, over))
        first = pb.StreamResponse()
        first.task.CopyFrom(run.task)
        return EventStream(self._follow(run, sub, first, run.seq, None, until, over))

    async def _follow(
        self,
        run: TaskRun,
        sub: Subscription,
        first: pb.StreamResponse | None,
        seen: int,
        replay_after: int | None,
        until: frozenset[int] = SETTLED,
        over: int | None = None,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Yield `first`, then stored events after `replay_after`, then live events after
        `seen`, until one puts the task in a state of `until` (or is a direct reply), or
        `seen` reaches `over` (the seq at which the task was already in such a state)."""
        try:
            if first is not None:
                yield StoredEvent(seen, first)
                if ends_stream(first, until):
                    return
            if replay_after is not None:
                for stored in await self.store.events_after(run.scope, run.task_id, replay_after):
                    if stored.seq > seen:
                        seen = stored.seq
                        yield stored
                        if ends_stream(stored.event, until):
                            return
            if over is not None and seen >= over:
                return
            async for stored in self._live(
                run.scope, run.task_id, sub, seen, catch_up=False, until=until
            ):
                yield stored
                if ends_stream(stored.event, until):
                    return
            turn = run.turn
            if turn is not None and turn.done() and not turn.cancelled():
                failure = turn.exception()
                if failure is not None:
                    raise failure
        finally:
            sub.close()

    # ---- GetTask / ListTasks / CancelTask --------------------------------------

    async def get(self, scope: Scope, task_id: str) -> pb.Task:
        run = self._runs.get((scope, task_id))
        if run is not None and run.task is not None and run.ready is None:
            return run.task
        task = await self.store.get(scope, task_id)
        if task is None:
            raise TaskNotFoundError(f"Task {task_id} not found.")
        return task

    async def stored_file(self, scope: Scope, task_id: str, sha256: str) -> StoredFile:
        """A file artifact of a task the scope can see (TaskNotFoundError, as GetTask, for
        any other task; also for a hash the task has no file of)."""
        task = await self.get(scope, task_id)
        found = await self.files.find(scope, task, sha256) if self.files is not None else None
        if found is None:
            raise TaskNotFoundError(f"Task {task_id} has no stored file {sha256}.")
        return found

    async def release_files(self, scope: Scope, task_id: str) -> int:
        """For task retention, when it deletes a task: its stored files go, unless another
        task stored the same bytes. Returns how many blobs were deleted."""
        return await self.files.release_task(scope, task_id) if self.files is not None else 0

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        """The task's latest committed event (0 when none): where a new listener starts."""
        return await self.store.last_seq(scope, task_id)

    async def latest_in_context(self, scope: Scope, context_id: str) -> pb.Task | None:
        """The context's task with the latest status (committed), or None."""
        page = await self.store.list(scope, TaskQuery(context_id=context_id, page_size=1))
        return page.tasks[0] if page.tasks else None

    async def list(self, scope: Scope, request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        page_size = check_page_size(request.page_size if request.HasField("page_size") else None)
        query = TaskQuery(
            context_id=request.context_id,
            state=request.status,
            status_after_us=status_after(request),
            page_size=page_size,
            cursor=decode_cursor(self.store.page_token_key, scope, request.page_token)
            if request.page_token
            else None,
        )
        page = await self.store.list(scope, query)
        history = request.history_length if request.HasField("history_length") else None
        include = request.include_artifacts if request.HasField("include_artifacts") else False
        response = pb.ListTasksResponse(
            page_size=page_size,
            total_size=page.total_size,
            next_page_token=encode_cursor(self.store.page_token_key, scope, page.next_cursor)
            if page.next_cursor
            else "",
        )
        for task in page.tasks:  # committed snapshots: they are what the filters and order saw
            response.tasks.append(shape_task(task, history, include))
        return response

    async def cancel(self, scope: Scope, task_id: str) -> pb.Task:
        if self.peers is not None and (scope, task_id) not in self._runs:
            remote = await self.peers.cancel_elsewhere(scope, task_id)
            if remote is not None:
                return remote
        run = await self._claim(scope, task_id)
        assert run.task is not None
        if run.state in TERMINAL:
            self._release(run)
            raise TaskNotCancelableError(
                f"Task {task_id} is {state_name(run.state)} and can no longer be canceled."
            )
        if run.agent_alive:
            await run.stop_agent(cancel=True)  # not cancelled if this request goes away
            if run.state not in TERMINAL:  # canceled before its first step: _drive never ran
                run.agent_ended()
                self._free_slot(run)
                run.force_state(pb.TASK_STATE_CANCELED, "The task was canceled.")
                await run.finish()
        else:
            run.force_state(pb.TASK_STATE_CANCELED, "The task was canceled.")
            await run.finish()
        return run.task

    def active_contexts(self) -> set[str]:
        """Contexts with a task live in this process (their bookkeeping is in use)."""
        return {run.context_id for run in self._runs.values()}

    # ---- shutdown ------------------------------------------------------------

    def busy(self) -> bool:
        """Whether any turn is still at work: an agent running (not paused for input), or
        events not yet committed. What a drain waits for."""
        for run in self._runs.values():
            if run.agent_alive and run.input_waiter is None:
                return True
            if not run.idle:
                return True
        return False

    def end_streams(self, error: BaseException) -> int:
        """End every open event stream with `error` (their tasks go on); returns how many."""
        return self.bus.end_all(error)

    def _stopped_by_shutdown(self, run: TaskRun) -> None:
        """A turn cut short by shutdown: a paused one keeps its interrupted state (a follow-up
        after the restart starts a new turn); a working one ends FAILED, saying why."""
        if run.input_waiter is None and not run.settled:
            run.force_state(pb.TASK_STATE_FAILED, SHUTDOWN_MESSAGE)

    async def shutdown(self) -> int:
        """Stop every agent coroutine, settle the tasks they were working on (FAILED with
        SHUTDOWN_MESSAGE), and commit everything; returns how many tasks were stopped."""
        runs = list(self._runs.values())
        for run in runs:  # the drain waited for the store already: one more attempt each
            run.give_up_commits()
        stopped = 0
        stopping = []
        for run in runs:
            if run.agent_alive:
                if run.input_waiter is None and not run.settled:
                    stopped += 1
                stopping.append(run.stop_agent(cancel=False))
        await asyncio.gather(*stopping)
        for run in runs:
            if run.agent_task is not None:
                # Cancelled before its first step: _drive never ran to settle it.
                run.agent_ended()
                self._free_slot(run)
                self._stopped_by_shutdown(run)
                await run.finish()
            try:
                await run.flushed()
            except BaseException:
                pass  # logged by the flusher; the store's close reports what is left
        return stopped


async def _with_first(
    items: AsyncIterator[StoredEvent], first: StoredEvent | None
) -> AsyncIterator[StoredEvent]:
    """`first` (when given), then `items`."""
    if first is not None:
        yield first
    async for item in items:
        yield item
