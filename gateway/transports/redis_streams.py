"""JSON-RPC over Redis Streams (`redis_streams_url`): requests are entries of one stream that
every replica reads through one consumer group, answers are entries of the requester's own
reply stream (docs/transports.md).

A request entry has the fields `correlation_id` (echoed), `reply_stream` (where the answer
goes) and `payload` (one JSON-RPC request document, as on the other transports of
session.py). Each answer frame is one entry on the reply stream: `correlation_id`, `payload`
(the frame), `final` ("0" for a stream event, "1" for the last frame) and `attempt` (1, or
more when the request was taken over from a replica that died).

Answered once: a frame is written by a Lua script that first checks the request is still
pending to this replica; the final frame's script also acknowledges (XACK) and deletes
(XDEL) the request, in the same step. So the request stream holds only what is unanswered,
and a request taken over by another replica (XAUTOCLAIM after `redis_streams_reclaim_seconds`
idle) gets its final answer from one replica only. A live replica keeps the requests it
answers fresh (XCLAIM JUSTID to itself) so long streams are not taken over.

The blocking read (XREADGROUP BLOCK) has a connection of its own and a short block, and is
never cancelled while the service runs: a cancelled blocking read can leave a redis-py
connection unusable, and stopping only needs the loop to see the flag within a second.

The drain: reading stops; requests in flight get the drain's time (streams end with the
resumable UNAVAILABLE, which is their final answer); what is still unanswered at close stays
pending, un-acknowledged, for another replica to take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from gateway.transports.session import Frame, FramedJsonRpc, Link, error_frame
from service.protocol.errors import A2AError, InternalError, InvalidRequestError

log = logging.getLogger("service")

TRANSPORT = "redis-streams"  # the access log's binding and the card's binding name
BLOCK_MS = 1000  # one blocking read: how long a stop may wait to be seen
MAX_NAME_BYTES = 1024  # reply_stream and correlation_id
MAX_ATTEMPTS = 5  # a request whose replicas kept dying is answered with an error, not again
BACKOFF_SECONDS = (0.1, 5.0)
FIELDS_MESSAGE = (
    "A request entry needs the fields correlation_id, reply_stream and payload (one JSON-RPC "
    "request document)."
)

# KEYS: reply stream, request stream. ARGV: group, entry id, consumer, correlation id,
# payload, final ("0"/"1"), attempt, reply maxlen, reply ttl. 1: written; 0: not ours.
ANSWER_SCRIPT = """
local mine = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1, ARGV[3])
if #mine == 0 then return 0 end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[8], '*', 'correlation_id', ARGV[4],
  'payload', ARGV[5], 'final', ARGV[6], 'attempt', ARGV[7])
redis.call('EXPIRE', KEYS[1], ARGV[9])
if ARGV[6] == '1' then
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[2], ARGV[2])
end
return 1
"""

# KEYS: request stream. ARGV: group, consumer, entry ids. Each still ours is made fresh
# (its idle time reset); the ids no longer ours are returned.
KEEP_SCRIPT = """
local lost = {}
for i = 3, #ARGV do
  local mine = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #mine == 0 then
    table.insert(lost, ARGV[i])
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  end
end
return lost
"""

# What Redis raises when it cannot be reached, as redis-py and the socket report it.
OUTAGE = (RedisError, OSError, TimeoutError)


def consumer_name() -> str:
    """This replica's consumer in the group: unique per process and start."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


@dataclass(frozen=True, slots=True)
class _Entry:
    id: bytes
    correlation_id: bytes
    reply_stream: bytes
    attempt: int


