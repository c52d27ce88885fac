"""`a2a-call` (the console script; `python -m service call` once) against our real server on loopback: exit codes and
`--json` lines over each binding, the commands, credentials, `--verify-card`, the permission
round trip (non-interactive, and a person at a pty), and `download` with its SHA-256 check.

Every server is a real process on ephemeral ports; the CLI runs as a process too. The
permission requests come from `tests/agents.py` (`HumanLoopAgent`: `permit` asks through
the server's own `ctx.request_permission`); `stored` makes url parts shaped like stored file
artifacts whose bytes a small real HTTP server in this test serves (another origin: no
credentials go there). tests/integration/test_call_cli_real.py downloads through the
gateway's own route.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import threading
import time

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from a2a_cards.keys import key_from_pem
from tests.bench.common import ServerProcess
from tests.call_util import SCRIPT, cli, cli_env, lines, serve_for_cli, state_of
from tests.process import ROOT, free_port
from tests.security_util import make_pki

BINDINGS = ("jsonrpc", "rest", "grpc")
TOKEN = "t0ken-" + "a" * 30
API_KEY = "k3y-" + "b" * 30
PASSWORD = "pa55word-long"
EVENT_KEYS = {"task", "statusUpdate", "artifactUpdate", "message"}


class Server:
    def __init__(self, proc: ServerProcess) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{proc.http_port}"
        self.grpc = f"127.0.0.1:{proc.port}"


def _serve(
    tmp: pathlib.Path, name: str, *args: str, env: dict[str, str] | None = None
) -> ServerProcess:
    return serve_for_cli(
        tmp, name, "tests.agents:HumanLoopAgent", "--store", "memory:", *args, env=env
    )


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    proc = _serve(tmp_path_factory.mktemp("call-cli"), "plain")
    yield Server(proc)
    proc.stop()


class Site:
    """A loopback HTTP server answering GETs and POSTs from `routes` (path -> (status, body))
    and recording each request's headers."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.seen: list[dict[str, str]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                site.seen.append({k.lower(): v for k, v in self.headers.items()})
                status, body = site.routes.get(self.path, (404, b"not found"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site():
    s = Site()
    yield s
    s.close()


# ----------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(
    ("text", "code", "state"),
    [
        ("echo hi there", 0, "TASK_STATE_COMPLETED"),
        ("fail", 1, "TASK_STATE_FAILED"),
        ("reject", 3, "TASK_STATE_REJECTED"),
        ("input more please", 4, "TASK_STATE_INPUT_REQUIRED"),
        ("auth", 5, "TASK_STATE_AUTH_REQUIRED"),
    ],
)
def test_exit_code_and_json_lines_follow_the_task(ours, binding, text, code, state):
    result = cli("--json", "--binding", binding, ours.url, text)
    assert result.returncode == code, result.stderr
    events = lines(result.stdout)
    assert all(len(e.keys() & EVENT_KEYS) == 1 for e in events), events
    assert "task" in events[0] and state_of(events[-1]) == state
    # Each event's number, in order, what `subscribe --after` takes: the SSE id, or on gRPC
    # the event's a2a_service.eventId (moved out of the event: none is left in it).
    ids = [int(e["eventId"]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert "a2a_service" not in json.dumps(events)
    task_ids = {
        e.get("task", {}).get("id") or e.get("statusUpdate", {}).get("taskId") for e in events
    }
    task_ids.discard(None)
    assert len(task_ids) == 1
    if text.startswith("echo"):
        [artifact] = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        assert artifact["artifact"]["parts"] == [{"text": "echo hi there"}]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_direct_reply_is_one_message_line_and_exit_0(ours, binding):
    result = cli("--json", "--binding", binding, ours.url, "reply", "hello")
    assert result.returncode == 0, result.stderr
    [event] = lines(result.stdout)
    assert event["message"]["parts"] == [{"text": "hello"}]


def test_human_output_off_a_terminal_is_plain_lines(ours):
    result = cli(ours.url, "slow", "2")
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout + result.stderr
    out = result.stdout.splitlines()
    assert "[working] step 0" in out and "[working] step 1" in out
    assert out[-1].endswith(" completed")


def test_unary_when_asked_and_parts_from_files_and_data(ours, tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("file body")
    result = cli(
        "--json",
        "--no-stream",
        ours.url,
        "echo",
        "x",
        "--file",
        str(note),
        "--file-url",
        "https://example.com/a.png",
        "--data",
        '{"n": 1}',
    )
    # Parts in order: text, the file inline, the URL part; our input policy refuses remote
    # URLs (an A2A error reply, exit 8) and names the part.
    assert result.returncode == 8, result.stdout
    assert "InvalidParams: message.parts[2].url" in result.stderr
    result = cli("--json", "--no-stream", ours.url, "echo x", "--data", '{"n": 1}')
    assert result.returncode == 0, result.stderr
    [event] = lines(result.stdout)  # unary: one answer, the settled task
    assert event["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert event["task"]["history"][0]["parts"][1] == {
        "data": {"n": 1.0},
        "mediaType": "application/json",
    }


def test_context_and_task_continue_a_conversation(ours):
    first = cli("--json", ours.url, "input", "what next?")
    assert first.returncode == 4
    task = lines(first.stdout)[0]["task"]
    follow = cli("--json", ours.url, "--task", task["id"], "--context", task["contextId"], "go on")
    assert follow.returncode == 0, follow.stderr
    events = lines(follow.stdout)
    assert events[0]["task"]["id"] == task["id"]
    [artifact] = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    assert artifact["parts"] == [{"text": "follow-up: go on"}]
    other = cli("--json", ours.url, "--context", task["contextId"], "echo", "same context")
    assert other.returncode == 0
    new_task = lines(other.stdout)[0]["task"]
    assert new_task["contextId"] == task["contextId"] and new_task["id"] != task["id"]


def test_grpc_address_without_a_card(ours):
    result = cli("--json", "--grpc", ours.grpc, "echo", "over grpc")
    assert result.returncode == 0, result.stderr
    assert state_of(lines(result.stdout)[-1]) == "TASK_STATE_COMPLETED"


def test_the_first_interface_it_speaks_is_picked(ours, site):
    card = httpx.get(ours.url + "/.well-known/agent-card.json").json()
    grpc_iface = next(i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")
    card["supportedInterfaces"] = [
        {"url": "ws://127.0.0.1:1", "protocolBinding": "WEBSOCKET", "protocolVersion": "1.0"},
        grpc_iface,
    ]
    site.routes["/agent.json"] = (200, json.dumps(card).encode())
    result = cli("--json", site.origin + "/agent.json", "echo", "picked")
    assert result.returncode == 0, result.stderr
    result = cli("--binding", "jsonrpc", site.origin + "/agent.json", "echo")
    assert result.returncode == 8
    assert "offers no interface for JSONRPC" in result.stderr
    card["supportedInterfaces"] = [
        {"url": "ws://127.0.0.1:1/a2a/ws", "protocolBinding": "urn:a2a-service:binding:websocket"}
    ]
    site.routes["/agent.json"] = (200, json.dumps(card).encode())
    result = cli(site.origin + "/agent.json", "echo")
    assert result.returncode == 8
    assert (
        "the agent offers urn:a2a-service:binding:websocket, which a2a-call does not speak; "
        "it speaks JSONRPC, HTTP+JSON, GRPC"
    ) in result.stderr


def test_headers_version_and_credentials_go_to_the_interface_not_the_card(site):
    card = {
        "name": "n",
        "description": "d",
        "version": "1",
        "supportedInterfaces": [
            {"url": site.origin + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }
    site.routes["/card.json"] = (200, json.dumps(card).encode())
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task x not found"}}
    site.routes["/rpc"] = (200, json.dumps(error).encode())
    result = cli("get", site.origin + "/card.json", "--task", "x", "--bearer", TOKEN)
    assert result.returncode == 8 and "TaskNotFound" in result.stderr
    card_request, rpc_request = site.seen
    assert "authorization" not in card_request  # the card is public: no credentials
    assert rpc_request["a2a-version"] == "1.0"
    assert rpc_request["authorization"] == f"Bearer {TOKEN}"


def test_python_m_service_call_and_card(ours):
    result = subprocess.run(
        [sys.executable, "-m", "service", "call", "card", "--json", ours.url],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == httpx.get(ours.url + "/.well-known/agent-card.json").json()
    human = cli("card", ours.url)
    assert human.returncode == 0 and "interface GRPC" in human.stdout
    # gRPC has no public card RPC; this server has no extended card: an A2A error (8)
    assert cli("card", "--grpc", ours.grpc).returncode == 8


def test_errors_unreachable_protocol_and_usage(ours, site):
    dead = f"127.0.0.1:{free_port()}"
    assert cli("list", f"http://{dead}").returncode == 6
    assert cli("list", "--grpc", dead).returncode == 6
    missing = cli("get", ours.url, "--task", "no-such-task")
    assert missing.returncode == 8 and "TaskNotFound" in missing.stderr
    site.routes["/.well-known/agent-card.json"] = (200, b"[1, 2]")
    assert cli("list", site.origin).returncode == 8
    assert cli("list", site.origin + "/nothing.json").returncode == 8
    assert cli("send", ours.url).returncode == 2  # nothing to send
    assert cli("list", "--binding", "carrier-pigeon", ours.url).returncode == 2
    slow = cli("--timeout", "1", ours.url, "hang")
    assert slow.returncode == 6 and "timed out" in slow.stderr
    # A stream that broke off says how to pick it up: the task and the last event id.
    assert "resume with: a2a-call subscribe … --task " in slow.stderr
    assert " --after 2" in slow.stderr  # 1: the task, 2: working "hanging"


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_silent_stream_is_given_up_after_the_idle_bound(ours, binding):
    # `hang` says it is working, then nothing (SSE keep-alive comments are no event)
    quiet = cli("--binding", binding, "--idle-timeout", "2", ours.url, "hang")
    assert quiet.returncode == 6, quiet.stderr
    assert "no event for 2 s (--idle-timeout): gave up" in quiet.stderr
    assert "resume with: a2a-call subscribe … --task " in quiet.stderr
    unary = cli("--binding", binding, "--no-stream", "--idle-timeout", "2", ours.url, "hang")
    assert unary.returncode == 6 and "no event for 2 s" in unary.stderr


def test_a_stream_that_keeps_talking_is_bounded_only_by_timeout(ours):
    # `tick` sends an event every 0.05 s, far inside the idle bound, and never ends: the
    # idle bound never fires, --timeout (the whole call) does
    busy = cli("--idle-timeout", "3", "--timeout", "6", ours.url, "tick")
    assert busy.returncode == 6, busy.stderr
    assert "timed out after 6 s (--timeout)" in busy.stderr and "no event" not in busy.stderr
    # a quiet stretch shorter than the (default) idle bound is waited through
    patient = cli(ours.url, "sleep", "2")
    assert patient.returncode == 0, patient.stderr


# ----------------------------------------------------------------------------- other commands


def _start(url: str, text: str) -> str:
    """A task that keeps running (returnImmediately), by plain JSON-RPC."""
    reply = httpx.post(
        url,
        headers={"A2A-Version": "1.0"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": os.urandom(8).hex(),
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                },
                "configuration": {"returnImmediately": True},
            },
        },
    ).json()
    return reply["result"]["task"]["id"]


def _wait_for_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output from the subscriber"
    return proc.stdout.readline()


@pytest.mark.parametrize("binding", BINDINGS)
def test_get_list_cancel_and_subscribe(ours, binding):
    task_id = _start(ours.url, "hang")
    sub = subprocess.Popen(
        [SCRIPT, "subscribe", "--json", "--binding", binding]
        + (["--after", "1"] if binding == "grpc" else [])
        + [ours.url, "--task", task_id],
        cwd=ROOT,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = json.loads(_wait_for_line(sub))
        assert first["task"]["id"] == task_id  # the snapshot
        got = cli("get", "--json", "--binding", binding, ours.url, "--task", task_id)
        assert got.returncode == 0 and lines(got.stdout)[0]["id"] == task_id
        listed = cli("list", "--json", "--binding", binding, ours.url, "--state", "working")
        assert listed.returncode == 0
        assert task_id in [t["id"] for t in lines(listed.stdout)[0]["tasks"]]
        canceled = cli("cancel", "--json", "--binding", binding, ours.url, "--task", task_id)
        assert canceled.returncode == 0, canceled.stderr
        assert lines(canceled.stdout)[0]["status"]["state"] == "TASK_STATE_CANCELED"
        out, err = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    assert sub.returncode == 3, err
    assert state_of(lines(out)[-1]) == "TASK_STATE_CANCELED"


@pytest.mark.parametrize("binding", BINDINGS)
def test_subscribe_after_resumes_with_last_event_id(ours, binding):
    done = cli("--json", ours.url, "slow", "3")
    assert done.returncode == 0
    sent = lines(done.stdout)
    task_id, third = sent[0]["task"]["id"], sent[2]["eventId"]
    every = cli(
        "subscribe", "--json", "--binding", binding, ours.url, "--task", task_id, "--after", "0"
    )
    later = cli(
        "subscribe", "--json", "--binding", binding, ours.url, "--task", task_id, "--after", third
    )
    assert every.returncode == 0 and later.returncode == 0, every.stderr + later.stderr
    all_events, rest = lines(every.stdout), lines(later.stdout)
    # The task as it is now first, numbered with the last event, then the events after the
    # resume point, replayed from the store: the same events with the same ids on every
    # binding (gRPC's number moved out of the event into eventId, as SSE's id is).
    for now in (all_events[0], rest[0]):
        assert now["task"]["id"] == task_id and now["eventId"] == sent[-1]["eventId"]
        assert state_of(now) == "TASK_STATE_COMPLETED"
    assert all_events[1:] == sent
    assert rest[1:] == sent[3:] and state_of(rest[-1]) == "TASK_STATE_COMPLETED"
    bad = cli("subscribe", "--binding", binding, ours.url, "--task", task_id, "--after", "x")
    assert bad.returncode == 8 and "Last-Event-ID" in bad.stderr


# ----------------------------------------------------------------------------- permission


def _envelope_of(events: list[dict]) -> dict:
    [paused] = [e for e in events if state_of(e) == "TASK_STATE_INPUT_REQUIRED"]
    return paused["statusUpdate"]["metadata"]["a2a_service"]["input"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_approve_and_deny_answer_the_permission_request(ours, binding):
    allowed = cli("--json", "--binding", binding, ours.url, "permit2", "/bin/true", "--approve")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    events = lines(allowed.stdout)
    acks = [
        e["statusUpdate"]["status"]["message"]["parts"][0]["data"]
        for e in events
        if state_of(e) == "TASK_STATE_WORKING"
        and "statusUpdate" in e
        and e["statusUpdate"]["status"].get("message", {}).get("parts", [{}])[0].get("data")
    ]
    assert [a["kind"] for a in acks] == ["permission_ack", "permission_ack"]
    assert all(a["decision"] == "allow_once" for a in acks)
    assert any(
        e.get("artifactUpdate", {}).get("artifact", {}).get("parts") == [{"text": "ran /bin/true"}]
        for e in events
    )
    denied = cli("--binding", binding, ours.url, "permit", "/bin/rm", "--deny")
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "the caller denied it" in denied.stdout


def test_unanswered_permission_exits_input_required_with_the_envelope(ours):
    human = cli(ours.url, "permit", "/usr/bin/make")
    assert human.returncode == 4, human.stderr
    [line] = [x for x in human.stdout.splitlines() if x.startswith("envelope: ")]
    envelope = json.loads(line.removeprefix("envelope: "))
    assert envelope["kind"] == "permission" and envelope["target"] == "/usr/bin/make"
    assert "target: /usr/bin/make" in human.stdout and "--approve" in human.stderr
    as_json = cli("--json", ours.url, "permit", "/usr/bin/make")
    assert as_json.returncode == 4
    events = lines(as_json.stdout)
    assert _envelope_of(events)["schemaVersion"] == 1
    # A later run answers the pending request of that task.
    task_id = events[0]["task"]["id"]
    answered = cli("--json", ours.url, "--task", task_id, "--approve")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert state_of(lines(answered.stdout)[-1]) == "TASK_STATE_COMPLETED"
    # ... and nothing is pending any more.
    again = cli(ours.url, "--task", task_id, "--deny")
    assert again.returncode == 2 and "no pending permission request" in again.stderr


def _on_a_pty(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the CLI with a terminal for stdin, stdout and stderr; type ANSWER at the prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [SCRIPT, *args],
        cwd=ROOT,
        env=cli_env({"TERM": "xterm"}),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    output, answered = b"", False
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the other side closed
                    break
                if not chunk:
                    break
                output += chunk
                if not answered and b"Allow?" in output:
                    os.write(master, answer)
                    answered = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, output.decode(errors="replace")


@pytest.mark.parametrize(
    ("answer", "code", "words"), [(b"a\n", 0, "ran /bin/date"), (b"d\n", 3, "denied")]
)
def test_a_person_at_a_terminal_is_asked(ours, answer, code, words):
    status, screen = _on_a_pty([ours.url, "permit", "/bin/date"], answer)
    assert status == code, screen
    assert "The agent asks for permission: Allow running /bin/date?" in screen
    assert "target: /bin/date" in screen and "readOnly: no" in screen
    assert words in screen
    assert "\r\x1b[K[" in screen  # the progress line, rewritten in place


# ----------------------------------------------------------------------------- download


def _stored_task(ours: Server, site: Site, name: str, body: str) -> tuple[str, str]:
    result = cli("--json", ours.url, "stored", name, site.origin + "/files", body)
    assert result.returncode == 0, result.stderr
    return lines(result.stdout)[0]["task"]["id"], hashlib.sha256(body.encode()).hexdigest()


def test_download_verifies_the_sha256(ours, site, tmp_path):
    task_id, digest = _stored_task(ours, site, "report.txt", "the report")
    site.routes[f"/files/{digest}"] = (200, b"the report")
    result = cli(
        "download", "--json", ours.url, "--task", task_id, "-o", str(tmp_path), "--bearer", TOKEN
    )
    assert result.returncode == 0, result.stderr
    [saved] = lines(result.stdout)
    assert saved["sha256"] == digest and saved["byteSize"] == 10
    assert (tmp_path / "report.txt").read_text() == "the report"
    # Credentials go only to the agent's own origin; this file server is another one.
    assert "authorization" not in site.seen[-1]
    again = cli("download", ours.url, "--task", task_id, "-o", str(tmp_path))
    assert again.returncode == 2 and "exists" in again.stderr
    # Bytes that do not match the declared SHA-256 are not written.
    site.routes[f"/files/{digest}"] = (200, b"the rep0rt")
    bad = cli("download", ours.url, "--task", task_id, "-o", str(tmp_path / "copy.txt"))
    assert bad.returncode == 9 and "does not match" in bad.stderr
    assert not (tmp_path / "copy.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]  # no temporary left over


def test_download_names_and_traversal(ours, site, tmp_path):
    task_id, digest = _stored_task(ours, site, "../../escape.txt", "x")
    site.routes[f"/files/{digest}"] = (200, b"x")
    result = cli("download", ours.url, "--task", task_id, "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "escape.txt").read_text() == "x"
    assert cli("download", ours.url, "--task", task_id, "other.bin").returncode == 2
    plain = cli("--json", ours.url, "echo", "no files")
    no_files = cli("download", ours.url, "--task", lines(plain.stdout)[0]["task"]["id"])
    assert no_files.returncode == 8 and "no stored file" in no_files.stderr


# ----------------------------------------------------------------------------- credentials


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    proc = _serve(
        tmp_path_factory.mktemp("call-cli-auth"),
        "auth",
        env={
            "A2A_AUTH_BEARER_TOKENS": f"alice={TOKEN}",
            "A2A_AUTH_API_KEYS": f"ci={API_KEY}",
            "A2A_AUTH_BASIC_USERS": f"carol:{PASSWORD}",
        },
    )
    yield Server(proc)
    proc.stop()


@pytest.mark.parametrize("binding", BINDINGS)
def test_credentials_over_each_binding(guarded, binding):
    assert cli("--binding", binding, guarded.url, "echo").returncode == 7
    result = cli("--binding", binding, guarded.url, "echo", "ok", "--bearer", TOKEN)
    assert result.returncode == 0, result.stderr


def test_every_credential_source_and_none_is_echoed(guarded):
    wrong = cli(guarded.url, "echo", "--bearer", "wrong-" + TOKEN)
    assert wrong.returncode == 7 and "not authenticated" in wrong.stderr
    assert TOKEN not in wrong.stdout + wrong.stderr
    for flags, env in (
        ([], {"A2A_CALL_BEARER": TOKEN}),
        (["--api-key", API_KEY], None),
        ([], {"A2A_CALL_API_KEY": API_KEY}),
        (["--basic", f"carol:{PASSWORD}"], None),
        ([], {"A2A_CALL_BASIC": f"carol:{PASSWORD}"}),
    ):
        result = cli(guarded.url, "echo", "ok", *flags, env=env)
        assert result.returncode == 0, (flags, env, result.stderr)
        for secret in (TOKEN, API_KEY, PASSWORD):
            assert secret not in result.stdout + result.stderr


def test_bearer_and_basic_together_is_a_usage_error(guarded):
    result = cli(guarded.url, "echo", "--bearer", TOKEN, "--basic", f"carol:{PASSWORD}")
    assert result.returncode == 2
    assert base64.b64encode(PASSWORD.encode()).decode() not in result.stderr


# ----------------------------------------------------------------------------- --verify-card


def _ec_pem(path: pathlib.Path) -> pathlib.Path:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("call-cli-signed")
    pem = _ec_pem(tmp / "card.pem")
    proc = _serve(tmp, "signed", env={"A2A_CARD_SIGNING_KEY_FILES": f"k1={pem}"})
    yield Server(proc), tmp
    proc.stop()


def test_verify_card_accepts_a_card_signed_with_the_pinned_keys(signed, ours):
    server, tmp = signed
    jwks_url = server.url + "/.well-known/jwks.json"
    pinned = tmp / "pinned.jwks"
    pinned.write_text(httpx.get(jwks_url).text)
    for source in (jwks_url, str(pinned)):
        result = cli("--verify-card", source, server.url, "echo", "trusted")
        assert result.returncode == 0, result.stderr
    # Another key set: refused, nothing is sent.
    other = tmp / "other.jwks"
    stranger = key_from_pem(_ec_pem(tmp / "other.pem").read_bytes(), "k1")
    other.write_text(json.dumps({"keys": [stranger.public_jwk()]}))  # same kid, another key
    refused = cli("--json", "--verify-card", str(other), server.url, "echo", "no")
    assert refused.returncode == 9 and "NOT VERIFIED" in refused.stderr
    assert refused.stdout == ""
    # An unsigned card cannot be verified: refused.
    unsigned = cli("--verify-card", str(pinned), ours.url, "echo")
    assert unsigned.returncode == 9 and "no signatures" in unsigned.stderr
    assert cli("--verify-card", str(tmp / "missing.jwks"), server.url, "echo").returncode == 9


# ----------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def mutual_tls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("call-cli-tls")
    pki = make_pki(tmp / "pki")
    proc = _serve(
        tmp,
        "tls",
        env={
            "A2A_TLS_CERT_FILE": pki.server_pem,
            "A2A_TLS_KEY_FILE": pki.server_key,
            "A2A_TLS_CLIENT_CA_FILE": pki.ca_pem,
        },
    )
    server = Server(proc)
    server.url = server.url.replace("http://", "https://")
    yield server, pki
    proc.stop()


@pytest.mark.parametrize("binding", BINDINGS)
def test_cacert_cert_and_key(mutual_tls, binding):
    server, pki = mutual_tls
    ok = cli(
        "--binding", binding, "--cacert", pki.ca_pem, "--cert", pki.client_pem,
        "--key", pki.client_key, server.url, "echo", "over TLS",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "artifact echo: echo over TLS" in ok.stdout
    # Without the client certificate the server refuses the handshake; without the CA the
    # client refuses the server: both are "unreachable".
    no_cert = cli("--binding", binding, "--cacert", pki.ca_pem, server.url, "echo")
    assert no_cert.returncode == 6, no_cert.stderr
    no_ca = cli(
        "--binding", binding, server.url, "echo", "--cert", pki.client_pem, "--key", pki.client_key
    )
    assert no_ca.returncode == 6, no_ca.stderr


def test_download_into_a_directory_given_with_a_trailing_slash(ours, site, tmp_path):
    task_id, digest = _stored_task(ours, site, "notes.txt", "some notes")
    site.routes[f"/files/{digest}"] = (200, b"some notes")
    target = tmp_path / "new" / "dir"
    result = cli("download", ours.url, "--task", task_id, "-o", f"{target}/")
    assert result.returncode == 0, result.stderr
    assert (target / "notes.txt").read_text() == "some notes"  # made, and written into
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    again = cli("download", ours.url, "--task", task_id, "-o", f"{target}/")
    assert again.returncode == 2 and "exists" in again.stderr  # into it again, not over it
