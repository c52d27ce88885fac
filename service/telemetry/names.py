"""Every span name, attribute key and metric the service emits, spelled once.

The metric list of docs/operations.md is checked against `METRICS` (tests/unit/test_telemetry.py).
Where OpenTelemetry's semantic conventions name a thing (RPC and HTTP server
durations, their attributes), their name is used; the rest is under `a2a.`.
"""

from __future__ import annotations

from dataclasses import dataclass

SCOPE = "a2a-grpc-service"  # the instrumentation scope of every span and metric
DEFAULT_SERVICE_NAME = "a2a-grpc-service"  # when neither OTEL_SERVICE_NAME nor `name` is set

# ---- span names (server spans are named after the A2A method, e.g. "SendMessage")
SERVICER_SPAN = "A2AApi/{method}"  # the in-process servicer call under a gateway request
TURN_SPAN = "agent turn"
PUSH_SPAN = "push delivery"

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
SEQ = "a2a.event.seq"
EVENTS = "a2a.store.events"  # events in one task's commit
COMMIT_MS = "a2a.store.commit_ms"  # how long that commit took (waiting for the group commit)
PUSH_OUTCOME = "a2a.push.outcome"  # delivered, retried, dead, dropped
PUSH_ATTEMPT = "a2a.push.attempt"
AUTH_SCHEME = "a2a.auth.scheme"  # bearer, basic, apiKey, none (no credential), other
LIMIT = "a2a.limit"  # the name of the limit that refused a request
ERROR_TYPE = "error.type"
RPC_SYSTEM = "rpc.system.name"
RPC_METHOD = "rpc.method"
RPC_STATUS = "rpc.response.status_code"
HTTP_METHOD = "http.request.method"
HTTP_STATUS = "http.response.status_code"
HTTP_ROUTE = "http.route"
URL_SCHEME = "url.scheme"

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
        unit = {"s": "_seconds", "1": "", "{write}": "", "{job}": "", "{request}": ""}.get(
            self.unit, ""
        )
        if unit and not base.endswith(unit):
            base += unit
        return base + ("_total" if self.kind == "counter" else "")


RPC_DURATION = MetricName(
    "rpc.server.call.duration",
    "histogram",
    "s",
    "gRPC calls: duration, by method and outcome (count = requests)",
    (RPC_SYSTEM, RPC_METHOD, RPC_STATUS, METHOD, BINDING, OUTCOME),
)
HTTP_DURATION = MetricName(
    "http.server.request.duration",
    "histogram",
    "s",
    "HTTP gateway requests: duration, by A2A method, binding and outcome (count = requests)",
    (HTTP_METHOD, HTTP_STATUS, URL_SCHEME, METHOD, BINDING, OUTCOME),
)
TASKS_ACTIVE = MetricName(
    "a2a.tasks.active", "updowncounter", "1", "tasks whose agent turn is running now", ()
)
TASKS_ENDED = MetricName(
    "a2a.tasks.ended", "counter", "1", "tasks that reached a terminal state, by state", (STATE,)
)
STREAMS_OPEN = MetricName(
    "a2a.streams.open", "updowncounter", "1", "event streams open now, by binding", (BINDING,)
)
STREAM_EVENTS = MetricName(
    "a2a.stream.events", "counter", "1", "events sent on event streams, by binding", (BINDING,)
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
    "1",
    "push notification attempts, by outcome: delivered, retried, dead (dead-lettered), dropped",
    (PUSH_OUTCOME,),
)
PUSH_QUEUE_DEPTH = MetricName(
    "a2a.push.queue.depth", "gauge", "{job}", "push jobs waiting in the queue", ()
)
AUTH_FAILURES = MetricName(
    "a2a.auth.failures",
    "counter",
    "1",
    "calls refused as unauthenticated, by the scheme offered",
    (AUTH_SCHEME,),
)
REFUSED = MetricName(
    "a2a.limits.refused",
    "counter",
    "1",
    "requests refused by a limit, by limit and binding",
    (LIMIT, BINDING),
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
)
