"""Several processes as one service: who is alive, who runs which task, and the messages
one process sends another (cancel a task it runs), over the Redis bus.

- Membership: every process keeps `PREFIX:alive:ID` alive (a key that expires after
  `lease_seconds`, refreshed three times per lease). A process that stops refreshing
  (killed, partitioned, stuck) is dead once it expires.
- Ownership: while an agent coroutine of a task runs (working, or paused in
  `ctx.ask()`), `PREFIX:owner:KEY` names its process. A new task records it at its
  first commit (queued before that commit's events) if its agent still runs then (a
  turn over before that was never seen working and needs none); a follow-up takes an
  idle task with an atomic compare-and-set, so two processes cannot both start a
  turn. Each heartbeat re-asserts the owner keys of the process's live, recorded
  runs, so a Redis restart (which forgets every key) is repaired within a third of a
  lease.
- Writes are fenced by the store, not by the lease: two writers of one task cannot
  both commit an event sequence (service.store.base.WriteConflict), so even a
  process that believes itself alive after its lease expired cannot interleave.
- Recovery: every quarter lease, each process looks at the store's unsettled tasks;
  one whose owner is dead (or unrecorded for longer than a lease) is taken over with
  compare-and-set by exactly one survivor and moved to FAILED (the restart message),
  so a killed process's tasks settle within about 1.25 x `lease_seconds`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from redis.exceptions import RedisError

from service.engine.redis_bus import RedisBus

log = logging.getLogger(__name__)

# KEYS[1] owner key; ARGV[1] me, ARGV[2] alive-key prefix. Take the key when it is free,
# mine, or names a process whose alive key is gone. Returns the owner after the call.
_TAKE = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] or redis.call('EXISTS', ARGV[2] .. cur) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return cur
"""
# KEYS[1] owner key; ARGV[1] me: delete it only while it is mine.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


Handler = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]
STOP_WAIT_SECONDS = 2.0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# KEYS[1] owner key; ARGV[1] alive-key prefix: the owner while its alive key exists, else nil.
_LIVE_OWNER = """
local cur = redis.call('GET', KEYS[1])
if cur and redis.call('EXISTS', ARGV[1] .. cur) == 1 then return cur end
return false
"""


class Cluster:
    def __init__(self, bus: RedisBus, lease_seconds: float, prefix: str) -> None:
        self.bus = bus
        self.lease = lease_seconds
        self.me = bus.origin.hex()
        self._prefix = prefix
        self._tasks: list[asyncio.Task[None]] = []
        self._live_keys: Callable[[], list[str]] = list
        self._handlers: dict[str, Handler] = {}
        self._running: set[asyncio.Task[None]] = set()
        self.connected_since: float | None = None  # loop time of the last good heartbeat run
        self._leaving = False

    def owner_key(self, key: str) -> str:
        return f"{self._prefix}:owner:{key}"

    def alive_key(self, member: str) -> str:
        return f"{self._prefix}:alive:{member}"

    # ---------------------------------------------------------------- lifecycle

    async def start(
        self,
        live_keys: Callable[[], list[str]],
        sweep: Callable[[], Awaitable[object]],
        handlers: dict[str, Handler],
    ) -> None:
        """Join: the first heartbeat now, then heartbeats and sweeps in the background."""
        self._live_keys = live_keys
        self._handlers = handlers
        self.bus.on_control = self._on_control
        await self._heartbeat()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(
                self._every(self.lease / 3, self._heartbeat), name="cluster-heartbeat"
            ),
            loop.create_task(self._every(max(0.25, self.lease / 4), sweep), name="cluster-sweep"),
        ]

    async def stop(self) -> None:
        """Leave: stop the loops and give up the alive key (survivors need not wait a lease)."""
        self._leaving = True
        tasks = [*self._tasks, *self._running]
        for task in tasks:
            task.cancel()
        if tasks:
            # A cancellation that lands as a Redis call times out can be taken for the
            # timeout (redis-py's socket timeout): the loops also end on `_leaving`, and
            # none is waited for past STOP_WAIT_SECONDS.
            await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
        self._tasks = []
        self.bus.on_control = None
        try:
            await self.bus.client.delete(self.alive_key(self.me))
        except (RedisError, OSError):
            pass

    async def _every(self, seconds: float, step: Callable[[], Awaitable[object]]) -> None:
        while not self._leaving:
            await asyncio.sleep(seconds)
            try:
                await step()
            except (RedisError, OSError) as exc:
                self.connected_since = None
                log.warning("cluster: Redis unreachable (%s)", exc)
            except Exception:
                log.exception("cluster: %s failed", getattr(step, "__name__", "a step"))

    async def _heartbeat(self) -> None:
        async with self.bus.client.pipeline(transaction=False) as pipe:
            pipe.set(self.alive_key(self.me), b"1", px=int(self.lease * 1000))
            for key in self._live_keys():
                pipe.set(self.owner_key(key), self.me)
            await pipe.execute()
        if self.connected_since is None:
            self.connected_since = asyncio.get_running_loop().time()

    def settled_in(self) -> bool:
        """Whether our view of who is alive can be trusted: Redis has answered our
        heartbeats for a whole lease (after a Redis restart every process re-asserts its
        keys within a third of one)."""
        since = self.connected_since
        return since is not None and asyncio.get_running_loop().time() - since >= self.lease

    # ---------------------------------------------------------------- ownership

    def claim_new(self, key: str) -> None:
        """A new task's turn starts here: record it, queued before its first event."""
        self.bus.command(lambda pipe: pipe.set(self.owner_key(key), self.me))

    def release(self, key: str) -> None:
        """The task's agent coroutine ended here: anyone may take its next turn."""
        owner_key = self.owner_key(key)
        self.bus.command(lambda pipe: pipe.eval(_RELEASE, 1, owner_key, self.me))

    async def take(self, key: str) -> str | None:
        """Become the task's owner unless a live process is; returns that other process's
        id, or None when the task is ours now."""
        owner = await self.bus.client.eval(
            _TAKE, 1, self.owner_key(key), self.me, self.alive_key("")
        )
        owner = owner.decode() if isinstance(owner, bytes) else str(owner)
        return None if owner == self.me else owner

    async def live_owner(self, key: str) -> str | None:
        """The live process (not us) that runs the task, or None (one round trip)."""
        owner = await self.bus.client.eval(_LIVE_OWNER, 1, self.owner_key(key), self.alive_key(""))
        if owner is None:
            return None
        member = _text(owner)
        return None if member == self.me else member

    async def recorded_owner(self, key: str) -> tuple[str | None, bool]:
        """(owner id or None, whether that owner is alive)."""
        owner = await self.bus.client.get(self.owner_key(key))
        if owner is None:
            return None, False
        member = _text(owner)
        return member, bool(await self.bus.client.exists(self.alive_key(member)))

    # ---------------------------------------------------------------- messages

    async def tell(self, member: str, kind: str, body: dict[str, Any]) -> None:
        """Send another process a control message (`kind` names its handler)."""
        data = json.dumps({"kind": kind, **body}).encode()
        await self.bus.client.publish(self.bus.control_channel(bytes.fromhex(member)), data)

    def _on_control(self, data: bytes) -> None:
        try:
            body = json.loads(data)
            handler = self._handlers[body.pop("kind")]
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("cluster: ignored a malformed control message")
            return
        task = asyncio.get_running_loop().create_task(handler(body))
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster: a control message failed: %s", task.exception())
