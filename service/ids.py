"""Server-generated ids: UUIDv7 (RFC 9562), time-ordered.

Ids that grow with time land at the right edge of every index keyed by them, so a
commit of many new tasks dirties a few pages instead of one random page per task
per index (which is most of the SQLite store's write cost). They are still 122
bits of uniqueness with 74 random bits, formatted as ordinary UUIDs.
"""

from __future__ import annotations

import os
import time


def uuid7() -> str:
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 used
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a: 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b: 62 bits
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
