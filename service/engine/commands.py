"""Commands: SendMessage (a new task, or a follow-up to an interrupted one), CancelTask,
and waiting for a started turn. The protocol's rules for what a message or a cancel may
do to a task live here; a task another process runs is handed to it (`Elsewhere`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.engine.driver import Driver
from service.engine.elsewhere import Elsewhere
from service.engine.permission import acknowledge, answer_for, not_recorded, record
from service.engine.reads import Reads
from service.engine.run import TaskRun
from service.engine.runs import Runs
from service.engine.stream import EventStream
from service.engine.subscriptions import Subscriptions
from service.engine.turn import Turn
from service.permission.policy import PermissionPolicy
from service.protocol.errors import (
    A2AError,
    InternalError,
    TaskNotCancelableError,
    UnsupportedOperationError,
    invalid_field,
)
from service.protocol.ids import uuid7
from service.protocol.states import INTERRUPTED, TERMINAL, state_name
from service.store import Scope


class Commands:
    def __init__(
        self,
        runs: Runs,
        driver: Driver,
        subscriptions: Subscriptions,
        reads: Reads,
        elsewhere: Elsewhere,
        permissions: PermissionPolicy,
        first_event_grace: float | None = None,
    ) -> None:
        self.runs = runs
        self.driver = driver
        self.subscriptions = subscriptions
        self.reads = reads
        self.elsewhere = elsewhere
        self.permissions = permissions  # who decides ctx.request_permission (permission_mode)
        # Seconds a new task's stream (or returnImmediately send) waits for the agent's first
        # word before the task is created for it; 0: created at once (first_event_grace_ms).
        # None (the engine alone, no settings): a stream waits for the agent as long as it
        # takes, a returnImmediately send creates the task at once.
        self.first_event_grace = first_event_grace

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
        self.runs.take_slot(scope.owner)  # refused before anything exists
        try:
            return await self._new_task(
                scope, message, caller, return_immediately, stream, before_start
            )
        except BaseException:
            self.runs.give_slot(scope.owner)
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
        run = self.runs.new(scope, task_id, context_id, None, first_message=message)
        run.first_commit_configs = configs
        run.holds_slot = self.runs.turns is not None
        turn = Turn(run, run.start_turn())
        if stream:  # subscribe before anything can be emitted
            turn.events = EventStream(
                self.subscriptions.follow(run, self.runs.bus.subscribe(run.key), None, 0, None)
            )
        if stream or return_immediately:
            self._first_event(turn)
        ctx = TurnContext(
            run,
            message=message,
            task_id=task_id,
            context_id=context_id,
            task=None,
            caller=caller,
            permissions=self.permissions,
        )
        run.claim = partial(self.elsewhere.claim_new, run.key)
        self.driver.start_agent(run, ctx)
        return turn

    def _first_event(self, turn: Turn) -> None:
        """A caller waiting for a new task's first event gets the task (SUBMITTED) when the
        agent has said nothing within the grace, so it has an id to cancel, subscribe to or
        resume; an agent that answers sooner, with a direct Message too, goes first."""
        run, outcome, grace = turn.run, turn.outcome, self.first_event_grace
        if grace is None and turn.events is not None:
            return
        if grace is None or grace <= 0:
            run.materialize()
            return
        loop = asyncio.get_running_loop()
        timer = loop.call_later(grace, _grace_over, run, outcome)
        outcome.add_done_callback(lambda _: timer.cancel())

    async def _follow_up(
        self, scope: Scope, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        while True:
            run = await self.runs.load(scope, message.task_id)
            assert run.task is not None
            if message.context_id and message.context_id != run.context_id:
                self.runs.release(run)
                raise invalid_field(
                    "message.contextId",
                    f"does not match the context of task {run.task_id}; omit it or send {run.context_id}",
                )
            state = run.state
            if state in TERMINAL:
                self.runs.release(run)
                raise UnsupportedOperationError(
                    f"Task {run.task_id} is {state_name(state)} and accepts no more messages; "
                    "start a new task (you may reuse the contextId)."
                )
            if state not in INTERRUPTED:
                self.runs.release(run)
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
            if not run.agent_alive:
                other = await self.elsewhere.take(run.key)
                if other is not None:  # the paused turn lives on another process
                    self.runs.release(run)
                    return await self.elsewhere.resume_elsewhere(
                        other, run, message, caller, stream
                    )
                run.owned = True
            break
        try:  # an answer to a pending permission request must match it (nothing changes if not)
            answer = answer_for(run, message)
        except BaseException:
            self.runs.release(run)
            raise
        if self.runs.turns is not None:
            try:
                self.runs.take_slot(scope.owner)
            except BaseException:
                self.runs.release(run)
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
            turn.events = self.subscriptions.subscribe_run(run)
        if answer is not None:
            ack = acknowledge(run, answer)
            try:  # the decision is acted on only once its audit record is durable
                await run.committed(ack)
            except A2AError:
                # Not stored, or not yet: what is not stored by now is dropped, and without
                # a durable record the decision is not acted on.
                if await run.abandon_uncommitted(ack):
                    turn.outcome = await not_recorded(run, answer, previous, message)
                    self.runs.free_slot(run)  # no agent was started to give it back
                    return turn
            if run.state in TERMINAL:  # canceled while the record was being committed
                self.runs.free_slot(run)
                return turn
        if paused:
            self.driver.resumed(run, message)
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
            self.driver.start_agent(run, ctx)
        return turn

    async def wait(self, turn: Turn) -> pb.Message | pb.Task:
        """Outcome of a blocking send: the direct reply or the settled task."""
        # Not shielded: if this caller goes away, cancelling the outcome future harms nobody.
        reply = await turn.outcome
        if reply is not None:
            return reply
        run = turn.run
        if turn.remote:
            return await self.reads.get(run.scope, run.task_id)
        if run.task is None:
            raise InternalError("The turn ended without a task.")
        return run.task

    async def accepted(self, run: TaskRun) -> pb.Task:
        """For returnImmediately: the task as soon as its creation (event 1) is committed."""
        await run.committed(1)
        assert run.task is not None
        return run.task

    async def answer_now(self, turn: Turn) -> pb.Message | pb.Task:
        """For returnImmediately: the task as soon as its creation (event 1) is committed;
        before the agent has spoken (within the first-event grace) a direct reply may come
        first, and is the answer."""
        run = turn.run
        if run.task is None:
            created: asyncio.Future[None] = asyncio.ensure_future(run.committed(1))
            either: list[asyncio.Future[Any]] = [turn.outcome, created]
            try:
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if created.done() and not created.cancelled():
                    created.exception()  # retrieved: raised again just below if it failed
                created.cancel()
            if run.task is None:  # the turn ended without a task: its reply (or its error)
                return await self.wait(turn)
        return await self.accepted(run)

    async def cancel(self, scope: Scope, task_id: str) -> pb.Task:
        if (scope, task_id) not in self.runs:
            remote = await self.elsewhere.cancel_elsewhere(scope, task_id)
            if remote is not None:
                return remote
        run = await self.runs.load(scope, task_id)
        if run.task is None and run.direct_reply is None:
            run.materialize()  # within the first-event grace: the task exists from now on
        assert run.task is not None
        if run.state in TERMINAL:
            self.runs.release(run)
            raise TaskNotCancelableError(
                f"Task {task_id} is {state_name(run.state)} and can no longer be canceled."
            )
        if run.agent_alive:
            await run.stop_agent(cancel=True)  # not cancelled if this request goes away
            if run.state not in TERMINAL:  # canceled before its first step: _drive never ran
                run.agent_ended()
                self.runs.free_slot(run)
                run.force_state(pb.TASK_STATE_CANCELED, "The task was canceled.")
                await run.finish()
        else:
            run.force_state(pb.TASK_STATE_CANCELED, "The task was canceled.")
            await run.finish()
        return run.task


def _grace_over(run: TaskRun, outcome: asyncio.Future[pb.Message | None]) -> None:
    """The first-event grace is over: a turn still silent gets its task now."""
    if run.turn is outcome and not outcome.done() and run.task is None and not run.broken:
        if run.direct_reply is None:
            run.materialize()
