"""OTLP export of the service's spans, over gRPC or HTTP/protobuf, with the SDK's exporters.

The loop hands ended spans on as flat tuples (`flatten`: plain values that `marshal`
carries to the exporter process, see remote.py and export.py). There `rebuild` makes the
SDK's `ReadableSpan` of each with its public constructor, and the SDK's own
`OTLPSpanExporter` encodes and sends them through its public `export`: endpoint, headers,
TLS, compression, timeouts, retries and the `OTEL_EXPORTER_OTLP_*` variables are all the
SDK's, and nothing here depends on its private names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from service.telemetry.settings import TelemetrySettings, headers
from service.telemetry.spans import EMPTY_STATE, LightSpan

Flat = tuple[Any, ...]  # a span as plain values: see flatten

_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def flatten(s: LightSpan) -> Flat:
    """An ended, recorded span as plain values (ints, strings, tuples, lists, dicts): what
    `marshal` can carry to the exporter process and `rebuild` reads. Its flags are 1: only
    sampled spans are exported."""
    state = s.trace_state
    return (
        s.name,
        s.trace_id,
        s.span_id,
        1,
        "" if state is EMPTY_STATE else state.to_header(),
        s.parent_id,
        s.parent_remote,
        s.kind,
        s.start_time,
        s.end_time,
        s.attributes,
        s.events,
        s.dropped_events,
        [
            (
                link.context.trace_id,
                link.context.span_id,
                int(link.context.trace_flags),
                link.context.is_remote,
                dict(link.attributes or {}),
            )
            for link in s.links
        ]
        if s.links
        else (),
        s.status_code,
        s.status_text,
    )


def rebuild(flat: Flat, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """A flat span (as `flatten` made it) as the SDK's ReadableSpan, for its exporters."""
    (
        name,
        trace_id,
        span_id,
        flags,
        state,
        parent_id,
        parent_remote,
        kind,
        start,
        end,
        attributes,
        span_events,
        dropped,
        links,
        status_code,
        status_text,
    ) = flat
    trace_state = TraceState.from_header([state]) if state else EMPTY_STATE
    trace_flags = _SAMPLED if flags == 1 else TraceFlags(flags)
    events: Sequence[Event] = [
        Event(event_name, attrs, ts) for event_name, ts, attrs in span_events
    ]
    if dropped:  # the SDK reads a dropped count only from its own bounded list
        bounded = BoundedList.from_seq(len(events), events)
        bounded.dropped = dropped
        events = bounded
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, trace_flags, trace_state),
        parent=SpanContext(trace_id, parent_id, parent_remote, trace_flags, trace_state)
        if parent_id
        else None,
        resource=resource,
        attributes=attributes,
        events=events,
        links=[
            Link(SpanContext(t, s, remote, TraceFlags(f)), attrs)
            for t, s, f, remote, attrs in links
        ],
        kind=_KINDS[kind],
        status=Status(_CODES[status_code], status_text or None),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def rebuild_all(
    flats: Sequence[Flat], resource: Resource, scope: InstrumentationScope
) -> list[ReadableSpan]:
    return [rebuild(flat, resource, scope) for flat in flats]


def _protocol(s: TelemetrySettings, signal: str) -> str:
    return (
        s.otlp_protocol
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )


def _endpoint(s: TelemetrySettings, protocol: str, path: str) -> str | None:
    """Our base URL for the exporter (None: the SDK reads OTEL_EXPORTER_OTLP_*ENDPOINT)."""
    if not s.otlp_endpoint:
        return None
    base = s.otlp_endpoint.rstrip("/")
    return base if protocol == "grpc" else f"{base}/{path}"


def otlp_span_exporter(s: TelemetrySettings) -> GrpcSpanExporter | HttpSpanExporter:
    """The SDK's OTLP span exporter for the configured protocol, endpoint and headers."""
    protocol = _protocol(s, "TRACES")
    endpoint = _endpoint(s, protocol, "v1/traces")
    if protocol == "grpc":
        return GrpcSpanExporter(endpoint=endpoint, headers=headers(s))
    return HttpSpanExporter(endpoint=endpoint, headers=headers(s))


def otlp_metric_exporter(s: TelemetrySettings) -> Any:
    protocol = _protocol(s, "METRICS")
    endpoint = _endpoint(s, protocol, "v1/metrics")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, headers=headers(s))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(endpoint=endpoint, headers=headers(s))
