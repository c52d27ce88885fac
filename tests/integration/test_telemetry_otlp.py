"""`telemetry = "otlp"` really sends: a collector stand-in on loopback receives the spans and
metrics, over gRPC (TraceService / MetricsService from opentelemetry-proto) and over
HTTP/protobuf (`/v1/traces`, `/v1/metrics`), with the configured headers."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.push_util import Receiver, eventually


class Collected:
    """What the stand-in collector received."""

    def __init__(self) -> None:
        self.spans: list = []
        self.metrics: set[str] = set()
        self.headers: list[dict[str, str]] = []
        self.service_of: dict[str, str] = {}  # span name -> its resource's service.name

    def traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        for rs in request.resource_spans:
            service = next(
                (
                    kv.value.string_value
                    for kv in rs.resource.attributes
                    if kv.key == "service.name"
                ),
                "",
            )
            for ss in rs.scope_spans:
                self.spans += list(ss.spans)
                self.service_of.update((span.name, service) for span in ss.spans)

    def metric_names(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                self.metrics.update(m.name for m in sm.metrics)


class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, collected: Collected) -> None:
        self.collected = collected

    async def Export(self, request, context):
        self.collected.traces(request)
        self.collected.headers.append(dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class MetricsReceiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, collected: Collected) -> None:
        self.collected = collected

    async def Export(self, request, context):
        self.collected.metric_names(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture
async def grpc_collector():
    collected = Collected()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceReceiver(collected), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
        MetricsReceiver(collected), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield collected, f"http://127.0.0.1:{port}"
    await server.stop(0)


@pytest.fixture
def http_collector():
    collected = Collected()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers["Content-Length"]))
            collected.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path == "/v1/traces":
                collected.traces(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            elif self.path == "/v1/metrics":
                collected.metric_names(
                    metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                )
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield collected, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def send_one(service) -> pb.SendMessageResponse:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        return await stub.SendMessage(
            pb.SendMessageRequest(message=user_message("hello collector")),
            metadata=(("a2a-version", "1.0"),),
        )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
async def test_the_otlp_exporter_sends_spans_and_metrics(
    grpc_collector, http_collector, monkeypatch, start_service, protocol
):  # start_service last: the service stops (and flushes) before the collectors do
    collected, endpoint = grpc_collector if protocol == "grpc" else http_collector
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")  # ms, read by the SDK
    monkeypatch.setenv("OTEL_SERVICE_NAME", "otlp-test-service")
    service = await start_service(
        store="memory:",
        telemetry="otlp",
        otlp_protocol=protocol,
        otlp_endpoint=endpoint,
        otlp_headers=["x-collector-tenant=team-a"],
    )
    response = await send_one(service)
    # An agent's own span, made with the OpenTelemetry SDK, leaves through the same exporter.
    with trace.get_tracer("an agent").start_as_current_span("agent's own work"):
        pass

    def arrived() -> bool:
        names = {s.name for s in collected.spans}
        return {"lf.a2a.v1.A2AService/SendMessage", "agent's own work"} <= names and (
            {"rpc.server.call.duration", "a2a.tasks.ended", "a2a.tasks.active"} <= collected.metrics
        )

    await eventually(arrived, seconds=20, what="spans and metrics at the collector")
    server = next(s for s in collected.spans if s.name == "lf.a2a.v1.A2AService/SendMessage")
    attributes = {kv.key: kv.value.string_value for kv in server.attributes}
    assert attributes["a2a.task.id"] == response.task.id
    assert attributes["a2a.binding"] == "GRPC"
    assert attributes["rpc.system"] == "grpc" and attributes["rpc.method"] == "SendMessage"
    codes = [kv.value for kv in server.attributes if kv.key == "rpc.grpc.status_code"]
    assert [c.WhichOneof("value") for c in codes] == ["int_value"] and codes[0].int_value == 0
    turn = next(s for s in collected.spans if s.name == "agent turn")
    assert turn.parent_span_id == server.span_id and turn.trace_id == server.trace_id
    # (an agent's spans carry the resource of the first installation in a process: in this
    # test process that may be another test's)
    assert collected.service_of["lf.a2a.v1.A2AService/SendMessage"] == "otlp-test-service"
    assert collected.service_of["agent turn"] == "otlp-test-service"
    assert any(h.get("x-collector-tenant") == "team-a" for h in collected.headers)
    # The exporter process runs at the lowest CPU priority: serving comes first.
    exporter = service.telemetry.pipeline.exporter
    assert os.getpriority(os.PRIO_PROCESS, exporter._process.pid) == 19


def _attributes(span) -> dict:
    """A received span's attributes as Python values of their OTLP types."""
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


async def test_http_and_push_spans_reach_the_collector_with_semantic_conventions(
    grpc_collector, monkeypatch, start_service
):
    """JSON-RPC, REST and push CLIENT spans, as a real OTLP receiver gets them: named as the
    conventions say, with their attributes under the conventions' names and types."""
    collected, endpoint = grpc_collector
    receiver = await Receiver().start()
    try:
        service = await start_service(
            store="memory:",
            http_port=0,
            agent="tests.agents:ScriptedAgent",
            telemetry="otlp",
            otlp_protocol="grpc",
            otlp_endpoint=endpoint,
            push_notifications=True,
            push_allow_networks=["127.0.0.0/8"],
        )
        message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "echo hi"}]}
        jsonrpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": message,
                "configuration": {"taskPushNotificationConfig": {"url": receiver.url}},
            },
        }
        rest = {"message": {**message, "messageId": "m-2"}}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}") as http:
            first = await http.post("/", json=jsonrpc, headers={"A2A-Version": "1.0"})
            second = await http.post("/message:send", json=rest, headers={"A2A-Version": "1.0"})
        assert first.status_code == second.status_code == 200

        def arrived() -> bool:
            names = {s.name for s in collected.spans}
            return {"POST /", "POST /message:send", "POST"} <= names

        await eventually(arrived, seconds=20, what="HTTP and push spans at the collector")
    finally:
        await receiver.stop()
    by_name = {s.name: s for s in collected.spans}
    for name, route in (("POST /", "/"), ("POST /message:send", "/message:send")):
        attributes = _attributes(by_name[name])
        assert attributes["http.request.method"] == "POST"
        assert attributes["http.route"] == route and attributes["url.path"] == route
        assert attributes["http.response.status_code"] == 200  # an int, not '200'
        assert attributes["client.address"] == "127.0.0.1"
    push = by_name["POST"]
    assert push.kind == push.SPAN_KIND_CLIENT
    attributes = _attributes(push)
    assert attributes["http.request.method"] == "POST"
    assert attributes["url.full"] == receiver.url
    assert attributes["http.response.status_code"] == 200
    assert attributes["server.address"] == "127.0.0.1"
    assert isinstance(attributes["server.port"], int)
