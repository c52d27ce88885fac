"""`local-file` push queue: one JSON file per job under DATA_DIR/push-queue.

    pending/   jobs waiting (or waiting for their retry time, kept in the file)
    inflight/  jobs leased to a worker of the running process
    dead/      jobs given up on: `python -m service push-dead list|replay`
    incoming/  replayed jobs dropped by the CLI; the running server adopts them
    cursors/   the dispatcher's per-(task, config) cursors
    tmp/       half-written files (removed at startup)

Every job file is written to tmp/, fsync'ed, renamed into place and its directory
fsync'ed, so a job is either wholly there or not at all, across kill -9 and power
loss. State changes that need no new content are renames. At startup everything
in inflight/ goes back to pending/: the process that leased it is gone. All file
changes of a running queue are made by one I/O thread in batches (one wake-up and
one fsync per touched directory per batch, like a database's group commit). An
in-memory index (lanes sorted by sequence, a heap of ready lanes) answers leases;
the files are the truth and rebuild it. One process owns the directory (flock).

A cursor is two files: NAME.json (its key and starting point, fsync'ed when the
config is stored) and NAME.seq (how far it moved). Moves are written without fsync:
jobs are durable before their cursor moves, so a move lost to power failure only
makes the dispatcher enqueue the same jobs again (same file names; at least once,
never lost).
"""

from __future__ import annotations

import asyncio
import bisect
import fcntl
import hashlib
import heapq
import itertools
import json
import logging
import os
import pathlib
import queue
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from service.push.queue_base import CursorKey, CursorMove, DeadJob, Job, Lease, TaskKey

log = logging.getLogger("service.push")

ADOPT_INTERVAL = 1.0  # seconds between looks into incoming/
DIRS = ("pending", "inflight", "dead", "incoming", "cursors", "tmp")


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cursor_name(key: CursorKey) -> str:
    """NAME.json: the key and where the cursor started (durable); NAME.seq: where it moved."""
    return hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:40]


def _sort_key(job: Job) -> tuple[int, str]:
    return job.seq, job.id


# A file operation's outcome: the future waiting for it (None: nobody waits), its value, its error.
_Result = tuple[asyncio.Future[Any] | None, Any, BaseException | None]
# A file operation for the I/O thread: fn(dirs, *args), and the future to settle (None: fire).
_Op = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any] | None]


def _settle(results: list[_Result]) -> None:
    for fut, value, exc in results:
        if fut is None:
            if exc is not None:
                log.error(
                    "push queue file operation failed: %s",
                    getattr(exc, "strerror", None) or type(exc).__name__,
                )
        elif not fut.done():
            if exc is None:
                fut.set_result(value)
            else:
                fut.set_exception(exc)


class _IoThread:
    """Runs file operations in submission order on one thread, in batches. Each operation
    gets the batch's set of directories to fsync; futures resolve after those fsyncs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._q: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="push-queue-io", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        fut = self._loop.create_future()
        self._q.put((fn, args, fut))
        return fut

    def fire(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run it, nobody waits (failures are logged)."""
        self._q.put((fn, args, None))

    def stop(self) -> None:
        self._q.put(None)
        self._thread.join()

    def _main(self) -> None:
        while True:
            batch = [self._q.get()]
            while True:
                try:
                    batch.append(self._q.get_nowait())
                except queue.Empty:
                    break
            dirs: set[pathlib.Path] = set()
            results: list[_Result] = []
            for item in batch:
                if item is None:
                    continue
                fn, args, fut = item
                try:
                    results.append((fut, fn(dirs, *args), None))
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                    results.append((fut, None, exc))
            try:
                for directory in dirs:
                    _fsync_dir(directory)
            except OSError as exc:
                results = [(fut, None, exc) for fut, _, _ in results]
            if results:
                self._loop.call_soon_threadsafe(_settle, results)
            if None in batch:
                return


