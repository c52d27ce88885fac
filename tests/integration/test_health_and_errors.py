"""gRPC health through startup and drain; unexpected exceptions become a sanitized INTERNAL."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.api import A2AApi
from service.app.server import Service
from service.grpc_binding import make_servicer
from tests.conftest import make_settings, user_message
from tests.grpc_util import expect_error


async def test_health_serving_then_not_serving_while_draining(tmp_path):
    service = Service(make_settings(tmp_path, store="memory:", drain_seconds=1.0))
    await service.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        check = await health.Check(health_pb2.HealthCheckRequest(service="lf.a2a.v1.A2AService"))
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        stopping = asyncio.create_task(service.stop())
        update = await asyncio.wait_for(watch.read(), 5)
        assert update.status == health_pb2.HealthCheckResponse.NOT_SERVING
        await stopping


class _ExplodingApi(A2AApi):
    async def GetTask(self, request, call):
        raise RuntimeError("database password hunter2 at /srv/secret/path")


async def test_unexpected_exception_is_internal_with_correlation_id(tmp_path, caplog):
    service = Service(make_settings(tmp_path, store="memory:"))
    await service.start()
    # The real gRPC binding over an API whose GetTask breaks unexpectedly.
    exploding = _ExplodingApi(service.engine, service.cards)
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(make_servicer(exploding), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            with caplog.at_level(logging.ERROR):
                err = await expect_error(
                    stub.GetTask(pb.GetTaskRequest(id="t1")),
                    grpc.StatusCode.INTERNAL,
                    "INTERNAL_ERROR",
                )
            assert "hunter2" not in err.details() and "/srv" not in err.details()
            ref = err.details().split("ref ")[1].rstrip(").")
            logged = [r for r in caplog.records if ref in r.getMessage()]
            assert logged and logged[0].exc_info is not None  # the details went to the log
            # Everything else keeps working.
            ok = await stub.SendMessage(pb.SendMessageRequest(message=user_message("hi")))
            assert ok.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await server.stop(None)
        await service.stop()


async def test_health_answers_garbage_bytes_with_invalid_argument_and_no_internals(service):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        for method in ("Check", "Watch"):
            path = f"/grpc.health.v1.Health/{method}"
            raw = (channel.unary_unary if method == "Check" else channel.unary_stream)(
                path, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            call = raw(b"\xff\xff\xff\xff\x0f")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                if method == "Check":
                    await call
                else:
                    await call.read()
            err = info.value
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (
                method,
                err.code(),
                err.details(),
            )
            assert "HealthCheckRequest" in err.details() and "DecodeError" not in err.details()
            assert "google.protobuf" not in err.details()
        # Well-formed checks still work on the same channel.
        health = health_pb2_grpc.HealthStub(channel)
        ok = await health.Check(health_pb2.HealthCheckRequest())
        assert ok.status == health_pb2.HealthCheckResponse.SERVING
