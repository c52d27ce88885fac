"""`redis-streams` push queue: jobs in a Redis Stream read by a consumer group, so
several replicas share the work.

Keys (all names configurable; defaults derive from one prefix, `a2a:push`):

    STREAM                 jobs ready to deliver; XREADGROUP by the group's consumers
    PREFIX:head            hash lane -> id of the lane's job that is in STREAM, in flight
                           or waiting for a retry (at most one per lane: order per lane)
    PREFIX:lane:LANE       sorted set of the lane's later jobs (score = sequence)
    RETRY                  sorted set of jobs waiting for their retry time (score = due ms)
    DEAD                   stream of dead jobs (job, error, failed_at)
    PREFIX:cursor:TASK     hash config id -> last enqueued sequence (dispatcher cursors)
    PREFIX:cursor-tasks    hash task hash -> [tenant, owner, task id]

A lease is a stream entry pending for this consumer. A consumer that dies keeps
its entries pending: `XAUTOCLAIM` hands entries idle past the lease timeout to a
live consumer, and a restarted consumer with the same name takes its own
pending entries back at once. Every state change is one Lua script, so the lane
rules hold with any number of consumers. Delivery is at least once: a job can be
delivered again after a crash or an expired lease (receivers use the
idempotency key).

Lane keys are computed inside the scripts, so this targets a single Redis (or
a cluster with all keys in one hash slot: use a prefix like `{a2a:push}`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from redis.typing import StreamRangeResponse, XReadGroupResponse

from service.engine.redis_bus import redis_outage
from service.push.queue_base import CursorKey, CursorMove, DeadJob, Job, Lease, TaskKey, task_hash

log = logging.getLogger("service.push")

POLL_SECONDS = 0.2
_ENTRY_ID = re.compile(
    r"[0-9]{1,20}-[0-9]{1,20}"
)  # idle poll: other replicas' jobs and due retries

# Admit a job to its lane: into the stream when the lane has no head, else park it.
_ADMIT = """
local function admit(head, lanekey, stream, lane, seq, job, id)
  if redis.call('HEXISTS', head, lane) == 1 then
    redis.call('ZADD', lanekey, seq, job)
  else
    redis.call('HSET', head, lane, id)
    redis.call('XADD', stream, '*', 'job', job)
  end
end
"""

ENQUEUE = (
    _ADMIT
    + """
-- KEYS: cursor hash, cursor index, head, lane zset, stream
-- ARGV: config id ('' = no cursor), expected, new, task hash, task json, lane, (seq, job, id)...
if ARGV[1] ~= '' then
  if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
