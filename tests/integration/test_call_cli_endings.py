"""How an `a2a-call` stream ends, the same exit status on every binding (errors.STREAM_ENDINGS):
a real server drained (SIGTERM) mid-stream, and a server killed mid-stream (the connection
lost), both exit 6 with a hint to resume; the table is the help text's."""

from __future__ import annotations

import json
import select
import signal
import subprocess

import pytest

from a2a_call.cli import build_parser
from a2a_call.errors import STREAM_ENDINGS, Exit, stream_table
from tests.call_util import SCRIPT, cli_env, serve_for_cli
from tests.process import ROOT

BINDINGS = ("jsonrpc", "rest", "grpc")


def _stream_then(tmp_path, binding: str, end) -> tuple[int, str, str]:
    """A `hang` stream over BINDING on a fresh server; once its first event is out, END(proc)
    stops the server. The CLI's exit status, stdout and stderr."""
    server = serve_for_cli(
        tmp_path,
        f"end-{binding}",
        "tests.agents:HumanLoopAgent",
        "--store",
        "memory:",
        env={"A2A_DRAIN_SECONDS": "1"},
    )
    url = f"http://127.0.0.1:{server.http_port}"
    client = subprocess.Popen(
        [SCRIPT, "--json", "--binding", binding, url, "hang"],
        cwd=ROOT,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([client.stdout], [], [], 60)
        assert ready, "no event from the stream"
        first = client.stdout.readline()
        assert "task" in json.loads(first)
        end(server)
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
        server.stop()
    return client.returncode, first + out, err


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_server_drained_mid_stream_is_exit_6_on_every_binding(tmp_path, binding):
    def drain(server) -> None:
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0

    code, _out, err = _stream_then(tmp_path, binding, drain)
    assert code == Exit.UNREACHABLE == 6, err
    assert "shutting down" in err
    assert "resume with: a2a-call subscribe … --task " in err
    if binding != "grpc":
        assert " --after 2" in err  # the HTTP bindings' last event id


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_connection_lost_mid_stream_is_exit_6_on_every_binding(tmp_path, binding):
    def kill(server) -> None:
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)

    code, _out, err = _stream_then(tmp_path, binding, kill)
    assert code == Exit.UNREACHABLE == 6, err
    assert "resume with: a2a-call subscribe … --task " in err


def test_the_help_prints_the_one_table():
    help_text = build_parser().format_help()
    assert stream_table() in help_text
    assert {code for _, code in STREAM_ENDINGS} == set(Exit) - {
        Exit.USAGE,
        Exit.NOT_VERIFIED,
        Exit.REFUSED,
    }
