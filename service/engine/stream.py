"""Numbered event streams: what the engine hands to the bindings for a stream.

An `EventStream` is an async iterator of `StreamResponse` (all gRPC needs) that
also tells the sequence number of the event it yielded last, as `seq` (None
for an event without one, e.g. a direct Message reply). The HTTP gateway sends
it as the SSE event id, so a client can resume SubscribeToTask with
`Last-Event-ID`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from gen import a2a_pb2 as pb
from service.store import StoredEvent


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
