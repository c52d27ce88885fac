"""Telemetry to OpenTelemetry's standard: REST span names and attributes from the semantic
conventions, the propagator `OTEL_PROPAGATORS` chooses (W3C with baggage by default, B3)
for what comes in and what goes out to a push receiver, the `OTEL_SPAN_*` limits on the
service's own spans, and the turn-duration, dependency-up and process metrics."""

from __future__ import annotations

import grpc
import httpx
import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.agent import TurnContext
from service.app.server import Service
from service.telemetry import names, spans
from service.telemetry.propagation import Limits
from service.telemetry.settings import TelemetrySettings
from service.telemetry.setup import install
from tests.conftest import make_settings, user_message
from tests.push_util import Receiver, eventually

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
V1 = {"a2a-version": "1.0"}


class BaggageAgent:
    """Notes the baggage it sees on its turn's span (what a caller's baggage is for)."""

    name = "baggage agent"
    description = "reads the caller's baggage"

    async def run(self, ctx: TurnContext) -> None:
        seen = baggage.get_all()
        span = trace.get_current_span()
        span.set_attribute("seen.baggage", ",".join(f"{k}={v}" for k, v in sorted(seen.items())))
        for i in range(6):
            await ctx.artifact(f"chunk {i}", name="answer", append=i > 0, last_chunk=i == 5)


@pytest.fixture
async def observed(tmp_path, monkeypatch):
    """`await observe(env, **settings)`: a service whose telemetry (installed with `env` in
    the environment) goes to in-memory exporters; returns (service, installed, spans, reader)."""
    started: list = []

    async def observe(env: dict[str, str], **overrides):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        installed = install(
            TelemetrySettings(), span_exporter=exporter, metric_readers=[reader], span_interval=0.05
        )
        assert installed is not None
        overrides.setdefault("agent", "tests.integration.test_telemetry_semconv:BaggageAgent")
        service = Service(make_settings(tmp_path, **overrides), telemetry=installed)
        started.append((service, installed))
        await service.start()
        return service, installed, exporter, reader

    yield observe
    for service, installed in started:
        await service.stop()
        installed.shutdown()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )
    spans.LIMITS = Limits()


