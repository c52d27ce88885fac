"""Telemetry without a server: spans rebuilt from flat tuples encode as the SDK's, the off switch
leaves nothing installed, the settings are checked, and docs/operations.md lists every metric."""

from __future__ import annotations

import enum
import marshal
import pathlib
import re

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, StatusCode

from service.telemetry import hub, names, setup
from service.telemetry.export import SpanPipeline, readable
from service.telemetry.otlp import flatten, rebuild_all
from service.telemetry.settings import TelemetrySettings, validate_telemetry
from service.telemetry.spans import LightSpan, LightTracer

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Collect:
    def __init__(self) -> None:
        self.spans: list[LightSpan] = []

    def finished(self, span: LightSpan) -> None:
        self.spans.append(span)


def test_spans_rebuilt_from_flat_tuples_encode_as_the_sdk_spans():
    sink = Collect()
    tracer = LightTracer(sink)
    root = tracer.start(
        "SendMessage",
        SpanKind.SERVER,
        None,
        {"a2a.method": "SendMessage", "n": 5, "neg": -3, "f": 1.5, "b": True, "l": ["x", "y"]},
    )
    child = tracer.start(
        "agent turn",
        SpanKind.INTERNAL,
        root.get_span_context(),
        {"a2a.task.id": "ü-" + "x" * 200},  # non-ASCII, and longer than one length byte
        [Link(root.get_span_context(), {"k": "v"})],
    )
    child.add_event("a2a.status", {"a2a.task.state": "TASK_STATE_WORKING", "a2a.event.seq": 2})
    child.set_status(StatusCode.ERROR, "boom")
    # The same key and value as a span attribute and as an event's (written in different
    # fields), and values equal as Python keys but not on the wire (True, 1, 1.0).
    child.set_attribute("a2a.task.state", "TASK_STATE_WORKING")
    child.add_event("flag", {"x": True})
    child.add_event("flag", {"x": 1})
    child.add_event("flag", {"x": 1.0})
    child.set_attribute("b", 1)  # "b" is True on the root: another type, another span
    child.end()
    root.end()
    resource = Resource.create({"service.name": "unit"})
    scope = InstrumentationScope("a2a-grpc-service", "1")
    # as the exporter process receives them
    flats = marshal.loads(marshal.dumps([flatten(x) for x in sink.spans]))
    ours = encode_spans(rebuild_all(flats, resource, scope))
    theirs = encode_spans([readable(s, resource, scope) for s in sink.spans])
    assert len(ours.resource_spans[0].scope_spans[0].spans) == 2
    assert ours == theirs


def test_a_rebuilt_span_keeps_its_dropped_events_count():
    sink = Collect()
    span = LightTracer(sink).start("s", SpanKind.INTERNAL, None, {})
    for n in range(40):  # past the default 32 events
        span.add_event("e", {"n": n})
    span.end()
    resource = Resource.create({"service.name": "unit"})
    (rebuilt,) = rebuild_all([flatten(sink.spans[0])], resource, InstrumentationScope("x"))
    assert len(rebuilt.events) == 32 and rebuilt.dropped_events == 8
    encoded = encode_spans([rebuilt]).resource_spans[0].scope_spans[0].spans[0]
    assert encoded.dropped_events_count == 8


def test_off_installs_nothing_and_counting_is_a_no_op():
    assert setup.install(TelemetrySettings()) is None
    assert hub.current is None
    hub.count_refusal("max_concurrent_turns", names.GRPC)  # nothing to count into: no error
    hub.count_auth_failure("bearer")


def test_refusals_are_counted_for_the_limits():
    reader = InMemoryMetricReader()
    installed = setup.install(TelemetrySettings(), metric_readers=[reader])
    assert installed is not None
    try:
        hub.count_refusal("max_concurrent_turns_per_principal", names.REST)
        hub.count_refusal("max_concurrent_turns_per_principal", names.REST)
        data = reader.get_metrics_data()
        found = [
            (dict(p.attributes), p.value)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == names.REFUSED.name
            for p in m.data.data_points
        ]
        assert found == [
            ({names.LIMIT: "max_concurrent_turns_per_principal", names.BINDING: names.REST}, 2)
        ]
    finally:
        installed.shutdown()
    assert hub.current is None


