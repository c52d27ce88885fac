"""Driving turns: an agent's turn runs as its own asyncio task until it ends, and is then
committed; the stall watchdog stops one that stalls; shutdown stops them all.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gen import a2a_pb2 as pb
from service.agent import Agent, TurnContext
from service.engine.elsewhere import Elsewhere
from service.engine.run import TaskRun
from service.engine.runs import Runs
from service.engine.watchdog import TurnWatchdog
from service.protocol.errors import internal_error
from service.protocol.states import state_name
from service.telemetry import hub, names

log = logging.getLogger("service.engine")

ABANDON_AFTER_SECONDS = 2.0  # a stalled turn's agent, once cancelled, has this long to end
SHUTDOWN_MESSAGE = (
    "The server shut down while this task was running; the turn was stopped. "
    "Send a new message to retry."
)

PARKED_MESSAGE = (
    "The agent's turn was released while it waited for an answer (paused_turn_idle_seconds), "
    "and its cleanup left the task working. Send a new message to retry."
)


class Driver:
    def __init__(
        self,
        agent: Agent,
        runs: Runs,
        elsewhere: Elsewhere,
        inactivity_timeout: float,
        max_turn_seconds: float,
    ) -> None:
        self.agent = agent
        self.runs = runs
        self.elsewhere = elsewhere
        self.watchdog = TurnWatchdog(inactivity_timeout, max_turn_seconds, self._stalled)
        self._stopping: set[asyncio.Task[None]] = set()  # stalled agents being stopped
        # Agent coroutines that ignored their cancellation after a stall: still running,
        # no longer waited for (the process exits without them).
        self.abandoned: set[asyncio.Task[None]] = set()

    def start_agent(self, run: TaskRun, ctx: TurnContext) -> None:
        run.parking = False
        run.start_agent(self._drive(run, ctx, hub.current))
        self.watchdog.watch(run)

    def resumed(self, run: TaskRun, message: pb.Message) -> None:
        """The paused agent coroutine continues with the caller's message."""
        run.parking = False  # an agent that ignored its parking and asked again
        run.resume(message)
        self.watchdog.watch(run)

    # ---- stalled turns ---------------------------------------------------------

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
        self.runs.free_slot(run)
        run.watched = False
        run.force_state(pb.TASK_STATE_FAILED, reason)
        run.stop_reason = None
        await run.finish()
        if run.owned:
            run.owned = False
            self.elsewhere.release(run.key)

    # ---- one turn ----------------------------------------------------------------

    async def _drive(self, run: TaskRun, ctx: TurnContext, tel: hub.Telemetry | None) -> None:
        """Run the agent's turn to its end and commit it. With telemetry on, inside the
        turn's span (a child of the call that started it, and the current span while the
        agent runs, so an agent's own spans nest under it): the task's events on it, its
        final state, and `a2a.tasks.active` while it runs. One coroutine, not a traced one
        around an untraced one: each resumption of the turn would pass through both."""
        turn = token = None
        started = 0.0
        if tel is not None:
            started = time.perf_counter()
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
                elif run.parking:
                    parked(run)
                else:
                    stopped_by_shutdown(run)
            except Exception as exc:  # the agent broke: the task fails, the server keeps serving
                ref = internal_error(exc, f"agent turn of task {run.task_id}").metadata["ref"]
                run.force_state(pb.TASK_STATE_FAILED, f"The agent failed (ref {ref}).")
            else:
                if not run.settled:
                    run.status(pb.TASK_STATE_COMPLETED, None, None)
            finally:
                run.stop_reason = None  # a stall stops this turn only
                run.parking = False
                self.runs.free_slot(run)
                if run.watch_handle is not None:
                    run.watch_handle.cancel()
                    run.watch_handle = None
                run.watched = False
            run.agent_ended()
            run.claim = None  # over before its first commit: nobody needs to find its owner
            await run.finish()
            if run.owned and not run.agent_alive:
                run.owned = False
                self.elsewhere.release(run.key)
        finally:
            if turn is not None:
                assert tel is not None  # a turn span only with telemetry
                hub.leave(token)
                tel.tasks_active -= 1
                if run.trace is turn:
                    run.trace = None
                state = state_name(run.state) if run.task is not None else ""
                if state:
                    turn.attributes[names.STATE] = state
                turn.end()
                tel.turn_ended(turn, state, time.perf_counter() - started)

    # ---- shutdown ------------------------------------------------------------------

    async def shutdown(self) -> int:
        """Stop every agent coroutine, settle the tasks they were working on (FAILED with
        SHUTDOWN_MESSAGE), and commit everything; returns how many tasks were stopped."""
        runs = list(self.runs.values())
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
                self.runs.free_slot(run)
                stopped_by_shutdown(run)
                await run.finish()
            try:
                await run.flushed()
            except BaseException:
                pass  # logged by the flusher; the store's close reports what is left
        return stopped


def parked(run: TaskRun) -> None:
    """A turn parked while it waited in ctx.ask(): the task stays interrupted, as stored,
    and the answer starts a new turn. An agent whose cleanup moved the task on (it emitted
    after the cancellation) has left it working with nobody at work: it fails, saying so."""
    log.debug("task %s: paused turn parked (paused_turn_idle_seconds)", run.task_id)
    if not run.settled:
        run.force_state(pb.TASK_STATE_FAILED, PARKED_MESSAGE)


def stopped_by_shutdown(run: TaskRun) -> None:
    """A turn cut short by shutdown: a paused one keeps its interrupted state (a follow-up
    after the restart starts a new turn); a working one ends FAILED, saying why."""
    if run.input_waiter is None and not run.settled:
        run.force_state(pb.TASK_STATE_FAILED, SHUTDOWN_MESSAGE)
