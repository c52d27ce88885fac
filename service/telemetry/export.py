"""Ended spans -> an SDK span exporter, in batches, on a thread of its own.

`SpanPipeline` is the `SpanSink` of the service's LightSpans: `finished` appends to a
bounded deque (no lock, no wake-up unless a batch is full), and a daemon thread
exports every `interval` seconds or `batch` spans, like the SDK's BatchSpanProcessor.

Exporters: an `OtlpSpans` exporter (otlp.py) takes the spans as they are and encodes
them itself; any other SDK `SpanExporter` (console, in-memory in tests) gets them
converted to the SDK's `ReadableSpan`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode

from service.telemetry.spans import LightSpan

log = logging.getLogger("service.telemetry")

MAX_QUEUE = 8192  # ended spans waiting for export; past it new ones are dropped (counted)


class RawSpanExporter(Protocol):
    """An exporter that takes LightSpans as they are (otlp.py)."""

    def export_light(self, spans: Sequence[LightSpan]) -> bool: ...

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
        self._queue: collections.deque[LightSpan] = collections.deque()
        self._wake = threading.Event()
        self._stop = False
        self._flushed = threading.Condition()
        self._exported_rounds = 0
        self._thread = threading.Thread(target=self._main, name="telemetry-spans", daemon=True)
        self._thread.start()

    def finished(self, span: LightSpan) -> None:
        queue = self._queue
        if len(queue) >= MAX_QUEUE:
            self.dropped += 1
            return
        queue.append(span)
        if len(queue) == self.batch:
            self._wake.set()

    def _main(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            self._drain()
            with self._flushed:
                self._exported_rounds += 1
                self._flushed.notify_all()
            if self._stop:
                return

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            spans: list[LightSpan] = []
            while queue and len(spans) < self.batch:
                spans.append(queue.popleft())
            try:
                if hasattr(self.exporter, "export_light"):
                    self.exporter.export_light(spans)
                else:
                    self.exporter.export([readable(s, self.resource, self.scope) for s in spans])
            except Exception as exc:  # an exporter must never take the service down
                log.warning("span export failed: %s", type(exc).__name__)

    def flush(self, timeout: float = 10.0) -> bool:
        """Export what is queued now; False if that took longer than `timeout`."""
        deadline = time.monotonic() + timeout
        with self._flushed:
            target = self._exported_rounds + 2  # a whole round that started after this call
            while self._exported_rounds < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._wake.set()
                self._flushed.wait(min(left, 0.05))
        return True

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        self.exporter.shutdown()
