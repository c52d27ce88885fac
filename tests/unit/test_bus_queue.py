"""The in-process bus's subscriber queue (service.engine.bus.QueueSubscription): events in
publish order, the close and shutdown items after what a subscriber already holds, a slow
subscriber holding its own backlog, and a cancelled wait losing nothing."""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.engine.bus import InProcessBus
from service.store import StoredEvent


def _events(*seqs: int) -> list[StoredEvent]:
    return [StoredEvent(seq, pb.StreamResponse()) for seq in seqs]


async def _drain(sub) -> list[int]:
    return [stored.seq async for stored in sub.events()]


async def test_events_arrive_in_publish_order_then_the_close():
    bus = InProcessBus()
    sub = bus.subscribe("t")
    bus.publish("t", _events(1, 2))
    bus.publish("t", _events(3))
    bus.close_topic("t")
    bus.publish("t", _events(4))  # after the close: nobody hears it
    assert await _drain(sub) == [1, 2, 3]
    assert await sub.next() is None  # a closed subscription stays closed
    assert not bus.has_topic("t")


async def test_a_waiting_reader_wakes_for_each_publish():
    bus = InProcessBus()
    sub = bus.subscribe("t")
    reader = asyncio.ensure_future(_drain(sub))
    await asyncio.sleep(0)
    for seq in range(1, 4):
        bus.publish("t", _events(seq))
        await asyncio.sleep(0)
    bus.close_topic("t")
    assert await reader == [1, 2, 3]


async def test_the_error_comes_after_what_the_subscriber_holds():
    bus = InProcessBus()
    sub = bus.subscribe("t")
    bus.publish("t", _events(1, 2))
    bus.close_topic("t", RuntimeError("gone"))
    seen = []
    with pytest.raises(RuntimeError, match="gone"):
        async for stored in sub.events():
            seen.append(stored.seq)
    assert seen == [1, 2]
    with pytest.raises(RuntimeError, match="gone"):
        await sub.next()


async def test_end_all_ends_every_subscription_after_its_backlog():
    bus = InProcessBus()
    a, b = bus.subscribe("t"), bus.subscribe("u")
    bus.publish("t", _events(1))
    assert bus.end_all(ConnectionError("shutdown")) == 2
    assert (await a.next()).seq == 1
    for sub in (a, b):
        with pytest.raises(ConnectionError):
            await sub.next()


async def test_a_slow_subscriber_holds_its_backlog_and_slows_nobody():
    bus = InProcessBus()
    slow, fast = bus.subscribe("t"), bus.subscribe("t")
    for seq in range(1, 1001):
        bus.publish("t", _events(seq))
        assert (await fast.next()).seq == seq
    bus.close_topic("t")
    assert await _drain(slow) == list(range(1, 1001))


async def test_a_cancelled_wait_loses_no_event():
    bus = InProcessBus()
    sub = bus.subscribe("t")
    waiting = asyncio.ensure_future(sub.next())
    await asyncio.sleep(0)
    waiting.cancel()
    bus.publish("t", _events(1))  # published as the cancellation lands
    with pytest.raises(asyncio.CancelledError):
        await waiting
    bus.publish("t", _events(2))
    assert (await sub.next()).seq == 1
    assert (await sub.next()).seq == 2
    sub.close()
    assert not bus.has_topic("t")
