"""What an open stream keeps in the process per event (issue 26, "open streams cost a
constant"): a streaming agent appends a chunk to one artifact with every event, its
streams are open; the run, its subscription and the bus must not keep a Python or protobuf
object per event. History and artifacts belong to the store: the store here keeps nothing,
so whatever grows is the engine's.

gc counts Python objects; protobuf messages live in upb arenas that neither gc nor
tracemalloc sees, so the heap's bytes in use (glibc `mallinfo2`) count those. Appended
chunks are kept encoded until the task is read (service.engine.chunks): an event may cost
its chunk's encoded bytes, not a message (~100 bytes of arena per part)."""

from __future__ import annotations

import asyncio
import gc
from functools import partial

import pytest

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.app import memory
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.store import Scope, StoredEvent
from service.store.memory import MemoryTaskStore
from tests.conftest import user_message

ALICE = Scope("", "alice")
STREAMS = 20
WARM = 200  # events before the first count (the heap's one-off growth is behind)
MORE = 800  # events between the counts
STEP = 10  # events the agents emit before the streams catch up
WAIT = 10


def _heap_in_use():
    """Bytes of the C heap in use (glibc), or None where it cannot be read."""
    heap = memory.HeapTrim.load()
    return None if heap is None else heap.in_use_bytes


class ForgetfulStore(MemoryTaskStore):
    """Takes every commit and keeps none of it: what grows is not the store's."""

    async def save(
        self, scope, task, events: list[StoredEvent], configs=(), snapshot=None, steady=False
    ):
        return None


class ChunkAgent:
    """Appends a chunk to one artifact each time `allowed` grows, then waits; `delivered`
    counts what each stream received, under the same condition."""

    def __init__(self, streams: int) -> None:
        self.step = asyncio.Condition()
        self.allowed = 0
        self.done = False
        self.delivered = [0] * streams

    def _may_emit(self, emitted: int) -> bool:
        return self.done or self.allowed > emitted

    async def run(self, ctx: TurnContext) -> None:
        art = None
        emitted = 0
        while True:
            async with self.step:
                await self.step.wait_for(partial(self._may_emit, emitted))
            if self.done:
                break
            art = await ctx.artifact(
                f"chunk {emitted} ", artifact_id=art, name="ticks", append=emitted > 0
            )
            emitted += 1
        await ctx.complete("done")

    async def follow(self, i: int, events) -> None:
        async for event in events:
            if event.HasField("artifact_update"):
                async with self.step:
                    self.delivered[i] += 1
                    self.step.notify_all()

    def _caught_up(self) -> bool:
        return min(self.delivered) >= self.allowed

    async def emitted(self, n: int) -> None:
        """Up to `n` events, a few at a time (as a stream goes: no backlog piles up), each
        delivered to every stream."""
        while self.allowed < n:
            async with self.step:
                self.allowed = min(n, self.allowed + STEP)
                self.step.notify_all()
                await asyncio.wait_for(self.step.wait_for(self._caught_up), WAIT)

    async def finish(self) -> None:
        async with self.step:
            self.done = True
            self.step.notify_all()


async def test_an_open_streams_memory_does_not_keep_its_events():
    in_use = _heap_in_use()
    if in_use is None:
        pytest.skip("the C heap's use is read with glibc's mallinfo2 (Linux)")
    agent = ChunkAgent(STREAMS)
    engine = Engine(ForgetfulStore(), agent, InProcessBus())

    followers = []
    for i in range(STREAMS):
        turn = await engine.send(ALICE, user_message("go"), Caller(), stream=True)
        assert turn.events is not None
        followers.append(asyncio.create_task(agent.follow(i, turn.events)))
    try:
        await agent.emitted(WARM)
        gc.collect()
        objects, heap = len(gc.get_objects()), in_use()
        await agent.emitted(WARM + MORE)
        gc.collect()
        grown_objects, grown_heap = len(gc.get_objects()) - objects, in_use() - heap
    finally:
        await agent.finish()
        await asyncio.wait_for(asyncio.gather(*followers), WAIT)
        await engine.shutdown()

    chunk = pb.Part(text=f"chunk {WARM + MORE} ").ByteSize() + 2  # its field tag and length
    per_event = grown_heap / (STREAMS * MORE)
    assert grown_objects < STREAMS, f"{grown_objects} more Python objects after {MORE} events"
    assert per_event <= 3 * chunk, (
        f"{per_event:.0f} bytes of heap per stream event, an encoded chunk is {chunk}"
    )
