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

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from time import perf_counter, time_ns
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation import get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service.telemetry import names, spans
from service.telemetry.spans import (
    EMPTY_STATE,
    INTERNAL,
    SAMPLED,
    SERVER,
    LightSpan,
    LightTracer,
    _bits,
    trim,
)

# W3C trace context is the service's own format for a span it keeps (a push job's parent,
# stored with the job); what goes over the wire is the configured propagator's (`inject`).
_W3C = TraceContextTextMapPropagator()
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"
GRPC_CODES = {code.name: code.value[0] for code in grpc.StatusCode}  # OK -> 0, ...
_NO_NAMES: dict[str, str] = {}
# The current span is OpenTelemetry's (the service's calls and turns, an agent's own spans),
# and the service sets it directly: `otel_context.attach(set_span_in_context())` makes ten
# Python calls for what is one dict and one ContextVar.set, twice per request. Only with
# the API's own contextvars runtime (the default); another one goes through the API.
_SPAN_KEY = next(iter(set_span_in_context(trace.INVALID_SPAN, Context())))
_runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
_OTEL_CURRENT: ContextVar[Context] | None = (
    _runtime._current_context if type(_runtime) is ContextVarsRuntimeContext else None
)
Token = object  # what `enter` returns and `leave` takes

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


def extract(
    propagator: TextMapPropagator, carrier: Mapping[str, str]
) -> tuple[SpanContext | None, Context | None]:
    """The caller's span and, when it sent baggage, the context that carries it."""
    ctx = propagator.extract(carrier)
    parent = get_current_span(ctx).get_span_context()
    return (parent if parent.is_valid else None), (ctx if baggage.get_all(ctx) else None)


def inject(headers: dict[str, str], span: trace.Span | None = None) -> None:
    """Add the configured propagator's headers for `span` (default: the current span)
    and the current baggage to `headers`."""
    if span is None:
        span = current_span()
    if not span.get_span_context().is_valid:
        return
    propagate.inject(headers, set_span_in_context(span, otel_context.get_current()))


def current_span() -> trace.Span:
    """The current span: a call's or a turn's of the service, or an agent's own."""
    var = _OTEL_CURRENT
    context = var.get() if var is not None else otel_context.get_current()
    span = context.get(_SPAN_KEY)
    return span if span is not None else trace.INVALID_SPAN  # type: ignore[return-value]


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


def enter(span: trace.Span) -> Token:
    """Make `span` the current span; `leave` undoes it."""
    var = _OTEL_CURRENT
    if var is None:
        return otel_context.attach(set_span_in_context(span))
    return var.set(Context({**var.get(), _SPAN_KEY: span}))


def leave(token: Token) -> None:
    var = _OTEL_CURRENT
    if var is None:
        otel_context.detach(token)  # type: ignore[arg-type]
        return
    try:
        var.reset(token)  # type: ignore[arg-type]
    except ValueError:  # left in another context than it was entered in (as detach allows)
        pass


