"""The call pipeline (service.calls) with fake interceptors and a fake A2AApi, no sockets:
the interceptors' order, a refusal that stops the rest, one record per call, and a refusal
logged, traced and counted exactly once — on the gRPC codec (its servicer called directly)
and on both HTTP codecs (the gateway app over ASGI)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import build_app
from gateway.invoker import InProcessInvoker
from gateway.telemetry import TelemetryMiddleware
from gen import a2a_pb2 as pb
from service.calls.access import AccessLog
from service.calls.pipeline import Pipeline
from service.calls.record import Call
from service.engine.limits import refuse
from service.grpc_binding import SERVICE, make_servicer
from service.protocol.params import CallContext
from service.telemetry import hub, names
from service.telemetry.spans import LightSpan, LightTracer

V1 = {"A2A-Version": "1.0"}


class Collect:
    def __init__(self) -> None:
        self.spans: list[LightSpan] = []

    def finished(self, span: LightSpan) -> None:
        self.spans.append(span)


class FakeApi:
    """Answers GetTask with the task asked for and streams two events; every other RPC
    is there (the invoker binds all of them) and never called here."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def GetTask(self, request: pb.GetTaskRequest, call: CallContext) -> pb.Task:
        self.calls.append("GetTask")
        return pb.Task(id=request.id, context_id="c")

    async def SubscribeToTask(
        self, request: pb.SubscribeToTaskRequest, call: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        self.calls.append("SubscribeToTask")

        async def events() -> AsyncIterator[pb.StreamResponse]:
            for state in (pb.TASK_STATE_WORKING, pb.TASK_STATE_COMPLETED):
                update = pb.TaskStatusUpdateEvent(task_id=request.id, context_id="c")
                update.status.state = state
                yield pb.StreamResponse(status_update=update)

        return events()

    def __getattr__(self, name: str):
        async def never(request, call):
            raise AssertionError(f"{name} was not to be called")

        return never


class Step:
    """An interceptor that notes what it sees; `refusing`: it refuses every call."""

    def __init__(self, name: str, seen: list[str], refusing: bool = False) -> None:
        self.name = name
        self.seen = seen
        self.refusing = refusing

    async def before(self, call: Call, context: CallContext, request) -> None:
        self.seen.append(f"before {self.name} {call.binding} {call.method}")
        if self.refusing:
            raise refuse("test_limit", 1, f"{self.name} refuses")

    def after(self, call: Call) -> None:
        self.seen.append(f"after {self.name} {call.outcome}")


class Aborted(Exception):
    def __init__(self, status) -> None:
        self.status = status


class FakeContext:
    """What the servicer reads of grpc's ServicerContext."""

    def __init__(self, metadata=()) -> None:
        self.metadata = tuple(metadata)

    def invocation_metadata(self):
        return self.metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    async def abort_with_status(self, status) -> None:
        raise Aborted(status)


def access_lines(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.name.startswith("service.access")]


@pytest.fixture
def telemetry(monkeypatch):
    """Telemetry on, as the root installs it: spans into a list, counts in `hub.current`."""
    sink = Collect()
    tel = hub.Telemetry(LightTracer(sink))
    monkeypatch.setattr(hub, "current", tel)
    return tel, sink


async def call_every_binding(pipeline: Pipeline, tel: hub.Telemetry | None) -> list:
    """GetTask once on each binding; what each answered."""
    api = FakeApi()
    servicer = make_servicer(api, pipeline)
    answers: list = []
    try:
        answers.append(await servicer.GetTask(pb.GetTaskRequest(id="t-1"), FakeContext()))
    except Aborted as exc:
        answers.append(exc.status.code.name)
    app = build_app(
        invoker=InProcessInvoker(api, SERVICE),
        service=SERVICE,
        card=pb.AgentCard(name="x"),
        is_serving=lambda: True,
        pipeline=pipeline,
    )
    if tel is not None:
        app = TelemetryMiddleware(app, tel)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}
        answers.append((await http.post("/", json=rpc, headers=V1)).json())
        answers.append((await http.get("/tasks/t-1", headers=V1)).status_code)
    return answers


