"""Ended spans -> an exporter, in batches, off the event loop.

`SpanPipeline` is the `SpanSink` of the service's LightSpans. With a `RawSpanExporter` (the
exporter process, remote.py) the loop flattens each ended span to plain values (a tuple
build) and, when a batch is full, `marshal`s it (C code, ~1 us a span); a daemon thread
only writes the ready batches to the exporter (a syscall, without the GIL) and, every
`interval` seconds, packs the partial batch. The thread so takes the GIL about once a
batch: when it flattened and marshalled the spans itself, its turns under the GIL and the
handovers cost the loop more than the same work done in place (a SendMessage's server
CPU with telemetry on, above off: +97 and +116 us against +56 and +76 us, two paired
h2load runs of five and six rounds).
Any other SDK `SpanExporter` (console, in-memory in tests) gets the spans queued as they
are and converted to the SDK's `ReadableSpan` on the thread.
"""

from __future__ import annotations

import collections
import logging
import marshal
import threading
import time
from typing import Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode

from service.telemetry.otlp import Flat, flatten
from service.telemetry.spans import LightSpan

log = logging.getLogger("service.telemetry")

MAX_QUEUE = 8192  # ended spans waiting for export; past it new ones are dropped (counted)


class RawSpanExporter(Protocol):
    """An exporter that takes batches of spans as `marshal`led flat tuples (remote.py)."""

    def send_flat(self, data: bytes, count: int) -> bool: ...

    def shutdown(self) -> None: ...


def readable(span: LightSpan, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """A LightSpan as the SDK's ReadableSpan (for exporters that only know those)."""
    return ReadableSpan(
        name=span.name,
        context=span.get_span_context(),
        parent=span.parent,
        resource=resource,
        attributes=span.attributes,
        events=[Event(name, attrs, ts) for name, ts, attrs in span.events],
        links=span.links,
        kind=SpanKind(span.kind),
        status=Status(StatusCode(span.status_code), span.status_text or None),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=scope,
    )


class SpanPipeline:
    def __init__(
        self,
        exporter: SpanExporter | RawSpanExporter,
        resource: Resource,
        scope: InstrumentationScope,
        *,
        interval: float = 1.0,
        batch: int = 512,
    ) -> None:
        self.exporter = exporter
        self.resource = resource
        self.scope = scope
        self.interval = interval
        self.batch = batch
        self.dropped = 0
        self._raw = hasattr(exporter, "send_flat")
        self._queue: collections.deque[LightSpan] = collections.deque()  # SDK exporters
        # Raw: flat spans not yet packed (the loop appends; a full batch is packed by the loop,
        # the partial one by the thread when its interval passes or a flush asks).
        self._flats: collections.deque[Flat] = collections.deque()
        self._packing = threading.Lock()  # one packer at a time; held once per batch
        self._ready: collections.deque[tuple[bytes, int]] = collections.deque()
        self._wake = threading.Event()
        self._stop = False
        self._flush_asked = False
        self._flushed = threading.Condition()
        self._exported_rounds = 0
        self._thread = threading.Thread(target=self._main, name="telemetry-spans", daemon=True)
        self._thread.start()

    def finished(self, span: LightSpan) -> None:
        if self._raw:
            flats = self._flats
            flats.append(flatten(span))
            if len(flats) >= self.batch:
                self._pack()
                self._wake.set()
            return
        queue = self._queue
        if len(queue) >= MAX_QUEUE:
            self._drop(1)
            return
        queue.append(span)
        if len(queue) == self.batch:
            self._wake.set()

    def _pack(self) -> None:
        """The batch being filled, marshalled and made ready to send (or dropped and counted
        when the exporter is that far behind). Never raises: it runs where a span ends."""
        with self._packing:
            pop = self._flats.popleft
            flats = [pop() for _ in range(min(len(self._flats), self.batch))]
            if not flats:
                return
            if len(self._ready) * self.batch >= MAX_QUEUE:
                self._drop(len(flats))
                return
            try:
                data = marshal.dumps(flats)
            except ValueError:  # a value marshal cannot carry (spans.py cleans the API's)
                self._drop(len(flats))
                return
            self._ready.append((data, len(flats)))

    def _drop(self, count: int) -> None:
        if not self.dropped:
            log.warning("telemetry: spans are dropped (the exporter is behind or failing)")
        self.dropped += count  # an estimate if two threads drop at once

    def _main(self) -> None:
        while True:
            timed_out = not self._wake.wait(self.interval)
            self._wake.clear()
            self._drain(partial=timed_out or self._flush_asked or self._stop)
            with self._flushed:
                self._exported_rounds += 1
                self._flushed.notify_all()
            if self._stop:
                return

    def _drain(self, partial: bool) -> None:
        try:
            if self._raw:
                while partial and self._flats:  # spans wait at most one interval
                    self._pack()
                ready = self._ready
                while ready:
                    data, count = ready.popleft()
                    self.exporter.send_flat(data, count)  # type: ignore[union-attr]
                return
            queue = self._queue
            while queue:
                spans: list[LightSpan] = []
                while queue and len(spans) < self.batch:
                    spans.append(queue.popleft())
                self.exporter.export(  # type: ignore[union-attr]
                    [readable(s, self.resource, self.scope) for s in spans]
                )
        except Exception as exc:  # an exporter must never take the service down
            log.warning("span export failed: %s", type(exc).__name__)

    def flush(self, timeout: float = 10.0) -> bool:
        """Export what is queued now; False if that took longer than `timeout`."""
        deadline = time.monotonic() + timeout
        self._flush_asked = True  # the partial batch too
        try:
            with self._flushed:
                target = self._exported_rounds + 2  # a whole round that started after this
                while self._exported_rounds < target:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._wake.set()
                    self._flushed.wait(min(left, 0.05))
        finally:
            self._flush_asked = False
        return True

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        self.exporter.shutdown()
