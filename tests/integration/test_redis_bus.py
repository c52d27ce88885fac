"""The Redis event bus between bus instances (as between processes), on a Redis server the
test starts on its own port: order, no echo, catch-up signals, and a Redis restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gen import a2a_pb2 as pb
from service.engine.bus import RESYNC
from service.engine.redis_bus import RedisBus, decode_events, encode_events
from service.store import StoredEvent
from tests.redis_util import OwnRedis


def ev(seq: int) -> StoredEvent:
    event = pb.StreamResponse()
    event.status_update.task_id = f"t{seq}"
    return StoredEvent(seq, event)


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(str(tmp_path / "redis")).start()
    yield server
    server.stop()


async def _next(it, wait: float = 10.0) -> StoredEvent:
    return await asyncio.wait_for(it.__anext__(), wait)


async def _until_live(it) -> None:
    """The first item of a new subscription is the RESYNC of its confirmation."""
    assert await _next(it) == RESYNC


@asynccontextmanager
async def publisher_and_follower(url: str) -> AsyncIterator[tuple[RedisBus, RedisBus, Any]]:
    """Two open buses (as two processes) and b's live subscription to topic "k"."""
    a, b = RedisBus(url), RedisBus(url)
    await a.open()
    await b.open()
    try:
        remote = b.subscribe("k").events()
        await _until_live(remote)
        yield a, b, remote
    finally:
        await a.close()
        await b.close()


def test_wire_format_round_trips():
    events = [ev(1), ev(2), ev(300)]
    assert decode_events(encode_events(b"o" * 16, events)) == events


async def test_events_cross_buses_in_order_and_never_echo(own_redis):
    a, b = RedisBus(own_redis.url), RedisBus(own_redis.url)
    await a.open()
    await b.open()
    try:
        remote = b.subscribe("k").events()
        local = a.subscribe("k").events()
        await _until_live(remote)
        await _until_live(local)
        a.publish("k", [ev(1), ev(2)])
        a.publish("k", [ev(3)])
        a.publish("other", [ev(9)])
        assert [await _next(remote) for _ in range(3)] == [ev(1), ev(2), ev(3)]
        assert [await _next(local) for _ in range(3)] == [ev(1), ev(2), ev(3)]
        # a's own message came back from Redis and was dropped: next is b's event.
        b.publish("k", [ev(4)])
        assert await _next(local) == ev(4)
        assert await _next(remote) == ev(4)  # b's local subscriber, at once
        assert await a.health() is None and await b.health() is None
    finally:
        await a.close()
        await b.close()


async def test_a_redis_restart_tells_subscribers_to_catch_up(own_redis):
    async with publisher_and_follower(own_redis.url) as (a, b, remote):
        a.publish("k", [ev(1)])
        assert await _next(remote) == ev(1)
        own_redis.stop()
        a.publish("k", [ev(2)])  # lost on the wire while Redis is down
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while await b.health() is None:
            assert loop.time() < deadline
            await asyncio.sleep(0.05)
        assert await b.health() in ("Redis unreachable", "Redis bus reconnecting")
        own_redis.start()  # same port
        # b reconnects and re-subscribes; a resends nothing but a catch-up signal.
        seen = [await _next(remote, 30)]
        while seen[-1] == RESYNC and len(seen) < 5:
            a.publish("k", [ev(3)])
            seen.append(await _next(remote, 30))
        assert RESYNC in seen and ev(2) not in seen
        assert seen[-1] == ev(3)
        deadline = loop.time() + 20
        while await b.health() is not None:
            assert loop.time() < deadline
            await asyncio.sleep(0.05)


async def test_publishing_round_trips_are_spaced_so_bursts_share_them(own_redis, monkeypatch):
    import redis.asyncio.client

    from service.engine import redis_bus

    starts: list[float] = []
    execute = redis.asyncio.client.Pipeline.execute

    async def timed(self, *args, **kwargs):
        starts.append(asyncio.get_running_loop().time())
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", timed)
    async with publisher_and_follower(own_redis.url) as (a, _, remote):
        for seq in range(1, 41):  # a burst from a busy loop, with turns in between
            a.publish("k", [ev(seq)])
            await asyncio.sleep(0)
        assert [(await _next(remote)).seq for _ in range(40)] == list(range(1, 41))
    # One round trip per gap at most: the burst shared a few instead of one each.
    assert 1 <= len(starts) < 40
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    assert all(g >= redis_bus._PIPELINE_GAP_S * 0.9 for g in gaps), gaps
