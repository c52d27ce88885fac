"""Shared fixtures: a real service on loopback with ephemeral ports."""

from __future__ import annotations

import os
import pathlib
import sys

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.app.config import Settings
from service.app.server import Service

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def missing_part(reason: str) -> None:
    """A system part a test needs (Redis, strace) is absent: skip loudly outside CI, fail
    under CI=true, so a broken CI setup cannot pass by skipping."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: it is required)")
    pytest.skip(reason)


def make_settings(tmp_path: pathlib.Path, **overrides) -> Settings:
    values = dict(
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        data_dir=str(tmp_path / "data"),
        push_notifications=True,
        drain_seconds=0.5,
        drain_grace_seconds=0.0,
        # The service runs on the test's own loop, so the test's work (clients, hypothesis,
        # blocking helpers) would count as the server's lag: streams are refused for it
        # only where a test asks (tests/integration/test_stream_refusal.py).
        stream_refusal_lag_ms=0.0,
    )
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def start_service(tmp_path):
    """Factory: `service = await start_service(agent=..., store=...)`; stopped at teardown.
    `purge_hooks`: the retention hooks the service calls (Service.purge_hooks)."""
    started: list[Service] = []

    async def start(purge_hooks=(), **overrides) -> Service:
        service = Service(make_settings(tmp_path, **overrides), purge_hooks=list(purge_hooks))
        await service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        await service.stop()


@pytest.fixture
async def service(start_service):
    return await start_service(store="memory:", agent="tests.agents:ScriptedAgent")


@pytest.fixture
async def stub(service):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def user_message(text: str = "hello", **fields) -> pb.Message:
    msg = pb.Message(
        message_id=fields.pop("message_id", os.urandom(8).hex()), role=pb.ROLE_USER, **fields
    )
    msg.parts.add(text=text)
    return msg
