"""The gRPC JSON-RPC envelope (`grpc_jsonrpc = true`): JSON-RPC carried inside gRPC, by the
service `a2a_service.jsonrpc.v1.JsonRpc` of proto/jsonrpc_envelope.proto on the gRPC
listener, beside A2AService (docs/transports.md).

Each call's request `Envelope` holds one JSON-RPC request; the answer frames of
session.FramedJsonRpc come back as `Envelope`s, `final` and `event_id` copied out of the
frame so a client need not parse the payload to know where a stream ends. `Send` carries
one frame (a streaming method is refused in the payload); `Stream` carries every frame of
any method. gRPC calls are concurrent by nature, so there is no Conversation: each call is
one request.

Service parameters also travel as the call's gRPC metadata (`authorization`, `x-api-key`,
`a2a-version`, `last-event-id`, ...), once per call; the request's own
`serviceParameters` win. The access line's client is grpc's peer string, as for
A2AService.

Sizes: the gRPC listener's message limit (`max_request_bytes`) applies to the whole
envelope, so a larger request is refused by gRPC itself (RESOURCE_EXHAUSTED) from its
length before any of it is handed here.

The drain: new calls are refused by the pipeline's gate (a -32603 frame with RetryInfo);
an open Stream ends with the resumable UNAVAILABLE error frame when the engine ends the
streams, and the gRPC server's stop lets that last frame be written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from gateway.transports.session import Frame, FramedJsonRpc, Link
from gen import jsonrpc_envelope_pb2 as envelope_pb2

TRANSPORT = "grpc-jsonrpc"  # the access log's binding and the card's binding name
SERVICE = envelope_pb2.DESCRIPTOR.services_by_name["JsonRpc"]
SERVICE_NAME = SERVICE.full_name  # a2a_service.jsonrpc.v1.JsonRpc: reflection and health


def envelope(frame: Frame) -> envelope_pb2.Envelope:
    return envelope_pb2.Envelope(
        payload=frame.payload,
        final=frame.final,
        event_id=str(frame.event_id) if frame.event_id else "",
    )


def parameters(metadata: Any) -> dict[str, str]:
    """Service parameters from a call's metadata: text entries, names lower-cased (binary
    `-bin` entries and pseudo-headers are not parameters)."""
    found: dict[str, str] = {}
    for key, value in metadata or ():
        name = key.lower()
        if isinstance(value, str) and not name.endswith("-bin") and not name.startswith(":"):
            found[name] = value
    return found


class JsonRpcEnvelopeServicer:
    """The `JsonRpc` service's two methods over the shared FramedJsonRpc."""

    def __init__(self, rpc: FramedJsonRpc) -> None:
        self.rpc = rpc
        self.calls = 0  # calls being answered (the drain waits for them)
        self._idle = asyncio.Event()
        self._idle.set()

    def _link(self, context: Any) -> Link:
        return Link(
            TRANSPORT,
            client=context.peer() or "",
            parameters=parameters(context.invocation_metadata()),
        )

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        self.calls += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.calls -= 1
            if not self.calls:
                self._idle.set()

    async def Send(self, request: envelope_pb2.Envelope, context: Any) -> envelope_pb2.Envelope:
        """One request, its one answer frame."""
        with self._counted():
            frames = self.rpc.answer(request.payload, self._link(context), unary=True)
            last: Frame | None = None
            try:
                async for frame in frames:
                    last = frame
            finally:
                await frames.aclose()
            assert last is not None  # answer() always ends with a final frame
            return envelope(last)

    async def Stream(
        self, request: envelope_pb2.Envelope, context: Any
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        """One request, every answer frame in order (the last one says final)."""
        with self._counted():
            frames = self.rpc.answer(request.payload, self._link(context))
            try:
                async for frame in frames:
                    yield envelope(frame)
            finally:
                await frames.aclose()

    # -- as the drain sees a transport of our own (service/app/drain.py) --

    def in_flight(self) -> int:
        return self.calls

    def stop_accepting(self) -> None:
        """Nothing to close: the gRPC listener is shared, and the gate refuses new calls."""

    async def finish(self, seconds: float) -> None:
        """Wait (at most `seconds`) for the calls being answered to end."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), seconds)
