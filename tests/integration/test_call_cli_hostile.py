"""`a2a-call` against a hostile agent: one written here, on loopback, that serves what a
malicious or broken agent could (control characters meant for the terminal, credentials in
URLs, plaintext interfaces behind a TLS card, endless or local-file downloads, a card that
trickles in). The CLI runs as a process, as a person would run it; nothing of the client is
stood in for. Each test asserts the outcome: the exit status, what reached the terminal,
what reached the agent, what was written to disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent import futures
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from tests.call_util import SCRIPT, cli, cli_env
from tests.process import ROOT, free_port
from tests.security_util import make_pki

ERASE = "\x1b[2K\x1b[1A"  # erase the line, move up: rewrites what a person approves
TOKEN = "h0stile-test-t0ken-" + "z" * 20

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


def card_of(url: str, binding: str = "JSONRPC", **fields: Any) -> dict[str, Any]:
    """A minimal A2A 1.0 card with one interface at URL (unary: no streaming)."""
    return {
        "name": "hostile",
        "description": "an agent written to misbehave",
        "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": binding, "protocolVersion": "1.0"}],
        "capabilities": {"streaming": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
        **fields,
    }


class HostileAgent:
    """A loopback HTTP(S) server: GET routes (a body, or a handler that writes its own
    answer), and JSON-RPC at /rpc answering each method with a canned result or error.
    Records every request's path and headers."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, bytes | Handler] = {}
        self.results: dict[str, dict[str, Any] | Handler] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        agent = self

        class Handle(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                agent.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                route = agent.routes.get(self.path)
                if callable(route):
                    with contextlib.suppress(OSError):  # the client hung up: fine
                        route(self)
                    return
                self._send(200 if route is not None else 404, route or b"not found")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                agent.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = agent.results.get(
                    request["method"], {"error": {"code": -32601, "message": "no such method"}}
                )
                if callable(answer):
                    with contextlib.suppress(OSError):
                        answer(self)
                    return
                body = {"jsonrpc": "2.0", "id": request.get("id"), **answer}
                self._send(200, json.dumps(body).encode(), "application/json")

            def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def origin(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def serve_card(self, card: dict[str, Any]) -> str:
        self.routes["/.well-known/agent-card.json"] = json.dumps(card).encode()
        return self.origin

    def answer(self, method: str, result: dict[str, Any]) -> None:
        self.results[method] = {"result": result}

    def fail(self, method: str, message: str) -> None:
        self.results[method] = {"error": {"code": -32603, "message": message}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def agent():
    a = HostileAgent()
    yield a
    a.close()


def _task(task_id: str = "t-1", state: str = "TASK_STATE_COMPLETED", **fields: Any) -> dict:
    return {"id": task_id, "contextId": "c-1", "status": {"state": state}, **fields}


def _raw_controls(text: str) -> set[str]:
    """The control characters in TEXT other than newline and tab."""
    return {c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F}


# ----------------------------------------------------------------------------- the terminal


def test_a_permission_target_cannot_rewrite_what_a_person_approves(agent):
    envelope = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": "t-1",
        "inputId": "i-1",
        "toolUseId": "u-1",
        "toolName": "command",
        "prompt": "Allow running ls?",
        "target": f"rm -rf ~{ERASE}\r   target: ls",
        "readOnly": True,
    }
    status = {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "message": {
            "messageId": "m-1",
            "role": "ROLE_AGENT",
            "parts": [{"text": f"waiting{ERASE}"}],
            "metadata": {"a2a_service": {"input": envelope}},
        },
    }
    agent.answer("SendMessage", {"task": {**_task(state=""), "status": status}})
    url = agent.serve_card(card_of(agent.origin + "/rpc"))
    result = cli(url, "do it")
    assert result.returncode == 4, result.stderr
    shown = result.stdout + result.stderr
    assert _raw_controls(shown) == set()
    assert "   target: rm -rf ~\\x1b[2K\\x1b[1A\\r   target: ls\n" in result.stdout
    assert "[input-required] waiting\\x1b[2K\\x1b[1A" in result.stdout


def test_texts_artifact_names_ids_and_errors_are_escaped(agent):
    artifact = {
        "artifactId": "a-1",
        "name": f"report{ERASE}",
        "parts": [{"text": "line one\nline two\x07\x9b2J"}],
    }
    task = _task(f"t{ERASE}", artifacts=[artifact])
    task["status"]["message"] = {
        "messageId": "m",
        "role": "ROLE_AGENT",
        "parts": [{"text": f"done{ERASE}"}],
    }
    agent.answer("SendMessage", {"task": task})
    agent.fail("GetTask", f"no such task{ERASE}\nfake: all good")
    url = agent.serve_card(
        card_of(
            agent.origin + "/rpc",
            name=f"Friendly{ERASE}",
            description="two\nlines\x1b]0;title\x07",
            skills=[{"id": "s", "name": f"skill{ERASE}", "description": "d", "tags": []}],
        )
    )
    sent = cli(url, "hi")
    assert sent.returncode == 0, sent.stderr
    assert _raw_controls(sent.stdout + sent.stderr) == set()
    # text keeps its newline (the agent's layout); the rest is escaped where it stood
    assert "artifact report\\x1b[2K\\x1b[1A: line one\nline two\\x07\\x9b2J\n" in sent.stdout
    assert "task t\\x1b[2K\\x1b[1A completed: done\\x1b[2K\\x1b[1A" in sent.stdout
    failed = cli("get", url, "--task", "x")
    assert failed.returncode == 8
    assert _raw_controls(failed.stderr) == set()
    assert failed.stderr.count("\n") == 1  # one line: the agent's newline is escaped
    assert "no such task\\x1b[2K\\x1b[1A\\nfake: all good" in failed.stderr
    card = cli("card", url)
    assert card.returncode == 0 and _raw_controls(card.stdout) == set()
    assert "Friendly\\x1b[2K\\x1b[1A  (version 1)" in card.stdout
    assert "two\nlines\\x1b]0;title\\x07" in card.stdout
    # --json is escaped by JSON itself, and stays exact
    as_json = cli("card", "--json", url)
    assert _raw_controls(as_json.stdout) == set()
    assert json.loads(as_json.stdout)["name"] == f"Friendly{ERASE}"


# ----------------------------------------------------------------------------- URL credentials


def test_url_credentials_are_not_printed(agent, tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    result = cli("list", f"http://user:PW-s3cret@{dead}/")
    assert result.returncode == 6, result.stderr
    assert "PW-s3cret" not in result.stderr
    assert f"http://user:***@{dead}/" in result.stderr
    # a URL the agent names, with a token in its query, in the message of a failed download
    sha = "ab" * 32
    part = {
        "url": f"http://{dead}/files/{sha}?token=QUERY-s3cret&name=r.txt",
        "filename": "r.txt",
        "metadata": {"a2a_service": {"sha256": sha, "byteSize": 1}},
    }
    agent.answer("GetTask", _task(artifacts=[{"artifactId": "a", "parts": [part]}]))
    url = agent.serve_card(card_of(agent.origin + "/rpc"))
    failed = cli("download", url, "--task", "t-1", "-o", str(tmp_path))
    assert failed.returncode == 6, failed.stderr
    assert "QUERY-s3cret" not in failed.stderr and "token=***&name=r.txt" in failed.stderr


# ----------------------------------------------------------------------------- TLS downgrade

# Connections to 0.0.0.0 reach the loopback listeners (Linux), but 0.0.0.0 is no loopback
# address, so the client treats the interface as one across the network, as it would
# treat the attacker's host; the listeners can tell whether a credential arrived.
ELSEWHERE = "0.0.0.0"


class GrpcRecorder(grpc.GenericRpcHandler):
    """A plaintext gRPC server on loopback that notes the metadata of each call and answers
    UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[self])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def service(self, handler_call_details):
        self.metadata.append(dict(handler_call_details.invocation_metadata))
        return None

    @property
    def authorizations(self) -> list[str | None]:
        return [m.get("authorization") for m in self.metadata]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("hostile-pki"))


@pytest.fixture
def over_tls(pki):
    """A hostile agent whose card comes over https (a certificate --cacert trusts), and a
    plaintext gRPC and HTTP listener its card can point at."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_pem, pki.server_key)
    tls_agent, plain, recorder = HostileAgent(tls=context), HostileAgent(), GrpcRecorder()
    plain.answer("GetTask", _task())
    yield SimpleNamespace(agent=tls_agent, plain=plain, grpc=recorder, ca=pki.ca_pem)
    recorder.server.stop(None)
    tls_agent.close()
    plain.close()


def _plaintext_interface(env: SimpleNamespace, binding: str, host: str) -> tuple[str, str]:
    if binding == "GRPC":
        return f"grpc://{host}:{env.grpc.port}", "GRPC"
    path = "/rpc" if binding == "JSONRPC" else ""
    return f"http://{host}:{env.plain.port}{path}", binding


def _authorizations(env: SimpleNamespace, binding: str) -> list[str | None]:
    if binding == "GRPC":
        return env.grpc.authorizations
    return [headers.get("authorization") for _, headers in env.plain.seen]


@pytest.mark.parametrize("binding", ["GRPC", "JSONRPC", "HTTP+JSON"])
def test_credentials_never_go_in_plaintext_to_an_interface_a_tls_card_names(over_tls, binding):
    iface, protocol = _plaintext_interface(over_tls, binding, ELSEWHERE)
    url = over_tls.agent.serve_card(card_of(iface, protocol))
    refused = cli("get", url, "--task", "t-1", "--cacert", over_tls.ca, "--bearer", TOKEN)
    assert refused.returncode == 10, refused.stderr
    assert "refused: the card came over https" in refused.stderr
    assert "--allow-plaintext-credentials" in refused.stderr and TOKEN not in refused.stderr
    assert _authorizations(over_tls, binding) == []  # not even a connection with no header
    # the user's explicit say-so sends them (which shows the listener would have seen them)
    allowed = cli(
        "get", url, "--task", "t-1", "--cacert", over_tls.ca, "--bearer", TOKEN,
        "--allow-plaintext-credentials",
    )  # fmt: skip
    assert allowed.returncode in (0, 8), allowed.stderr  # 8: the gRPC recorder answers no A2A
    assert _authorizations(over_tls, binding) == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize("binding", ["GRPC", "JSONRPC"])
def test_loopback_interfaces_and_calls_without_credentials_are_not_refused(over_tls, binding):
    iface, protocol = _plaintext_interface(over_tls, binding, "127.0.0.1")
    url = over_tls.agent.serve_card(card_of(iface, protocol))
    local = cli("get", url, "--task", "t-1", "--cacert", over_tls.ca, "--bearer", TOKEN)
    assert local.returncode in (0, 8), local.stderr
    assert _authorizations(over_tls, binding) == [f"Bearer {TOKEN}"]
    iface, protocol = _plaintext_interface(over_tls, binding, ELSEWHERE)
    url = over_tls.agent.serve_card(card_of(iface, protocol))
    anonymous = cli("get", url, "--task", "t-1", "--cacert", over_tls.ca)
    assert anonymous.returncode in (0, 8), anonymous.stderr
    assert _authorizations(over_tls, binding) == [f"Bearer {TOKEN}", None]
    # `card` only shows the card: no call carries the credentials, nothing to refuse
    shown = cli("card", url, "--cacert", over_tls.ca, "--bearer", TOKEN)
    assert shown.returncode == 0, shown.stderr


def test_a_download_from_a_plaintext_origin_of_a_tls_card_gets_no_credentials(over_tls, tmp_path):
    sha = "ab" * 32
    part = {
        "url": f"http://{ELSEWHERE}:{over_tls.plain.port}/files/{sha}",
        "filename": "f.txt",
        "metadata": {"a2a_service": {"sha256": sha}},
    }
    agent = over_tls.agent
    agent.answer("GetTask", _task(artifacts=[{"artifactId": "a", "parts": [part]}]))
    # the TLS interface is the one used; the card also names a plaintext one, the download's
    card = card_of(agent.origin + "/rpc")
    card["supportedInterfaces"].append(
        {
            "url": f"http://{ELSEWHERE}:{over_tls.plain.port}/rpc",
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
    )
    url = agent.serve_card(card)
    args = ("download", url, "--task", "t-1", "-o", str(tmp_path), "--cacert", over_tls.ca)
    refused = cli(*args, "--bearer", TOKEN)
    assert refused.returncode == 10, refused.stderr
    assert "the download http://" in refused.stderr
    assert over_tls.plain.seen == [] and list(tmp_path.iterdir()) == []
    assert agent.seen[-1][1]["authorization"] == f"Bearer {TOKEN}"  # GetTask, over TLS


# ----------------------------------------------------------------------------- downloads

SHA = "ab" * 32  # what the endless bodies below will never match: they must be cut first


def endless(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A body with no Content-Length (it lasts until the connection closes) and far more
    bytes than any limit these tests set; 256 MiB, not forever, so that a client which
    stopped cutting it fails the test instead of filling the disk."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    block = b"\0" * 65536
    for _ in range(4096):
        handler.wfile.write(block)


def _stored(agent: HostileAgent, url: str, sha: str = SHA, **meta: Any) -> str:
    """The agent's card, and a task t-1 whose one stored file is at URL."""
    part = {"url": url, "filename": "f.bin", "metadata": {"a2a_service": {"sha256": sha, **meta}}}
    agent.answer("GetTask", _task(artifacts=[{"artifactId": "a", "parts": [part]}]))
    return agent.serve_card(card_of(agent.origin + "/rpc"))


@pytest.mark.timeout(60)  # the bug this guards against never ended on its own
def test_a_body_past_its_declared_size_is_cut_and_deleted(agent, tmp_path):
    agent.routes["/files/endless"] = endless
    url = _stored(agent, agent.origin + "/files/endless", byteSize=10)
    result = cli("download", url, "--task", "t-1", "-o", str(tmp_path))
    assert result.returncode == 9, result.stderr
    assert "more than the 10 bytes the artifact declares; aborted, nothing written" in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


@pytest.mark.timeout(60)
def test_a_body_past_max_download_is_cut_and_deleted(agent, tmp_path):
    agent.routes["/files/endless"] = endless
    url = _stored(agent, agent.origin + "/files/endless")  # no size declared
    result = cli("download", url, "--task", "t-1", "-o", str(tmp_path), "--max-download", "1M")
    assert result.returncode == 10, result.stderr
    assert "larger than --max-download (1048576 bytes)" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_sizes_declared_or_announced_past_the_limits_are_refused_before_any_byte(agent, tmp_path):
    body = b"0123456789" * 1000
    agent.routes["/files/big"] = body  # served with its Content-Length: 10000
    big = hashlib.sha256(body).hexdigest()
    url = _stored(agent, agent.origin + "/files/big", big, byteSize=2 << 20)
    over = cli("download", url, "--task", "t-1", "-o", str(tmp_path), "--max-download", "1MiB")
    assert over.returncode == 10 and "larger than --max-download" in over.stderr
    assert "/files/big" not in [path for path, _ in agent.seen]  # not even asked for
    url = _stored(agent, agent.origin + "/files/big", big, byteSize=10)
    short = cli("download", url, "--task", "t-1", "-o", str(tmp_path))
    assert short.returncode == 9 and "more than the 10 bytes" in short.stderr
    assert list(tmp_path.iterdir()) == []
    # within both limits: saved
    url = _stored(agent, agent.origin + "/files/big", big, byteSize=len(body))
    fine = cli("download", url, "--task", "t-1", "-o", str(tmp_path), "--max-download", "10000")
    assert fine.returncode == 0, fine.stderr
    assert (tmp_path / "f.bin").read_bytes() == body


@pytest.mark.timeout(60)
def test_file_urls_an_agent_names_are_never_read(agent, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the user's own file")
    out = tmp_path / "out"
    out.mkdir()
    # (not file:///dev/zero: a client that read it would fill the disk, not fail the test)
    for target, sha in (
        (secret.as_uri(), hashlib.sha256(secret.read_bytes()).hexdigest()),  # it would verify
        ("FILE:///etc/hostname", SHA),
        (f"file://localhost{secret}", SHA),
    ):
        url = _stored(agent, target, sha)
        result = cli("download", url, "--task", "t-1", "-o", str(out))
        assert result.returncode == 10, result.stderr
        assert "a2a-call never reads file:// URLs an agent names" in result.stderr
        assert list(out.iterdir()) == []


# ----------------------------------------------------------------------------- timeouts


def trickle(handler: http.server.BaseHTTPRequestHandler) -> None:
    """An answer that promises a JSON body and sends a space a second (the stalling a
    per-read timeout never catches), until the client hangs up (or ten minutes)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    for _ in range(600):
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(1)


def test_a_card_or_a_unary_answer_at_a_byte_a_second_ends_without_timeout(agent):
    """No --timeout given: the default bounds the card and each unary call (both at once:
    it takes the default's time)."""
    slow_card = HostileAgent()
    slow_card.routes["/.well-known/agent-card.json"] = trickle
    agent.results["GetTask"] = trickle
    url = agent.serve_card(card_of(agent.origin + "/rpc"))
    runs = [
        subprocess.Popen(
            [SCRIPT, *args],
            cwd=ROOT,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in (["card", slow_card.origin], ["get", url, "--task", "t-1"])
    ]
    try:
        for run in runs:
            _, err = run.communicate(timeout=100)  # far past the default: it did not hang
            assert run.returncode == 6, err
            assert "timed out after 30 s (--timeout)" in err
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.communicate()
        slow_card.close()


def test_timeout_flags_are_checked(agent):
    url = agent.serve_card(card_of(agent.origin + "/rpc"))
    assert cli("get", url, "--task", "t", "--idle-timeout", "-1").returncode == 2
    assert cli("get", url, "--task", "t", "--timeout", "0").returncode == 2
