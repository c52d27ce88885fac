"""The hot path of telemetry: what every layer calls, and nothing when it is off.

`current` is None unless the composition root installed telemetry (setup.py). Every
caller reads it once (`tel = hub.current`) and does nothing more when it is None: no
SDK object is touched, no context is attached. When it is on, `Telemetry` starts the
service's spans (spans.py) and counts into plain integers and histograms (`Counts`, `Hist`) that are read when
metrics are collected: no SDK instrument is called per request.

`count_refusal(limit, binding)` and `count_auth_failure(scheme)` are for code that
refuses calls (limits, authentication): one call, a no-op when telemetry is off.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation import get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service.telemetry import names
from service.telemetry.spans import LightTracer

_W3C = TraceContextTextMapPropagator()
# The service's current span: set by server calls, servicer calls and turns (which also make
# it OpenTelemetry's current span, for an agent's own spans and for log lines that read the
# ids with the API). Read first, as it is cheaper than OpenTelemetry's context.
CURRENT: ContextVar[trace.Span | None] = ContextVar("a2a_span", default=None)
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"

SERVER_FAULTS = frozenset({"INTERNAL", "UNKNOWN", "UNAVAILABLE", "DATA_LOSS", "DEADLINE_EXCEEDED"})
Key = tuple[tuple[str, Any], ...]  # attributes as a hashable key
SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Counts:
    """Monotonic or up-down sums by attribute set, read at collection time."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[Key, int] = {}

    def add(self, key: Key, n: int = 1) -> None:
        values = self.values
        values[key] = values.get(key, 0) + n

    def snapshot(self) -> list[tuple[dict[str, Any], int]]:
        return [(dict(k), v) for k, v in list(self.values.items())]


class Hist:
    """An explicit-bucket histogram by attribute set, as the SDK aggregates one, at the cost
    of a dict lookup and a bisect per record (the SDK's `Histogram.record` costs tens of
    microseconds). Read at collection time (setup.py merges it into what readers collect)."""

    __slots__ = ("metric", "bounds", "points", "_n")

    def __init__(self, metric: names.MetricName, bounds: Sequence[float]) -> None:
        self.metric = metric
        self.bounds = tuple(bounds)
        self._n = len(self.bounds) + 1
        # per key: [bucket counts..., sum, count, min, max]
        self.points: dict[Key, list[float]] = {}

    def record(self, value: float, key: Key = ()) -> None:
        point = self.points.get(key)
        n = self._n
        if point is None:
            point = self.points[key] = [0] * n + [0.0, 0, value, value]
        point[bisect_left(self.bounds, value)] += 1
        point[n] += value
        point[n + 1] += 1
        if value < point[n + 2]:
            point[n + 2] = value
        if value > point[n + 3]:
            point[n + 3] = value

    def snapshot(self) -> list[tuple[dict[str, Any], list[int], float, int, float, float]]:
        """(attributes, bucket counts, sum, count, min, max) per attribute set."""
        n = self._n
        out = []
        for key, point in list(self.points.items()):
            point = list(point)
            buckets = [int(c) for c in point[:n]]
            out.append(
                (dict(key), buckets, point[n], int(point[n + 1]), point[n + 2], point[n + 3])
            )
        return out


def remote_parent(carrier: Mapping[str, str]) -> SpanContext | None:
    """The caller's span from W3C `traceparent` / `tracestate` in `carrier` (lower-case
    keys), or None."""
    if TRACEPARENT not in carrier:
        return None
    ctx = _W3C.extract({k: carrier[k] for k in (TRACEPARENT, TRACESTATE) if k in carrier})
    parent = get_current_span(ctx).get_span_context()
    return parent if parent.is_valid else None


def current_span() -> trace.Span:
    """The service's current span, else OpenTelemetry's (an agent's own span)."""
    span = CURRENT.get()
    return span if span is not None else get_current_span()


def traceparent(span_context: SpanContext | None = None) -> str:
    """The W3C traceparent of `span_context` (default: the current span), '' if none."""
    if span_context is None:
        span_context = current_span().get_span_context()
    if not span_context.is_valid:
        return ""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, set_span_in_context(trace.NonRecordingSpan(span_context)))
    return carrier.get(TRACEPARENT, "")


def context_of(traceparent_header: str) -> SpanContext | None:
    """The span context a `traceparent` value names (None when empty or malformed)."""
    return remote_parent({TRACEPARENT: traceparent_header}) if traceparent_header else None


