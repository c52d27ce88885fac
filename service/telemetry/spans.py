"""The service's own spans: OpenTelemetry API spans that cost little to make.

The SDK's `Tracer.start_span` costs tens of microseconds (attribute cleaning, locks,
processor hooks), several per request. Spans made here are plain objects that
implement the API's `Span` (so they can be the current span, and an agent's own SDK
spans nest under them). They keep their ids as ints and their attributes in a dict as
given (every value the service sets is a str, int, float or bool), and when they end go
to a `SpanSink` that exports them in batches off the event loop (see export.py). Values
that come through the API (an agent's `set_attribute` on its turn's span) are cleaned to
what OTLP carries, as the SDK does. A server call and an agent turn (hub.py) are
LightSpans themselves: one object each.

Sampling follows the parent's sampled flag; a root is sampled by the configured SDK
sampler (`OTEL_TRACES_SAMPLER`, default always on). An unsampled span still carries its
ids, so propagation keeps working, but it records nothing and never reaches the sink.
Without a tracer (metrics only) a span has no ids at all: its context is invalid.

Limits (`OTEL_SPAN_*`, propagation.py) are those of `LIMITS`: events past the limit are
counted as dropped, attributes set through the API past the count are dropped, and
when any limit was configured a span is trimmed to it as it ends (attribute count and
string length, links): nothing is checked per attribute on the service's own path.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

from service.telemetry.propagation import Limits

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
MAX_EVENTS = 32  # per span by default; more are counted in `dropped_events`, not kept
LIMITS = Limits()  # what setup.install read from the environment
EMPTY_STATE = TraceState()
SERVER, CLIENT, INTERNAL = SpanKind.SERVER.value, SpanKind.CLIENT.value, SpanKind.INTERNAL.value
# A SpanContext is the tuple (trace_id, span_id, is_remote, flags, state, is_valid); its
# properties are Python calls, so the hot path reads it by index, and makes one for a span
# of ours as that tuple (SpanContext.__new__ re-checks ids that come from getrandbits).
_new_context = tuple.__new__
_bits = random.getrandbits  # ids: 128 and 64 random bits, as the SDK's default generator
_time_ns = time.time_ns


def _clean(value: Any) -> Any:
    """An attribute value as OTLP carries it, in the exact built-in types `marshal` takes
    (an IntEnum becomes its int, a numpy float64 a float; anything else its str)."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or kind is float:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return str(value)


def cleaned(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _clean(v) for k, v in attributes.items()}


def _cut(value: Any, length: int) -> Any:
    if type(value) is str:
        return value[:length]
    if type(value) is list:
        return [v[:length] if type(v) is str else v for v in value]
    return value


def trim(span: LightSpan, limits: Limits) -> None:
    """Bring an ending span within `limits` (called only when limits were configured)."""
    attributes = span.attributes
    most = limits.max_attributes
    if most is not None and len(attributes) > most:
        span.attributes = attributes = dict(list(attributes.items())[:most])
    length = limits.max_value_length
    if length is not None:
        for key, value in attributes.items():
            attributes[key] = _cut(value, length)
        for _, _, event_attributes in span.events:
            if isinstance(event_attributes, dict):
                for key, value in event_attributes.items():
                    event_attributes[key] = _cut(value, length)
    if len(span.links) > limits.max_links:
        span.links = tuple(span.links)[: limits.max_links]


class SpanSink(Protocol):
    def finished(self, span: LightSpan) -> None:
        """Take an ended span (called on the event loop: must not block)."""


RootSampler = Callable[[int, str], bool]  # (trace id, span name) -> sampled


def always(trace_id: int, name: str) -> bool:
    return True


class LightTracer:
    """What the spans of one installation share: where they go when they end, and how a
    new trace is sampled."""

    def __init__(self, sink: SpanSink, sampler: RootSampler = always) -> None:
        self.sink = sink
        self.sampler = sampler
        self.sample_all = sampler is always  # then a root needs no call to know

    def start(
        self,
        name: str,
        kind: SpanKind,
        parent: SpanContext | trace.Span | None,
        attributes: dict[str, Any],
        links: Sequence[Link] = (),
    ) -> LightSpan:
        """A new span, child of `parent` (None or invalid: a root)."""
        return LightSpan(self, name, kind.value, parent, attributes, links)


