"""Traces and metrics of a real service on loopback, read with the SDK's in-memory exporters.

One trace covers an HTTP request, its servicer call, the agent turn (with its store
commits as events) and the push delivery it causes (whose receiver gets the traceparent); a caller's W3C
traceparent is continued on HTTP and gRPC; an agent's own spans nest under its turn;
no credential appears in any span; the metrics count requests by method, binding and
outcome, auth failures, tasks and push deliveries; `/metrics` serves Prometheus text
behind the auth guard or on its own port.
"""

from __future__ import annotations

import json
import urllib.request

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.agent import TurnContext
from service.app.server import Service
from service.telemetry import names
from service.telemetry.settings import TelemetrySettings
from service.telemetry.setup import install
from tests.conftest import make_settings, user_message
from tests.push_util import Receiver, eventually

TOKEN = "tok-" + "s3cr3t-bearer-value-0123456789"
PUSH_TOKEN = "push-token-never-in-a-span-42"
PUSH_CREDENTIALS = "push-credentials-never-in-a-span-43"
SECRETS = (TOKEN, PUSH_TOKEN, PUSH_CREDENTIALS)
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


class TracingAgent:
    """Nests a span of its own under the turn, as the README shows agent authors."""

    name = "tracing test agent"
    description = "makes a span of its own"

    async def run(self, ctx: TurnContext) -> None:
        tracer = trace.get_tracer("my-agent")
        with tracer.start_as_current_span("look things up") as span:
            span.set_attribute("lookup.words", len(ctx.text.split()))
            await ctx.artifact(f"echo: {ctx.text}", name="answer")


@pytest.fixture
async def telemetry(tmp_path):
    """(start, spans, metrics): `await start(**settings)` runs a service whose telemetry
    goes to the in-memory exporter and reader; stopped at teardown."""
    spans = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    installed = install(
        TelemetrySettings(), span_exporter=spans, metric_readers=[reader], span_interval=0.05
    )
    assert installed is not None
    started: list[Service] = []

    async def start(**overrides) -> Service:
        service = Service(make_settings(tmp_path, **overrides), telemetry=installed)
        started.append(service)
        await service.start()
        return service

    yield start, installed, spans, reader
    for service in started:
        await service.stop()
    installed.shutdown()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, f"{name}: {[s.name for s in spans]}"
    return found[0]


def child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    return (
        span.parent is not None
        and span.parent.span_id == parent.context.span_id
        and span.context.trace_id == parent.context.trace_id
    )


def no_secret_in(spans: list[ReadableSpan]) -> None:
    for span in spans:
        texts = [span.name, *map(str, (span.attributes or {}).values())]
        for event in span.events:
            texts += [event.name, *map(str, (event.attributes or {}).values())]
        for text in texts:
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} in span {span.name}"