class Call:
    """One server call being observed: its span (current while the handler runs), and
    what the metric gets at the end."""

    __slots__ = (
        "tel",
        "span",
        "method",
        "binding",
        "outcome",
        "code",
        "start",
        "_token",
        "_stream",
    )

    def __init__(
        self, tel: Telemetry, span: trace.Span, method: str, binding: str, attach: bool
    ) -> None:
        self.tel = tel
        self.span = span
        self.method = method
        self.binding = binding
        self.outcome = names.OK
        self.code = "OK"
        self.start = time.perf_counter()
        self._stream = False
        # Current for the service and for OpenTelemetry's API (an access log reads the ids
        # with `trace.get_current_span()`), until `detach`.
        self._token = Telemetry.enter(span, otel=True) if attach else None

    def rename(self, method: str, binding: str) -> None:
        """The A2A method became known (JSON-RPC: after the body was read)."""
        self.method, self.binding = method, binding
        self.span.update_name(method)
        self.span.set_attributes({names.METHOD: method, names.BINDING: binding})

    def principal(self, principal: str) -> None:
        if principal:
            self.span.set_attribute(names.PRINCIPAL, principal)

    def task(self, task_id: str, context_id: str, state: str = "") -> None:
        span = self.span
        if task_id:
            span.set_attribute(names.TASK_ID, task_id)
        if context_id:
            span.set_attribute(names.CONTEXT_ID, context_id)
        if state:
            span.set_attribute(names.STATE, state)

    def failed(self, reason: str, code: str) -> None:
        """The call ended with an A2A error (`reason`, e.g. TASK_NOT_FOUND; `code`: its
        gRPC status name)."""
        self.outcome = reason
        self.code = code
        self.span.set_attribute(names.OUTCOME, reason)
        self.span.set_attribute(names.ERROR_TYPE, reason)
        if code in SERVER_FAULTS:  # the caller's mistakes are not the server's errors
            self.span.set_status(Status(StatusCode.ERROR, reason))

    def detach(self) -> None:
        """Stop being the current span (before a stream's events are sent)."""
        if self._token is not None:
            Telemetry.leave(self._token)
            self._token = None

    def stream_opened(self) -> None:
        """The call's events start: counted as an open stream until the call ends."""
        self._stream = True
        self.tel.stream_opened(self.binding)

    def stream_event(self, event: Any, describe: Callable[[Call, Any], None]) -> None:
        describe(self, event)
        self.tel.stream_event(self.binding)

    def end_rpc(self, service: str) -> None:
        """End a gRPC call: its span, and `rpc.server.call.duration`."""
        self.end(
            self.tel.rpc_duration,
            (
                (names.RPC_SYSTEM, "grpc"),
                (names.RPC_METHOD, f"{service}/{self.method}"),
                (names.RPC_STATUS, self.code),
            ),
        )

    def end(self, histogram: Hist, attributes: Key) -> None:
        """End the call: its span, and one record in `histogram` with `attributes` and the
        A2A ones."""
        seconds = time.perf_counter() - self.start
        if self._stream:
            self._stream = False
            self.tel.stream_opened(self.binding, -1)
        self.detach()
        self.span.set_attribute(names.OUTCOME, self.outcome)
        self.span.end()
        key = (
            *attributes,
            (names.METHOD, self.method),
            (names.BINDING, self.binding),
            (names.OUTCOME, self.outcome),
        )
        histogram.record(seconds, key)


