"""Every span name, attribute key and metric the service emits, spelled once.

The metric list of docs/operations.md is checked against `METRICS` (tests/unit/test_telemetry.py).
Where OpenTelemetry's semantic conventions name a thing (RPC and HTTP server
durations, their attributes), their name is used; the rest is under `a2a.`.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.semconv.attributes import (
    client_attributes,
    error_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)
from opentelemetry.semconv.metrics import http_metrics
from opentelemetry.semconv.trace import SpanAttributes  # the RPC names' public home

SCOPE = "a2a-grpc-service"  # the instrumentation scope of every span and metric
DEFAULT_SERVICE_NAME = "a2a-grpc-service"  # when neither OTEL_SERVICE_NAME nor `name` is set

# ---- span names: a gRPC server span is `{rpc.service}/{rpc.method}`
# ("lf.a2a.v1.A2AService/SendMessage"), an HTTP one `{method} {http.route}` ("POST
# /message:send"; just the method while no route matched), as the conventions say.
SERVICER_SPAN = "A2AApi/{method}"  # the in-process servicer call under a gateway request
TURN_SPAN = "agent turn"
PUSH_SPAN = "POST"  # an HTTP client span: its method, as the conventions say

# ---- span events
EVENT_STATUS = "a2a.status"  # a state transition of the task
EVENT_ARTIFACT = "a2a.artifact"  # an artifact chunk
EVENT_COMMIT = "a2a.store.commit"  # the turn's events so far are durable in the store

# ---- attributes
METHOD = "a2a.method"  # SendMessage, GetTask, ...
BINDING = "a2a.binding"  # GRPC, JSONRPC, HTTP+JSON (the card's protocolBinding values)
OUTCOME = "a2a.outcome"  # OK, or the error's reason (TASK_NOT_FOUND, UNAUTHENTICATED, ...)
TASK_ID = "a2a.task.id"
CONTEXT_ID = "a2a.context.id"
PRINCIPAL = "a2a.principal"  # the authenticated caller's name (bearer:ci), never a credential
STATE = "a2a.task.state"  # TASK_STATE_COMPLETED, ...
ARTIFACT_ID = "a2a.artifact.id"
LAST_CHUNK = "a2a.artifact.last_chunk"
SEQ = "a2a.event.seq"  # int
EVENTS = "a2a.store.events"  # events in one task's commit (int)
COMMIT_SECONDS = "a2a.store.commit.duration"  # that commit's duration in s (the group commit)
PUSH_OUTCOME = "a2a.push.outcome"  # delivered, retried, dead, dropped
PUSH_ATTEMPT = "a2a.push.attempt"  # int, 1 for the first
AUTH_SCHEME = "a2a.auth.scheme"  # bearer, basic, apiKey, none (no credential), other
LIMIT = "a2a.limit"  # the name of the limit that refused a request
AGENT = "a2a.agent.name"  # the agent's name (the card's)
DEPENDENCY = "a2a.dependency"  # a store, bus or queue the readiness probe checks
# OpenTelemetry's semantic conventions (opentelemetry-semantic-conventions)
ERROR_TYPE = error_attributes.ERROR_TYPE
RPC_SYSTEM = SpanAttributes.RPC_SYSTEM  # "grpc"
RPC_SERVICE = SpanAttributes.RPC_SERVICE  # lf.a2a.v1.A2AService
RPC_METHOD = SpanAttributes.RPC_METHOD  # SendMessage
RPC_STATUS = SpanAttributes.RPC_GRPC_STATUS_CODE  # int: 0 OK, 5 NOT_FOUND, ...
HTTP_METHOD = http_attributes.HTTP_REQUEST_METHOD
HTTP_STATUS = http_attributes.HTTP_RESPONSE_STATUS_CODE  # int
HTTP_ROUTE = http_attributes.HTTP_ROUTE  # the route template: /tasks/{id=*}
URL_SCHEME = url_attributes.URL_SCHEME
URL_PATH = url_attributes.URL_PATH
URL_FULL = url_attributes.URL_FULL  # a push callback, without userinfo and query
CLIENT_ADDRESS = client_attributes.CLIENT_ADDRESS
SERVER_ADDRESS = server_attributes.SERVER_ADDRESS
SERVER_PORT = server_attributes.SERVER_PORT  # int
GRPC_SYSTEM = "grpc"  # the value of rpc.system

GRPC, JSONRPC, REST = "GRPC", "JSONRPC", "HTTP+JSON"
OK = "OK"

# ---- closed sets for values a caller chooses: anything else is recorded as OTHER, so no
# caller can add a metric series (or a span name) per value it makes up. The HTTP methods
# are those OpenTelemetry's HTTP semantic conventions know (case-sensitive: `get` is OTHER).
OTHER = "_OTHER"
HTTP_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
URL_SCHEMES = frozenset(("http", "https"))


@dataclass(frozen=True)
class MetricName:
    name: str
    kind: str  # histogram, counter, updowncounter, gauge
    unit: str
    description: str
    attributes: tuple[str, ...]

    @property
    def prometheus(self) -> str:
        """How the Prometheus exporter names it (counters get `_total`, seconds `_seconds`)."""
        base = self.name.replace(".", "_")
        unit = {"s": "_seconds", "By": "_bytes", "ms": "_milliseconds"}.get(self.unit, "")
        if unit and not base.endswith(unit):
            base += unit
        return base + ("_total" if self.kind == "counter" else "")


RPC_DURATION = MetricName(
    "rpc.server.call.duration",
    "histogram",
    "s",
    "gRPC calls: duration, by method and outcome (count = requests)",
    (RPC_SYSTEM, RPC_SERVICE, RPC_METHOD, RPC_STATUS, METHOD, BINDING, OUTCOME),
)
HTTP_DURATION = MetricName(
    http_metrics.HTTP_SERVER_REQUEST_DURATION,
    "histogram",
    "s",
    "HTTP gateway requests: duration, by A2A method, binding and outcome (count = requests)",
    (HTTP_METHOD, HTTP_STATUS, HTTP_ROUTE, URL_SCHEME, METHOD, BINDING, OUTCOME),
)
TASKS_ACTIVE = MetricName(
    "a2a.tasks.active", "updowncounter", "{task}", "tasks whose agent turn is running now", ()
)
TASKS_ENDED = MetricName(
    "a2a.tasks.ended",
    "counter",
    "{task}",
    "tasks that reached a terminal state, by state",
    (STATE,),
)
STREAMS_OPEN = MetricName(
    "a2a.streams.open",
    "updowncounter",
    "{stream}",
    "event streams open now, by binding",
    (BINDING,),
)
STREAM_EVENTS = MetricName(
    "a2a.stream.events",
    "counter",
    "{event}",
    "events sent on event streams, by binding",
    (BINDING,),
)
COMMIT_DURATION = MetricName(
    "a2a.store.commit.duration", "histogram", "s", "task store commits: duration", ()
)
COMMIT_BATCH = MetricName(
    "a2a.store.commit.batch_size",
    "histogram",
    "{write}",
    "task store commits: writes per commit (group commit)",
    (),
)
PUSH_DELIVERIES = MetricName(
    "a2a.push.deliveries",
    "counter",
    "{attempt}",
    "push notification attempts, by outcome: delivered, retried, dead (dead-lettered), dropped",
    (PUSH_OUTCOME,),
)
PUSH_QUEUE_DEPTH = MetricName(
    "a2a.push.queue.depth",
    "gauge",
    "{job}",
    "push jobs waiting in the queue (local-file and redis-streams)",
    (),
)
TURN_DURATION = MetricName(
    "a2a.turn.duration",
    "histogram",
    "s",
    "agent turns: duration, by agent and the task's state at the turn's end",
    (AGENT, STATE),
)
DEPENDENCY_UP = MetricName(
    "a2a.dependency.up",
    "gauge",
    "{dependency}",
    "1 when the store, bus or queue answered the last readiness check, else 0",
    (DEPENDENCY,),
)
AUTH_FAILURES = MetricName(
    "a2a.auth.failures",
    "counter",
    "{request}",
    "calls refused as unauthenticated, by the scheme offered",
    (AUTH_SCHEME,),
)
REFUSED = MetricName(
    "a2a.limits.refused",
    "counter",
    "{request}",
    "requests refused by a limit, by limit and binding",
    (LIMIT, BINDING),
)
EVENT_LOOP_LAG = MetricName(
    "a2a.event_loop.lag",
    "gauge",
    "ms",
    "how late the event loop runs what is due: the longest delay of the last 5 s",
    (),
)

METRICS = (
    RPC_DURATION,
    HTTP_DURATION,
    TASKS_ACTIVE,
    TASKS_ENDED,
    STREAMS_OPEN,
    STREAM_EVENTS,
    COMMIT_DURATION,
    COMMIT_BATCH,
    PUSH_DELIVERIES,
    PUSH_QUEUE_DEPTH,
    AUTH_FAILURES,
    REFUSED,
    TURN_DURATION,
    DEPENDENCY_UP,
    EVENT_LOOP_LAG,
)
# Process and runtime metrics (CPU, memory, open fds, threads, GC) come from
# opentelemetry-instrumentation-system-metrics, under their own conventional names:
PROCESS_METRICS: dict[str, list[str] | None] = {  # the instrumentor's config: name -> labels
    "process.cpu.time": ["user", "system"],
    "process.memory.usage": None,
    "process.open_file_descriptor.count": None,
    "process.thread.count": None,
    "cpython.gc.collections": None,
}