class FileQueue:
    def __init__(self, root: str | os.PathLike[str], lease_seconds: float = 300.0) -> None:
        self.root = pathlib.Path(root)
        self.lease_seconds = lease_seconds
        self.pending, self.inflight, self.dead_dir, self.incoming, self.cursor_dir, self.tmp = (
            self.root / d for d in DIRS
        )
        self._lanes: dict[str, list[Job]] = {}  # pending jobs per lane, head first
        self._pending_ids: set[str] = set()
        self._busy: dict[str, str] = {}  # lane -> token of its lease
        self._leases: dict[str, tuple[Lease, float]] = {}  # token -> (lease, deadline)
        self._ready: list[
            tuple[float, int, str]
        ] = []  # (head due_at, tie, lane); stale entries skipped
        self._tie = itertools.count()
        self._cursors: dict[TaskKey, dict[str, int]] = {}
        self._event = asyncio.Event()
        self._lock_fd: int | None = None
        self._last_adopt = 0.0
        self._io: _IoThread | None = None

    def depth(self) -> int:
        """Jobs waiting (due or not, leased ones included), for the queue-depth gauge."""
        return len(self._pending_ids)

    # ---- files -------------------------------------------------------------

    def _write(
        self,
        dirs: set[pathlib.Path],
        items: list[tuple[pathlib.Path, str, str]],
        durable: bool = True,
    ) -> None:
        """Atomically (re)place files: tmp write, fsync, rename; the directories go into
        `dirs` for the caller to fsync."""
        staged = []
        for directory, name, text in items:
            tmp = self.tmp / f"{name}.{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as f:
                f.write(text.encode())
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            staged.append((tmp, directory / name))
        for tmp, final in staged:
            os.replace(tmp, final)
        if durable:
            dirs.update(d for d, _, _ in items)

    def _write_now(self, items: list[tuple[pathlib.Path, str, str]]) -> None:
        """`_write` + the fsyncs, in the calling thread (startup, the CLI)."""
        dirs: set[pathlib.Path] = set()
        self._write(dirs, items)
        for directory in dirs:
            _fsync_dir(directory)

    def _run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """A file operation on the I/O thread (or a worker thread when the queue is not open)."""
        if self._io is not None:
            return self._io.submit(fn, *args)

        def now() -> Any:
            dirs: set[pathlib.Path] = set()
            out = fn(dirs, *args)
            for directory in dirs:
                _fsync_dir(directory)
            return out

        return asyncio.to_thread(now)

    @staticmethod
    def _unlink(dirs: set[pathlib.Path], path: pathlib.Path) -> None:
        path.unlink(missing_ok=True)

    def _ensure_dirs(self) -> None:
        for d in (
            self.pending,
            self.inflight,
            self.dead_dir,
            self.incoming,
            self.cursor_dir,
            self.tmp,
        ):
            d.mkdir(parents=True, exist_ok=True)

    # ---- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        jobs, cursors = await asyncio.to_thread(self._open_sync)
        self._io = _IoThread(asyncio.get_running_loop())
        for job in jobs:
            self._insert(job)
        self._cursors = cursors
        self._last_adopt = time.monotonic()

    def _open_sync(self) -> tuple[list[Job], dict[TaskKey, dict[str, int]]]:
        self._ensure_dirs()
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(f"push queue {self.root} is in use by another running server") from None
        self._lock_fd = fd
        for leftover in self.tmp.iterdir():
            leftover.unlink(missing_ok=True)
        for path in self.inflight.iterdir():  # leased by a process that is gone
            if (self.pending / path.name).exists():
                path.unlink()
            else:
                os.replace(path, self.pending / path.name)
        self._adopt_sync()
        jobs = []
        for path in self.pending.iterdir():
            try:
                jobs.append(Job.from_json(path.read_bytes()))
            except (ValueError, TypeError) as exc:
                log.error(
                    "unreadable push job %s (%s); moved aside to the queue's corrupt/ folder",
                    path.name,
                    type(exc).__name__,
                )
                (self.root / "corrupt").mkdir(exist_ok=True)
                os.replace(path, self.root / "corrupt" / path.name)
        cursors: dict[TaskKey, dict[str, int]] = {}
        for path in self.cursor_dir.glob("*.json"):
            try:
                data = json.loads(path.read_bytes())
                tenant, owner, task_id, config_id = data["key"]
                seq = int(data["seq"])
            except (ValueError, KeyError, TypeError):
                log.error("unreadable push cursor %s; removed", path.name)
                path.unlink()
                continue
            try:
                seq = max(seq, int(path.with_suffix(".seq").read_text()))
            except (OSError, ValueError):
                pass  # never moved, or the move was lost: from the start again (at least once)
            cursors.setdefault((tenant, owner, task_id), {})[config_id] = seq
        return jobs, cursors

    async def close(self) -> None:
        for lease, _ in list(self._leases.values()):  # hand back what is being delivered
            self._requeue_file(lease.job)
        self._leases.clear()
        self._busy.clear()
        if self._io is not None:
            await asyncio.to_thread(self._io.stop)  # finishes what was submitted
            self._io = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def abandon(self) -> None:
        """Drop the directory lock and leave every file as it is, as a killed process would (tests)."""
        if self._io is not None:
            self._io.stop()
            self._io = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- index -------------------------------------------------------------

    def _insert(self, job: Job) -> None:
        lane = job.lane
        jobs = self._lanes.setdefault(lane, [])
        if job.id in self._pending_ids:  # the same job again (re-enqueued after a crash)
            jobs[:] = [other for other in jobs if other.id != job.id]
        self._pending_ids.add(job.id)
        bisect.insort(jobs, job, key=_sort_key)
        if jobs[0] is job:  # a new head: the lane's readiness changed
            self._mark_ready(lane)

    def _mark_ready(self, lane: str) -> None:
        jobs = self._lanes.get(lane)
        if jobs and lane not in self._busy:
            heapq.heappush(self._ready, (jobs[0].due_at, next(self._tie), lane))

    def _requeue_file(self, job: Job) -> None:
        src = self.inflight / job.id
        if (self.pending / job.id).exists():
            src.unlink(missing_ok=True)
        else:
            try:
                os.replace(src, self.pending / job.id)
            except FileNotFoundError:
                pass

    def _current(self, lease: Lease) -> bool:
        return lease.token in self._leases

    def _finish(self, lease: Lease) -> None:
        self._leases.pop(lease.token, None)
        lane = lease.job.lane
        if self._busy.get(lane) == lease.token:
            del self._busy[lane]
            self._mark_ready(lane)
        self._event.set()

    def _expire(self, now: float) -> None:
        for lease, deadline in list(self._leases.values()):
            if deadline <= now:
                log.warning("push job %s: lease expired; handing it out again", lease.job.id)
                self._requeue_file(lease.job)
                self._finish(lease)
                self._insert(lease.job)

    # ---- the queue ---------------------------------------------------------

    async def enqueue(self, jobs: list[Job], cursor: CursorMove | None = None) -> bool:
        if cursor is not None:
            task, config_id = cursor.key[:3], cursor.key[3]
            if self._cursors.get(task, {}).get(config_id) != cursor.expected:
                return False
            self._cursors[task][config_id] = cursor.new  # reserved before the write yields
        try:
            await self._run(self._enqueue_files, jobs, cursor)
        except BaseException:
            if (
                cursor is not None
                and self._cursors.get(cursor.key[:3], {}).get(cursor.key[3]) == cursor.new
            ):
                self._cursors[cursor.key[:3]][cursor.key[3]] = cursor.expected
            raise
        for job in jobs:
            self._insert(job)
        self._event.set()
        return True

    def _enqueue_files(
        self, dirs: set[pathlib.Path], jobs: list[Job], cursor: CursorMove | None
    ) -> None:
        if jobs:
            self._write(dirs, [(self.pending, job.id, job.to_json()) for job in jobs])
        if cursor is not None:
            name = _cursor_name(cursor.key) + ".seq"
            self._write(dirs, [(self.cursor_dir, name, str(cursor.new))], durable=False)

    async def lease(self, limit: int) -> list[Lease]:
        now = time.time()
        self._expire(now)
        if time.monotonic() - self._last_adopt >= ADOPT_INTERVAL:
            await self._adopt()
        out: list[Lease] = []
        while self._ready and len(out) < limit and self._ready[0][0] <= now:
            due, _, lane = heapq.heappop(self._ready)
            jobs = self._lanes.get(lane)
            if lane in self._busy or not jobs or jobs[0].due_at != due:
                continue  # stale entry
            job = jobs.pop(0)
            self._pending_ids.discard(job.id)
            if not jobs:
                del self._lanes[lane]
            try:
                os.replace(self.pending / job.id, self.inflight / job.id)
            except FileNotFoundError:
                log.error("push job %s vanished from the pending folder", job.id)
                self._mark_ready(lane)
                continue
            lease = Lease(job, uuid.uuid4().hex)
            self._busy[lane] = lease.token
            self._leases[lease.token] = (lease, now + self.lease_seconds)
            out.append(lease)
        return out

    async def ack(self, lease: Lease) -> None:
        if not self._current(lease):
            return
        self._finish(lease)
        # Not awaited: the lane moves on at once. Should the process die before the file
        # is gone, the job is delivered once more (at least once).
        if self._io is not None:
            self._io.fire(self._unlink, self.inflight / lease.job.id)

    async def retry(self, lease: Lease, job: Job) -> None:
        if not self._current(lease):
            return
        await self._run(self._move_with, self.pending, job.id, job.to_json())
        if self._current(lease):  # the lane stays busy until the retry is on disk
            self._leases.pop(lease.token)
            self._busy.pop(job.lane, None)
            self._insert(job)
            self._event.set()

    async def release(self, lease: Lease, due_at: float) -> None:
        if not self._current(lease):
            return
        self._requeue_file(lease.job)
        self._leases.pop(lease.token)
        self._busy.pop(lease.job.lane, None)
        lease.job.due_at = due_at  # in memory only: after a restart it is due at once
        self._insert(lease.job)
        self._event.set()

    async def dead(self, lease: Lease, job: Job, error: str) -> None:
        if not self._current(lease):
            return
        entry = {"job": json.loads(job.to_json()), "error": error, "failed_at": time.time()}
        await self._run(self._move_with, self.dead_dir, job.id, json.dumps(entry))
        self._finish(lease)

    def _move_with(
        self, dirs: set[pathlib.Path], directory: pathlib.Path, name: str, text: str
    ) -> None:
        """inflight/NAME becomes DIRECTORY/NAME with new content (durably)."""
        self._write(dirs, [(directory, name, text)])
        (self.inflight / name).unlink(missing_ok=True)

    async def wait(self, max_seconds: float) -> None:
        if not self._event.is_set():
            delay = min(max_seconds, ADOPT_INTERVAL)
            if self._ready:
                delay = min(delay, max(0.0, self._ready[0][0] - time.time()))
            try:
                await asyncio.wait_for(self._event.wait(), delay)
            except TimeoutError:
                pass
        self._event.clear()

    # ---- dead letters (also used by the CLI, with or without a running server) ----

    async def list_dead(self, limit: int = 100) -> list[DeadJob]:
        return await asyncio.to_thread(self._list_dead_sync, limit)

    def _list_dead_sync(self, limit: int) -> list[DeadJob]:
        if not self.dead_dir.exists():
            return []
        found = []
        for path in self.dead_dir.iterdir():
            try:
                data = json.loads(path.read_bytes())
                found.append(
                    DeadJob(path.name, Job(**data["job"]), data["error"], data["failed_at"])
                )
            except (ValueError, KeyError, TypeError, FileNotFoundError):
                log.error("unreadable dead push job %s", path.name)
        found.sort(key=lambda d: (d.failed_at, d.id))
        return found[:limit]

    async def replay_dead(self, ids: list[str] | None = None) -> int:
        count = await asyncio.to_thread(self._replay_sync, ids)
        if self._lock_fd is not None:  # this process runs the queue: take them in now
            await self._adopt()
        return count

    def _replay_sync(self, ids: list[str] | None) -> int:
        self._ensure_dirs()
        wanted = None if ids is None else set(ids)
        count = 0
        now = time.time()
        for dead in self._list_dead_sync(1 << 62):
            if wanted is not None and dead.id not in wanted:
                continue
            job = dead.job
            job.id = f"{job.id.split('~', 1)[0]}~r{int(now * 1000)}"
            job.attempts, job.last_error, job.replay = 0, "", True
            job.created_at = job.due_at = now
            self._write_now([(self.incoming, job.id, job.to_json())])
            (self.dead_dir / dead.id).unlink(missing_ok=True)
            count += 1
        return count

    async def _adopt(self) -> None:
        self._last_adopt = time.monotonic()
        jobs = await asyncio.to_thread(self._adopt_sync)
        for job in jobs:
            self._insert(job)
        if jobs:
            self._event.set()

    def _adopt_sync(self) -> list[Job]:
        jobs = []
        for path in self.incoming.iterdir():
            try:
                job = Job.from_json(path.read_bytes())
            except (ValueError, TypeError):
                continue  # being written by the CLI (it writes via rename, so rare)
            os.replace(path, self.pending / path.name)
            jobs.append(job)
        return jobs

    # ---- cursors -----------------------------------------------------------

    async def cursors(self, task: TaskKey) -> dict[str, int]:
        return dict(self._cursors.get(task, {}))

    async def cursor_tasks(self) -> list[TaskKey]:
        return [task for task, found in self._cursors.items() if found]

    async def start_cursor(self, key: CursorKey, seq: int) -> None:
        found = self._cursors.setdefault(key[:3], {})
        if key[3] in found:
            return
        found[key[3]] = seq
        body = json.dumps({"key": list(key), "seq": seq})
        await self._run(self._write, [(self.cursor_dir, _cursor_name(key) + ".json", body)])

    async def drop_cursor(self, key: CursorKey) -> None:
        found = self._cursors.get(key[:3])
        if found is None or found.pop(key[3], None) is None:
            return
        if not found:
            del self._cursors[key[:3]]
        await self._run(self._unlink, self.cursor_dir / (_cursor_name(key) + ".seq"))
        await self._run(self._unlink, self.cursor_dir / (_cursor_name(key) + ".json"))
