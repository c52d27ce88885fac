"""One record per call: what the access line, the span and the metrics of a call say.

A binding opens it when a request arrives (`Pipeline.open`); the steps below fill in
what they learn — the method once it is known, the principal, the task (from the
request, the reply or a stream's events), the outcome — and the binding closes it when
the answer (for a stream: its last event) has been written. Closing writes the access
line (when the access log is on) and ends the call's span (when telemetry is on and the
span is the call's own; an HTTP request's span belongs to the gateway's middleware,
which ends it with the response status).

The record is the current call of its context (`current()`), so code below the binding
(the JSON-RPC dispatcher, an agent-facing helper) reaches it without being handed it.
"""

from __future__ import annotations

import contextvars
import time
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from service.telemetry.describe import describe

if TYPE_CHECKING:
    from service.telemetry import hub

OK = "OK"
CANCELLED = "CANCELLED"  # the caller went away before the answer was complete
MAX_ID_CHARS = 128  # the longest id the protocol accepts
_ID_IS_TASK = frozenset(("Task", "GetTaskRequest", "CancelTaskRequest", "SubscribeToTaskRequest"))

_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("a2a_call", default=None)
# The span of the HTTP request being handled (the gateway's middleware opens and ends it);
# a record opened under it adopts it instead of opening one of its own.
REQUEST_SPAN: contextvars.ContextVar[hub.Call | None] = contextvars.ContextVar(
    "a2a_http_request", default=None
)


def task_id_of(message: Message) -> str:
    """The task a request or reply is about ('' if none): Task.id, the `id` of the task
    requests, any `task_id`, or that of the message / payload it carries."""
    where, name = _task_id_rule(message.DESCRIPTOR)
    if where == _FIELD:
        return str(getattr(message, name, ""))
    if where == _PAYLOAD:
        which = message.WhichOneof("payload")
        return task_id_of(getattr(message, which)) if which else ""
    if where == _MESSAGE and message.HasField("message"):
        return task_id_of(message.message)
    return ""


_NONE, _FIELD, _PAYLOAD, _MESSAGE = range(4)


@cache
def _task_id_rule(descriptor: Descriptor) -> tuple[int, str]:
    """Where a message type keeps its task id (looked up once per type, on every call's
    request and answer)."""
    if descriptor.name in _ID_IS_TASK:
        return _FIELD, "id"
    fields = descriptor.fields_by_name
    if "task_id" in fields:
        return _FIELD, "task_id"
    if "payload" in descriptor.oneofs_by_name:
        return _PAYLOAD, ""
    if "message" in fields:
        return _MESSAGE, ""
    return _NONE, ""


class LineWriter(Protocol):
    """Where a closed call's line goes (access.AccessLog)."""

    def write(self, call: Call) -> None: ...


class Call:
    """What one call's access line, span and metrics will say; filled in while it runs."""

    __slots__ = (
        "binding",
        "method",
        "start",
        "outcome",
        "task_id",
        "principal",
        "ref",
        "span",
        "passed",
        "client",
        "user_agent",
        "status",
        "bytes",
        "held",
        "stream",
        "_log",
        "_end_span",
    )

    def __init__(
        self,
        binding: str,
        method: str = "",
        log: LineWriter | None = None,
        span: hub.Call | None = None,
        end_span: str = "",
    ) -> None:
        self.binding = binding  # grpc, jsonrpc, rest; a v0.3 codec's ends in -v0.3
        self.method = method  # the A2A method ('' until known)
        self.start = time.perf_counter()
        self.outcome = OK
        self.task_id = ""
        self.principal = ""
        self.ref = ""  # an internal error's reference
        self.span = span
        self.passed = 0  # interceptors whose `before` let the call through (pipeline.py)
        # Filled by the binding, for the access line: the caller's address (HTTP: the host;
        # gRPC: grpc's peer string, parsed when the line is written), its User-Agent, the
        # answer's status (HTTP: the code; gRPC: the status name) and the bytes of the
        # response body (gRPC: of the response messages).
        self.client = ""
        self.user_agent = ""
        self.status: int | str = 0
        self.bytes = 0
        self.held = False  # a slot of the binding's call limit, given back when it closes
        # The method answers with a stream (its descriptor's server_streaming), set at admission.
        self.stream = False
        self._log = log
        self._end_span = end_span  # the gRPC service whose call the span ends ('': not ours)

    @property
    def logged(self) -> bool:
        """Its access line will be written (what only that line needs may be skipped else)."""
        return self._log is not None

    def enter(self) -> None:
        """Make this the current call of the running context."""
        _current.set(self)

    def named(self, method: str) -> None:
        """The A2A method became known (HTTP: once the request is routed)."""
        self.method = method
        span = self.span
        if span is not None:
            span.rename(method, span.binding)

    def identified(self, principal: str) -> None:
        self.principal = principal
        if self.span is not None:
            self.span.principal(principal)

    def saw(self, message: Message) -> None:
        """A request or reply of this call: remember its task id if none is known yet."""
        if not self.task_id:
            self.about(task_id_of(message))

    def about(self, task_id: str) -> None:
        """The call concerns this task (a route that carries no A2A message, e.g. a file
        download, names it from its path)."""
        if not self.task_id:
            self.task_id = task_id[:MAX_ID_CHARS]  # a refused id may be any length

    def replied(self, response: Message) -> None:
        """The unary answer: its task in the line, its task and state on the span."""
        if not self.task_id:
            self.about(task_id_of(response))
        if self.span is not None:
            describe(self.span, response)

    def streaming(self) -> None:
        """The call's events start (counted as an open stream until the call ends); they
        are sent outside the span's context."""
        span = self.span
        if span is not None:
            if self._end_span:
                span.detach()
            span.stream_opened()

    def event(self, event: Message) -> None:
        """One event of a stream, about to be sent."""
        if not self.task_id:
            self.about(task_id_of(event))
        if self.span is not None:
            self.span.stream_event(event, describe)

    def failed(self, err: Any) -> None:
        """The call ends with this A2AError (its reason, and the ref of an internal error)."""
        reason = str(getattr(err, "reason", "") or type(err).__name__)
        self.outcome = reason
        metadata = getattr(err, "metadata", None) or {}
        self.ref = metadata.get("ref", "")
        if self.span is not None:
            self.span.failed(reason, str(getattr(err, "grpc_status", "") or "UNKNOWN"))

    def cancelled(self) -> None:
        """The caller went away before the answer was complete."""
        if self.outcome == OK:
            self.outcome = CANCELLED

    def close(self) -> None:
        """The answer is out: write the access line, end the span if it is the call's own.
        Only the first close counts."""
        log = self._log
        if log is not None:
            self._log = None
            log.write(self)  # while the call's span is still current (its ids in the line)
        if self._end_span and self.span is not None:
            service, self._end_span = self._end_span, ""
            self.span.end_rpc(service)


def current() -> Call | None:
    """The call being handled in this context."""
    return _current.get()


def name_method(name: str) -> None:
    """The binding knows which A2A method the current call is (before its request is
    read; the span is renamed once the request is, see `Call.named`)."""
    call = _current.get()
    if call is not None:
        call.method = name


def name_route(template: str) -> None:
    """The HTTP request matched the route `template` (e.g. /tasks/{id=*}): its span is
    named after it, as OpenTelemetry's HTTP conventions say (`GET /tasks/{id=*}`)."""
    span = REQUEST_SPAN.get()
    if span is not None:
        span.routed(template)