class LightSpan(trace.Span):
    """A span of this service (ended once; exported by its tracer's sink if it records)."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "flags",
        "trace_state",
        "parent_id",
        "parent_remote",
        "kind",
        "start_time",
        "end_time",
        "attributes",
        "events",
        "links",
        "status_code",
        "status_text",
        "dropped_events",
        "recording",
        "_sink",
        "_context",
    )

    def __init__(
        self,
        tracer: LightTracer | None,
        name: str,
        kind: int,
        parent: SpanContext | trace.Span | None,
        attributes: dict[str, Any],
        links: Sequence[Link] = (),
    ) -> None:
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.events: list[tuple[str, int, Mapping[str, Any]]] = []
        self.links = links
        self.status_code = 0  # StatusCode.UNSET
        self.status_text = ""
        self.dropped_events = 0
        self.end_time = 0
        self._context: SpanContext | None = None
        self.parent_id = 0
        self.parent_remote = False
        if tracer is None:  # metrics only: no trace at all
            self.trace_id = self.span_id = 0
            self.flags = NOT_SAMPLED
            self.trace_state = EMPTY_STATE
            self.recording = False
            self._sink: SpanSink | None = None
            self.start_time = 0
            return
        if isinstance(parent, LightSpan):
            if parent.trace_id:
                self.trace_id = parent.trace_id
                self.flags = parent.flags
                self.trace_state = parent.trace_state
                self.parent_id = parent.span_id
            else:
                parent = None
        elif parent is not None:
            if not isinstance(parent, tuple):  # another API span (an agent's own)
                parent = parent.get_span_context()
            if parent[5]:
                self.trace_id = parent[0]
                self.flags = SAMPLED if parent[3] & 1 else NOT_SAMPLED
                self.trace_state = parent[4]
                self.parent_id = parent[1]
                self.parent_remote = parent[2]
            else:
                parent = None
        if parent is None:
            self.trace_id = trace_id = _bits(128) or 1
            self.flags = (
                SAMPLED if tracer.sample_all or tracer.sampler(trace_id, name) else NOT_SAMPLED
            )
            self.trace_state = EMPTY_STATE
        self.span_id = _bits(64) or 1
        self.recording = self.flags is SAMPLED
        self._sink = tracer.sink
        self.start_time = _time_ns()

    # ---- the API --------------------------------------------------------------

    def end(self, end_time: int | None = None) -> None:
        if self.end_time:
            return
        self.end_time = end_time or _time_ns()
        if self.recording:
            if LIMITS.set_by_env:
                trim(self, LIMITS)
            self.recording = False
            self._sink.finished(self)  # type: ignore[union-attr]  # recording: it has one

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            if not self.trace_id:
                return trace.INVALID_SPAN_CONTEXT
            context = self._context = _new_context(
                SpanContext,
                (self.trace_id, self.span_id, False, self.flags, self.trace_state, True),
            )
        return context

    @property
    def parent(self) -> SpanContext | None:
        """The parent's context as the SDK's ReadableSpan has it (ids and remoteness)."""
        if not self.parent_id:
            return None
        return SpanContext(self.trace_id, self.parent_id, self.parent_remote, self.flags)

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        """An attribute set through the API (by an agent): within the attribute limits."""
        if not self.recording:
            return
        key = str(key)
        attributes = self.attributes
        most = LIMITS.max_attributes
        if most is not None and key not in attributes and len(attributes) >= most:
            return
        value = _clean(value)
        length = LIMITS.max_value_length
        attributes[key] = value if length is None else _cut(value, length)

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if self.recording:
            self._add_event(str(name), cleaned(attributes or {}), timestamp)

    def _add_event(
        self, name: str, attributes: dict[str, Any], timestamp: int | None = None
    ) -> None:
        """An event whose attributes are already what OTLP carries (the service's own):
        kept up to MAX_EVENTS, counted as dropped past them, none once the span ended."""
        if not self.recording:
            return
        if len(self.events) >= LIMITS.max_events:
            self.dropped_events += 1
            return
        self.events.append((name, timestamp or _time_ns(), attributes))

    def update_name(self, name: str) -> None:
        if self.recording:
            self.name = name

    def is_recording(self) -> bool:
        return self.recording

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if not self.recording:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        self.status_code = status.status_code.value
        self.status_text = status.description or ""

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
        return f"{type(self).__name__}({self.name!r}, {self.span_id:016x})"
