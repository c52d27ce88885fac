"""Repeated log records summarised instead of repeated.

A client can make some errors happen as often as it likes: failed accepts when
descriptors run out (asyncio logs `socket.accept() out of system resource` with a
traceback, again every second), malformed requests, disconnects, refused inputs.
One line each would let it fill the disk. `FloodFilter` lets the first `burst`
records of a kind through per `window` seconds, then one summary per window:
"N more like this in the last 60 s: <first line>". A kind is the logger, the
level, the first line of the unformatted message and the exception type.

Tracebacks of operating-system errors (`OSError`: EMFILE, ECONNRESET, ...) are
cut down to one line: they describe the environment, not a bug. Other
exceptions keep their traceback on the records that get through, so a real bug
is still shown once per window with its stack.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

SUMMARY = "flood_summary"  # attribute marking this filter's own summary records
MAX_KINDS = 256  # kinds remembered at once (least recently seen forgotten first)


class _Kind:
    __slots__ = ("start", "seen", "suppressed", "name", "level", "text")

    def __init__(self, start: float, record: logging.LogRecord) -> None:
        self.start = start
        self.seen = 0
        self.suppressed = 0
        self.name = record.name
        self.level = record.levelno
        try:  # what the summary quotes: the first record of the window, formatted
            self.text = record.getMessage().split("\n", 1)[0][:200]
        except Exception:  # noqa: BLE001 - a bad format string is logging's to report
            self.text = _first_line(record)


def _first_line(record: logging.LogRecord) -> str:
    msg = record.msg if isinstance(record.msg, str) else repr(record.msg)
    return msg.split("\n", 1)[0][:200]


class FloodFilter(logging.Filter):
    def __init__(
        self, window: float = 60.0, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window = window
        self.burst = burst
        self.clock = clock
        # (logger name, level, first line, exception type name)
        self._kinds: OrderedDict[tuple[str, int, str, str], _Kind] = OrderedDict()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, SUMMARY, False):
            return True
        now = self.clock()
        exc = record.exc_info[1] if record.exc_info else None
        text = _first_line(record)
        key = (record.name, record.levelno, text, type(exc).__name__ if exc is not None else "")
        due: list[_Kind] = []
        with self._lock:
            for other in self._kinds.values():  # windows that ended: their summaries are due
                if other.suppressed and now - other.start >= self.window:
                    due.append(other)
            kind = self._kinds.get(key)
            if kind is None or now - kind.start >= self.window:
                kind = _Kind(now, record)
                self._kinds[key] = kind
                while len(self._kinds) > MAX_KINDS:
                    old = self._kinds.popitem(last=False)[1]
                    if old.suppressed:
                        due.append(old)
            self._kinds.move_to_end(key)
            kind.seen += 1
            passed = kind.seen <= self.burst
            if not passed:
                kind.suppressed += 1
            summaries = [(k.name, k.level, k.suppressed, k.text) for k in dict.fromkeys(due)]
            for k in due:
                k.suppressed = 0
        _summarise(summaries, self.window)
        if passed and isinstance(exc, OSError):
            _one_line(record, exc)
        return passed

    def flush(self, everything: bool = False) -> None:
        """Log the summaries due (windows that ended; with `everything`, all pending ones)."""
        now = self.clock()
        with self._lock:
            due = [
                k
                for k in self._kinds.values()
                if k.suppressed and (everything or now - k.start >= self.window)
            ]
            summaries = [(k.name, k.level, k.suppressed, k.text) for k in due]
            for k in due:
                k.suppressed = 0
        _summarise(summaries, self.window)


def _summarise(summaries: list[tuple[str, int, int, str]], window: float) -> None:
    for name, level, count, first in summaries:
        logging.getLogger(name).log(
            level,
            "%d more like this in the last %d s: %s",
            count,
            round(window),
            first,
            extra={SUMMARY: True},
        )


def _one_line(record: logging.LogRecord, exc: BaseException) -> None:
    """The record without its traceback: the exception's type and text end the message."""
    record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
    record.args = None
    record.exc_info = None
    record.exc_text = None


# Loggers a client can make speak: asyncio (failed accepts, transport errors), uvicorn
# (malformed requests, disconnects), the gateway's connection guard, and the access lines
# of refused credentials (service.calls.access; a few per minute get through).
FLOODABLE = ("asyncio", "uvicorn.error", "gateway.connections", "service.access.unauthenticated")
BURST = {"service.access.unauthenticated": 10}  # records of a kind per window (default 1)
_installed: dict[str, FloodFilter] = {}
_install_lock = threading.Lock()


def install(window: float = 60.0) -> None:
    """Put a FloodFilter on each FLOODABLE logger (once per process; idempotent)."""
    with _install_lock:
        for name in FLOODABLE:
            if name not in _installed:
                flood = FloodFilter(window, burst=BURST.get(name, 1))
                logging.getLogger(name).addFilter(flood)
                _installed[name] = flood


def flush(everything: bool = False) -> None:
    """Log the installed filters' due summaries (all pending ones with `everything`): call it
    every window or so, and at shutdown with everything=True."""
    for flood in list(_installed.values()):
        flood.flush(everything)
