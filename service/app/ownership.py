"""One process owns a data directory (and a task database file) at a time.

Two servers on one directory would both write the same tasks: the second one's
restart recovery fails the first one's running tasks, and their commits
interleave in one event log. So before anything in the directory is opened, the
server takes an exclusive `flock` on a lock file there and writes its pid into
it. The lock goes with the process (also on `kill -9`), so a stale file never
blocks a restart. A second server finds the lock held, names the owner's pid
and exits without touching anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "server.lock"


class InUseError(Exception):
    """The directory or file is owned by another live process; the message names it."""


class Ownership:
    """Exclusive locks held until `release()` (or the process's end)."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        self.paths: list[Path] = []

    def claim(self, lock_path: Path, what: str) -> None:
        """Lock `lock_path` (created if needed) or raise InUseError naming `what`.
        OSError when it cannot be created (e.g. an unwritable directory)."""
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            who = f"pid {owner}" if owner else "another process"
            raise InUseError(
                f"{what} is in use by another server ({who}; lock {lock_path}); "
                "stop it first, or give this one its own directory"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fds.append(fd)
        self.paths.append(lock_path)

    def release(self) -> None:
        """Unlock; the files stay (removing them would race with a starting successor)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)
        self._fds.clear()
        self.paths.clear()


def _read_pid(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return ""