class Call(LightSpan):
    """One server call being observed: its span (current while the handler runs), and
    what the metric gets at the end."""

    __slots__ = (
        "tel",
        "method",
        "binding",
        "outcome",
        "code",
        "route",
        "started",
        "_token",
        "_stream",
    )

    def __init__(
        self,
        tel: Telemetry,
        method: str,
        binding: str,
        parent: SpanContext | None,
        attach: bool,
        name: str = "",
        attributes: dict[str, Any] | None = None,
        carried: Context | None = None,
    ) -> None:
        """`name` (default `method`) and `attributes` (default the A2A method and binding)
        of the span; `carried`: the caller's context when it sent baggage, current while
        the call runs."""
        tracer = tel.tracer
        if attributes is None:
            attributes = {names.METHOD: method, names.BINDING: binding}
        if parent is not None or tracer is None or not tracer.sample_all:
            LightSpan.__init__(self, tracer, name or method, SERVER, parent, attributes)
        else:  # the common case, a new trace that is sampled: LightSpan.__init__ inlined
            self.name = name or method
            self.kind = SERVER
            self.attributes = attributes
            self.events = []
            self.links = ()
            self.status_code = self.dropped_events = self.end_time = self.parent_id = 0
            self.status_text = ""
            self._context = None
            self.parent_remote = False
            self.trace_id = _bits(128) or 1
            self.span_id = _bits(64) or 1
            self.flags = SAMPLED
            self.trace_state = EMPTY_STATE
            self.recording = True
            self._sink = tracer.sink
            self.start_time = time_ns()
        self.tel = tel
        self.method = method
        self.binding = binding
        self.outcome = names.OK
        self.code = "OK"
        self.route = ""
        self.started = perf_counter()
        self._stream = False
        # Current until `detach` (`enter`, inlined for its common case)
        var = _OTEL_CURRENT
        self._token: Token | None = None
        if not attach:
            pass
        elif carried is not None:  # the caller's baggage is current too
            self._token = otel_context.attach(set_span_in_context(self, carried))
        elif var is not None:
            self._token = var.set(Context({**var.get(), _SPAN_KEY: self}))
        else:
            self._token = enter(self)

    def rename(self, method: str, binding: str) -> None:
        """The A2A method became known (JSON-RPC: after the body was read). The span's
        name stays the conventional one (the RPC, or the HTTP method and route)."""
        self.method = method
        self.binding = binding
        if self.recording:
            self.attributes[names.METHOD] = method
            self.attributes[names.BINDING] = binding

    def routed(self, route: str) -> None:
        """The HTTP request matched `route` (its template): the span becomes
        `{method} {route}`."""
        self.route = route
        if self.recording:
            attributes = self.attributes
            attributes[names.HTTP_ROUTE] = route
            http_method = attributes.get(names.HTTP_METHOD, names.OTHER)
            if http_method != names.OTHER:  # an unknown method's span stays `HTTP`
                self.name = self.tel.http_name(http_method, route)

    def principal(self, principal: str) -> None:
        if principal and self.recording:
            self.attributes[names.PRINCIPAL] = principal

    def task(self, task_id: str, context_id: str, state: str = "") -> None:
        if not self.recording:  # ended (exported as it was) or not sampled
            return
        attributes = self.attributes
        if task_id:
            attributes[names.TASK_ID] = task_id
        if context_id:
            attributes[names.CONTEXT_ID] = context_id
        if state:
            attributes[names.STATE] = state

    def failed(self, reason: str, code: str) -> None:
        """The call ended with an A2A error (`reason`, e.g. TASK_NOT_FOUND; `code`: its
        gRPC status name)."""
        self.outcome = reason
        self.code = code
        if self.recording:
            self.attributes[names.ERROR_TYPE] = reason
        if code in SERVER_FAULTS:  # the caller's mistakes are not the server's errors
            self.set_status(StatusCode.ERROR, reason)

    def detach(self) -> None:
        """Stop being the current span (before a stream's events are sent)."""
        if self._token is not None:
            leave(self._token)
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
        tel = self.tel
        labels = (service, self.method, self.binding, self.code, self.outcome)
        key = tel.rpc_keys.get(labels)
        if key is None:
            key = tel.rpc_key(*labels)
        if self.recording:
            self.attributes[names.RPC_STATUS] = key[3][1]
        self._finish(tel.rpc_duration, key)

    def end_request(self, histogram: Hist, attributes: Key, status: int = 0) -> None:
        """End an HTTP request (answered with `status`): its span, and one record in
        `histogram` with `attributes` and the A2A ones."""
        if self.recording and status:
            self.attributes[names.HTTP_STATUS] = status
        if self.route:
            key: Key = (
                *attributes,
                (names.HTTP_ROUTE, self.route),
                (names.METHOD, self.method),
                (names.BINDING, self.binding),
                (names.OUTCOME, self.outcome),
            )
        else:
            key = (
                *attributes,
                (names.METHOD, self.method),
                (names.BINDING, self.binding),
                (names.OUTCOME, self.outcome),
            )
        self._finish(histogram, key)

    def _finish(self, histogram: Hist, key: Key) -> None:
        seconds = perf_counter() - self.started
        if self._stream:
            self._stream = False
            self.tel.stream_opened(self.binding, -1)
        if self._token is not None:
            leave(self._token)
            self._token = None
        if not self.end_time:  # `end`, inlined
            self.end_time = time_ns()
            if self.recording:
                self.attributes[names.OUTCOME] = self.outcome
                limits = spans.LIMITS
                if limits.set_by_env:
                    trim(self, limits)
                self.recording = False
                self._sink.finished(self)  # type: ignore[union-attr]  # recording: it has one
        histogram.record(seconds, key)


