"""An `EventBus` shared by every process of a cluster, over Redis pub/sub.

Why pub/sub and not Streams: the store already is the ordered, durable log
(events are committed before they are published, numbered per task), so the
bus only has to carry them fast to whoever listens *now*:

- ordering: one channel per task, one publishing connection per process, and
  one writer per task, so a channel carries a task's events in commit order;
  the sequence numbers make any loss visible.
- resume: from the store, by sequence (`events_after`), never from Redis:
  nothing to trim, no per-subscriber cursor kept in Redis.
- back-pressure: publishing never waits for subscribers (a slow one cannot
  slow the agent or Redis: its local queue absorbs it, and Redis's pub/sub
  output buffer limit cuts off a stuck client). Whatever a subscriber may
  have missed — a dropped publish, a reconnect, the moments before its
  SUBSCRIBE was confirmed — it is told to catch up (`RESYNC`), and the engine
  reads the store after the last sequence it yielded.

Streams would add a second copy of every event, trimming policy and a
blocking read per subscribed task, to buy a replay the store gives already.

Local subscribers are served in-process at once (an `InProcessBus` inside),
so a process keeps streaming its own tasks while Redis is down; what it
publishes meanwhile is dropped and, once Redis is back, every topic that lost
a message gets a RESYNC on the wire. The subscriber connection re-subscribes
after a reconnect (back-off 0.1 s doubling to 5 s) and then RESYNCs every
local subscription.

Wire format of a message: `E` + origin (16 bytes) + events (seq: 8 bytes,
length: 4 bytes, serialized StreamResponse), or `R` + origin (catch up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gen import a2a_pb2 as pb
from service.engine.bus import RESYNC, InProcessBus, QueueSubscription
from service.protocol.errors import UnavailableError
from service.store import StoredEvent

log = logging.getLogger(__name__)

_BACKOFF_S = (0.1, 5.0)
_MAX_OUTGOING = 10_000  # messages queued for Redis; beyond, they are dropped (and RESYNCed)
# Between two publishing round trips. Measured on a 2-core host, one process at ~1,300
# SendMessage/s: with every round trip taking what was queued, batches held a few messages
# and redis-py's per-round-trip cost was ~1/3 of a request's CPU; 2 ms: +10% throughput,
# half the Redis CPU, and cross-process events still arrive in ~3 ms (p50).
_PIPELINE_GAP_S = 0.002
_HEAD = struct.Struct(">QI")

# What Redis raises when it cannot be reached (down, restarting, loading its data, a
# network fault), as redis-py and the socket report it.
REDIS_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


@contextlib.contextmanager
def redis_outage(what: str) -> Iterator[None]:
    """A call that needs Redis now: when Redis cannot be reached the caller gets UNAVAILABLE
    with a retry hint (as for the store), never an internal error."""
    try:
        yield
    except REDIS_OUTAGE as exc:
        log.warning("%s: Redis unreachable (%s)", what, type(exc).__name__)
        raise UnavailableError(
            f"The {what} (Redis) is unreachable; retry shortly.", retry_after=1.0
        ) from None


_EVENTS, _RESYNC = b"E", b"R"


def encode_events(origin: bytes, events: list[StoredEvent]) -> bytes:
    parts = [_EVENTS, origin]
    for stored in events:
        payload = stored.event.SerializeToString()
        parts += [_HEAD.pack(stored.seq, len(payload)), payload]
    return b"".join(parts)


def decode_events(data: bytes) -> list[StoredEvent]:
    out, pos = [], 17
    while pos < len(data):
        seq, length = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        out.append(StoredEvent(seq, pb.StreamResponse.FromString(data[pos : pos + length])))
        pos += length
    return out


class RedisSubscription:
    """A local subscription that also keeps the task's channel subscribed in Redis."""

    def __init__(self, bus: RedisBus, inner: QueueSubscription) -> None:
        self._bus = bus
        self._inner = inner
        self.key = inner.key

    def events(self) -> AsyncIterator[StoredEvent]:
        return self._inner.events()

    def next(self) -> Coroutine[Any, Any, StoredEvent | None]:
        return self._inner.next()

    def close(self) -> None:
        self._inner.close()
        self._bus._release(self.key)


