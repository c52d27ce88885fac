"""`python -m service card verify`: exit status 2 for every unreadable card or key source, the
HS256 hint, and what it trusts (jku scheme and origin, redirects, local files, byte cap).

Cards are signed here and served by a real HTTP server on 127.0.0.1 (ephemeral ports);
nothing but loopback is contacted."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format

from a2a_cards import fetch
from a2a_cards.finder import KeyFinder
from a2a_cards.keys import SigningError, key_from_pem, key_from_secret
from gen import a2a_pb2 as pb
from service.app import card_cli
from service.cards.signing import CardSigner
from tests.conftest import ROOT

SECRET = "s3cret-" + "x" * 40


class Site:
    """A loopback HTTP server answering from `routes`: path -> (status, headers, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.hits: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                site.hits.append(self.path)
                status, headers, body = site.routes.get(self.path, (404, {}, b"not found"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def json(self, path: str, document) -> str:
        self.routes[path] = (
            200,
            {"Content-Type": "application/json"},
            json.dumps(document).encode(),
        )
        return self.origin + path

    def redirect(self, path: str, to: str) -> str:
        self.routes[path] = (302, {"Location": to}, b"")
        return self.origin + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site():
    s = Site()
    yield s
    s.close()


@pytest.fixture
def other_site():
    s = Site()
    yield s
    s.close()


def new_key():
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_from_pem(pem)


def signed_card(key=None, *, jku: str = "", secret: str = "") -> tuple[dict, dict]:
    """(card JSON, its JWKS) signed with `key` (a new ES256 key by default) and/or a secret."""
    keys = [] if key is None and secret else [key or new_key()]
    signer = CardSigner(
        keys, secret_key=key_from_secret(secret.encode(), "hs") if secret else None, jku=jku
    )
    card = signer.sign(pb.AgentCard(name="n", description="d", version="1"))
    return json_format.MessageToDict(card), signer.jwks()


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", "card", "verify", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process(*argv: str) -> int:
    from service.app.cli import build_parser

    return card_cli.main(build_parser().parse_args(["card", "verify", *argv]))


# ---------------------------------------------------------------- unreadable card or keys: exit 2


def test_unreadable_pinned_keys_exit_2_with_one_line(site, tmp_path):
    card, jwks = signed_card()
    (tmp_path / "card.json").write_text(json.dumps(card))
    site.routes["/bad.json"] = (200, {}, b"{not json")
    site.routes["/big.json"] = (200, {}, b" " * (fetch.MAX_DOCUMENT_BYTES + 10))
    cases = {
        f"http://127.0.0.1:{free_port()}/jwks.json": "cannot read",  # connection refused
        site.origin + "/missing.jwks": "HTTP 404",
        site.origin + "/bad.json": "not JSON",
        site.origin + "/big.json": "larger than",
        site.json("/not-a-set.json", {"kty": "EC"}): "not a JWK Set",
        str(tmp_path / "no-such.jwks"): "cannot read",
    }
    for jwks_source, reason in cases.items():
        result = cli(str(tmp_path / "card.json"), "--jwks", jwks_source)
        assert result.returncode == 2, (jwks_source, result.stderr)
        line = one_error_line(result)
        assert line.startswith("error: ") and reason in line and jwks_source in line
    # The same keys, readable: verified.
    assert cli(str(tmp_path / "card.json"), "--jwks", site.json("/good.jwks", jwks)).returncode == 0


def test_unreadable_card_exits_2(site, tmp_path):
    site.routes["/.well-known/agent-card.json"] = (500, {}, b"oops")
    assert "HTTP 500" in one_error_line(result := cli(site.origin)) and result.returncode == 2
    (tmp_path / "card.json").write_text("[1, 2")
    assert (
        "not JSON" in one_error_line(result := cli(str(tmp_path / "card.json")))
        and result.returncode == 2
    )


def test_a_timeout_exits_2(monkeypatch, capsys, tmp_path):
    card, _ = signed_card()
    (tmp_path / "card.json").write_text(json.dumps(card))
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setattr(fetch, "TIMEOUT_SECONDS", 0.5)
        port = silent.getsockname()[1]
        assert (
            in_process(str(tmp_path / "card.json"), "--jwks", f"http://127.0.0.1:{port}/jwks") == 2
        )
        assert in_process(f"http://127.0.0.1:{port}/card.json") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") and "timed out" in line for line in err)


def test_a_dns_failure_exits_2(monkeypatch, capsys, tmp_path):
    card, _ = signed_card()
    (tmp_path / "card.json").write_text(json.dumps(card))

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)  # nothing leaves the machine
    assert (
        in_process(str(tmp_path / "card.json"), "--jwks", "https://unreachable.example/jwks.json")
        == 2
    )
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: https://unreachable.example/jwks.json: cannot read it")
    assert "Name or service not known" in line


def test_hs256_without_a_secret_says_how_to_pass_one(tmp_path):
    card, _ = signed_card(secret=SECRET)
    (tmp_path / "card.json").write_text(json.dumps(card))
    result = cli(str(tmp_path / "card.json"))
    assert result.returncode == 1
    line = one_error_line(result)
    assert (
        line.startswith("NOT VERIFIED")
        and "--secret-env NAME" in line
        and "--secret-file FILE" in line
    )
    result = cli(str(tmp_path / "card.json"), "--algorithms", "HS256")
    assert result.returncode == 1 and "--secret-env NAME" in one_error_line(result)
    result = cli(
        str(tmp_path / "card.json"), "--secret-env", "CARD_SECRET", env={"CARD_SECRET": SECRET}
    )
    assert result.returncode == 0 and "HS256" in result.stdout, result.stderr


# ---------------------------------------------------------------- what card verify trusts


def test_a_same_origin_jku_verifies_for_integrity_only(site):
    key = new_key()
    card, jwks = signed_card(key, jku=site.origin + "/keys/jwks.json")
    site.json("/keys/jwks.json", jwks)
    url = site.json("/card.json", card)
    result = cli(url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "verified (integrity only: the key came from the card's own jku, "
        "not from a key you pinned with --jwks)"
    )
    assert site.origin + "/keys/jwks.json" in result.stdout
    # Loopback names are one host: the README's `card verify http://localhost:8080` works
    # against a server whose jku says 127.0.0.1.
    result = cli(url.replace("127.0.0.1", "localhost"))
    assert result.returncode == 0 and "card's own jku" in result.stdout, result.stderr
    # Without a jku: the agent's well-known JWKS, also integrity only.
    card, jwks = signed_card(key)
    site.json("/.well-known/jwks.json", jwks)
    site.json("/.well-known/agent-card.json", card)
    result = cli(site.origin)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "verified (integrity only: the key came from the agent's own JWKS"
    )
    # Pinned with --jwks: no such caveat.
    result = cli(site.origin, "--jwks", site.origin + "/.well-known/jwks.json")
    assert result.returncode == 0 and result.stdout.startswith("verified: ")
    assert "integrity only" not in result.stdout and "pinned with --jwks" in result.stdout


def test_a_foreign_jku_is_refused_unless_allowed(site, other_site):
    card, jwks = signed_card(jku=other_site.json("/jwks.json", {}))
    other_site.json("/jwks.json", jwks)
    url = site.json("/card.json", card)
    result = cli(url)
    assert result.returncode == 1 and "refused: not the card URL's origin" in one_error_line(result)
    assert "--allow-foreign-jku" in result.stderr and other_site.hits == []  # never fetched
    result = cli(url, "--allow-foreign-jku")
    assert result.returncode == 0 and "integrity only" in result.stdout, result.stderr


def test_a_card_from_a_file_has_no_origin_for_its_jku(site, tmp_path):
    card, jwks = signed_card(jku=site.json("/jwks.json", {}))
    site.json("/jwks.json", jwks)
    (tmp_path / "card.json").write_text(json.dumps(card))
    result = cli(str(tmp_path / "card.json"))
    assert (
        result.returncode == 1 and "read from a file" in one_error_line(result) and site.hits == []
    )
    result = cli(str(tmp_path / "card.json"), "--allow-foreign-jku")
    assert result.returncode == 0 and "card's own jku" in result.stdout, result.stderr


def test_a_jku_is_never_a_local_file_nor_plain_http_off_loopback(site, tmp_path):
    key = new_key()
    _, jwks = signed_card(key)
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    for jku in (
        str(tmp_path / "jwks.json"),
        f"file://{tmp_path}/jwks.json",
        "/dev/zero",
        "/dev/stdin",
        "/etc/hostname",
        "ftp://127.0.0.1/jwks.json",
    ):
        card, _ = signed_card(key, jku=jku)
        url = site.json("/card.json", card)
        result = subprocess.run(
            [sys.executable, "-m", "service", "card", "verify", url, "--allow-foreign-jku"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            input="",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert result.returncode == 1, (jku, result.stderr)
        assert "refused: only https://" in one_error_line(result), jku
        assert "verified" not in result.stdout
    # Plain http off loopback: refused before any connection is tried.
    finder = KeyFinder("https://agent.example/card.json", None, None, allow_foreign_jku=True)
    for jku in (
        "http://192.0.2.1/jwks.json",
        "http://agent.example/jwks.json",
        "http://[::ffff:7f00:1]/j",
    ):
        with pytest.raises(SigningError, match="refused: only https://"):
            finder({"alg": "ES256", "kid": "k", "jku": jku})
    assert finder.unreadable == [] and finder.sources == []


def test_a_redirect_to_another_host_is_not_followed(site, other_site):
    key = new_key()
    card, jwks = signed_card(key)
    other_site.json("/.well-known/agent-card.json", card)
    other_site.json("/.well-known/jwks.json", jwks)
    site.redirect(
        "/.well-known/agent-card.json", other_site.origin + "/.well-known/agent-card.json"
    )
    result = cli(site.origin)
    assert result.returncode == 2 and "another origin (not followed)" in one_error_line(result)
    assert other_site.hits == []
    # The keys redirected elsewhere: not followed either (unreadable keys: exit 2).
    site.json("/.well-known/agent-card.json", card)
    site.redirect("/.well-known/jwks.json", other_site.origin + "/.well-known/jwks.json")
    result = cli(site.origin)
    assert (
        result.returncode == 2
        and "another origin" in one_error_line(result)
        and other_site.hits == []
    )
    # Same-origin redirects are followed, a bounded number of times.
    site.redirect("/.well-known/jwks.json", "/keys")
    site.json("/keys", jwks)
    assert cli(site.origin).returncode == 0
    site.redirect("/loop", "/loop")
    result = cli(site.origin, "--jwks", site.origin + "/loop")
    assert result.returncode == 2 and "HTTP 302" in one_error_line(result)
    assert 1 < site.hits.count("/loop") <= fetch.MAX_REDIRECTS + 1


def test_local_files_must_be_regular_and_small(tmp_path):
    card, jwks = signed_card()
    (tmp_path / "card.json").write_text(json.dumps(card))
    (tmp_path / "big.json").write_bytes(b" " * (fetch.MAX_DOCUMENT_BYTES + 1))
    os.mkfifo(tmp_path / "fifo")
    for source in ("/dev/zero", "/dev/stdin", str(tmp_path / "fifo"), str(tmp_path)):
        for args in ((source,), (str(tmp_path / "card.json"), "--jwks", source)):
            result = subprocess.run(
                [sys.executable, "-m", "service", "card", "verify", *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                input="{}",
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert result.returncode == 2, (args, result.stderr)
            line = one_error_line(result)
            assert line.startswith(f"error: {source}: ") and (
                "not a regular file" in line or "cannot read" in line
            )
    result = cli(str(tmp_path / "big.json"))
    assert result.returncode == 2 and "larger than" in one_error_line(result)
    result = cli(str(tmp_path / "card.json"), "--secret-file", "/dev/zero")
    assert result.returncode == 2 and "not a regular file" in one_error_line(result)
