"""OTLP span export in a child process, so encoding and sending never take the server's GIL.

The service runs its requests on one event-loop thread; an exporter thread in the same
process takes the GIL from it for as long as it encodes (and the switching costs the loop
more again). With `telemetry = "otlp"` the span pipeline's thread only flattens each
batch of ended spans to plain tuples, `marshal`s them (C code) and writes them to a pipe;
a child process started with the service rebuilds the spans and exports them with
otlp.py's exporters, on another core. If the child is gone, spans are dropped (counted in
a warning), never queued without bound.
"""

from __future__ import annotations

import logging
import marshal
import multiprocessing
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from service.telemetry.spans import LightSpan

log = logging.getLogger("service.telemetry")

Flat = tuple[Any, ...]


def flatten(s: LightSpan) -> Flat:
    ctx = s.context
    parent = s.parent
    return (
        s.name,
        ctx.trace_id,
        ctx.span_id,
        int(ctx.trace_flags),
        ctx.trace_state.to_header() if ctx.trace_state else "",
        parent.span_id if parent is not None else 0,
        bool(parent is not None and parent.is_remote),
        s.kind.value,
        s.start_time,
        s.end_time,
        s.attributes,
        s.events,
        s.dropped_events,
        [
            (
                link.context.trace_id,
                link.context.span_id,
                int(link.context.trace_flags),
                link.context.is_remote,
                dict(link.attributes or {}),
            )
            for link in s.links
        ],
        s.status.status_code.value,
        s.status.description or "",
    )


def rebuild(flat: Flat) -> LightSpan:
    """A LightSpan again (in the child: it is only encoded, never ended)."""
    (name, trace_id, span_id, flags, state, parent_id, parent_remote, kind, start, end) = flat[:10]
    attributes, events, dropped, links, status_code, status_text = flat[10:]
    trace_state = TraceState.from_header([state]) if state else TraceState()
    span = object.__new__(LightSpan)
    span.name = name
    span.context = SpanContext(trace_id, span_id, False, TraceFlags(flags), trace_state)
    span.parent = SpanContext(trace_id, parent_id, parent_remote) if parent_id else None
    span.kind = SpanKind(kind)
    span.start_time, span.end_time = start, end
    span.attributes = attributes
    span.events = [tuple(e) for e in events]
    span.dropped_events = dropped
    span.links = [
        Link(SpanContext(tid, sid, remote, TraceFlags(lflags)), lattrs)
        for tid, sid, lflags, remote, lattrs in links
    ]
    span.status = Status(StatusCode(status_code), status_text or None)
    return span


def _child(
    conn: Connection, settings: dict[str, Any], resource: dict[str, Any], scope: Any
) -> None:
    """The exporter process: spans from the pipe to the collector, until the pipe closes.
    It runs at the lowest CPU priority: on a busy host the requests come first, and spans
    wait in the pipe (bounded) rather than slow them down."""
    import os

    os.nice(19)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from service.telemetry.otlp import otlp_span_exporter
    from service.telemetry.settings import TelemetrySettings

    exporter: Any = otlp_span_exporter(
        TelemetrySettings(**settings), Resource(resource), InstrumentationScope(*scope)
    )
    try:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                return
            if not data:
                return
            exporter.export_light([rebuild(f) for f in marshal.loads(data)])
    finally:
        exporter.shutdown()


class ExporterProcess:
    """A `RawSpanExporter` (export.py) whose work happens in a child process."""

    def __init__(self, settings: dict[str, Any], resource: dict[str, Any], scope: Any) -> None:
        context = multiprocessing.get_context("spawn")  # no fork: grpc has threads
        self._conn, child_end = context.Pipe(duplex=False)[::-1]
        receive_end = child_end
        self._process = context.Process(
            target=_child,
            args=(receive_end, settings, resource, scope),
            name="a2a-telemetry-exporter",
            daemon=True,
        )
        self._process.start()
        receive_end.close()
        self._lock = threading.Lock()
        self.dropped = 0

    def export_light(self, spans: Sequence[LightSpan]) -> bool:
        if not self._process.is_alive():
            self.dropped += len(spans)
            if self.dropped == len(spans):
                log.warning("telemetry: the span exporter process is gone; spans are dropped")
            return False
        try:
            with self._lock:
                self._conn.send_bytes(marshal.dumps([flatten(s) for s in spans]))
        except (OSError, ValueError) as exc:
            log.warning("telemetry: cannot hand spans to the exporter process: %s", exc)
            return False
        return True

    def shutdown(self) -> None:
        try:
            with self._lock:
                self._conn.send_bytes(b"")
        except (OSError, ValueError):
            pass
        self._process.join(10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(2)
        self._conn.close()
