"""a2a-call's one escaping helper (`printable`) and its URL redaction (`redact`), and that the
places which print an agent's words go through them: the permission prompt, the renderer,
and every CallError (the one line a failed run prints)."""

from __future__ import annotations

import io

import pytest
from a2a.types import a2a_pb2 as sdk

from a2a_call import permission as call_permission
from a2a_call.errors import CallError, Exit, classify
from a2a_call.render import Printer
from a2a_call.safe import printable, redact, redact_url

ERASE = "\x1b[2K\x1b[1A"  # erase the line, move up: rewrites what a person is approving


@pytest.mark.parametrize(
    ("raw", "line", "text"),
    [
        ("plain words", "plain words", "plain words"),
        (f"make {ERASE}deploy", "make \\x1b[2K\\x1b[1Adeploy", "make \\x1b[2K\\x1b[1Adeploy"),
        ("a\nb\tc", "a\\nb\\tc", "a\nb\tc"),
        ("over\rwrite", "over\\rwrite", "over\\rwrite"),
        ("bell\x07 nul\x00 del\x7f", "bell\\x07 nul\\x00 del\\x7f", "bell\\x07 nul\\x00 del\\x7f"),
        ("csi\x9b2J nel\x85", "csi\\x9b2J nel\\x85", "csi\\x9b2J nel\\x85"),
        ("rlo\u202etxt.exe", "rlo\\u202etxt.exe", "rlo\\u202etxt.exe"),
        ("sep\u2028x", "sep\\u2028x", "sep\\u2028x"),
        ("lone \ud800", "lone \\ud800", "lone \\ud800"),
        ("ünïcode ✓ 日本", "ünïcode ✓ 日本", "ünïcode ✓ 日本"),
    ],
)
def test_printable_escapes_controls_and_keeps_layout_only_in_text(raw, line, text):
    assert printable(raw) == line
    assert printable(raw, multiline=True) == text
    assert printable(printable(raw)) == printable(raw)  # nothing left to escape


def test_printable_takes_any_value():
    assert printable({"a": "\x1b"}) == "{'a': '\\x1b'}"  # the repr already escapes
    assert printable(None) == "None"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:PW@host:8080/a?b=1", "http://user:***@host:8080/a?b=1"),
        ("https://ghp_T0KEN@github.com/x", "https://***@github.com/x"),
        (
            "https://h/f?token=T&name=n&X-Amz-Signature=S",
            "https://h/f?token=***&name=n&X-Amz-Signature=***",
        ),
        ("https://h/cb#access_token=T&state=s", "https://h/cb#access_token=***&state=s"),
        ("https://h/f?api_key=K&sig=S&code=C", "https://h/f?api_key=***&sig=***&code=***"),
        ("grpc://127.0.0.1:50051", "grpc://127.0.0.1:50051"),
        ("http://[::1/x", "http://[::1/x"),  # not parseable, and no userinfo: as given
        ("http://u:p@[::1/x", "http://***@[::1/x"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_redact_finds_urls_in_a_message():
    message = "unreachable: http://user:PW@127.0.0.1:9/.well-known/agent-card.json: ConnectError"
    assert redact(message) == (
        "unreachable: http://user:***@127.0.0.1:9/.well-known/agent-card.json: ConnectError"
    )
    assert redact("'ftp://a:b@h' is not an http(s) URL") == "'ftp://a:***@h' is not an http(s) URL"
    assert redact("no url here: user:pw") == "no url here: user:pw"


def test_a_call_error_is_one_safe_line_whoever_raised_it():
    error = CallError(Exit.PROTOCOL, f"Internal: boom{ERASE}\nfake line http://u:PW@h/?token=T")
    assert error.message == "Internal: boom\\x1b[2K\\x1b[1A\\nfake line http://u:***@h/?token=***"
    assert str(error) == error.message
    # classify quotes the agent's own error text: through CallError too
    assert "\x1b" not in classify(RuntimeError(f"x{ERASE}")).message


ENVELOPE = {
    "schemaVersion": 1,
    "kind": "permission",
    "requestTaskId": "t1",
    "inputId": "i1",
    "toolUseId": "u1",
    "toolName": "command",
    "target": f"rm -rf /{ERASE}\r  target: ls",
    "prompt": "Allow\nthis?",
    "options": [{"id": "allow_once"}, {"id": f"deny{ERASE}"}],
}


def test_the_permission_prompt_shows_each_field_as_one_escaped_line():
    out = io.StringIO()
    assert call_permission.prompt(ENVELOPE, lambda: "d\n", out) == "deny"
    shown = out.getvalue()
    assert "\x1b" not in shown and "\r" not in shown
    assert "   target: rm -rf /\\x1b[2K\\x1b[1A\\r  target: ls\n" in shown
    assert "The agent asks for permission: Allow\\nthis?\n" in shown
    assert "deny\\x1b[2K\\x1b[1A" in shown


def test_the_renderer_escapes_what_the_agent_sent():
    out, err = io.StringIO(), io.StringIO()
    printer = Printer(as_json=False, out=out, err=err, progress=True)
    event = sdk.StreamResponse()
    event.status_update.status.state = sdk.TASK_STATE_WORKING
    event.status_update.status.message.parts.add(text=f"step\n1{ERASE}")
    printer.event(event)
    event = sdk.StreamResponse()
    artifact = event.artifact_update.artifact
    artifact.artifact_id, artifact.name = "a1", f"name{ERASE}\nartifact evil"
    artifact.parts.add(text=f"line 1\nline 2{ERASE}")
    artifact.parts.add(url="https://u:PW@h/f?token=T", filename=f"f{ERASE}")
    printer.event(event)
    printer.done()
    # the progress line (stderr; drawn, then drawn again below the artifact) stays one line;
    # our own clearing sequence is the only raw control there
    shown = err.getvalue().replace("\r\x1b[K", "")
    assert shown == "[working] step\\n1\\x1b[2K\\x1b[1A" * 2
    assert out.getvalue() == (
        "artifact name\\x1b[2K\\x1b[1A\\nartifact evil: line 1\nline 2\\x1b[2K\\x1b[1A "
        "[file f\\x1b[2K\\x1b[1A: https://u:***@h/f?token=***]\n"
    )
    card = sdk.AgentCard(name=f"Agent{ERASE}", description="two\nlines\x07", version="1")
    card.supported_interfaces.add(url="http://u:PW@h/", protocol_binding="JSONRPC")
    card.skills.add(id="s\n1", name="n\x1b", description="d")
    out.truncate(0), out.seek(0)
    printer.card(card, None)
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "PW" not in shown
    assert "Agent\\x1b[2K\\x1b[1A  (version 1)\n  two\nlines\\x07\n" in shown
    assert "  skill s\\n1: n\\x1b — d\n" in shown