class RedisBus:
    """Events of every process's tasks, for subscribers on any process."""

    shared = True  # subscribers may follow tasks another process runs

    def __init__(self, url: str, prefix: str = "a2a") -> None:
        self._url = url
        self._prefix = prefix.encode()
        self._origin = os.urandom(16)  # our own messages come back: skipped by this
        self._local = InProcessBus()
        self._channels: dict[bytes, str] = {}  # subscribed channel -> topic key
        # (channel, message) to publish, or (None, command) to run, in order, on one connection.
        self._outgoing: asyncio.Queue[tuple[bytes | None, Any]] = asyncio.Queue(_MAX_OUTGOING)
        self.on_control: Callable[[bytes], None] | None = None  # messages to this process
        self._dirty: set[str] = set()  # topics that lost a publish: RESYNC when Redis is back
        self._client: aioredis.Redis | None = None
        self._pubsub: aioredis.client.PubSub | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()  # the subscriber loop has channels to (un)subscribe
        self._subscribed: set[bytes] = set()  # channels the current connection subscribed
        self._side_tasks: set[asyncio.Task[None]] = set()
        self.connected = False  # the subscriber connection is up and subscribed

    # ---------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Check that Redis answers, then start the publisher and subscriber loops."""
        self._client = aioredis.Redis.from_url(
            self._url, socket_connect_timeout=3, socket_timeout=5, health_check_interval=10
        )
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            await self._client.aclose()
            self._client = None
            raise RuntimeError(f"Redis unreachable: {type(exc).__name__}: {exc}") from None
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._publish_loop(), name="redis-bus-publish"),
            loop.create_task(self._subscribe_loop(), name="redis-bus-subscribe"),
        ]

    async def close(self) -> None:
        for task in [*self._tasks, *self._side_tasks]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._side_tasks, return_exceptions=True)
        self._tasks = []
        if self._pubsub is not None:
            await self._pubsub.aclose()
            self._pubsub = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def health(self) -> str | None:
        """None when Redis answers (and the subscriber connection is up), else what is wrong."""
        if self._client is None:
            return "Redis bus not started"
        try:
            await asyncio.wait_for(self._client.ping(), 2)
        except (RedisError, OSError, TimeoutError):
            return "Redis unreachable"
        return None if self.connected else "Redis bus reconnecting"

    # ---------------------------------------------------------------- the seam

    def channel(self, key: str) -> bytes:
        return self._prefix + b":task:" + key.encode()

    def subscribe(self, key: str) -> RedisSubscription:
        sub = RedisSubscription(self, self._local.subscribe(key))
        channel = self.channel(key)
        if channel not in self._channels:
            self._channels[channel] = key
            self._wake.set()  # the loop reconciles; its confirmation RESYNCs the topic
            pubsub = self._pubsub
            if self.connected and pubsub is not None and channel not in self._subscribed:
                # Now rather than at the loop's next turn (a cancel waits on this).
                self._subscribed.add(channel)
                task = asyncio.get_running_loop().create_task(self._subscribe_now(pubsub, channel))
                self._side_tasks.add(task)
                task.add_done_callback(self._side_tasks.discard)
        return sub

    async def _subscribe_now(self, pubsub: aioredis.client.PubSub, channel: bytes) -> None:
        try:
            await pubsub.subscribe(channel)
        except (RedisError, OSError):
            self._subscribed.discard(channel)  # the loop reconnects and subscribes again

    def publish(self, key: str, events: list[StoredEvent]) -> None:
        self._local.publish(key, events)
        if events and events[-1].seq:  # only numbered (stored) events leave the process
            self._send(key, encode_events(self._origin, events))

    def close_topic(self, key: str, error: BaseException | None = None) -> None:
        self._local.close_topic(key, error)
        # Remote followers end on the settling event itself; a RESYNC makes sure they look.
        self._send(key, _RESYNC + self._origin)

    def end_all(self, error: BaseException) -> int:
        return self._local.end_all(error)

    # ---------------------------------------------------------------- internals

    @property
    def origin(self) -> bytes:
        """This process's id on the bus (16 random bytes)."""
        return self._origin

    @property
    def client(self) -> aioredis.Redis:
        assert self._client is not None, "the bus is not open"
        return self._client

    def control_channel(self, origin: bytes) -> bytes:
        return self._prefix + b":ctl:" + origin.hex().encode()

    def command(self, run: Callable[[Any], None]) -> bool:
        """Queue `run(pipeline)` behind what is already queued for Redis (so e.g. a task's
        owner is recorded before its first event goes out); False when the queue is full."""
        try:
            self._outgoing.put_nowait((None, run))
            return True
        except asyncio.QueueFull:
            return False

    def _send(self, key: str, message: bytes) -> None:
        try:
            self._outgoing.put_nowait((self.channel(key), message))
        except asyncio.QueueFull:
            self._dirty.add(key)

    def _release(self, key: str) -> None:
        if not self._local.has_topic(key):
            self._channels.pop(self.channel(key), None)
            self._wake.set()

    async def _publish_loop(self) -> None:
        backoff = _BACKOFF_S[0]
        loop = asyncio.get_running_loop()
        last = float("-inf")
        while True:
            channel, message = await self._outgoing.get()
            # At most one round trip per _PIPELINE_GAP_S: under load, what the next
            # millisecond brings shares it (sparse traffic goes out at once).
            wait = last + _PIPELINE_GAP_S - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            last = loop.time()
            batch = [(channel, message)]
            while not self._outgoing.empty() and len(batch) < 256:
                batch.append(self._outgoing.get_nowait())
            assert self._client is not None
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for key in list(self._dirty):
                        pipe.publish(self.channel(key), _RESYNC + self._origin)
                    for ch, msg in batch:
                        if ch is None:
                            msg(pipe)
                        else:
                            pipe.publish(ch, msg)
                    await pipe.execute()
                self._dirty.clear()
                backoff = _BACKOFF_S[0]
            except (RedisError, OSError) as exc:
                # Dropped: subscribers elsewhere catch up from the store once told to.
                for ch, _ in batch:
                    if ch is not None:
                        self._dirty.add(ch[len(self._prefix) + 6 :].decode())
                log.warning("event bus: cannot publish to Redis (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_S[1])

    async def _subscribe_loop(self) -> None:
        backoff = _BACKOFF_S[0]
        while True:
            assert self._client is not None
            pubsub = self._client.pubsub()
            self._pubsub = pubsub
            subscribed = self._subscribed = set()
            try:
                # Our control channel: it also makes the connection now.
                await pubsub.subscribe(self.control_channel(self._origin))
                self.connected = True
                if backoff > _BACKOFF_S[0]:
                    log.info("event bus: Redis reachable again")
                backoff = _BACKOFF_S[0]
                while True:
                    wanted = set(self._channels)
                    if wanted - subscribed:
                        more = wanted - subscribed
                        subscribed |= more
                        await pubsub.subscribe(*more)
                    if subscribed - wanted:
                        fewer = subscribed - wanted
                        subscribed -= fewer
                        await pubsub.unsubscribe(*fewer)
                    self._wake.clear()
                    message = await pubsub.get_message(timeout=0.05)
                    while message is not None:
                        self._on_message(message)
                        message = await pubsub.get_message(timeout=0)
                    if self._wake.is_set():
                        continue
            except (RedisError, OSError) as exc:
                self.connected = False
                log.warning("event bus: Redis connection lost (%s); reconnecting", exc)
                await pubsub.aclose()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_S[1])
                for key in set(self._channels.values()):  # whatever came meanwhile is missed
                    self._local.publish(key, [RESYNC])

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        if channel == self.control_channel(self._origin):
            if kind == "message" and self.on_control is not None:
                try:
                    self.on_control(message["data"])
                except Exception:
                    log.exception("event bus: a control message failed")
            return
        key = self._channels.get(channel) if isinstance(channel, bytes) else None
        if key is None:
            return
        if kind == "subscribe":  # from now on nothing is missed; before it, maybe
            self._local.publish(key, [RESYNC])
            return
        if kind != "message":
            return
        data: bytes = message["data"]
        if data[1:17] == self._origin:
            return  # our own: local subscribers had it at once
        if data[:1] == _EVENTS:
            self._local.publish(key, decode_events(data))
        else:
            self._local.publish(key, [RESYNC])