def points(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    found = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    found += metric.data.data_points
    return found


async def test_one_trace_from_http_request_to_push_delivery(telemetry):
    start, installed, exporter, reader = telemetry
    receiver = await Receiver().start()
    service = await start(
        agent="tests.agents:ScriptedAgent",
        http_port=0,
        auth_bearer_tokens=[f"ci={TOKEN}"],
        push_allow_networks=["127.0.0.0/8"],
    )
    try:
        message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "chunks 2"}]}
        config = {
            "url": receiver.url,
            "token": PUSH_TOKEN,
            "authentication": {"scheme": "Bearer", "credentials": PUSH_CREDENTIALS},
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": message,
                "configuration": {"taskPushNotificationConfig": config},
            },
        }
        headers = {
            "authorization": f"Bearer {TOKEN}",
            "a2a-version": "1.0",
            "traceparent": TRACEPARENT,
        }
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
            reply = await http.post("/", json=body, headers=headers)
            unauthorized = await http.post("/", json=body)
        assert reply.status_code == 200, reply.text
        assert unauthorized.status_code == 401
        task = reply.json()["result"]["task"]

        def final_pushed() -> bool:
            return any(
                r.body.get("statusUpdate", {}).get("status", {}).get("state")
                == "TASK_STATE_COMPLETED"
                for r in receiver.requests
            )

        await eventually(final_pushed, what="the final event at the receiver")
        await eventually(lambda: len(by_name(exporter.get_finished_spans(), names.PUSH_SPAN)) >= 1)
        installed.flush()
        spans = list(exporter.get_finished_spans())
    finally:
        await receiver.stop()

    request = next(
        s for s in by_name(spans, "POST /") if s.attributes.get(names.TASK_ID) == task["id"]
    )
    assert request.kind == trace.SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == CALLER_TRACE  # the caller's trace goes on
    assert request.parent is not None and format(request.parent.span_id, "016x") == CALLER_SPAN
    attrs = request.attributes
    assert attrs[names.METHOD] == "SendMessage" and attrs[names.BINDING] == names.JSONRPC
    assert attrs[names.TASK_ID] == task["id"] and attrs[names.CONTEXT_ID] == task["contextId"]
    assert attrs[names.PRINCIPAL] == "bearer:ci"
    assert attrs[names.STATE] == "TASK_STATE_COMPLETED" and attrs[names.OUTCOME] == "OK"
    # the semantic conventions' HTTP server attributes, in their types
    assert attrs["http.request.method"] == "POST" and attrs["http.route"] == "/"
    assert attrs["url.path"] == "/" and attrs["url.scheme"] == "http"
    assert attrs["client.address"] == "127.0.0.1"
    assert attrs["http.response.status_code"] == 200
    assert type(attrs["http.response.status_code"]) is int

    servicer = one(spans, "A2AApi/SendMessage")
    assert child_of(servicer, request)
    turn = one(spans, "agent turn")
    assert child_of(turn, servicer)
    assert turn.attributes[names.TASK_ID] == task["id"]
    assert turn.attributes[names.STATE] == "TASK_STATE_COMPLETED"
    events = [(e.name, dict(e.attributes or {})) for e in turn.events]
    states = [a[names.STATE] for n, a in events if n == names.EVENT_STATUS]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"
    assert sum(1 for n, _ in events if n == names.EVENT_ARTIFACT) == 2
    commits = [a for n, a in events if n == names.EVENT_COMMIT]  # the store commit, on the turn
    assert commits and sum(c[names.EVENTS] for c in commits) >= 4  # task, WORKING, 2 chunks, ...
    assert all(type(c[names.EVENTS]) is int for c in commits)
    assert all(type(c["a2a.store.commit.duration"]) is float for c in commits)  # seconds
    assert all(c["a2a.store.commit.duration"] < 10 for c in commits)
    assert all(type(a[names.SEQ]) is int for n, a in events if n == names.EVENT_STATUS)

    deliveries = by_name(spans, names.PUSH_SPAN)
    assert deliveries and all(child_of(d, turn) for d in deliveries)
    assert all(d.links and d.links[0].context.span_id == turn.context.span_id for d in deliveries)
    assert all(d.attributes[names.PUSH_OUTCOME] == "delivered" for d in deliveries)
    for d in deliveries:  # an HTTP client span, as the conventions say
        assert d.kind == trace.SpanKind.CLIENT and d.name == "POST"
        a = d.attributes
        assert a["http.request.method"] == "POST" and a["http.response.status_code"] == 200
        assert a["url.full"] == receiver.url.split("?")[0]
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == receiver.port
        assert type(a[names.SEQ]) is int and a[names.PUSH_ATTEMPT] == 1
    delivery_ids = {format(d.context.span_id, "016x") for d in deliveries}
    for pushed in receiver.requests:  # the receiver can continue the trace
        _, trace_id, parent_id, _ = pushed.headers["traceparent"].split("-")
        assert trace_id == CALLER_TRACE and parent_id in delivery_ids

    refused = next(  # refused before the body (and its method) was read
        s for s in by_name(spans, "POST /") if s.attributes[names.OUTCOME] != "OK"
    )
    assert refused.attributes[names.OUTCOME] == "UNAUTHENTICATED"
    no_secret_in(spans)

    http_points = points(reader, names.HTTP_DURATION.name)
    outcomes = {
        (dict(p.attributes)[names.METHOD], dict(p.attributes)[names.OUTCOME]) for p in http_points
    }
    assert ("SendMessage", "OK") in outcomes
    failures = points(reader, names.AUTH_FAILURES.name)
    assert any(dict(p.attributes)[names.AUTH_SCHEME] == "none" for p in failures)
    delivered = points(reader, names.PUSH_DELIVERIES.name)
    assert any(dict(p.attributes)[names.PUSH_OUTCOME] == "delivered" for p in delivered)
    ended = points(reader, names.TASKS_ENDED.name)
    assert any(dict(p.attributes)[names.STATE] == "TASK_STATE_COMPLETED" for p in ended)
    assert points(reader, names.COMMIT_DURATION.name)


