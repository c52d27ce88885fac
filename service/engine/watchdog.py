"""Stalled turns: a turn whose agent emits nothing for too long, or works too long, fails.

Activity is any event the agent emits (`ctx.working`, an artifact chunk, a status); a
turn's clock starts when its agent starts or is resumed with the caller's message. A
turn paused in `ctx.ask()` waits for the caller, not for the agent, so it is not
watched until the answer resumes it; neither is an agent winding down after its turn
settled. One timer per watched turn, re-armed only when it fires (an event costs a
clock read, no timer churn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from service.engine.run import TaskRun

INACTIVE_MESSAGE = (
    "The agent sent nothing for {seconds:g} s (turn_inactivity_timeout_seconds), so the "
    "turn was stopped as stalled. Start a new task to retry."
)
TOO_LONG_MESSAGE = (
    "The turn ran longer than {seconds:g} s (max_turn_seconds) and was stopped. Start a new "
    "task to retry."
)


class TurnWatchdog:
    """Calls `on_stall(run, reason)` when a watched turn stalls (0 = that check is off)."""

    def __init__(
        self,
        inactivity_seconds: float,
        max_turn_seconds: float,
        on_stall: Callable[[TaskRun, str], None],
    ) -> None:
        self.inactivity = inactivity_seconds
        self.max_turn = max_turn_seconds
        self.on_stall = on_stall

    @property
    def enabled(self) -> bool:
        return bool(self.inactivity or self.max_turn)

    def watch(self, run: TaskRun) -> None:
        """A turn's agent starts (or resumes) now."""
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        run.watched = True
        run.last_activity = now
        if run.watch_handle is not None:
            run.watch_handle.cancel()
        started = now
        run.watch_handle = loop.call_at(self._next(run, started), self._check, run, started)

    def _next(self, run: TaskRun, started: float) -> float:
        times = []
        if self.inactivity:
            times.append(run.last_activity + self.inactivity)
        if self.max_turn:
            times.append(started + self.max_turn)
        return min(times)

    def _check(self, run: TaskRun, started: float) -> None:
        run.watch_handle = None
        if not run.agent_alive or run.settled or run.input_waiter is not None:
            run.watched = False  # ended, settled or paused: a resumed turn is watched anew
            return
        now = asyncio.get_running_loop().time()
        if self.max_turn and now >= started + self.max_turn:
            run.watched = False
            self.on_stall(run, TOO_LONG_MESSAGE.format(seconds=self.max_turn))
        elif self.inactivity and now >= run.last_activity + self.inactivity:
            run.watched = False
            self.on_stall(run, INACTIVE_MESSAGE.format(seconds=self.inactivity))
        else:
            when = self._next(run, started)
            run.watch_handle = asyncio.get_running_loop().call_at(when, self._check, run, started)
