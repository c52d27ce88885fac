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
in inflight/ goes back to pending/: the process that leased it is gone. An
in-memory index (lanes sorted by sequence, a heap of ready lanes) answers leases;
the files are the truth and rebuild it. One process owns the directory (flock).

Cursor moves are written without fsync: jobs are durable before their cursor
moves, so a cursor lost to power failure only makes the dispatcher enqueue the
same jobs again (same file names; at least once, never lost).
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
import time
import uuid

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
    return hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:40] + ".json"


def _sort_key(job: Job) -> tuple[int, str]:
    return job.seq, job.id


class FileQueue:
    def __init__(self, root: str | os.PathLike, lease_seconds: float = 300.0) -> None:
        self.root = pathlib.Path(root)
        self.lease_seconds = lease_seconds
        self.pending, self.inflight, self.dead_dir, self.incoming, self.cursor_dir, self.tmp = (
            self.root / d for d in DIRS
        )
        self._lanes: dict[str, list[Job]] = {}  # pending jobs per lane, head first
        self._busy: dict[str, str] = {}  # lane -> token of its lease
        self._leases: dict[str, tuple[Lease, float]] = {}  # token -> (lease, deadline)
        self._ready: list[tuple[float, int, str]] = []  # (head due_at, tie, lane); stale entries skipped
        self._tie = itertools.count()
        self._cursors: dict[TaskKey, dict[str, int]] = {}
        self._event = asyncio.Event()
        self._lock_fd: int | None = None
        self._last_adopt = 0.0

    # ---- files -------------------------------------------------------------

    def _write(self, items: list[tuple[pathlib.Path, str, str]], durable: bool = True) -> None:
        """Atomically (re)place files: tmp write, fsync, rename, fsync the directories."""
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
            for directory in {d for d, _, _ in items}:
                _fsync_dir(directory)

    def _ensure_dirs(self) -> None:
        for d in (self.pending, self.inflight, self.dead_dir, self.incoming, self.cursor_dir, self.tmp):
            d.mkdir(parents=True, exist_ok=True)

    # ---- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        jobs, cursors = await asyncio.to_thread(self._open_sync)
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
                log.error("unreadable push job %s (%s); moved aside to %s", path.name, exc, self.root / "corrupt")
                (self.root / "corrupt").mkdir(exist_ok=True)
                os.replace(path, self.root / "corrupt" / path.name)
        cursors: dict[TaskKey, dict[str, int]] = {}
        for path in self.cursor_dir.iterdir():
            try:
                data = json.loads(path.read_bytes())
                tenant, owner, task_id, config_id = data["key"]
                cursors.setdefault((tenant, owner, task_id), {})[config_id] = int(data["seq"])
            except (ValueError, KeyError, TypeError):
                log.error("unreadable push cursor %s; removed (its task's events are not re-sent)", path)
                path.unlink()
        return jobs, cursors

    async def close(self) -> None:
        for lease, _ in list(self._leases.values()):  # hand back what is being delivered
            self._requeue_file(lease.job)
        self._leases.clear()
        self._busy.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def abandon(self) -> None:
        """Drop the directory lock and leave every file as it is, as a killed process would (tests)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- index -------------------------------------------------------------

    def _insert(self, job: Job) -> None:
        lane = job.lane
        jobs = self._lanes.setdefault(lane, [])
        for i, other in enumerate(jobs):
            if other.id == job.id:
                del jobs[i]
                break
        bisect.insort(jobs, job, key=_sort_key)
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
            await asyncio.to_thread(self._enqueue_sync, jobs, cursor)
        except BaseException:
            if cursor is not None and self._cursors.get(cursor.key[:3], {}).get(cursor.key[3]) == cursor.new:
                self._cursors[cursor.key[:3]][cursor.key[3]] = cursor.expected
            raise
        for job in jobs:
            self._insert(job)
        self._event.set()
        return True

    def _enqueue_sync(self, jobs: list[Job], cursor: CursorMove | None) -> None:
        if jobs:
            self._write([(self.pending, job.id, job.to_json()) for job in jobs])
        if cursor is not None:
            body = json.dumps({"key": list(cursor.key), "seq": cursor.new})
            self._write([(self.cursor_dir, _cursor_name(cursor.key), body)], durable=False)

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
            if not jobs:
                del self._lanes[lane]
            try:
                os.replace(self.pending / job.id, self.inflight / job.id)
            except FileNotFoundError:
                log.error("push job %s vanished from %s", job.id, self.pending)
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
        (self.inflight / lease.job.id).unlink(missing_ok=True)
        self._finish(lease)

    async def retry(self, lease: Lease, job: Job) -> None:
        if not self._current(lease):
            return
        await asyncio.to_thread(self._write, [(self.pending, job.id, job.to_json())])
        (self.inflight / job.id).unlink(missing_ok=True)
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
        await asyncio.to_thread(self._write, [(self.dead_dir, job.id, json.dumps(entry))])
        (self.inflight / job.id).unlink(missing_ok=True)
        self._finish(lease)

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
                found.append(DeadJob(path.name, Job(**data["job"]), data["error"], data["failed_at"]))
            except (ValueError, KeyError, TypeError, FileNotFoundError):
                log.error("unreadable dead push job %s", path)
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
            self._write([(self.incoming, job.id, job.to_json())])
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
        await asyncio.to_thread(self._write, [(self.cursor_dir, _cursor_name(key), body)])

    async def drop_cursor(self, key: CursorKey) -> None:
        found = self._cursors.get(key[:3])
        if found is None or found.pop(key[3], None) is None:
            return
        if not found:
            del self._cursors[key[:3]]
        await asyncio.to_thread((self.cursor_dir / _cursor_name(key)).unlink, True)