class TurnTrace:
    """The span of one agent turn, and the task's events on it (bounded, see spans.py)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def status(self, state: str, seq: int) -> None:
        self.span.add_event(names.EVENT_STATUS, {names.STATE: state, names.SEQ: seq})

    def committed(self, events: int, seconds: float, failed: bool = False) -> None:
        """The turn's events up to now are durable in the store (a span event, not a span of
        its own: a span costs as much again to make and export, and there is one per commit)."""
        attributes: dict[str, Any] = {names.EVENTS: events, names.COMMIT_MS: seconds * 1000}
        if failed:
            attributes[names.ERROR_TYPE] = "commit failed"
        self.span.add_event(names.EVENT_COMMIT, attributes)

    def artifact(self, artifact_id: str, last_chunk: bool, seq: int) -> None:
        self.span.add_event(
            names.EVENT_ARTIFACT,
            {names.ARTIFACT_ID: artifact_id, names.LAST_CHUNK: last_chunk, names.SEQ: seq},
        )


class Telemetry:
    """Spans and counts of one installed configuration (setup.py builds it)."""

    def __init__(self, tracer: LightTracer | None) -> None:
        self.tracer = tracer  # None: metrics only (metrics_endpoint without traces)
        self.rpc_duration = Hist(names.RPC_DURATION, SECONDS_BUCKETS)
        self.http_duration = Hist(names.HTTP_DURATION, SECONDS_BUCKETS)
        self.commit_duration = Hist(names.COMMIT_DURATION, SECONDS_BUCKETS)
        self.commit_batch = Hist(names.COMMIT_BATCH, BATCH_BUCKETS)
        self.histograms = (
            self.rpc_duration,
            self.http_duration,
            self.commit_duration,
            self.commit_batch,
        )
        self.tasks_active = 0
        self.push_queue_depth: int | None = None
        self.tasks_ended = Counts()
        self.streams_open = Counts()
        self.stream_events = Counts()
        self.push_deliveries = Counts()
        self.auth_failures = Counts()
        self.refused = Counts()

    # ---- spans ------------------------------------------------------------------------

    def span(
        self,
        name: str,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        parent: SpanContext | None = None,
        links: Sequence[Link] = (),
    ) -> trace.Span:
        """A span (child of `parent`, default the current span); not made current."""
        if self.tracer is None:
            return trace.INVALID_SPAN
        if parent is None:
            parent = current_span().get_span_context()
        return self.tracer.start(name, kind, parent, attributes or {}, links)

    def server_call(
        self, method: str, binding: str, carrier: Mapping[str, str] | None, attach: bool = True
    ) -> Call:
        """The server span of one call (made current unless `attach` is False), continuing
        the caller's trace when `carrier` holds a W3C traceparent."""
        parent = remote_parent(carrier) if carrier else None
        span = self.span(
            method,
            SpanKind.SERVER,
            {names.METHOD: method, names.BINDING: binding},
            parent or trace.INVALID_SPAN_CONTEXT,
        )
        return Call(self, span, method, binding, attach)

    def servicer_span(self, method: str) -> trace.Span:
        """The in-process servicer call under a gateway request."""
        return self.span(
            names.SERVICER_SPAN.format(method=method), attributes={names.METHOD: method}
        )

    @staticmethod
    def enter(span: trace.Span, otel: bool = False) -> tuple[Token[trace.Span | None], object]:
        """Make `span` current (also for OpenTelemetry's API with `otel`); `leave` undoes it."""
        return CURRENT.set(span), otel_context.attach(set_span_in_context(span)) if otel else None

    @staticmethod
    def leave(tokens: tuple[Token[trace.Span | None], object]) -> None:
        mine, otel = tokens
        if otel is not None:
            otel_context.detach(otel)  # type: ignore[arg-type]
        CURRENT.reset(mine)

    def turn(self, task_id: str, context_id: str, principal: str) -> TurnTrace:
        attributes = {names.TASK_ID: task_id, names.CONTEXT_ID: context_id}
        if principal:
            attributes[names.PRINCIPAL] = principal
        return TurnTrace(self.span(names.TURN_SPAN, attributes=attributes))

    def push_span(
        self, parent_traceparent: str, task_id: str, seq: int, attempt: int
    ) -> trace.Span:
        """The span of one delivery attempt: a child of the span named by the job's
        traceparent (the turn that committed the event), and linked to it."""
        parent = context_of(parent_traceparent)
        return self.span(
            names.PUSH_SPAN,
            SpanKind.CLIENT,
            {names.TASK_ID: task_id, names.SEQ: seq, names.PUSH_ATTEMPT: attempt},
            parent or trace.INVALID_SPAN_CONTEXT,
            (Link(parent),) if parent is not None else (),
        )

    # ---- counts -----------------------------------------------------------------------

    def task_ended(self, state: str) -> None:
        self.tasks_ended.add(((names.STATE, state),))

    def stream_opened(self, binding: str, n: int = 1) -> None:
        self.streams_open.add(((names.BINDING, binding),), n)

    def stream_event(self, binding: str) -> None:
        self.stream_events.add(((names.BINDING, binding),))

    def committed(self, seconds: float, writes: int) -> None:
        self.commit_duration.record(seconds)
        self.commit_batch.record(writes)

    def push_outcome(self, outcome: str) -> None:
        self.push_deliveries.add(((names.PUSH_OUTCOME, outcome),))

    def observations(self) -> Iterable[tuple[names.MetricName, list[tuple[dict[str, Any], int]]]]:
        """What the observable instruments report (setup.py registers the callbacks)."""
        yield names.TASKS_ACTIVE, [({}, self.tasks_active)]
        yield names.TASKS_ENDED, self.tasks_ended.snapshot()
        yield names.STREAMS_OPEN, self.streams_open.snapshot()
        yield names.STREAM_EVENTS, self.stream_events.snapshot()
        yield names.PUSH_DELIVERIES, self.push_deliveries.snapshot()
        depth = self.push_queue_depth
        yield names.PUSH_QUEUE_DEPTH, [] if depth is None else [({}, depth)]
        yield names.AUTH_FAILURES, self.auth_failures.snapshot()
        yield names.REFUSED, self.refused.snapshot()


current: Telemetry | None = None  # set by setup.install, cleared by its shutdown


def count_refusal(limit: str, binding: str = "") -> None:
    """A request was refused by the limit named `limit` (e.g. "grpc_max_concurrent_calls",
    "max_concurrent_turns_per_principal") on `binding` (GRPC, JSONRPC, HTTP+JSON; '' when
    not known). Counted in `a2a.limits.refused`; nothing when telemetry is off."""
    tel = current
    if tel is not None:
        tel.refused.add(((names.LIMIT, limit), (names.BINDING, binding)))


def count_auth_failure(scheme: str) -> None:
    """A call was refused as unauthenticated; `scheme`: the one the caller offered
    (bearer, basic, apiKey, none, other). Counted in `a2a.auth.failures`."""
    tel = current
    if tel is not None:
        tel.auth_failures.add(((names.AUTH_SCHEME, scheme),))