def points(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    return [
        p
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    ]


async def send_rest(service: Service, headers: dict[str, str], push: str = "") -> dict:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    body: dict = {"message": message}
    if push:
        body["configuration"] = {"taskPushNotificationConfig": {"url": push}}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        reply = await http.post("/message:send", json=body, headers={**V1, **headers})
        assert reply.status_code == 200, reply.text
        task = reply.json()["task"]
        got = await http.get(f"/tasks/{task['id']}", headers=V1)
        assert got.status_code == 200
    return task


async def test_rest_spans_are_named_by_route_and_w3c_baggage_reaches_the_agent(observed):
    service, installed, exporter, reader = await observed({}, http_port=0)
    headers = {
        "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
        "baggage": "tenant=acme,plan=gold",
    }
    task = await send_rest(service, headers)
    await eventually(lambda: any(s.name == "agent turn" for s in exporter.get_finished_spans()))
    installed.flush()
    finished = exporter.get_finished_spans()

    sent = next(s for s in finished if s.name == "POST /message:send")
    attrs = sent.attributes
    assert sent.kind == trace.SpanKind.SERVER
    assert format(sent.context.trace_id, "032x") == CALLER_TRACE
    assert attrs["http.request.method"] == "POST" and attrs["http.route"] == "/message:send"
    assert attrs["url.path"] == "/message:send" and attrs["client.address"] == "127.0.0.1"
    assert attrs["http.response.status_code"] == 200
    assert type(attrs["http.response.status_code"]) is int
    assert attrs[names.METHOD] == "SendMessage" and attrs[names.BINDING] == names.REST

    got = next(s for s in finished if s.name == "GET /tasks/{id=*}")
    assert got.attributes["url.path"] == f"/tasks/{task['id']}"  # the path; the name: the route

    turn = next(s for s in finished if s.name == "agent turn")
    assert turn.attributes["seen.baggage"] == "plan=gold,tenant=acme"  # the caller's baggage

    http_points = points(reader, names.HTTP_DURATION.name)
    routes = {dict(p.attributes).get("http.route") for p in http_points}
    assert {"/message:send", "/tasks/{id=*}"} <= routes
    assert all(type(dict(p.attributes)["http.response.status_code"]) is int for p in http_points)


async def test_b3_chosen_by_otel_propagators_in_and_out(observed):
    receiver = await Receiver().start()
    try:
        service, installed, exporter, _ = await observed(
            {"OTEL_PROPAGATORS": "b3multi,baggage"},
            http_port=0,
            push_allow_networks=["127.0.0.0/8"],
        )
        headers = {
            "x-b3-traceid": CALLER_TRACE,
            "x-b3-spanid": CALLER_SPAN,
            "x-b3-sampled": "1",
            "baggage": "tenant=acme",
            "traceparent": "00-11111111111111111111111111111111-2222222222222222-01",  # not read
        }
        await send_rest(service, headers, push=receiver.url)
        await eventually(lambda: receiver.requests, what="a push delivery")
    finally:
        await receiver.stop()
    installed.flush()
    finished = exporter.get_finished_spans()
    sent = next(s for s in finished if s.name == "POST /message:send")
    assert format(sent.context.trace_id, "032x") == CALLER_TRACE  # B3 was read, W3C was not
    turn = next(s for s in finished if s.name == "agent turn")
    assert turn.attributes["seen.baggage"] == "tenant=acme"
    pushed = receiver.requests[0].headers
    assert pushed["x-b3-traceid"] == CALLER_TRACE and "traceparent" not in pushed  # B3 out


async def test_grpc_extracts_with_the_configured_propagator(observed):
    service, installed, exporter, _ = await observed({"OTEL_PROPAGATORS": "b3"})
    metadata = (("a2a-version", "1.0"), ("b3", f"{CALLER_TRACE}-{CALLER_SPAN}-1"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await stub.SendMessage(pb.SendMessageRequest(message=user_message("hi")), metadata=metadata)
    installed.flush()
    server = next(
        s for s in exporter.get_finished_spans() if s.name == "lf.a2a.v1.A2AService/SendMessage"
    )
    assert format(server.context.trace_id, "032x") == CALLER_TRACE
    assert format(server.parent.span_id, "016x") == CALLER_SPAN


async def test_span_limits_from_the_environment_hold_for_the_services_spans(observed):
    env = {"OTEL_SPAN_EVENT_COUNT_LIMIT": "3", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "8"}
    service, installed, exporter, _ = await observed(env, http_port=0)
    task = await send_rest(service, {})
    await eventually(lambda: any(s.name == "agent turn" for s in exporter.get_finished_spans()))
    installed.flush()
    turn = next(s for s in exporter.get_finished_spans() if s.name == "agent turn")
    assert len(turn.events) == 3  # of 6 chunks, their status events and commits
    assert turn.attributes[names.TASK_ID] == task["id"][:8]  # cut to the length limit


async def test_turn_duration_dependency_up_and_process_metrics(observed):
    service, installed, _, reader = await observed({}, http_port=0)
    await send_rest(service, {})
    await service.readiness.refresh()
    turns = points(reader, names.TURN_DURATION.name)
    assert turns and turns[0].count >= 1 and 0 < turns[0].sum < 30  # seconds
    assert dict(turns[0].attributes)[names.STATE] == "TASK_STATE_COMPLETED"
    assert names.AGENT in dict(turns[0].attributes)
    up = {
        dict(p.attributes)[names.DEPENDENCY]: p.value for p in points(reader, "a2a.dependency.up")
    }
    assert up == dict.fromkeys(service.readiness.checks, 1)
    for metric in names.PROCESS_METRICS:
        assert points(reader, metric), metric
    rss = points(reader, "process.memory.usage")
    assert rss[0].value > 1_000_000  # bytes
