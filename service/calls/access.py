"""The access log: one line per A2A call, on every binding, when the call ends.

The line is written from the call's record (record.py) when the binding closes it, so
the duration and outcome are those the caller saw. The line (logger `service.access`,
INFO) carries `method` (the A2A method name), `binding` (`grpc`, `jsonrpc`, `rest`),
`outcome` (`OK`, the error reason, or `CANCELLED` when the caller went away),
`duration_ms`, `task_id`, `principal`, the `trace_id` and `span_id` of the OpenTelemetry
span current at the end (when one is valid), and the `ref` of an internal error. Never a
credential, a header, or a body.

Refusals of authentication go to `service.access.unauthenticated`, which is
flood-limited (service.ops.logflood): a client guessing tokens writes a few lines per
minute and a summary, not one line per guess.

Off (`access_log = false`), or with the logger above INFO, no line is written.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from service.calls.record import CANCELLED, OK, Call, current, task_id_of
from service.telemetry import hub

__all__ = ["CANCELLED", "OK", "AccessLog", "Call", "current", "task_id_of"]

log = logging.getLogger("service.access")
refusals = logging.getLogger("service.access.unauthenticated")  # flood-limited: logflood
UNAUTHENTICATED = "UNAUTHENTICATED"


@dataclass(frozen=True)
class AccessLog:
    """Opens the calls of a binding; `None` in its place means the access log is off."""

    def open(self, binding: str, method: str = "") -> Call | None:
        """A new call with no span, made current for the code below (None when the line
        would not be written)."""
        sink = self.sink()
        if sink is None:
            return None
        call = Call(binding, method, sink)
        call.enter()
        return call

    def sink(self) -> AccessLog | None:
        """Itself while its lines are written (the logger at INFO), else None."""
        return self if log.isEnabledFor(logging.INFO) else None

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
