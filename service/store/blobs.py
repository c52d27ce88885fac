"""The blob store seam: bytes of stored file artifacts, content-addressed by SHA-256.

A blob is kept once however many tasks store the same bytes (deduplicated); each task
that stored it holds a reference, and `release_task` drops a task's references and
deletes every blob no other task still refers to (what task retention calls when it
removes a task). The bytes never go into the task store: tasks carry only a URL.

`LocalBlobStore` keeps them in one directory:

    objects/ab/<sha256>      the bytes (read-only), named by their hash
    refs/<sha256>/<task>     one empty file per task that refers to the blob
    tasks/<task>/<sha256>    the same reference, indexed by task (for release_task)
    tmp/                     blobs being written (moved into objects/ when complete)
    lock                     flock'ed around reference changes

`<task>` is the SHA-256 of (tenant, owner, task id), so no caller-chosen text becomes a
path. Every change of references happens under an exclusive `flock` of `lock`, so
several processes, also on several hosts sharing the directory (a network file system
with working locks), may use one store: a blob is deleted only while no reference to it
exists, and a blob being stored is moved into place while its reference is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import pathlib
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from service.protocol.files import SHA256_HEX
from service.store.base import Scope

COPY_CHUNK = 1024 * 1024
# A half-written blob is locked (flock) by its writer; one that is not, and is older than
# this (its writer may have made it and not locked it yet), belongs to a writer that died.
STALE_TMP_SECONDS = 60
EPHEMERAL_PREFIX = "a2a-files-"  # temporary blob directories (memory store), in TMPDIR
OWNER_FILE = "owner.lock"  # flock'ed by the process that uses a temporary directory

BlobSource = bytes | str | os.PathLike[str] | BinaryIO


class BlobTooLargeError(ValueError):
    """The bytes exceed the size the caller allowed; nothing was stored."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Blob:
    """A stored blob: its hash (lower-case hex), size, and where its bytes are readable."""

    sha256: str
    size: int
    path: pathlib.Path


class BlobStore(Protocol):
    async def put(self, scope: Scope, task_id: str, source: BlobSource, max_bytes: int) -> Blob:
        """Store the bytes (raw, a file path, or a binary file object read to its end) for a
        task; BlobTooLargeError when they exceed `max_bytes`, ValueError when the path is
        not a regular file (a symbolic link is not followed)."""

    async def find(self, scope: Scope, task_id: str, sha256: str) -> Blob | None:
        """The blob if this task stored it and it is still there, else None."""

    async def release_task(self, scope: Scope, task_id: str) -> int:
        """Drop the task's references; delete blobs no task refers to. Returns how many."""

    async def close(self) -> None: ...


def task_key(scope: Scope, task_id: str) -> str:
    return hashlib.sha256(f"{scope.tenant}\x00{scope.owner}\x00{task_id}".encode()).hexdigest()


