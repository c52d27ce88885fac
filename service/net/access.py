"""The access log: one line per A2A call, on every binding, when the call ends.

A binding opens a `Call` when a request arrives (`AccessLog.open`), the layers below
fill in what they learn through `current()` — the method, the task id (from the request
or the reply), the principal, the outcome — and the binding closes it when the answer
(for a stream: its last event) has been written. The line (logger `service.access`, INFO)
carries `method` (the A2A method name), `binding` (`grpc`, `jsonrpc`, `rest`), `outcome`
(`OK`, the error reason, or `CANCELLED` when the caller went away), `duration_ms`, `task_id`, `principal`, the `trace_id` and
`span_id` of the OpenTelemetry span current at the end (when one is valid), and the `ref`
of an internal error. Never a credential, a header, or a body.

Refusals of authentication go to `service.access.unauthenticated`, which is
flood-limited (service.net.logflood): a client guessing tokens writes a few lines per
minute and a summary, not one line per guess.

Off (`access_log = false`), or with the logger above INFO, no `Call` is made at all.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from service.telemetry import hub

log = logging.getLogger("service.access")
refusals = logging.getLogger("service.access.unauthenticated")  # flood-limited: logflood
OK = "OK"
CANCELLED = "CANCELLED"  # the caller went away before the answer was complete
MAX_ID_CHARS = 128  # the longest id the protocol accepts
UNAUTHENTICATED = "UNAUTHENTICATED"

_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("a2a_access", default=None)
_ID_IS_TASK = frozenset(("Task", "GetTaskRequest", "CancelTaskRequest", "SubscribeToTaskRequest"))


def task_id_of(message: Message) -> str:
    """The task a request or reply is about ('' if none): Task.id, the `id` of the task
    requests, any `task_id`, or that of the message / payload it carries."""
    descriptor = message.DESCRIPTOR
    if descriptor.name in _ID_IS_TASK:
        return str(getattr(message, "id", ""))
    fields = descriptor.fields_by_name
    if "task_id" in fields:
        return str(getattr(message, "task_id", ""))
    if "payload" in descriptor.oneofs_by_name:
        which = message.WhichOneof("payload")
        return task_id_of(getattr(message, which)) if which else ""
    if "message" in fields and message.HasField("message"):
        return task_id_of(message.message)
    return ""


class Call:
    """What the access line of one call will say; filled in while the call runs."""

    __slots__ = ("binding", "method", "start", "outcome", "task_id", "principal", "ref", "_log")

    def __init__(self, access: AccessLog, binding: str, method: str = "") -> None:
        self._log = access
        self.binding = binding
        self.method = method
        self.start = time.perf_counter()
        self.outcome = OK
        self.task_id = ""
        self.principal = ""
        self.ref = ""

    def saw(self, message: Message) -> None:
        """A request or reply of this call: remember its task id if none is known yet."""
        if not self.task_id:
            self.about(task_id_of(message))

    def about(self, task_id: str) -> None:
        """The call concerns this task (a route that carries no A2A message, e.g. a file
        download, names it from its path)."""
        if not self.task_id:
            self.task_id = task_id[:MAX_ID_CHARS]  # a refused id may be any length

    def failed(self, err: Any) -> None:
        """The call ends with this A2AError (its reason, and the ref of an internal error)."""
        self.outcome = str(getattr(err, "reason", "") or type(err).__name__)
        metadata = getattr(err, "metadata", None) or {}
        self.ref = metadata.get("ref", "")

    def close(self) -> None:
        self._log.write(self)


@dataclass(frozen=True)
class AccessLog:
    """Opens the calls of a binding; `None` in its place means the access log is off."""

    def open(self, binding: str, method: str = "") -> Call | None:
        """A new call, made current for the code below (None when the line would not be written)."""
        if not log.isEnabledFor(logging.INFO):
            return None
        call = Call(self, binding, method)
        _current.set(call)
        return call

    def write(self, call: Call) -> None:
        duration = round((time.perf_counter() - call.start) * 1000, 3)
        fields: dict[str, Any] = {
            "method": call.method or "-",
            "binding": call.binding,
            "outcome": call.outcome,
            "duration_ms": duration,
            "task_id": call.task_id,
            "principal": call.principal,
            "ref": call.ref,
        }
        span = hub.current_span().get_span_context()  # the call's, or an agent's own
        if span.is_valid:
            fields["trace_id"] = format(span.trace_id, "032x")
            fields["span_id"] = format(span.span_id, "016x")
        extras = "".join(
            f" {key}={fields[key]}"
            for key in ("task_id", "principal", "ref", "trace_id")
            if fields.get(key)
        )
        logger = refusals if call.outcome == UNAUTHENTICATED else log
        logger.info(
            "%s %s %s %.1f ms%s",
            fields["method"],
            call.binding,
            call.outcome,
            duration,
            extras,
            extra={"fields": fields},
        )


def current() -> Call | None:
    """The call being handled in this context, if the access log is on."""
    return _current.get()


def name_method(name: str) -> None:
    """The binding knows which A2A method the current call is (before its request is read)."""
    call = _current.get()
    if call is not None:
        call.method = name
