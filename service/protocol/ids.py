"""Server-generated ids: UUIDv7 (RFC 9562), time-ordered.

Ids that grow with time land at the right edge of every index keyed by them, so a
commit of many new tasks dirties a few pages instead of one random page per task
per index (which is most of the SQLite store's write cost). They are still 122
bits of uniqueness with 74 random bits, formatted as ordinary UUIDs.

Several ids are made per request, so the text is assembled from hex strings rather
than through a 128-bit integer, and the random bits come from a pool of `os.urandom`
hex drawn a few kilobytes at a time (one system call per ~200 ids instead of one per
id). A forked child starts with an empty pool, so parent and child never share bits.
"""

from __future__ import annotations

import os
import threading
import time

_POOL_BYTES = 4096
_PER_ID = 19  # hex digits of randomness one id takes (74 bits are used of 76)
# The variant field: the bits 10 followed by two random bits, as one hex digit, from a
# random hex digit (each of the four values from four of the sixteen digits).
_VARIANT = {f"{d:x}": "89ab"[d & 3] for d in range(16)}

_pool = ""
_at = 0
_millis = -1
_prefix = ""
_lock = threading.Lock()  # agents may make ids from their own threads


def _reset_after_fork() -> None:
    global _pool, _at
    _pool, _at = "", 0


os.register_at_fork(after_in_child=_reset_after_fork)


def uuid7() -> str:
    global _pool, _at, _millis, _prefix
    millis = time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF
    prefix = _prefix
    if millis != _millis:
        text = f"{millis:012x}"
        prefix = f"{text[:8]}-{text[8:]}-7"
        _millis, _prefix = millis, prefix
    with _lock:
        at = _at
        if at + _PER_ID > len(_pool):
            _pool, at = os.urandom(_POOL_BYTES).hex(), 0
        _at = at + _PER_ID
        h = _pool[at : at + _PER_ID]
    return f"{prefix}{h[:3]}-{_VARIANT[h[3]]}{h[4:7]}-{h[7:]}"
