"""The a2a_service metadata extension's values: a tool input is described by its shape only,
results and names are capped and scrubbed of credentials and local paths, usage counts are
checked; and the TurnContext helpers emit them as WORKING status updates (engine on the
memory store). Over a real server: tests/integration/test_metadata_extension.py."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service import agent_metadata as am
from service.agent import Caller, TurnContext
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.store import Scope
from service.store.memory import MemoryTaskStore
from tests.agents import ScriptedAgent, tool_steps
from tests.conftest import user_message

SECRETS = {
    "Authorization: Bearer abcdefghijklmnop.qrs": "abcdefghijklmnop",
    "curl -H 'X-Token: token 9s8d7f6g5h4j3k2l'": "9s8d7f6g5h4j3k2l",
    "password=hunter2 then": "hunter2",
    "api_key: abc123def": "abc123def",
    "use sk-proj0123456789abcdefXYZ": "sk-proj0123456789abcdefXYZ",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl": "eyJhbGciOiJIUzI1NiJ9",
    "clone https://bob:s3cretpw@git.example.com/r.git": "s3cretpw",
    "ghp_0123456789abcdefghijABCDEFGHIJ0123 pushed": "ghp_0123456789",
    "AKIAIOSFODNN7EXAMPLE in env": "AKIAIOSFODNN7EXAMPLE",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----": "MIIEabc",
    "hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "9f86d0818",
}
PATHS = {
    "read /home/alice/.ssh/id_rsa now": "/home/alice",
    "wrote ~/notes/today.txt": "notes/today",
    "opened file:///etc/hosts": "/etc/hosts",
    r"saved C:\Users\bob\report.docx": "bob",
    r"on \\fileserver\share\x": "fileserver",
    "cwd /tmp": "/tmp",
}


@pytest.mark.parametrize("text", list(SECRETS))
def test_token_like_strings_are_redacted(text):
    cleaned = am.clean_text(text)
    assert SECRETS[text] not in cleaned and am.REDACTED in cleaned


@pytest.mark.parametrize("text", list(PATHS))
def test_local_paths_are_removed(text):
    cleaned = am.clean_text(text)
    assert PATHS[text] not in cleaned and am.PATH in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com/docs/a/b",
        "and/or 1/2 km/h",
        "task 0190a4c4-8b7e-7c3a-9f00-1234567890ab done",
        "the token count was 12",
        "plain words",
    ],
)
def test_ordinary_text_stays(text):
    assert am.clean_text(text) == text


def test_strings_are_capped():
    assert am.clean_text("x" * 10_000) == "x" * (am.MAX_TEXT - 1) + "…"
    # A secret that starts just before the cut is still recognised and removed.
    cut = am.clean_text("y" * (am.MAX_TEXT - 20) + " token=" + "s3cr3t" * 100)
    assert "s3cr3t" not in cut and cut.endswith("token=[redacted]")
    assert len(am.clean_text("a-" * 1_000_000)) == am.MAX_TEXT  # huge input: bounded work
    assert len(am.clean_name("t" * 1000, "name")) == am.MAX_NAME


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("password", True),
        ("api_key", True),
        ("apiKey", True),
        ("X-Auth-Token", True),
        ("access_token", True),
        ("Authorization", True),
        ("client_secret", True),
        ("privateKey", True),
        ("session_id", True),
        ("input_tokens", False),
        ("author", False),
        ("monkey", False),
        ("path", False),
    ],
)
def test_keys_that_name_credentials(key, sensitive):
    assert am.is_sensitive_key(key) is sensitive


def test_input_summary_is_the_shape_never_a_value():
    tool_input = {
        "path": "/etc/passwd",
        "recursive": True,
        "depth": 3,
        "pattern": None,
        "files": ["a", "b", "c"],
        "options": {"password": "hunter2", "mode": "fast", "nested": {"a": {"b": {"c": 1}}}},
        "apiKey": 12345,
    }
    summary = am.input_summary(tool_input)
    assert summary == {
        "path": "string(11)",
        "recursive": "boolean",
        "depth": "number",
        "pattern": "null",
        "files": "array(3)",
        "options": {
            "password": "redacted",
            "mode": "string(4)",
            "nested": {"a": {"b": "object(1)"}},
        },
        "apiKey": "redacted",
    }
    text = json.dumps(summary)
    for value in ("/etc/passwd", "hunter2", "fast", "12345"):
        assert value not in text
    assert am.input_summary("a secret sentence") == "string(17)"


def test_sanitize_bounds_size_and_redacts_credential_values():
    result = {
        "stdout": "listed /srv/data/x and 3 files",
        "token": "abc",
        "exitCode": 0,
        "lines": list(range(100)),
        "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        **{f"k{i}": i for i in range(50)},
    }
    clean = am.sanitize(result)
    assert clean["stdout"] == "listed [path] and 3 files"
    assert clean["token"] == am.REDACTED and clean["exitCode"] == 0
    assert clean["lines"][: am.MAX_ITEMS] == list(range(am.MAX_ITEMS))
    assert clean["lines"][-1] == f"… {100 - am.MAX_ITEMS} more"
    assert clean["deep"]["a"]["b"]["c"] == "[object(1)]"
    assert len(clean) == am.MAX_KEYS + 1 and clean["…"] == f"{len(result) - am.MAX_KEYS} more"
    assert am.sanitize(2**60) == str(2**60)  # not representable in JSON numbers exactly
    assert am.sanitize(object()).startswith("<object object")


def test_usage_counts_are_whole_and_summed():
    assert am.usage_metadata(10, 5) == {
        "a2a_service": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}}
    }
    assert am.usage_metadata(1, 2, 7)["a2a_service"]["usage"]["totalTokens"] == 7
    for bad in (-1, 1.5, True, "3", 10**16):
        with pytest.raises(ValueError, match="input_tokens"):
            am.usage_metadata(bad, 0)


def test_tool_metadata_checks_status_and_names():
    with pytest.raises(ValueError, match="tool status"):
        am.tool_metadata("running", "t1", "grep")
    with pytest.raises(ValueError, match="tool name"):
        am.tool_metadata("started", "t1", "  ")
    meta = am.tool_metadata(
        "started", "toolu_01A09q90qw90lq917835lq9x", "grep\n", input={"q": "x"}, has_input=True
    )
    assert meta["a2a_service"]["tool"] == {
        "status": "started",
        "toolUseId": "toolu_01A09q90qw90lq917835lq9x",  # an id is not redacted as random
        "name": "grep",
        "inputSummary": {"q": "string(1)"},
    }


# ------------------------------------------------------------------- the TurnContext helpers


class NeverStarted:
    name = "never started"

    async def run(self, ctx: TurnContext) -> None:
        await ctx.tool_finished("never-started")


async def test_helpers_emit_working_updates_with_the_namespace():
    engine = Engine(MemoryTaskStore(), ScriptedAgent(), InProcessBus())
    try:
        turn = await engine.send(Scope(), user_message("tools"), Caller(), stream=True)
        assert turn.events is not None
        events = [e async for e in turn.events]
    finally:
        await engine.shutdown()
    updates = [
        e.status_update
        for e in events
        if e.HasField("status_update") and e.status_update.HasField("metadata")
    ]
    assert {u.status.state for u in updates} == {pb.TASK_STATE_WORKING}
    ours = [json_format.MessageToDict(u.metadata)["a2a_service"] for u in updates]
    tools = [m["tool"] for m in ours if "tool" in m]
    use_id = tools[0]["toolUseId"]
    assert use_id.startswith("tool-")  # generated
    assert [(t["status"], t["name"], t["toolUseId"]) for t in tools] == tool_steps(use_id)
    assert ours[-1]["usage"]["totalTokens"] == 150
    assert "/home/alice" not in str(events) and "sk-live-123" not in str(events)
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED  # the agent returned


async def test_a_step_of_a_tool_never_started_is_the_agents_error():
    engine = Engine(MemoryTaskStore(), NeverStarted(), InProcessBus())
    try:
        turn = await engine.send(Scope(), user_message("go"), Caller())
        task = await engine.wait(turn)
    finally:
        await engine.shutdown()
    assert isinstance(task, pb.Task) and task.status.state == pb.TASK_STATE_FAILED