async def test_interceptors_run_in_order_and_a_refusal_stops_the_rest():
    seen: list[str] = []
    pipeline = Pipeline(
        interceptors=[Step("a", seen), Step("b", seen, refusing=True), Step("c", seen)]
    )
    call = pipeline.open("grpc", "GetTask")
    with pytest.raises(Exception) as refused:
        await pipeline.admit(call, CallContext(), pb.GetTaskRequest(id="t"))
    err = pipeline.failed(call, refused.value, "GetTask")
    pipeline.close(call)
    pipeline.close(call)  # a second close does nothing
    assert err.reason == "RESOURCE_EXHAUSTED"
    assert seen == [
        "before a grpc GetTask",
        "before b grpc GetTask",
        f"after a {err.reason}",  # only what let the call through is told it ended
    ]
    assert call.task_id == "t" and call.outcome == err.reason


async def test_a_configured_interceptor_runs_on_every_binding(caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    seen: list[str] = []
    pipeline = Pipeline(interceptors=[Step("audit", seen)], access=AccessLog())
    answers = await call_every_binding(pipeline, None)
    assert answers[0] == pb.Task(id="t-1", context_id="c")
    assert answers[1]["result"]["id"] == "t-1" and answers[2] == 200
    assert seen == [
        "before audit grpc GetTask",
        "after audit OK",
        "before audit jsonrpc GetTask",
        "after audit OK",
        "before audit rest GetTask",
        "after audit OK",
    ]
    lines = access_lines(caplog)  # one record, one line per call
    assert [(f["binding"], f["method"], f["outcome"], f["task_id"]) for f in lines] == [
        ("grpc", "GetTask", "OK", "t-1"),
        ("jsonrpc", "GetTask", "OK", "t-1"),
        ("rest", "GetTask", "OK", "t-1"),
    ]


async def test_a_refusal_is_logged_traced_and_counted_once_on_every_binding(caplog, telemetry):
    tel, sink = telemetry
    caplog.set_level(logging.INFO, logger="service.access")
    seen: list[str] = []
    pipeline = Pipeline(
        interceptors=[Step("limit", seen, refusing=True), Step("never", seen)],
        access=AccessLog(),
        telemetry=tel,
    )
    answers = await call_every_binding(pipeline, tel)
    assert answers[0] == "RESOURCE_EXHAUSTED"
    assert answers[1]["error"]["code"] == -32603  # JSON-RPC's code for RESOURCE_EXHAUSTED
    assert answers[2] == 429
    assert not any("never" in s for s in seen)  # the refusal stopped the chain
    lines = access_lines(caplog)
    assert [f["binding"] for f in lines] == ["grpc", "jsonrpc", "rest"]
    reason = "RESOURCE_EXHAUSTED"
    assert [f["outcome"] for f in lines] == [reason] * 3
    spans = sink.spans
    assert len(spans) == 3  # one span per call, each marked once with the refusal
    assert [s.attributes[names.ERROR_TYPE] for s in spans] == [reason] * 3
    assert [s.attributes[names.METHOD] for s in spans] == ["GetTask"] * 3
    refused = {dict(k)[names.LIMIT]: v for k, v in tel.refused.values.items()}
    assert refused == {"test_limit": 3}  # counted once per call


async def test_a_stream_is_one_record_with_its_events_task(caplog, telemetry):
    tel, sink = telemetry
    caplog.set_level(logging.INFO, logger="service.access")
    api = FakeApi()
    servicer = make_servicer(api, Pipeline(access=AccessLog(), telemetry=tel))
    events = [
        e
        async for e in servicer.SubscribeToTask(pb.SubscribeToTaskRequest(id="t-9"), FakeContext())
    ]
    assert len(events) == 2
    [line] = access_lines(caplog)
    assert (line["method"], line["outcome"], line["task_id"]) == ("SubscribeToTask", "OK", "t-9")
    [span] = sink.spans
    assert span.attributes[names.STATE] == "TASK_STATE_COMPLETED"
    assert sum(tel.stream_events.values.values()) == 2
    assert sum(tel.streams_open.values.values()) == 0  # closed with the call
