"""The drain: the part of shutdown whose order is deliberate, run first when the service's
stack closes (the parts are then closed in reverse start order, service/app/parts.py).

1. Say so in the log (`draining: …`, once the service served); stop the readiness loop
   and housekeeping (a purge batch already sent still commits); gRPC health goes
   NOT_SERVING for every service name, every probe answers 503; calls are still taken.
2. Wait `drain_grace_seconds` (at most `drain_seconds`; only once the service served) so
   load balancers notice.
3. Close the gate: new calls are refused with UNAVAILABLE / 503 + Retry-After; the
   transports of our own with a listener stop taking requests (the unix socket its
   connections, Redis Streams its reads).
4. Wait while turns run or requests are in flight (HTTP, the transports of our own),
   until `drain_seconds` from step 1.
5. End open streams with an UNAVAILABLE error that says they can be resumed (the proxy's
   relayed streams too); stop the turns still running: their tasks settle FAILED and
   everything is committed.
6. Write the last answers: the gRPC server stops, the HTTP server and the transports of
   our own drain, together.

What follows is the stack's reverse order: the listeners, the invoker, push delivery, the
cluster, the bus, the file artifacts and the store, telemetry, the data-directory lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from gateway.invoker import GatedInvoker, Invoker
from gateway.server import HttpServer
from service.app.housekeeping import Housekeeping
from service.engine.registry import Engine
from service.ops.readiness import Readiness
from service.protocol.admission import Gate
from service.protocol.errors import UnavailableError

log = logging.getLogger("service")

STREAM_SHUTDOWN_MESSAGE = (
    "The server is shutting down; this stream ended before its task did. Resume it with "
    "SubscribeToTask, sending the id of the last event received (HTTP: Last-Event-ID; gRPC: "
    "the last-event-id metadata)."
)
RESPONSE_FLUSH_SECONDS = 2.0  # after the drain: time for answers already made to be written


class Health(Protocol):
    """The gRPC health service, as the drain uses it."""

    async def enter_graceful_shutdown(self) -> None: ...


class Transport(Protocol):
    """A transport of our own (gateway/transports: stdio, the unix socket, Redis Streams),
    as drained."""

    def in_flight(self) -> int: ...

    def stop_accepting(self) -> None: ...

    async def finish(self, seconds: float) -> None: ...


@dataclass
class Draining:
    """What the drain touches; None where a part was never started (proxy mode, a failed
    startup)."""

    drain_seconds: float
    grace_seconds: float
    served: bool  # startup completed: there may be callers, so the grace period applies
    readiness: Readiness
    housekeeping: Housekeeping
    gate: Gate
    health: Health | None
    engine: Engine | None
    invoker: Invoker | None
    grpc_server: grpc.aio.Server | None
    http: HttpServer | None
    phase: Callable[[str], None]  # names the step (a stop that overruns names it)
    transports: Sequence[Transport] = field(default_factory=list)


async def drain(d: Draining) -> None:
    if d.served:  # a startup that failed has no callers to drain; its error says enough
        log.info(
            "draining: health NOT_SERVING now; new calls refused after %g s; running turns "
            "and open calls get up to %g s",
            min(d.grace_seconds, d.drain_seconds),
            d.drain_seconds,
            extra={
                "fields": {
                    "grace_seconds": min(d.grace_seconds, d.drain_seconds),
                    "drain_seconds": d.drain_seconds,
                }
            },
        )
    d.phase("stopping the readiness checks")
    await d.readiness.stop()
    d.phase("stopping housekeeping")
    await d.housekeeping.stop()
    if d.health is not None:
        await d.health.enter_graceful_shutdown()  # every service name: NOT_SERVING
    loop = asyncio.get_running_loop()
    deadline = loop.time() + d.drain_seconds
    grace = min(d.grace_seconds, d.drain_seconds)
    d.phase("draining")
    if grace > 0 and d.served:
        await asyncio.sleep(grace)  # load balancers see the health change; calls still served
    d.gate.close()
    for transport in d.transports:
        transport.stop_accepting()
    while _busy(d) and loop.time() < deadline:  # noqa: ASYNC110 - no event covers both servers
        await asyncio.sleep(0.05)
    if isinstance(d.invoker, GatedInvoker):  # proxy mode: the relayed streams
        d.invoker.end_streams(UnavailableError(STREAM_SHUTDOWN_MESSAGE, retry_after=1))
    if d.engine is not None:
        ended = d.engine.end_streams(UnavailableError(STREAM_SHUTDOWN_MESSAGE, retry_after=1))
        d.phase("stopping running turns")
        stopped = await d.engine.shutdown()
        if ended or stopped:
            log.info(
                "shutdown: ended %d open stream(s); %d running task(s) stopped and marked FAILED",
                ended,
                stopped,
            )
    d.phase("writing the last answers")
    flushing: list[Awaitable[None]] = []
    if d.grpc_server is not None:
        flushing.append(d.grpc_server.stop(RESPONSE_FLUSH_SECONDS))
    if d.http is not None:
        flushing.append(d.http.drain(RESPONSE_FLUSH_SECONDS))
    flushing += [t.finish(RESPONSE_FLUSH_SECONDS) for t in d.transports]
    await asyncio.gather(*flushing)


def _busy(d: Draining) -> bool:
    """Work a drain waits for: running turns, and requests in flight."""
    if d.engine is not None and d.engine.busy():
        return True
    if any(t.in_flight() for t in d.transports):
        return True
    return d.http is not None and d.http.in_flight() > 0
