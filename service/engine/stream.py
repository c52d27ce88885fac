"""Numbered event streams: what the engine hands to the bindings for a stream.

An `EventStream` is an async iterator of `StreamResponse` (all gRPC needs) that
also tells the sequence number of the event it yielded last, as `seq` (None
for an event without one, e.g. a direct Message reply). The HTTP gateway sends
it as the SSE event id, the gRPC binding writes it into the event
(service.protocol.event_ids), so a client can resume SubscribeToTask with
`Last-Event-ID` / `last-event-id`.

`NumberedEvents` is that contract as a type, for whoever consumes a stream
without knowing who made it (the gateway's invokers: in-process it is an
EventStream, in proxy mode a relay that reads `seq` out of the upstream's events).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol, TypeVar

from gen import a2a_pb2 as pb
from service.store import StoredEvent

T_co = TypeVar("T_co", covariant=True)


class NumberedEvents(Protocol[T_co]):
    """An async iterator of events that tells the sequence number of the one it yielded
    last (`seq`, None when that event has none) and can be closed early."""

    @property
    def seq(self) -> int | None: ...

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def __anext__(self) -> T_co: ...

    async def aclose(self) -> None: ...


class EventStream:
    __slots__ = ("_source", "seq")

    def __init__(self, source: AsyncGenerator[StoredEvent, None]) -> None:
        self._source = source
        self.seq: int | None = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> pb.StreamResponse:
        stored = await self._source.__anext__()
        self.seq = stored.seq or None
        return stored.event

    async def aclose(self) -> None:
        await self._source.aclose()