@pytest.mark.parametrize(
    "values, message",
    [
        ({"telemetry": "jaeger"}, "telemetry: expected one of none, console, otlp"),
        ({"otlp_protocol": "http/json"}, "otlp_protocol"),
        ({"otlp_endpoint": "collector:4317"}, "otlp_endpoint: expected a URL"),
        ({"otlp_headers": ["no-equals-sign"]}, "otlp_headers: entry 1"),
        ({"metrics_port": 9464}, "metrics_port: set metrics_endpoint = true"),
        ({"metrics_endpoint": True, "metrics_port": 70000}, "metrics_port: 70000"),
    ],
)
def test_bad_settings_name_the_key(values, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_telemetry(TelemetrySettings(**values))


def test_the_operations_doc_lists_every_metric_with_its_prometheus_name():
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc.split("### Metrics", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z0-9_.]+)` \| `([a-z0-9_]+)`", section, re.M))
    assert listed == {(m.name, m.prometheus) for m in names.METRICS}


def test_the_prometheus_names_are_what_metrics_serves():
    installed = setup.install(TelemetrySettings(metrics_endpoint=True))
    assert installed is not None and hub.current is not None
    try:
        tel = hub.current
        for hist in tel.histograms:
            hist.record(0.01)
        tel.task_ended("TASK_STATE_COMPLETED")
        tel.stream_opened(names.GRPC)
        tel.stream_event(names.GRPC)
        tel.push_outcome("delivered")
        tel.push_queue_depth = 1
        tel.dependencies = lambda: {"task store": 1, "push queue": 0}
        tel.loop_lag = lambda: 12.5
        hub.count_auth_failure("none")
        hub.count_refusal("grpc_max_concurrent_calls", names.GRPC)
        text = installed.metrics_text().decode()
    finally:
        installed.shutdown()
    served = set(re.findall(r"^# TYPE (\S+) ", text, re.M)) - {"target_info"}
    process = {n for n in served if n.startswith(("process_", "cpython_"))}
    assert len(process) >= len(names.PROCESS_METRICS)  # CPU, memory, fds, threads, GC
    assert served - process == {m.prometheus for m in names.METRICS}


def test_a_call_is_the_current_span_for_the_opentelemetry_api_until_it_ends():
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    installed = setup.install(
        TelemetrySettings(),
        span_exporter=InMemorySpanExporter(),
        metric_readers=[InMemoryMetricReader()],
    )
    assert installed is not None and hub.current is not None
    try:
        before = trace.get_current_span()
        rec = hub.current.server_call("GetTask", names.GRPC, None)
        assert isinstance(rec, LightSpan)  # a call is its own span
        assert trace.get_current_span() is rec  # what an agent's or a library's span nests under
        assert hub.current_span() is rec
        rec.end_rpc("lf.a2a.v1.A2AService")
        assert trace.get_current_span() is before
    finally:
        installed.shutdown()


class _Batches:
    """A stand-in for the exporter process: keeps what it is handed (or waits, when stuck)."""

    def __init__(self, stuck: bool = False) -> None:
        import threading

        self.batches: list[list] = []
        self.release = threading.Event()
        if not stuck:
            self.release.set()

    def send_flat(self, data: bytes, count: int) -> bool:
        self.release.wait(10)
        spans = marshal.loads(data)
        assert len(spans) == count
        self.batches.append(spans)
        return True

    def shutdown(self) -> None:
        self.release.set()


def _ended_spans(pipeline: SpanPipeline, n: int) -> list[int]:
    tracer = LightTracer(pipeline)
    ids = []
    for _ in range(n):
        span = tracer.start("SendMessage", SpanKind.SERVER, None, {"a2a.method": "SendMessage"})
        span.end()
        ids.append(span.span_id)
    return ids


def test_the_pipeline_hands_every_span_over_in_marshalled_batches():
    exporter = _Batches()
    pipeline = SpanPipeline(exporter, Resource.create({}), InstrumentationScope("s"), batch=100)
    try:
        ids = _ended_spans(pipeline, 250)  # two full batches packed on the caller, one partial
        assert pipeline.flush(5)
        sent = [flat[2] for batch in exporter.batches for flat in batch]
        assert sent == ids
        assert [len(b) for b in exporter.batches] == [100, 100, 50]
    finally:
        pipeline.shutdown()


def test_the_pipeline_drops_and_counts_past_its_bound_when_the_exporter_is_stuck():
    from service.telemetry.export import MAX_QUEUE

    exporter = _Batches(stuck=True)
    pipeline = SpanPipeline(exporter, Resource.create({}), InstrumentationScope("s"), batch=512)
    try:
        _ended_spans(pipeline, MAX_QUEUE + 3 * 512)
        assert pipeline.dropped >= 2 * 512  # bounded: not all kept while nothing leaves
        exporter.release.set()
        assert pipeline.flush(10)
        kept = sum(len(b) for b in exporter.batches)
        assert kept + pipeline.dropped == MAX_QUEUE + 3 * 512  # each span sent or counted
    finally:
        pipeline.shutdown()


class _IntState(enum.IntEnum):
    DONE = 3


def test_unsampled_and_metrics_only_spans_carry_context_but_reach_no_sink():
    sink = Collect()
    never = LightTracer(sink, sampler=lambda trace_id, name: False)
    root = never.start("SendMessage", SpanKind.SERVER, None, {})
    child = LightTracer(sink).start("agent turn", SpanKind.INTERNAL, root, {})
    assert root.get_span_context().is_valid and not root.get_span_context().trace_flags.sampled
    assert child.get_span_context().trace_id == root.get_span_context().trace_id
    assert not child.is_recording()  # follows its parent's decision
    child.end()
    root.end()
    assert sink.spans == []
    tel = hub.Telemetry(None)  # metrics only
    call = tel.server_call("GetTask", names.GRPC, None)
    assert not call.get_span_context().is_valid
    call.end_rpc("lf.a2a.v1.A2AService")
    assert tel.rpc_duration.snapshot()  # still counted


def test_values_an_agent_sets_are_cleaned_and_an_ended_span_takes_no_more():
    sink = Collect()
    span = LightTracer(sink).start("agent turn", SpanKind.INTERNAL, None, {})
    span.set_attribute("state", _IntState.DONE)
    span.set_attributes({"path": pathlib.PurePosixPath("/x"), "seq": (1, _IntState.DONE)})
    span.add_event("step", {"n": _IntState.DONE})
    span.end()
    span.set_attribute("late", "x")
    span.add_event("late")
    assert span.attributes == {"state": 3, "path": "/x", "seq": [1, 3]}
    assert type(span.attributes["state"]) is int
    assert [name for name, _, _ in span.events] == ["step"]
    marshal.dumps([flatten(s) for s in sink.spans])  # what the pipeline sends: no error


def test_a_pipeline_batch_that_cannot_be_marshalled_is_dropped_not_raised():
    exporter = _Batches()
    pipeline = SpanPipeline(exporter, Resource.create({}), InstrumentationScope("s"), batch=2)
    try:
        tracer = LightTracer(pipeline)
        bad = tracer.start("x", SpanKind.INTERNAL, None, {"obj": object()})  # not via the API
        bad.end()
        tracer.start("y", SpanKind.INTERNAL, None, {}).end()  # fills the batch: packed here
        assert pipeline.dropped == 2
        _ended_spans(pipeline, 3)
        assert pipeline.flush(5)
        assert sum(len(b) for b in exporter.batches) == 3
    finally:
        pipeline.shutdown()


def test_the_inlined_call_start_sets_what_lightspan_sets():
    """hub.Call inlines LightSpan.__init__ for a sampled root: both must fill every slot."""
    tel = hub.Telemetry(LightTracer(Collect()))
    inlined = tel.server_call("SendMessage", names.GRPC, None, attach=False)
    general = hub.Call(tel, "SendMessage", names.GRPC, inlined.get_span_context(), False)
    for slot in LightSpan.__slots__:
        assert hasattr(inlined, slot) and hasattr(general, slot), slot
        if slot not in ("trace_id", "span_id", "parent_id", "start_time", "_context", "attributes"):
            assert getattr(inlined, slot) == getattr(general, slot) or slot == "events", slot


async def test_http_methods_and_schemes_outside_the_known_sets_are_other():
    from gateway.telemetry import TelemetryMiddleware

    async def answer_405(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 405, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def no_body() -> dict:
        return {"type": "http.request", "body": b""}

    async def drop(message) -> None:
        return None

    sink = Collect()
    tel = hub.Telemetry(LightTracer(sink))
    app = TelemetryMiddleware(answer_405, tel)
    for method, scheme in (("BREW", "http"), ("get", "https"), ("GET", "gopher")):
        scope = {"type": "http", "method": method, "path": "/tasks", "scheme": scheme}
        await app({**scope, "headers": []}, no_body, drop)
    assert [span.name for span in sink.spans] == ["HTTP", "HTTP", "GET"]
    recorded = {
        (attrs[names.HTTP_METHOD], attrs[names.URL_SCHEME], attrs[names.METHOD])
        for attrs, *_ in tel.http_duration.snapshot()
    }
    assert recorded == {
        ("_OTHER", "http", "HTTP"),
        ("_OTHER", "https", "HTTP"),
        ("GET", "_OTHER", "GET"),
    }
