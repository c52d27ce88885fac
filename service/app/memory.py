"""The C heap's arenas: at most two (glibc), unless `MALLOC_ARENA_MAX` says otherwise.

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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas`; False where it is not done (not Linux, no
    `mallopt`, or the environment chose)."""
    if platform.system() != "Linux" or "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
