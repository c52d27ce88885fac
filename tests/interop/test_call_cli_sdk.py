"""Interop: `a2a-call` against the a2a-sdk 1.3.0's own servers — its HTTP server (agent card
route, JSON-RPC and REST: tests/interop/sdk_http_server.py) and its gRPC server
(tests/bench/sdk_server.py, no card: `--grpc HOST:PORT`). Exit codes and `--json` lines."""

from __future__ import annotations

import pathlib
import sys

import pytest

from tests.bench.common import ServerProcess
from tests.call_util import cli, lines, state_of
from tests.process import ROOT


@pytest.fixture(scope="module")
def sdk_http(tmp_path_factory):
    proc = ServerProcess(
        "sdk-http",
        [sys.executable, str(ROOT / "tests/interop/sdk_http_server.py"), "--port", "0"],
        pathlib.Path(tmp_path_factory.mktemp("sdk-http")),
    ).start()
    yield f"http://127.0.0.1:{proc.http_port}"
    proc.stop()


@pytest.fixture(scope="module")
def sdk_grpc(tmp_path_factory):
    proc = ServerProcess(
        "sdk-grpc",
        [sys.executable, str(ROOT / "tests/bench/sdk_server.py"), "--port", "0"],
        pathlib.Path(tmp_path_factory.mktemp("sdk-grpc")),
    ).start()
    yield proc.target
    proc.stop()


@pytest.mark.parametrize("binding", ("jsonrpc", "rest"))
def test_send_get_list_over_the_sdk_http_server(sdk_http, binding):
    sent = cli("--json", "--binding", binding, sdk_http, "hello", "sdk")
    assert sent.returncode == 0, sent.stderr
    events = lines(sent.stdout)
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    [artifact] = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    assert artifact["parts"] == [{"text": "hello sdk"}]
    task_id = events[0]["task"]["id"]
    got = cli("get", "--json", "--binding", binding, sdk_http, "--task", task_id)
    assert got.returncode == 0, got.stderr
    assert lines(got.stdout)[0]["status"]["state"] == "TASK_STATE_COMPLETED"
    listed = cli("list", "--json", "--binding", binding, sdk_http)
    assert listed.returncode == 0, listed.stderr
    assert task_id in [t["id"] for t in lines(listed.stdout)[0]["tasks"]]
    missing = cli("get", "--binding", binding, sdk_http, "--task", "no-such-task")
    assert missing.returncode == 8 and "TaskNotFound" in missing.stderr


def test_the_default_is_the_first_interface_of_the_sdk_card(sdk_http):
    card = cli("card", "--json", sdk_http)
    assert card.returncode == 0
    assert lines(card.stdout)[0]["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    sent = cli(sdk_http, "hello")
    assert sent.returncode == 0, sent.stderr
    assert "artifact echo: hello" in sent.stdout


def test_send_and_get_over_the_sdk_grpc_server(sdk_grpc):
    sent = cli("--json", "--grpc", sdk_grpc, "hello", "grpc")
    assert sent.returncode == 0, sent.stderr
    events = lines(sent.stdout)
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    got = cli("get", "--json", "--grpc", sdk_grpc, "--task", events[0]["task"]["id"])
    assert got.returncode == 0, got.stderr
    assert lines(got.stdout)[0]["artifacts"][0]["parts"] == [{"text": "hello grpc"}]
    missing = cli("cancel", "--grpc", sdk_grpc, "--task", "no-such-task")
    assert missing.returncode == 8 and "TaskNotFound" in missing.stderr