class RedisStreamsTransport:
    """One replica's consumer of the request stream and writer of the answers."""

    def __init__(
        self,
        rpc: FramedJsonRpc,
        url: str,
        *,
        stream: str,
        group: str,
        max_in_flight: int,
        reclaim_seconds: float,
        reply_maxlen: int,
        reply_ttl_seconds: int,
    ) -> None:
        self.rpc = rpc
        self.url = url
        self.stream = stream
        self.group = group
        self.consumer = consumer_name()
        self.max_in_flight = max_in_flight
        self.reclaim_seconds = reclaim_seconds
        self.reply_maxlen = reply_maxlen
        self.reply_ttl_seconds = reply_ttl_seconds
        self.calls: dict[bytes, asyncio.Task[None]] = {}  # entry id -> its answer
        self.side: set[asyncio.Task[Any]] = set()  # removals of entries that cannot be answered
        self.accepting = True
        self._room = asyncio.Event()
        self._redis: aioredis.Redis | None = None
        self._reading: aioredis.Redis | None = None  # the blocking read's own connection
        self._reader: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._answer: Any = None
        self._keep: Any = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Connect, make the group (and the stream) if missing, start reading. Raises
        RuntimeError, without credentials, when Redis cannot be used."""
        self._redis = aioredis.Redis.from_url(
            self.url, socket_connect_timeout=3, socket_timeout=10, health_check_interval=10
        )
        self._reading = aioredis.Redis.from_url(
            self.url,
            single_connection_client=True,
            socket_connect_timeout=3,
            socket_timeout=BLOCK_MS / 1000 + 10,
        )
        try:
            await self._redis.ping()
            await self._ensure_group()
        except OUTAGE as exc:
            await self._disconnect()
            raise RuntimeError(f"Redis cannot be used ({type(exc).__name__}: {exc})") from None
        self._answer = self._redis.register_script(ANSWER_SCRIPT)
        self._keep = self._redis.register_script(KEEP_SCRIPT)
        self._reader = asyncio.create_task(self._read_loop(), name="redis-streams-read")
        self._keeper = asyncio.create_task(self._keep_loop(), name="redis-streams-keep")

    async def _ensure_group(self) -> None:
        """The consumer group, reading from the stream's start: requests sent before any
        replica ran are answered too."""
        assert self._redis is not None
        try:
            await self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def in_flight(self) -> int:
        return len(self.calls)

    def stop_accepting(self) -> None:
        """Read no more requests (the loop sees it within one blocking read)."""
        self.accepting = False
        self._room.set()

    async def finish(self, seconds: float) -> None:
        """Wait (at most `seconds`) for the requests read so far to be answered."""
        waiting = list(self.calls.values())
        if self._reader is not None:
            waiting.append(self._reader)
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*waiting, return_exceptions=True), seconds + BLOCK_MS / 1000
                )

    async def close(self) -> None:
        """Stop answering: what is unanswered stays pending for another replica. The
        consumer is removed from the group when it holds nothing."""
        self.stop_accepting()
        running = [t for t in (self._reader, self._keeper, *self.calls.values()) if t]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, *self.side, return_exceptions=True)
        if self._redis is not None:
            with contextlib.suppress(*OUTAGE):
                mine = await self._redis.xpending_range(
                    self.stream, self.group, "-", "+", 1, consumername=self.consumer
                )
                if not mine:
                    await self._redis.xgroup_delconsumer(self.stream, self.group, self.consumer)
        await self._disconnect()

    async def _disconnect(self) -> None:
        for client in (self._reading, self._redis):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()
        self._reading = self._redis = None

    # ---------------------------------------------------------------- reading

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        pause = BACKOFF_SECONDS[0]
        next_reclaim = 0.0
        while self.accepting:
            try:
                if len(self.calls) >= self.max_in_flight:
                    self._room.clear()
                    await self._room.wait()
                    continue
                if loop.time() >= next_reclaim:
                    next_reclaim = loop.time() + self.reclaim_seconds / 2
                    await self._reclaim()
                room = self.max_in_flight - len(self.calls)
                if room <= 0 or not self.accepting:
                    continue
                assert self._reading is not None
                read: Any = await self._reading.xreadgroup(
                    self.group, self.consumer, {self.stream: ">"}, count=room, block=BLOCK_MS
                )
                for _stream, entries in read or []:
                    for entry_id, fields in entries:
                        if self.accepting:
                            self._received(entry_id, fields, 1)
                        # read as the drain began: left pending, for another replica
                pause = BACKOFF_SECONDS[0]
            except ResponseError as exc:
                if any(w in str(exc) for w in ("NOGROUP", "UNBLOCKED")):  # stream deleted
                    log.warning("redis_streams: the group was gone; making it again")
                    with contextlib.suppress(*OUTAGE):
                        await self._ensure_group()
                    continue
                log.warning("redis_streams: reading failed (%s)", exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, BACKOFF_SECONDS[1])
            except OUTAGE as exc:
                log.warning("redis_streams: Redis unreachable (%s); retrying", type(exc).__name__)
                await asyncio.sleep(pause)
                pause = min(pause * 2, BACKOFF_SECONDS[1])

    async def _reclaim(self) -> None:
        """Take over the requests of replicas that stopped answering them."""
        assert self._redis is not None
        start: Any = "0-0"
        while self.accepting:
            room = self.max_in_flight - len(self.calls)
            if room <= 0:
                return
            found = await self._redis.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=int(self.reclaim_seconds * 1000),
                start_id=start,
                count=room,
            )
            start, entries = found[0], found[1]
            for entry_id, fields in entries:
                if entry_id in self.calls or fields is None:
                    continue
                attempt = await self._attempt(entry_id)
                log.info(
                    "redis_streams: took over request %s (attempt %d) from a replica that "
                    "stopped answering it",
                    entry_id.decode(),
                    attempt,
                )
                self._received(entry_id, fields, attempt)
            if start in (b"0-0", "0-0"):
                return

    async def _attempt(self, entry_id: bytes) -> int:
        """How many times the request was delivered (this one included)."""
        assert self._redis is not None
        pending = await self._redis.xpending_range(self.stream, self.group, entry_id, entry_id, 1)
        return int(pending[0]["times_delivered"]) if pending else 2

    def _received(self, entry_id: bytes, fields: dict[bytes, bytes], attempt: int) -> None:
        reply = fields.get(b"reply_stream")
        if not reply or len(reply) > MAX_NAME_BYTES:
            log.warning(
                "redis_streams: request %s has no usable reply_stream field; removed unanswered",
                entry_id.decode(),
            )
            self._side(self._remove(entry_id))
            return
        correlation = fields.get(b"correlation_id")
        payload = fields.get(b"payload")
        refusal: A2AError | None = None
        if correlation is None or payload is None:
            refusal = InvalidRequestError(FIELDS_MESSAGE)
        elif len(correlation) > MAX_NAME_BYTES:
            refusal = InvalidRequestError(
                f"correlation_id may hold at most {MAX_NAME_BYTES} bytes."
            )
        elif attempt > MAX_ATTEMPTS:
            refusal = InternalError(
                f"This request was taken up {attempt - 1} times by replicas that stopped "
                "before answering it; it is not tried again."
            )
        if isinstance(refusal, InvalidRequestError):
            correlation = b""
        entry = _Entry(entry_id, correlation or b"", reply, attempt)
        task = asyncio.create_task(self._serve(entry, payload or b"", refusal))
        self.calls[entry_id] = task
        task.add_done_callback(lambda _: self._ended(entry_id))

    def _ended(self, entry_id: bytes) -> None:
        self.calls.pop(entry_id, None)
        self._room.set()

    def _side(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self.side.add(task)
        task.add_done_callback(self.side.discard)

    async def _remove(self, entry_id: bytes) -> None:
        """Acknowledge and delete a request that cannot be answered."""
        assert self._redis is not None
        with contextlib.suppress(*OUTAGE):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, self.group, entry_id)
                pipe.xdel(self.stream, entry_id)
                await pipe.execute()

    # ---------------------------------------------------------------- answering

    async def _serve(self, entry: _Entry, payload: bytes, refusal: A2AError | None) -> None:
        try:
            if refusal is not None:
                await self._write(entry, error_frame(refusal))
                return
            link = Link(TRANSPORT, client="redis:" + entry.reply_stream.decode(errors="replace"))
            frames = self.rpc.answer(payload, link)
            try:
                async for frame in frames:
                    if not await self._write(entry, frame):
                        log.warning(
                            "redis_streams: request %s was taken over by another replica; "
                            "this one stops answering it",
                            entry.id.decode(),
                        )
                        return
            finally:
                await frames.aclose()
        except asyncio.CancelledError:
            pass  # closing: the request stays pending for another replica
        except OUTAGE as exc:  # pending still: taken over once Redis is back
            log.warning(
                "redis_streams: could not write the answer to %s (%s)",
                entry.id.decode(),
                type(exc).__name__,
            )

    async def _write(self, entry: _Entry, frame: Frame) -> bool:
        """One frame on the reply stream, if the request is still ours (False if not)."""
        try:
            written = await self._answer(
                keys=[entry.reply_stream, self.stream],
                args=[
                    self.group,
                    entry.id,
                    self.consumer,
                    entry.correlation_id,
                    frame.payload,
                    "1" if frame.final else "0",
                    entry.attempt,
                    self.reply_maxlen,
                    self.reply_ttl_seconds,
                ],
            )
        except ResponseError as exc:  # e.g. reply_stream names a key that is not a stream
            log.warning(
                "redis_streams: the answer to %s cannot be written (%s); removed unanswered",
                entry.id.decode(),
                str(exc).split("\n", 1)[0][:200],
            )
            await self._remove(entry.id)
            return False
        return bool(written)

    # ---------------------------------------------------------------- keeping

    async def _keep_loop(self) -> None:
        """Keep the requests being answered fresh, so no other replica takes them over;
        stop answering one another replica took anyway."""
        every = max(self.reclaim_seconds / 3, 0.1)
        while True:
            await asyncio.sleep(every)
            ids = list(self.calls)
            if not ids:
                continue
            try:
                lost = await self._keep(keys=[self.stream], args=[self.group, self.consumer, *ids])
            except OUTAGE as exc:
                log.warning("redis_streams: keeping requests failed (%s)", type(exc).__name__)
                continue
            for entry_id in lost:
                task = self.calls.get(entry_id)
                if task is not None:
                    task.cancel()
