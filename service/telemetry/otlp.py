"""OTLP export of the service's spans, over gRPC or HTTP/protobuf, with the SDK's exporters.

The SDK's OTLP span exporters encode each span by building protobuf messages field
by field, which costs more per span (100-250 us on a small machine) than the service
spends on a whole request. Here spans, as the flat tuples `flatten` makes of them (what
the exporter process receives, see remote.py), are written straight to the protobuf wire
format (repeated parts such as `a2a.method = SendMessage` cached), and the encoded
request goes as it is to the SDK exporter's own transport: its endpoint, headers, TLS,
compression, timeouts and retries, and the `OTEL_EXPORTER_OTLP_*` variables, are the
SDK's (over gRPC, its channel with a stub that sends bytes as they are).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.common._internal import _encode_resource
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope as PbScope
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from service.telemetry.settings import TelemetrySettings, headers
from service.telemetry.spans import EMPTY_STATE, LightSpan

log = logging.getLogger("service.telemetry")

_pack_q = struct.Struct("<Q").pack
_pack_d = struct.Struct("<d").pack
_pack_times = struct.Struct("<BBBQBQ").pack
_CACHE_MAX = 4096
_CACHED_STR = 32  # str attribute values up to this long are cached encoded (names, states)
# An AnyValue{string_value} of n < 126 bytes in a KeyValue's value field: both lengths
_SHORT_STR = [bytes((0x12, n + 2, 0x0A, n)) for n in range(0x7E)]
_STATUS = (b"", b"\x18\x01", b"\x18\x02")  # by StatusCode value: UNSET, OK, ERROR
_EXPORT_PATH = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

Flat = tuple[Any, ...]  # a span as plain values: see flatten


def flatten(s: LightSpan) -> Flat:
    """An ended, recorded span as plain values (ints, strings, tuples, lists, dicts): what
    `marshal` can carry to the exporter process and SpanEncoder writes from. Its flags are
    1: only sampled spans are exported."""
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


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (`tag` = field number << 3 | 2, one byte here)."""
    n = len(payload)
    if n < 0x80:
        return bytes((tag, n)) + payload
    return bytes((tag,)) + _varint(n) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(0x0A, value.encode("utf-8", "replace"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _pack_d(value)
    if isinstance(value, (list, tuple)):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(v)) for v in value))
    return _field(0x0A, str(value).encode("utf-8", "replace"))


def _repeats(attributes: Mapping[str, Any]) -> bool:
    """Whether an event with these attributes may come again (no float, no long str: a
    commit's milliseconds or an id would only fill the cache)."""
    for value in attributes.values():
        kind = type(value)
        if kind is float or (kind is str and len(value) > _CACHED_STR):
            return False
    return True


