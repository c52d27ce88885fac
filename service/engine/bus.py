"""The event bus seam (`EventBus`): fan-out of committed task events to live subscribers.

The engine publishes each event after it is committed to the store, in
sequence order. Each subscriber has its own queue, so a slow or departed
subscriber never affects another. A topic is one task (its key names the
tenant, owner and task, never a run), so a subscription outlives the run
that was live when it began: a paused task's subscriber hears the run that
a follow-up starts later. `InProcessBus` serves one process, `RedisBus`
(service.engine.redis_bus) several; the composition root chooses the bus and
hands it to the engine.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

from gen import a2a_pb2 as pb
from service.store import StoredEvent


class Subscription(Protocol):
    """One subscriber's view of a topic."""

    def events(self) -> AsyncIterator[StoredEvent]:
        """Events until the topic closes; raises the error the bus ended it with."""
        ...

    async def next(self) -> StoredEvent | None:
        """The next event, None once the topic is closed; raises the error the bus ended it
        with. What `events()` yields, without an async generator around it."""
        ...

    def close(self) -> None: ...


class EventBus(Protocol):
    def subscribe(self, key: str) -> Subscription: ...

    def publish(self, key: str, events: list[StoredEvent]) -> None:
        """Deliver committed events, in order, to every subscriber of `key`."""

    def close_topic(self, key: str, error: BaseException | None = None) -> None:
        """The topic's task is over (terminal, or it could not be stored): its subscriptions
        end after what they hold, raising `error` if one is given."""

    def end_all(self, error: BaseException) -> int:
        """End every subscription with `error` (shutdown); returns how many."""
        ...


# An item a shared bus hands its subscribers when they may have missed events (a reconnect,
# a dropped publish, the start of a subscription): catch up from the store after the last
# sequence yielded. A process-local bus never sends it.
RESYNC = StoredEvent(-1, pb.StreamResponse())

_CLOSED = None  # queue sentinel: the publisher closed the topic


class _Ended:
    """Queue item: the subscription ends with this error (the server is shutting down)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class QueueSubscription:
    """One subscriber's queue: unbounded (a slow subscriber holds its own backlog and
    slows nobody else), a deque and the one waiter of its one reader, which costs less per
    event than an `asyncio.Queue`."""

    __slots__ = ("_bus", "key", "_items", "_waiter", "_loop")

    def __init__(self, bus: InProcessBus, key: str) -> None:
        self._bus = bus
        self.key = key
        self._items: deque[StoredEvent | _Ended | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        # The reader's loop, kept: asyncio.get_running_loop() is a getpid() call on 3.11.
        self._loop: asyncio.AbstractEventLoop | None = None

    def put(self, item: StoredEvent | _Ended | None) -> None:
        self._items.append(item)
        self._wake()

    def put_all(self, items: Iterable[StoredEvent]) -> None:
        self._items.extend(items)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self._bus._drop(self)

    async def next(self) -> StoredEvent | None:
        """The next event, None once the topic is closed; raises the error a subscription
        was ended with (`InProcessBus.end_all`). One reader at a time."""
        items = self._items
        while not items:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            waiter = self._loop.create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                if self._waiter is waiter:  # cancelled: nothing is taken from the queue
                    self._waiter = None
        item = items.popleft()
        if item is _CLOSED:
            items.appendleft(item)  # a closed subscription stays closed
            return None
        if isinstance(item, _Ended):
            items.appendleft(item)
            raise item.error
        return item

    async def events(self) -> AsyncIterator[StoredEvent]:
        """Events until the topic is closed; the caller decides when to stop earlier. Raises
        the error a subscription was ended with (`InProcessBus.end_all`)."""
        while (item := await self.next()) is not None:
            yield item


class InProcessBus:
    def __init__(self) -> None:
        self._topics: dict[str, set[QueueSubscription]] = {}

    def subscribe(self, key: str) -> QueueSubscription:
        sub = QueueSubscription(self, key)
        self._topics.setdefault(key, set()).add(sub)
        return sub

    def publish(self, key: str, events: list[StoredEvent]) -> None:
        for sub in self._topics.get(key, ()):
            sub.put_all(events)

    def close_topic(self, key: str, error: BaseException | None = None) -> None:
        for sub in self._topics.pop(key, ()):
            sub.put(_CLOSED if error is None else _Ended(error))

    def end_all(self, error: BaseException) -> int:
        """End every subscription with `error` (after what it already holds); returns how many."""
        ended = 0
        for subs in self._topics.values():
            for sub in subs:
                sub.put(_Ended(error))
                ended += 1
        self._topics.clear()
        return ended

    def has_topic(self, key: str) -> bool:
        """Whether anyone here still subscribes to `key`."""
        return key in self._topics

    def _drop(self, sub: QueueSubscription) -> None:
        subs = self._topics.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._topics[sub.key]
