"""The service's own spans: OpenTelemetry API spans that cost little to make.

The SDK's `Tracer.start_span` costs tens of microseconds (attribute cleaning, locks,
processor hooks), several per request. Spans made here are plain objects that
implement the API's `Span` (so they can be the current span, and an agent's own SDK
spans nest under them), keep their attributes in a dict as given (every value the
service sets is a str, int, float or bool) and, when they end, go to a `SpanSink`
that exports them in batches off the event loop (see export.py).

Sampling follows the parent's sampled flag; a root is sampled by the configured SDK
sampler (`OTEL_TRACES_SAMPLER`, default always on). An unsampled span is the API's
`NonRecordingSpan`: it still carries the ids, so propagation keeps working.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
MAX_EVENTS = 32  # per span; more are counted in `dropped_events`, not kept
_EMPTY_STATE = TraceState()
UNSET = Status(StatusCode.UNSET)  # immutable: shared by every span until one sets its own
_new_context = tuple.__new__  # SpanContext is a tuple; its constructor re-checks our own ids


def _context(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
    """A valid, local SpanContext, without SpanContext.__new__'s range checks (the ids come
    from getrandbits and are never 0)."""
    return _new_context(SpanContext, (trace_id, span_id, False, flags, state, True))


class SpanSink(Protocol):
    def finished(self, span: LightSpan) -> None:
        """Take an ended span (called on the event loop: must not block)."""


RootSampler = Callable[[int, str], bool]  # (trace id, span name) -> sampled


def always(trace_id: int, name: str) -> bool:
    return True


class LightSpan(trace.Span):
    """A recording span of this service (ended once, exported by its sink)."""

    __slots__ = (
        "name",
        "context",
        "parent",
        "kind",
        "start_time",
        "end_time",
        "attributes",
        "events",
        "links",
        "status",
        "dropped_events",
        "_sink",
    )

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: Sequence[Link],
        sink: SpanSink,
    ) -> None:
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.start_time = time.time_ns()
        self.end_time = 0
        self.attributes = attributes
        self.events: list[tuple[str, int, Mapping[str, Any]]] = []
        self.links = links
        self.status = UNSET
        self.dropped_events = 0
        self._sink = sink

    # ---- the API --------------------------------------------------------------

    def end(self, end_time: int | None = None) -> None:
        if self.end_time:
            return
        self.end_time = end_time or time.time_ns()
        self._sink.finished(self)

    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if not self.end_time:
            self.attributes.update(attributes)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if not self.end_time:
            self.attributes[key] = value

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if self.end_time:
            return
        if len(self.events) >= MAX_EVENTS:
            self.dropped_events += 1
            return
        self.events.append((name, timestamp or time.time_ns(), attributes or {}))

    def update_name(self, name: str) -> None:
        if not self.end_time:
            self.name = name

    def is_recording(self) -> bool:
        return not self.end_time

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_time:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        self.status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Only the exception's type: its message may hold what a trace must not show."""
        self.add_event(
            "exception", {"exception.type": type(exception).__qualname__}, timestamp=timestamp
        )

    def __repr__(self) -> str:
        return f"LightSpan({self.name!r}, {self.context.span_id:016x})"


class LightTracer:
    """Starts LightSpans; `sink` receives them when they end."""

    def __init__(self, sink: SpanSink, sampler: RootSampler = always) -> None:
        self.sink = sink
        self.sampler = sampler
        self._bits = random.getrandbits

    def start(
        self,
        name: str,
        kind: SpanKind,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        links: Sequence[Link] = (),
    ) -> trace.Span:
        """A new span, child of `parent` (None or invalid: a root)."""
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            sampled = parent.trace_flags.sampled
            state = parent.trace_state
        else:
            parent = None
            trace_id = self._bits(128) or 1
            sampled = self.sampler(trace_id, name)
            state = _EMPTY_STATE
        context = _context(
            trace_id, self._bits(64) or 1, SAMPLED if sampled else NOT_SAMPLED, state
        )
        if not sampled:
            return NonRecordingSpan(context)
        return LightSpan(name, context, parent, kind, attributes, links, self.sink)