async def test_grpc_traceparent_is_continued_and_agents_nest_spans(telemetry):
    start, installed, exporter, reader = telemetry
    service = await start(
        store="memory:",
        agent="tests.integration.test_telemetry:TracingAgent",
    )
    metadata = (("a2a-version", "1.0"), ("traceparent", TRACEPARENT))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        response = await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("three little words")), metadata=metadata
        )
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetTask(pb.GetTaskRequest(id="no-such-task"), metadata=metadata)
        events = [
            e
            async for e in stub.SendStreamingMessage(
                pb.SendMessageRequest(message=user_message("streamed")), metadata=metadata
            )
        ]
    assert events
    await eventually(lambda: len(by_name(exporter.get_finished_spans(), "agent turn")) >= 2)
    installed.flush()
    spans = list(exporter.get_finished_spans())

    server = next(
        s
        for s in by_name(spans, "lf.a2a.v1.A2AService/SendMessage")
        if s.attributes.get(names.TASK_ID) == response.task.id
    )
    assert server.kind == trace.SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == CALLER_TRACE
    assert format(server.parent.span_id, "016x") == CALLER_SPAN
    assert server.attributes[names.BINDING] == names.GRPC
    # the semantic conventions' gRPC server attributes, in their types
    assert server.attributes["rpc.system"] == "grpc"
    assert server.attributes["rpc.service"] == "lf.a2a.v1.A2AService"
    assert server.attributes["rpc.method"] == "SendMessage"
    assert server.attributes["rpc.grpc.status_code"] == 0
    turn = next(
        s for s in by_name(spans, "agent turn") if s.attributes[names.TASK_ID] == response.task.id
    )
    assert child_of(turn, server)
    own = next(s for s in by_name(spans, "look things up") if child_of(s, turn))
    assert own.attributes["lookup.words"] == 3

    missing = one(spans, "lf.a2a.v1.A2AService/GetTask")
    assert missing.attributes[names.OUTCOME] == "TASK_NOT_FOUND"
    assert missing.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    stream = one(spans, "lf.a2a.v1.A2AService/SendStreamingMessage")
    assert stream.attributes[names.STATE] == "TASK_STATE_COMPLETED"

    rpc = {
        (dict(p.attributes)[names.METHOD], dict(p.attributes)[names.OUTCOME]): p.count
        for p in points(reader, names.RPC_DURATION.name)
    }
    assert rpc[("SendMessage", "OK")] == 1
    point = next(p for p in points(reader, names.RPC_DURATION.name) if p.count)
    assert dict(point.attributes)["rpc.system"] == "grpc"
    assert type(dict(point.attributes)["rpc.grpc.status_code"]) is int  # as on the span
    assert rpc[("GetTask", "TASK_NOT_FOUND")] == 1
    assert rpc[("SendStreamingMessage", "OK")] == 1
    sent = points(reader, names.STREAM_EVENTS.name)
    assert sum(p.value for p in sent) == len(events)
    opened = points(reader, names.STREAMS_OPEN.name)
    assert all(p.value == 0 for p in opened)  # the stream ended


async def test_metrics_endpoint_is_behind_the_guard(start_service, tmp_path):
    service = await start_service(
        store="memory:",
        http_port=0,
        metrics_endpoint=True,
        auth_bearer_tokens=[f"ci={TOKEN}"],
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
        await http.get("/tasks", headers={"authorization": "Bearer wrong-token-0123456789"})
        anonymous = await http.get("/metrics")
        scraped = await http.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert anonymous.status_code == 401
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    text = scraped.text
    assert 'a2a_auth_failures_total{a2a_auth_scheme="bearer"' in text
    for metric in (names.HTTP_DURATION, names.AUTH_FAILURES, names.TASKS_ACTIVE):
        assert metric.prometheus in text, metric.prometheus
    assert TOKEN not in text


async def test_metrics_on_their_own_port(start_service, tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = await start_service(
        store="memory:",
        metrics_endpoint=True,
        metrics_port=port,
        auth_bearer_tokens=[f"ci={TOKEN}"],
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("hi")),
            metadata=(("a2a-version", "1.0"), ("authorization", f"Bearer {TOKEN}")),
        )

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return r.read().decode()

    import asyncio

    text = await asyncio.to_thread(scrape)
    assert names.RPC_DURATION.prometheus + "_count" in text
    assert 'a2a_method="SendMessage"' in text
    json.dumps(text)  # plain text
