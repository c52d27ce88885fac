"""The access log: one line per A2A call, on every binding, when the call ends.

The line is written from the call's record (record.py) when the binding closes it, so
the duration and outcome are those the caller saw. The line (logger `service.access`,
INFO) carries `method` (the A2A method name), `binding` (`grpc`, `jsonrpc`, `rest`),
`outcome` (`OK`, the error reason, or `CANCELLED` when the caller went away),
`duration_ms`, `task_id`, `principal`, the `trace_id` and `span_id` of the OpenTelemetry
span current at the end (when one is valid), the `ref` of an internal error, and what the
binding saw of the transport: `client_address` (the caller's IP address, or its socket),
`user_agent` (at most 256 printable characters, configured secrets redacted),
`http_status` (HTTP bindings: the response code) or `grpc_status` (gRPC: the status name),
and `response_bytes` (HTTP: the response body as sent; gRPC: the serialized response
messages, without framing). Never a credential, another header, or a body.

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
from service.ops.logs import REDACTOR
from service.telemetry import hub

__all__ = ["CANCELLED", "OK", "AccessLog", "Call", "current", "task_id_of"]

log = logging.getLogger("service.access")
refusals = logging.getLogger("service.access.unauthenticated")  # flood-limited: logflood
UNAUTHENTICATED = "UNAUTHENTICATED"
MAX_USER_AGENT_CHARS = 256


def client_address(peer: str) -> str:
    """The address part of a caller: grpc's `ipv4:1.2.3.4:5678` / `ipv6:[::1]:5678` peer
    strings become `1.2.3.4` / `::1`; anything else (an HTTP host, a unix socket) is kept."""
    kind, sep, rest = peer.partition(":")
    if not sep or kind not in ("ipv4", "ipv6"):
        return peer
    if rest.startswith("["):
        return rest[1:].partition("]")[0]
    return rest.rpartition(":")[0] or rest


def user_agent(text: str) -> str:
    """A caller-written User-Agent as the line may hold it: short, printable, no secret."""
    text = text[:MAX_USER_AGENT_CHARS]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else "?" for c in text)
    return REDACTOR.text(text)


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
        if call.client:
            fields["client_address"] = client_address(call.client)
        if call.status:
            fields["grpc_status" if call.binding == "grpc" else "http_status"] = call.status
        if call.status or call.bytes:
            fields["response_bytes"] = call.bytes
        if call.user_agent:
            fields["user_agent"] = user_agent(call.user_agent)
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
