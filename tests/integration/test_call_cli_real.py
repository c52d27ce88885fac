"""`a2a-call` against the server's real human-in-the-loop parts (not stand-ins): the
permission side-band of `ctx.request_permission` answered with `--approve` / `--deny` on
each binding, the command agent's `command_approval`, and `download` of a stored file
artifact through the gateway's own route (same origin, so the credentials go along), its
SHA-256 checked. Real server processes on loopback; the CLI runs as a process."""

from __future__ import annotations

import hashlib
import pathlib

import pytest

from tests.bench.common import ServerProcess
from tests.call_util import cli, lines, serve_for_cli, state_of

BINDINGS = ("jsonrpc", "rest", "grpc")
TOKEN = "real-t0ken-" + "c" * 30


def _serve(tmp: pathlib.Path, name: str, agent: str, env: dict[str, str]) -> ServerProcess:
    return serve_for_cli(tmp, name, agent, env=env)


@pytest.fixture(scope="module")
def permissions(tmp_path_factory):
    proc = _serve(
        tmp_path_factory.mktemp("call-real"), "perm", "tests.permission_agents:PermissionAgent", {}
    )
    yield f"http://127.0.0.1:{proc.http_port}"
    proc.stop()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    proc = _serve(
        tmp_path_factory.mktemp("call-real"),
        "files",
        "tests.agents:ScriptedAgent",
        {"A2A_AUTH_BEARER_TOKENS": f"alice={TOKEN}"},
    )
    yield f"http://127.0.0.1:{proc.http_port}"
    proc.stop()


def _acks(events: list[dict]) -> list[dict]:
    return [
        part["data"]
        for e in events
        if "statusUpdate" in e
        for part in e["statusUpdate"]["status"].get("message", {}).get("parts", [])
        if isinstance(part.get("data"), dict) and part["data"].get("kind") == "permission_ack"
    ]


@pytest.mark.parametrize("binding", BINDINGS)
def test_approve_and_deny_answer_the_real_permission_side_band(permissions, binding):
    allowed = cli("--json", "--binding", binding, permissions, "tool shell /srv", "--approve")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    events = lines(allowed.stdout)
    [paused] = [e for e in events if state_of(e) == "TASK_STATE_INPUT_REQUIRED"]
    envelope = paused["statusUpdate"]["metadata"]["a2a_service"]["input"]
    assert envelope["kind"] == "permission" and envelope["toolName"] == "shell"
    [ack] = _acks(events)
    assert ack["decision"] == "allow_once" and ack["inputId"] == envelope["inputId"]
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"

    denied = cli("--json", "--binding", binding, permissions, "tool shell /srv", "--deny")
    assert denied.returncode == 3, denied.stdout + denied.stderr  # rejected
    events = lines(denied.stdout)
    assert [a["decision"] for a in _acks(events)] == ["deny"]
    assert state_of(events[-1]) == "TASK_STATE_REJECTED"


def test_unanswered_then_answered_later_with_task(permissions):
    first = cli("--json", permissions, "tool deploy prod")
    assert first.returncode == 4, first.stdout + first.stderr  # input required
    task_id = next(e["task"]["id"] for e in lines(first.stdout) if "task" in e)
    later = cli("--json", permissions, "--task", task_id, "--approve")
    assert later.returncode == 0, later.stdout + later.stderr
    assert [a["decision"] for a in _acks(lines(later.stdout))] == ["allow_once"]


def test_command_approval_with_the_cli(tmp_path):
    proc = _serve(
        tmp_path,
        "cmd",
        "command",
        {"A2A_COMMAND": "wc -c", "A2A_COMMAND_APPROVAL": "true"},
    )
    try:
        url = f"http://127.0.0.1:{proc.http_port}"
        ran = cli("--json", url, "four", "--approve")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        texts = [
            p.get("text", "")
            for e in lines(ran.stdout)
            if "artifactUpdate" in e
            for p in e["artifactUpdate"]["artifact"]["parts"]
        ]
        assert "".join(texts).strip() == "4"
        refused = cli(url, "four", "--deny")
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "denied permission" in refused.stdout
    finally:
        proc.stop()


def test_download_of_a_stored_file_through_the_gateway(files, tmp_path):
    body = "bytes kept by the server"
    made = cli("--json", files, f"file report.txt {body}", "--bearer", TOKEN)
    assert made.returncode == 0, made.stdout + made.stderr
    task_id = next(e["task"]["id"] for e in lines(made.stdout) if "task" in e)
    got = cli(
        "download", "--json", files, "--task", task_id, "-o", str(tmp_path), "--bearer", TOKEN
    )
    assert got.returncode == 0, got.stdout + got.stderr
    [saved] = lines(got.stdout)
    assert saved["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    assert (tmp_path / "report.txt").read_text() == body
    # Without the owner's credentials the route answers 401, and nothing is written.
    anon = cli("download", files, "--task", task_id, "-o", str(tmp_path / "copy.txt"))
    assert anon.returncode == 7, anon.stdout + anon.stderr  # unauthenticated
    assert not (tmp_path / "copy.txt").exists()