class LocalBlobStore:
    """Blobs in a directory (created on first use). `ephemeral`: removed by close() (for a
    memory task store, whose tasks do not outlive the process either)."""

    def __init__(self, root: str | os.PathLike[str], *, ephemeral: bool = False) -> None:
        self.root = pathlib.Path(root)
        self.ephemeral = ephemeral
        self._ready = False
        self._owner: int | None = None  # the lock of a temporary directory, while it is used
        if ephemeral:
            self.root.mkdir(parents=True, exist_ok=True)
            self._owner = os.open(self.root / OWNER_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._owner, fcntl.LOCK_EX)

    @classmethod
    def temporary(cls) -> LocalBlobStore:
        """A store in a new temporary directory, removed by close(); those of processes that
        ended without closing theirs (kill -9) are removed first."""
        remove_abandoned_directories()
        return cls(tempfile.mkdtemp(prefix=EPHEMERAL_PREFIX), ephemeral=True)

    # ---- the seam (file work runs in a thread: the event loop never waits on a disk) ----

    async def put(self, scope: Scope, task_id: str, source: BlobSource, max_bytes: int) -> Blob:
        return await asyncio.to_thread(self._put, task_key(scope, task_id), source, max_bytes)

    async def find(self, scope: Scope, task_id: str, sha256: str) -> Blob | None:
        return await asyncio.to_thread(self._find, task_key(scope, task_id), sha256)

    async def release_task(self, scope: Scope, task_id: str) -> int:
        return await asyncio.to_thread(self._release, task_key(scope, task_id))

    async def close(self) -> None:
        if self.ephemeral:
            await asyncio.to_thread(shutil.rmtree, self.root, True)
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None

    async def sweep_tmp(self) -> int:
        """Remove half-written blobs whose writer is gone; returns how many."""
        if not (self.root / "tmp").is_dir():
            return 0
        return await asyncio.to_thread(self._sweep_tmp)

    # ---- layout --------------------------------------------------------------

    def object_path(self, sha256: str) -> pathlib.Path:
        return self.root / "objects" / sha256[:2] / sha256

    def count(self) -> int:
        """How many blobs are stored (for tests and tools)."""
        objects = self.root / "objects"
        return sum(1 for p in objects.glob("*/*") if p.is_file()) if objects.exists() else 0

    def _prepare(self) -> None:
        if self._ready:
            return
        for sub in ("objects", "refs", "tasks", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._sweep_tmp()
        self._ready = True

    def _sweep_tmp(self) -> int:
        cutoff = time.time() - STALE_TMP_SECONDS
        removed = 0
        for leftover in (self.root / "tmp").iterdir():
            with contextlib.suppress(OSError):
                if leftover.lstat().st_mtime < cutoff and not _in_use(leftover):
                    leftover.unlink()
                    removed += 1
        return removed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / "lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # ---- operations --------------------------------------------------------------

    def _put(self, key: str, source: BlobSource, max_bytes: int) -> Blob:
        self._prepare()
        fd, tmp_name = tempfile.mkstemp(dir=self.root / "tmp", prefix="put-")
        tmp = pathlib.Path(tmp_name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # being written: a sweep leaves it alone
            with os.fdopen(fd, "wb") as out:
                sha256, size = _copy(source, out, max_bytes)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)  # content-addressed: never to be changed in place
            target = self.object_path(sha256)
            with self._locked():
                if target.exists():
                    tmp.unlink()  # the same bytes are stored already
                else:
                    target.parent.mkdir(exist_ok=True)
                    os.replace(tmp, target)
                refs = self.root / "refs" / sha256
                refs.mkdir(exist_ok=True)
                (refs / key).touch()
                index = self.root / "tasks" / key
                index.mkdir(exist_ok=True)
                (index / sha256).touch()
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        return Blob(sha256, size, target)

    def _find(self, key: str, sha256: str) -> Blob | None:
        if not SHA256_HEX.fullmatch(sha256):
            return None
        if not (self.root / "refs" / sha256 / key).exists():
            return None
        path = self.object_path(sha256)
        try:
            info = path.stat()
        except FileNotFoundError:
            return None
        return Blob(sha256, info.st_size, path)

    def _release(self, key: str) -> int:
        index = self.root / "tasks" / key
        if not index.is_dir():
            return 0
        deleted = 0
        with self._locked():
            for entry in list(index.iterdir()):
                sha256 = entry.name
                refs = self.root / "refs" / sha256
                with contextlib.suppress(FileNotFoundError):
                    (refs / key).unlink()
                try:
                    refs.rmdir()  # only when no other task refers to the blob
                except FileNotFoundError:
                    pass
                except OSError:
                    entry.unlink()
                    continue  # still referred to: kept
                with contextlib.suppress(FileNotFoundError):
                    self.object_path(sha256).unlink()
                    deleted += 1
                entry.unlink()
            with contextlib.suppress(OSError):
                index.rmdir()
        return deleted


def _in_use(path: pathlib.Path) -> bool:
    """Whether a live process holds the file's flock (its writer, or a directory's owner)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True  # gone already: nothing to do
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def remove_abandoned_directories(parent: str | None = None) -> int:
    """Remove temporary blob directories whose process ended without removing them (no one
    holds their owner lock); returns how many."""
    where = pathlib.Path(parent or tempfile.gettempdir())
    cutoff = time.time() - STALE_TMP_SECONDS
    removed = 0
    for candidate in where.glob(EPHEMERAL_PREFIX + "*"):
        with contextlib.suppress(OSError):
            if not candidate.is_dir() or candidate.is_symlink():
                continue
            if candidate.lstat().st_mtime >= cutoff:
                continue  # just made: its owner may not hold the lock yet
            owner = candidate / OWNER_FILE
            if owner.exists() and _in_use(owner):
                continue
            shutil.rmtree(candidate)
            removed += 1
    return removed


def _copy(source: BlobSource, out: BinaryIO, max_bytes: int) -> tuple[str, int]:
    """Write the source to `out`, hashing it; (hex SHA-256, size)."""
    digest = hashlib.sha256()
    if isinstance(source, bytes):
        if len(source) > max_bytes:
            raise BlobTooLargeError(max_bytes)
        digest.update(source)
        out.write(source)
        return digest.hexdigest(), len(source)
    if isinstance(source, (str, os.PathLike)):
        try:  # not through a link; a FIFO must not block the open
            fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ValueError("a symbolic link, not a regular file") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("not a regular file")
            reader = open(fd, "rb")  # noqa: SIM115 - closed by the with below
        except BaseException:
            os.close(fd)
            raise
        with reader:
            return _copy_stream(reader, out, digest, max_bytes)
    return _copy_stream(source, out, digest, max_bytes)


def _known_size(reader: BinaryIO) -> int | None:
    """What is left to read of a regular file (None for a pipe or an in-memory stream)."""
    try:
        info = os.fstat(reader.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    try:
        return max(0, info.st_size - reader.tell())
    except OSError:
        return None


def _copy_stream(
    reader: BinaryIO, out: BinaryIO, digest: hashlib._Hash, max_bytes: int
) -> tuple[str, int]:
    known = _known_size(reader)
    if known is not None and known > max_bytes:
        raise BlobTooLargeError(max_bytes)  # before copying anything
    size = 0
    while chunk := reader.read(COPY_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise BlobTooLargeError(max_bytes)
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest(), size
