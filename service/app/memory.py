"""The C heap: at most two arenas (glibc), unless `MALLOC_ARENA_MAX` says otherwise, and
its free memory given back to the system now and then (`heap_trim_seconds`).

glibc gives each thread that allocates while another holds an arena's lock an arena of its
own, up to eight per CPU. Ours are few and mostly quiet (the SQLite writer, readers and
checkpointer, gRPC's pollers, `asyncio.to_thread`), but what they allocate and free in
turn with the event loop's thread (a commit's rows and blobs, gRPC's buffers) leaves holes
in every arena, which the process keeps. An in-process probe with 500 streams of 600
events open over SQLite: while the events flowed the arenas grew from 36 to 82 MiB, the
bytes in use by 6 MiB; capped at two arenas, from 33 to 43 MiB (docs/benchmarks.md,
2026-12-06). The threads spend most of their time in C code that holds the GIL or a
store's own lock, so they rarely wait for an arena.

Called once before the event loop starts (threads made after it share the two arenas);
`MALLOC_ARENA_MAX` in the environment, which glibc reads itself, wins.

Free memory inside the heap stays resident: glibc's `free` gives back only the top of a
heap, and what many streams leave behind is spread through it (gRPC's message buffers,
SQLite's pages, Python's objects when PYTHONMALLOC=malloc). `HeapTrim` asks glibc every
`heap_trim_seconds` how much of the heap is free and, past TRIM_FREE_BYTES, calls
`malloc_trim(0)` on a helper thread (ctypes releases the GIL; the trim holds one arena's
lock at a time), which returns every whole free page. Measured after 1,000 streams of 60
events on SQLite: a minute later the RSS was 1.55x the baseline over gRPC without it,
1.3x with it (docs/benchmarks.md, 2026-12-06).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.setting import between, check_section, setting

log = logging.getLogger("service.memory")

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2
HEAP_TRIM_SECONDS = 30.0
# Less free than this is not worth a trim: the next allocations would take it back.
TRIM_FREE_BYTES = 8 * 1024 * 1024


@dataclass
class MemorySettings:
    """The process's C heap ([Operations: memory of the C heap](operations.md#memory-of-the-c-heap))."""

    heap_trim_seconds: float = setting(
        HEAP_TRIM_SECONDS,
        "every this many seconds, when glibc's heap holds at least 8 MiB of free memory, it is given back to the system (`malloc_trim` on a helper thread): what many streams or large messages left behind does not stay in the RSS. `0` = never (Linux with glibc only)",
        check=between(0, 86_400, "must be between {low} (off) and {high} (seconds), got {value}"),
    )


def validate_memory(s: MemorySettings) -> None:
    check_section(s, MemorySettings)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> ctypes.CDLL | None:
    """The C library, on Linux (where glibc's heap functions are looked for)."""
    if platform.system() != "Linux":
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name is not None else None


def _rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class HeapTrim:
    """The housekeeping job: the heap's free memory back to the system when there is
    enough of it (`load()` is None where glibc's `mallinfo2`/`malloc_trim` are missing)."""

    def __init__(
        self, mallinfo2: Callable[[], _MallInfo2], malloc_trim: Callable[[int], int]
    ) -> None:
        self._mallinfo2 = mallinfo2
        self._malloc_trim = malloc_trim
        self.trims = 0  # how many were done (tests, logs)

    @classmethod
    def load(cls) -> HeapTrim | None:
        libc = _libc()
        if libc is None:
            return None
        mallinfo2 = getattr(libc, "mallinfo2", None)  # glibc 2.33 and later
        malloc_trim = getattr(libc, "malloc_trim", None)
        if mallinfo2 is None or malloc_trim is None:
            return None
        mallinfo2.argtypes, mallinfo2.restype = (), _MallInfo2
        malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
        return cls(mallinfo2, malloc_trim)

    def free_bytes(self) -> int:
        """Bytes free inside the heap's arenas (all of them)."""
        info = self._mallinfo2()
        return int(info.fordblks) + int(info.fsmblks)

    def in_use_bytes(self) -> int:
        """Bytes the heap has handed out, its own mmapped blocks included."""
        info = self._mallinfo2()
        return int(info.uordblks) + int(info.hblkhd)

    def trim(self) -> int:
        """`malloc_trim(0)`: the RSS it gave back (bytes; a helper thread calls this)."""
        before = _rss_bytes()
        self._malloc_trim(0)
        self.trims += 1
        return max(0, before - _rss_bytes())

    async def __call__(self, at_least: int = TRIM_FREE_BYTES) -> None:
        free = self.free_bytes()
        if free < at_least:
            return
        started = time.perf_counter()
        released = await asyncio.to_thread(self.trim)
        log.debug(
            "heap trim: %.1f MiB free in the heap, %.1f MiB of RSS given back in %.1f ms",
            free / 2**20,
            released / 2**20,
            1000 * (time.perf_counter() - started),
        )


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas`; False where it is not done (not Linux, no
    `mallopt`, or the environment chose)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