class SpanEncoder:
    """LightSpans -> ExportTraceServiceRequest bytes, for one resource and scope."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self._resource = _field(0x0A, _encode_resource(resource).SerializeToString())
        self._scope = _field(
            0x0A, PbScope(name=scope.name, version=scope.version or "").SerializeToString()
        )
        # Encoded attributes by (key, value), one cache per field they are written in (a
        # span's, an event's, a link's), for short str values only: ids (unique) would only
        # churn it, and True == 1 == 1.0 as keys.
        self._kv: dict[int, dict[tuple[str, Any], bytes]] = {0x4A: {}, 0x1A: {}, 0x22: {}}
        self._keys: dict[str, bytes] = {}  # an attribute's key field
        self._names: dict[tuple[int, str], bytes] = {}
        # Encoded events (name and attributes) that repeat: a state change, a last chunk.
        # Only those (see _repeats); full, it keeps what it has.
        self._events: dict[tuple[Any, ...], bytes] = {}

    def _attribute(self, tag: int, key: str, value: Any) -> bytes:
        """One KeyValue written in field `tag`."""
        head = self._keys.get(key)
        if head is None:
            head = self._keys[key] = _field(0x0A, key.encode("utf-8", "replace"))
        kind = type(value)
        if kind is str:
            encoded: bytes = value.encode("utf-8", "replace")
            n = len(encoded)
            if n < 0x7E:  # the AnyValue's and the value field's lengths fit one byte each
                body = head + _SHORT_STR[n] + encoded
            else:
                body = head + _field(0x12, _field(0x0A, encoded))
        elif kind is int:
            body = head + _field(0x12, b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF))
        elif kind is float:
            body = head + b"\x12\x09\x21" + _pack_d(value)
        else:
            body = head + _field(0x12, _any_value(value))
        n = len(body)
        field = (bytes((tag, n)) if n < 0x80 else bytes((tag,)) + _varint(n)) + body
        if kind is str and len(value) <= _CACHED_STR:
            cache = self._kv[tag]
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            cache[(key, value)] = field
        return field

    def _attributes(self, tag: int, attributes: Mapping[str, Any]) -> list[bytes]:
        cache = self._kv[tag]
        out = []
        for item in attributes.items():
            try:
                encoded = cache.get(item)
            except TypeError:  # an unhashable value (a list)
                encoded = None
            out.append(encoded if encoded is not None else self._attribute(tag, *item))
        return out

    def _name(self, tag: int, name: str) -> bytes:
        key = (tag, name)
        encoded = self._names.get(key)
        if encoded is None:
            encoded = self._names[key] = _field(tag, name.encode("utf-8", "replace"))
        return encoded

    def span(self, flat: Flat) -> bytes:
        """One span (as `flatten` made it) in the wire format of an OTLP `Span`."""
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
        parts = [
            b"\x0a\x10" + trace_id.to_bytes(16, "big") + b"\x12\x08" + span_id.to_bytes(8, "big")
        ]
        if state:
            parts.append(_field(0x1A, state.encode()))
        if parent_id:
            parts.append(b"\x22\x08" + parent_id.to_bytes(8, "big"))
        # name, kind (OTLP's kinds are the API's + 1), start and end times
        parts.append(self._name(0x2A, name))
        parts.append(_pack_times(0x30, kind + 1, 0x39, start, 0x41, end))
        parts += self._attributes(0x4A, attributes)
        events = self._events
        for event_name, ts, attrs in span_events:
            # State changes and chunks repeat: one encoding each, by name, attributes and
            # their types (True == 1 as a key)
            event_key = (event_name, *attrs.items(), *map(type, attrs.values()))
            try:
                body = events.get(event_key)
            except TypeError:  # an unhashable attribute value
                body = None
            if body is None:
                body = self._name(0x12, event_name) + b"".join(self._attributes(0x1A, attrs))
                if len(events) < _CACHE_MAX and _repeats(attrs):
                    events[event_key] = body
            n = 9 + len(body)  # the time (a fixed64 and its tag), then the body
            head = bytes((0x5A, n)) if n < 0x80 else b"\x5a" + _varint(n)
            parts.append(head + b"\x09" + _pack_q(ts) + body)
        if dropped:
            parts.append(b"\x60" + _varint(dropped))
        for link_trace, link_span, link_flags, link_remote, link_attrs in links:
            link_parts = [
                b"\x0a\x10" + link_trace.to_bytes(16, "big"),
                b"\x12\x08" + link_span.to_bytes(8, "big"),
                *self._attributes(0x22, link_attrs),
                b"\x35" + struct.pack("<I", link_flags | 0x100 | (0x200 * link_remote)),
            ]
            parts.append(_field(0x6A, b"".join(link_parts)))
        status = _STATUS[status_code]
        if status or status_text:
            encoded = (_field(0x12, status_text.encode()) if status_text else b"") + status
            parts.append(_field(0x7A, encoded))
        remote = 0x300 if parent_remote else 0x100
        parts.append(b"\x85\x01" + struct.pack("<I", flags | remote))
        return b"".join(parts)

    def request(self, spans: Sequence[Flat]) -> bytes:
        """An `ExportTraceServiceRequest` of flat spans, encoded."""
        scope_spans = self._scope + b"".join(_field(0x12, self.span(s)) for s in spans)
        resource_spans = self._resource + _field(0x12, scope_spans)
        return _field(0x0A, resource_spans)


def _as_bytes(request: bytes | ExportTraceServiceRequest) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


class _TraceServiceStub:
    """TraceService's stub, taking requests already encoded (or messages, for SDK spans)."""

    def __init__(self, channel: Any) -> None:
        self.Export = channel.unary_unary(
            _EXPORT_PATH,
            request_serializer=_as_bytes,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )


class GrpcSpans(GrpcSpanExporter):
    """The SDK's OTLP/gRPC span exporter, fed pre-encoded requests."""

    def __init__(self, encoder: SpanEncoder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._encoder = encoder

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        self._client = cast(Any, _TraceServiceStub(self._channel))

    def export_flat(self, spans: Sequence[Flat]) -> bool:
        result = self._export(spans)  # type: ignore[arg-type]  # ours: see _translate_data
        return bool(result.value == 0)

    def _translate_data(self, data: Any) -> Any:
        if data and not isinstance(data[0], tuple):  # an agent's own SDK spans
            return super()._translate_data(data)
        return self._encoder.request(data)  # bytes, sent as they are (_TraceServiceStub)

    def _count_data(self, data: Any) -> int:
        return len(data)


class HttpSpans(HttpSpanExporter):
    """The SDK's OTLP/HTTP (protobuf) span exporter, fed pre-encoded requests."""

    def __init__(self, encoder: SpanEncoder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._encoder = encoder

    def export_flat(self, spans: Sequence[Flat]) -> bool:
        if self._shutdown:
            return False
        result = self._client.export(self._encoder.request(spans))
        if not result.success:
            log.warning("span export to %s failed", self._endpoint)
        return bool(result.success)


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


def otlp_span_exporter(
    s: TelemetrySettings, resource: Resource, scope: InstrumentationScope
) -> GrpcSpans | HttpSpans:
    encoder = SpanEncoder(resource, scope)
    protocol = _protocol(s, "TRACES")
    endpoint = _endpoint(s, protocol, "v1/traces")
    if protocol == "grpc":
        return GrpcSpans(encoder, endpoint=endpoint, headers=headers(s))
    return HttpSpans(encoder, endpoint=endpoint, headers=headers(s))


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


# ResourceSpans / ScopeSpans are imported so the field numbers above can be checked against
# them (tests/unit/test_telemetry_otlp.py parses what SpanEncoder writes).
__all__ = [
    "Flat",
    "GrpcSpans",
    "HttpSpans",
    "SpanEncoder",
    "ResourceSpans",
    "flatten",
    "ScopeSpans",
    "otlp_metric_exporter",
    "otlp_span_exporter",
]
