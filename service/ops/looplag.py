"""Event-loop lag: how late the loop runs what is due.

One event loop runs every call, stream and agent of a process. When it has more work
than one core can do (or a callback blocks it), everything runs late — timers, reads,
agents' sleeps — and nothing says so. `LoopLag` asks to be woken every `interval`
seconds and records how late each wake-up comes. `lag_ms` is the largest delay of the
last `window` seconds, counting a wake-up overdue right now: a reading that holds long
enough to act on (a scrape, the refusal of new streams, `stream_refusal_lag_ms`) instead
of vanishing at the next punctual wake-up.

The recent maximum is kept in a monotonic queue (each sample drops the smaller ones
before it), so a wake-up and a reading cost O(1) amortised, whatever the window.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

INTERVAL_SECONDS = 0.1  # how often the meter asks to be woken
WINDOW_SECONDS = 5.0  # how long a delay counts in `lag_ms`


class LoopLag:
    """The lag meter of the running loop: `start` in the loop, `stop` when done."""

    __slots__ = ("interval", "window", "_clock", "_recent", "_due", "_handle")

    def __init__(
        self,
        interval: float = INTERVAL_SECONDS,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.window = window
        self._clock = clock
        # (when, delay in s), delays strictly decreasing: the first is the window's maximum.
        self._recent: deque[tuple[float, float]] = deque()
        self._due = 0.0  # when the next wake-up is due (0: not running)
        self._handle: asyncio.TimerHandle | None = None

    # ---- measuring ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin waking every `interval` seconds on the running loop."""
        if self._handle is None:
            self._schedule(self._clock())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._due = 0.0

    def _schedule(self, now: float) -> None:
        self._due = now + self.interval
        self._handle = asyncio.get_running_loop().call_later(self.interval, self._wake)

    def _wake(self) -> None:
        now = self._clock()
        self.observe(now)
        self._schedule(now)

    def observe(self, now: float) -> None:
        """A wake-up happened at `now` (the timer calls it; a test may, with its own clock)."""
        delay = max(0.0, now - self._due) if self._due else 0.0
        recent = self._recent
        while recent and recent[-1][1] <= delay:
            recent.pop()
        recent.append((now, delay))
        self._forget(now)

    def expect(self, due: float) -> None:
        """The next wake-up is due at `due` (with `observe`, for a test's own clock)."""
        self._due = due

    def _forget(self, now: float) -> None:
        recent = self._recent
        horizon = now - self.window
        while recent and recent[0][0] < horizon:
            recent.popleft()

    # ---- reading --------------------------------------------------------------------------

    def lag_ms(self) -> float:
        """The longest delay of the last `window` seconds, or of the wake-up overdue now,
        in milliseconds (0 when the loop keeps time)."""
        now = self._clock()
        self._forget(now)
        recent = self._recent
        worst = recent[0][1] if recent else 0.0
        due = self._due
        if due and now - due > worst:
            worst = now - due
        return worst * 1000.0

    def retry_after(self) -> float:
        """Seconds until the delay now counted leaves the window (at least 1): when a
        caller refused for lag may hope to be taken here again."""
        now = self._clock()
        recent = self._recent
        when = recent[0][0] if recent else now
        return float(max(1, math.ceil(when + self.window - now)))