end
for i = 7, #ARGV, 3 do
  admit(KEYS[3], KEYS[4], KEYS[5], ARGV[6], ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return 1
"""
)

FINISH = """
-- ack or dead-letter. KEYS: stream, head, lane zset, dead stream
-- ARGV: group, entry id, lane, job id, dead job json ('' = ack), error, failed_at
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
if ARGV[5] ~= '' then
  redis.call('XADD', KEYS[4], '*', 'job', ARGV[5], 'error', ARGV[6], 'failed_at', ARGV[7])
end
if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[4] then
  local nxt = redis.call('ZPOPMIN', KEYS[3])
  if #nxt > 0 then
    redis.call('HSET', KEYS[2], ARGV[3], cjson.decode(nxt[1])['id'])
    redis.call('XADD', KEYS[1], '*', 'job', nxt[1])
  else
    redis.call('HDEL', KEYS[2], ARGV[3])
  end
end
return 1
"""

RETRY = """
-- KEYS: stream, retry zset. ARGV: group, entry id, due ms, job json
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return 1
"""

MOVE_DUE = """
-- KEYS: retry zset, stream. ARGV: now ms, limit
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, job in ipairs(items) do
  redis.call('ZREM', KEYS[1], job)
  redis.call('XADD', KEYS[2], '*', 'job', job)
end
return #items
"""

REPLAY = (
    _ADMIT
    + """
-- KEYS: dead stream, head, lane zset, stream. ARGV: dead id, lane, seq, job, id
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
admit(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
"""
)

START_CURSOR = """
-- KEYS: cursor hash, cursor index. ARGV: config id, seq, task hash, task json
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 1
"""

DROP_CURSOR = """
-- KEYS: cursor hash, cursor index. ARGV: config id, task hash
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('HDEL', KEYS[2], ARGV[2]) end
return 1
"""


# Replies as this queue's client gets them: it is made with decode_responses=True and speaks
# RESP2 (redis-py's default), so ids, names and values are str, never bytes, and a stream
# read is [[stream, entries]]. redis-py types its replies for every protocol and decoding;
# these helpers narrow them to that one form.
_Entry = tuple[str, dict[str, str] | None]  # entry id, fields (None: deleted while pending)


def _read_entries(reply: XReadGroupResponse) -> list[_Entry]:
    """The entries of the one stream an XREADGROUP named ([] when it read nothing)."""
    if not reply:
        return []
    assert isinstance(reply, list)  # RESP2: [[stream, entries]]
    entries: list[_Entry] = reply[0][1]
    return entries


def _range_entries(reply: StreamRangeResponse | None) -> list[tuple[str, dict[str, str]]]:
    """XRANGE entries of the dead stream (each one written with its fields)."""
    assert reply is not None  # RESP2 answers a list, empty when nothing is in the range
    return cast(list[tuple[str, dict[str, str]]], reply)


def _str_hash(reply: dict[bytes | str, bytes | str]) -> dict[str, str]:
    """An HGETALL reply (decoded: str keys and values)."""
    return cast(dict[str, str], reply)


def safe_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}" if sep and "@" in rest else url


class RedisQueue:
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "a2a:push",
        stream: str = "",
        retry_key: str = "",
        dead_stream: str = "",
        group: str = "a2a-push",
        consumer: str = "",
        lease_seconds: float = 300.0,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.stream = stream or f"{prefix}:stream"
        self.retry_key = retry_key or f"{prefix}:retry"
        self.dead_stream = dead_stream or f"{prefix}:dead"
        self.head = f"{prefix}:head"
        self.cursor_index = f"{prefix}:cursor-tasks"
        self.group = group
        self.consumer = consumer or socket.gethostname()
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self.redis: aioredis.Redis | None = None
        self._active: set[str] = set()  # entry ids this process is delivering
        self._own_pending: str | None = "0"  # read our own pending entries first (after a restart)
        self._event = asyncio.Event()

    async def backlog(self) -> int:
        """Jobs waiting (due, in flight or waiting for a retry: one per lane's head, and the
        lanes' later jobs), for the queue-depth gauge. One round trip per call."""
        with redis_outage("push queue"):
            lanes = await self.r.hkeys(self.head)
            if not lanes:
                return 0
            pipe = self.r.pipeline(transaction=False)
            for lane in lanes:
                pipe.zcard(self._lane_key(str(lane)))
            later = await pipe.execute()
        return len(lanes) + sum(int(n) for n in later)

    def _lane_key(self, lane: str) -> str:
        return f"{self.prefix}:lane:{lane}"

    def _cursor_key(self, task: TaskKey) -> str:
        return f"{self.prefix}:cursor:{task_hash(task)}"

    @property
    def r(self) -> aioredis.Redis:
        if self.redis is None:
            self.redis = aioredis.Redis.from_url(self.url, decode_responses=True)
            self._scripts = {
                name: self.redis.register_script(src)
                for name, src in (
                    ("enqueue", ENQUEUE),
                    ("finish", FINISH),
                    ("retry", RETRY),
                    ("move_due", MOVE_DUE),
                    ("replay", REPLAY),
                    ("start_cursor", START_CURSOR),
                    ("drop_cursor", DROP_CURSOR),
                )
            }
        return self.redis

    async def _run(self, name: str, keys: list[str], args: list[str | int]) -> int:
        self.r  # noqa: B018 - connect lazily
        with redis_outage("push queue"):
            return int(await self._scripts[name](keys=keys, args=args))

    # ---- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        try:
            await self.r.ping()
        except Exception as exc:
            raise ConnectionError(
                f"push queue: cannot reach Redis at {safe_url(self.url)} ({exc})"
            ) from None
        try:
            await self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()
            self.redis = None

    # ---- the queue ---------------------------------------------------------

    async def enqueue(self, jobs: list[Job], cursor: CursorMove | None = None) -> bool:
        if not jobs and cursor is None:
            return True
        jobs = sorted(jobs, key=lambda j: j.seq)
        lane = jobs[0].lane if jobs else ""
        if cursor is not None:
            task = cursor.key[:3]
            cursor_args = [
                cursor.key[3],
                str(cursor.expected),
                str(cursor.new),
                task_hash(task),
                json.dumps(task),
            ]
            cursor_keys = [self._cursor_key(task), self.cursor_index]
        else:
            cursor_args = ["", "", "", "", ""]
            cursor_keys = [f"{self.prefix}:none", self.cursor_index]
        args: list[str | int] = [*cursor_args, lane]
        for job in jobs:
            args += [job.seq, job.to_json(), job.id]
        keys = [*cursor_keys, self.head, self._lane_key(lane), self.stream]
        done = await self._run("enqueue", keys, args)
        if done:
            self._event.set()
        return bool(done)

    async def lease(self, limit: int) -> list[Lease]:
        if limit <= 0:
            return []
        await self._run(
            "move_due", [self.retry_key, self.stream], [int(time.time() * 1000), max(limit, 100)]
        )
        entries: list[_Entry] = []
        if self._own_pending is not None:
            got = await self.r.xreadgroup(
                self.group, self.consumer, {self.stream: self._own_pending}, count=limit
            )
            mine = _read_entries(got)
            entries += [(eid, fields) for eid, fields in mine if eid not in self._active]
            self._own_pending = mine[-1][0] if mine else None
        if len(entries) < limit:
            claimed = await self.r.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                self.lease_ms,
                "0-0",
                count=limit - len(entries),
            )
            entries += [(eid, fields) for eid, fields in claimed[1] if eid not in self._active]
        if len(entries) < limit:
            got = await self.r.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=limit - len(entries)
            )
            entries += [(eid, fields) for eid, fields in _read_entries(got)]
        out = []
        for eid, fields in entries:
            if not fields or "job" not in fields:  # deleted while pending
                await self.r.xack(self.stream, self.group, eid)
                continue
            self._active.add(eid)
            out.append(Lease(Job.from_json(fields["job"]), eid))
        return out

    async def _finish(self, lease: Lease, dead: str = "", error: str = "") -> None:
        job = lease.job
        try:
            await self._run(
                "finish",
                [self.stream, self.head, self._lane_key(job.lane), self.dead_stream],
                [self.group, lease.token, job.lane, job.id, dead, error, repr(time.time())],
            )
        finally:
            # Also when Redis did not answer: the entry stays pending and comes back (to this
            # consumer or another) once its lease expires; kept here, this consumer's claims
            # would skip it and keep it from ever going idle long enough for another.
            self._active.discard(lease.token)
        self._event.set()

    async def ack(self, lease: Lease) -> None:
        await self._finish(lease)

    async def dead(self, lease: Lease, job: Job, error: str) -> None:
        await self._finish(lease, dead=job.to_json(), error=error)

    async def retry(self, lease: Lease, job: Job) -> None:
        try:
            await self._run(
                "retry",
                [self.stream, self.retry_key],
                [self.group, lease.token, int(job.due_at * 1000), job.to_json()],
            )
        finally:
            self._active.discard(lease.token)  # as in _finish

    async def release(self, lease: Lease, due_at: float) -> None:
        lease.job.due_at = due_at
        await self.retry(lease, lease.job)

    async def wait(self, max_seconds: float) -> None:
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), min(max_seconds, POLL_SECONDS))
            except TimeoutError:
                pass
        self._event.clear()

    # ---- dead letters ------------------------------------------------------

    async def list_dead(self, limit: int = 100) -> list[DeadJob]:
        entries = _range_entries(await self.r.xrange(self.dead_stream, "-", "+", count=limit))
        return [_dead(eid, fields) for eid, fields in entries]

    async def replay_dead(self, ids: list[str] | None = None) -> int:
        if ids is None:
            targets, start = [], "-"
            while True:
                page = _range_entries(await self.r.xrange(self.dead_stream, start, "+", count=500))
                targets += [_dead(eid, fields) for eid, fields in page]
                if len(page) < 500:
                    break
                start = "(" + page[-1][0]
        else:
            targets = []
            for eid in ids:
                if _ENTRY_ID.fullmatch(eid):  # anything else names no entry
                    found = _range_entries(await self.r.xrange(self.dead_stream, eid, eid))
                    targets += [_dead(e, f) for e, f in found]
        count = 0
        now = time.time()
        for dead in targets:
            job = dead.job
            job.id = f"{job.id.split('~', 1)[0]}~r{int(now * 1000)}"
            job.attempts, job.last_error, job.replay = 0, "", True
            job.created_at = job.due_at = now
            count += await self._run(
                "replay",
                [self.dead_stream, self.head, self._lane_key(job.lane), self.stream],
                [dead.id, job.lane, job.seq, job.to_json(), job.id],
            )
        self._event.set()
        return count

    # ---- cursors -----------------------------------------------------------

    async def cursors(self, task: TaskKey) -> dict[str, int]:
        with redis_outage("push queue"):
            found = _str_hash(await self.r.hgetall(self._cursor_key(task)))
        return {k: int(v) for k, v in found.items()}

    async def cursor_tasks(self) -> list[TaskKey]:
        with redis_outage("push queue"):
            found = await self.r.hgetall(self.cursor_index)
        return [tuple(json.loads(v)) for v in found.values()]

    async def start_cursor(self, key: CursorKey, seq: int) -> None:
        task = key[:3]
        await self._run(
            "start_cursor",
            [self._cursor_key(task), self.cursor_index],
            [key[3], seq, task_hash(task), json.dumps(task)],
        )

    async def drop_cursor(self, key: CursorKey) -> None:
        task = key[:3]
        await self._run(
            "drop_cursor", [self._cursor_key(task), self.cursor_index], [key[3], task_hash(task)]
        )


def _dead(eid: str, fields: dict[str, str]) -> DeadJob:
    return DeadJob(
        eid,
        Job.from_json(fields["job"]),
        fields.get("error", ""),
        float(fields.get("failed_at", 0)),
    )