class Turn(LightSpan):
    """The span of one agent turn, and the task's events on it (at most MAX_EVENTS; past
    them they are counted as dropped, as LightSpan.add_event does)."""

    __slots__ = ()

    def status(self, state: str, seq: int) -> None:
        self._add_event(names.EVENT_STATUS, {names.STATE: state, names.SEQ: seq})

    def committed(self, events: int, seconds: float, failed: bool = False) -> None:
        """The turn's events up to now are durable in the store (a span event, not a span of
        its own: a span costs as much again to make and export, and there is one per commit)."""
        attributes: dict[str, Any] = {names.EVENTS: events, names.COMMIT_SECONDS: seconds}
        if failed:
            attributes[names.ERROR_TYPE] = "commit failed"
        self._add_event(names.EVENT_COMMIT, attributes)

    def artifact(self, artifact_id: str, last_chunk: bool, seq: int) -> None:
        self._add_event(
            names.EVENT_ARTIFACT,
            {names.ARTIFACT_ID: artifact_id, names.LAST_CHUNK: last_chunk, names.SEQ: seq},
        )


class Telemetry:
    """Spans and counts of one installed configuration (setup.py builds it)."""

    def __init__(
        self, tracer: LightTracer | None, propagator: TextMapPropagator | None = None
    ) -> None:
        self.tracer = tracer  # None: metrics only (metrics_endpoint without traces)
        # what extracts a caller's context: the global propagator (OTEL_PROPAGATORS), and
        # the headers it reads (a call that has none of them is a new trace, at no cost)
        self.propagator = propagator or propagate.get_global_textmap()
        self.carried = frozenset(self.propagator.fields)
        self.rpc_duration = Hist(names.RPC_DURATION, SECONDS_BUCKETS)
        self.http_duration = Hist(names.HTTP_DURATION, SECONDS_BUCKETS)
        self.commit_duration = Hist(names.COMMIT_DURATION, SECONDS_BUCKETS)
        self.commit_batch = Hist(names.COMMIT_BATCH, BATCH_BUCKETS)
        self.turn_duration = Hist(names.TURN_DURATION, SECONDS_BUCKETS)
        self.histograms = (
            self.rpc_duration,
            self.http_duration,
            self.commit_duration,
            self.commit_batch,
            self.turn_duration,
        )
        self.agent = ""  # the agent's name, on `a2a.turn.duration`
        self.tasks_active = 0
        self.push_queue_depth: int | None = None
        # store/bus/queue -> 1 up, 0 down, as the last readiness check found them
        self.dependencies: Callable[[], Mapping[str, int]] | None = None
        # the event loop's recent lag in ms (service/ops/looplag.py), read at each collection
        self.loop_lag: Callable[[], float] | None = None
        self.tasks_ended = Counts()
        self.streams_open = Counts()
        self.stream_events = Counts()
        self.push_deliveries = Counts()
        self.auth_failures = Counts()
        self.refused = Counts()
        self.rpc_keys: dict[tuple[str, ...], Key] = {}  # see rpc_key
        # span names and metric keys made once, looked up without making a key per call
        self.span_names: dict[str, dict[str, str]] = {}  # see rpc_name, http_name
        self.turn_keys: dict[str, Key] = {}  # see turn_ended

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
        return LightSpan(
            self.tracer,
            name,
            kind.value,
            current_span() if parent is None else parent,
            attributes or {},
            links,
        )

    def server_call(
        self,
        method: str,
        binding: str,
        carrier: Mapping[str, str] | None,
        attach: bool = True,
        *,
        service: str = "",
        attributes: dict[str, Any] | None = None,
    ) -> Call:
        """The server span of one call (made current unless `attach` is False), continuing
        the caller's trace (and baggage) when `carrier` holds what the propagator reads.
        `service`: a gRPC call's service (the span is `{service}/{method}`, with the `rpc.*`
        attributes); `attributes`: an HTTP request's (the A2A ones are added)."""
        parent = carried = None
        if carrier and not self.carried.isdisjoint(carrier):
            parent, carried = extract(self.propagator, carrier)
        name = method
        if service:
            name = self.span_names.get(service, _NO_NAMES).get(method) or self.rpc_name(
                service, method
            )
            attributes = {
                names.METHOD: method,
                names.BINDING: binding,
                names.RPC_SYSTEM: names.GRPC_SYSTEM,
                names.RPC_SERVICE: service,
                names.RPC_METHOD: method,
            }
        elif attributes is not None:
            attributes[names.METHOD] = method
            attributes[names.BINDING] = binding
        return Call(self, method, binding, parent, attach, name, attributes, carried)

    def rpc_name(self, service: str, method: str) -> str:
        """A gRPC server span's name, made once per method."""
        name = self.span_names.setdefault(service, {})[method] = f"{service}/{method}"
        return name

    def http_name(self, http_method: str, route: str) -> str:
        """An HTTP server span's name once its route is known, made once per route."""
        name = self.span_names.get(http_method, _NO_NAMES).get(route)
        if name is None:
            name = self.span_names.setdefault(http_method, {})[route] = f"{http_method} {route}"
        return name

    def servicer_span(self, method: str) -> trace.Span:
        """The in-process servicer call under a gateway request."""
        return self.span(
            names.SERVICER_SPAN.format(method=method), attributes={names.METHOD: method}
        )

    def turn(self, task_id: str, context_id: str, principal: str) -> Turn:
        """The span of an agent turn, a child of the current span (the call that started it)."""
        attributes = {names.TASK_ID: task_id, names.CONTEXT_ID: context_id}
        if principal:
            attributes[names.PRINCIPAL] = principal
        return Turn(self.tracer, names.TURN_SPAN, INTERNAL, current_span(), attributes)

    def push_span(
        self,
        parent_traceparent: str,
        task_id: str,
        seq: int,
        attempt: int,
        url: str = "",
    ) -> trace.Span:
        """The span of one delivery attempt (a POST to `url`): a child of the span named by
        the job's traceparent (the turn that committed the event), and linked to it."""
        parent = context_of(parent_traceparent)
        attributes: dict[str, Any] = {
            names.TASK_ID: task_id,
            names.SEQ: int(seq),
            names.PUSH_ATTEMPT: int(attempt),
            names.HTTP_METHOD: "POST",
        }
        if url:
            attributes.update(url_attributes(url))
        return self.span(
            names.PUSH_SPAN,
            SpanKind.CLIENT,
            attributes,
            parent or trace.INVALID_SPAN_CONTEXT,
            (Link(parent),) if parent is not None else (),
        )

    def turn_ended(self, turn: LightSpan, state: str, seconds: float) -> None:
        """An agent turn ended with the task in `state`: `a2a.turn.duration`."""
        key = self.turn_keys.get(state)
        if key is None:
            key = self.turn_keys[state] = ((names.AGENT, self.agent), (names.STATE, state))
        self.turn_duration.record(seconds, key)

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

    def rpc_key(self, service: str, method: str, binding: str, code: str, outcome: str) -> Key:
        """The attributes of one `rpc.server.call.duration` record, made once per
        combination (a handful of methods, codes and outcomes) and kept."""
        key = self.rpc_keys[(service, method, binding, code, outcome)] = (
            (names.RPC_SYSTEM, names.GRPC_SYSTEM),
            (names.RPC_SERVICE, service),
            (names.RPC_METHOD, method),
            (names.RPC_STATUS, GRPC_CODES.get(code, GRPC_CODES["UNKNOWN"])),
            (names.METHOD, method),
            (names.BINDING, binding),
            (names.OUTCOME, outcome),
        )
        return key

    def push_outcome(self, outcome: str) -> None:
        self.push_deliveries.add(((names.PUSH_OUTCOME, outcome),))

    def observations(
        self,
    ) -> Iterable[tuple[names.MetricName, Sequence[tuple[dict[str, Any], float]]]]:
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
        states = self.dependencies() if self.dependencies is not None else {}
        yield names.DEPENDENCY_UP, [({names.DEPENDENCY: name}, up) for name, up in states.items()]
        lag = self.loop_lag
        yield names.EVENT_LOOP_LAG, [] if lag is None else [({}, lag())]


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


def url_attributes(url: str) -> dict[str, Any]:
    """A push callback's `url.full`, `server.address` and `server.port`: without the
    userinfo, the query and the fragment (where a receiver's token would be)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
    except ValueError:
        return {}
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return {
        names.URL_FULL: urlunsplit((parts.scheme, netloc, parts.path, "", "")),
        names.SERVER_ADDRESS: host,
        names.SERVER_PORT: port,
    }
