"""a2a-call's pure parts: argument order, card URLs, the permission envelope and answer, stored
file parts, safe file names, error classification and the progress line."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys

import httpx
import pytest
from a2a.client import A2AClientError
from a2a.types import a2a_pb2 as sdk
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format

from a2a_call import cli as call_cli
from a2a_call import download as call_download
from a2a_call import permission as call_permission
from a2a_call.client import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    EventIds,
    card_url_of,
    is_loopback,
    pick_interface,
)
from a2a_call.errors import CallError, Exit, classify, error_reason
from a2a_call.render import Printer

ENVELOPE = {
    "schemaVersion": 1,
    "kind": "permission",
    "requestTaskId": "t1",
    "contextId": "c1",
    "inputId": "i1",
    "toolUseId": "u1",
    "toolName": "command",
    "title": "Run",
    "target": "make",
    "readOnly": True,
    "prompt": "Allow make?",
    "options": [{"id": "allow_once"}, {"id": "deny"}],
}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["http://a", "hi"], ["send", "http://a", "hi"]),
        (
            ["--json", "--binding", "grpc", "http://a", "hi"],
            ["send", "--json", "--binding", "grpc", "http://a", "hi"],
        ),
        (
            ["--json", "get", "http://a", "--task", "t"],
            ["get", "--json", "http://a", "--task", "t"],
        ),
        (["--grpc", "h:1", "list"], ["list", "--grpc", "h:1"]),
        (["--help"], ["--help"]),
    ],
)
def test_the_command_goes_first_and_send_is_the_default(argv, expected):
    assert call_cli.normalize(argv) == expected


def test_card_urls():
    assert card_url_of("http://h:1") == "http://h:1/.well-known/agent-card.json"
    assert card_url_of("http://h:1/agents/x/") == "http://h:1/agents/x/.well-known/agent-card.json"
    assert card_url_of("https://h/card.json") == "https://h/card.json"
    with pytest.raises(CallError) as info:
        card_url_of("h:50051")
    assert info.value.code == Exit.USAGE and "--grpc" in info.value.message


def test_the_first_interface_it_speaks():
    card = sdk.AgentCard()
    card.supported_interfaces.add(url="ws://x", protocol_binding="WEBSOCKET")
    card.supported_interfaces.add(url="h:1", protocol_binding="GRPC")
    card.supported_interfaces.add(url="http://h", protocol_binding="JSONRPC")
    assert pick_interface(card, None).protocol_binding == "GRPC"
    assert pick_interface(card, "JSONRPC").url == "http://h"
    with pytest.raises(CallError):
        pick_interface(card, "HTTP+JSON")


def test_a_card_of_bindings_it_cannot_speak_is_named():
    card = sdk.AgentCard()
    card.supported_interfaces.add(
        url="unix:/run/a.sock", protocol_binding="urn:a2a-service:binding:unix"
    )
    card.supported_interfaces.add(url="stdio:", protocol_binding="urn:a2a-service:binding:stdio")
    with pytest.raises(CallError) as info:
        pick_interface(card, None)
    assert info.value.code == Exit.PROTOCOL
    assert info.value.message == (
        "the card offers no interface a2a-call speaks; the agent offers "
        "urn:a2a-service:binding:unix, urn:a2a-service:binding:stdio, none of which a2a-call "
        "speaks; it speaks JSONRPC, HTTP+JSON, GRPC"
    )
    card.supported_interfaces.add(url="h:1", protocol_binding="GRPC")
    with pytest.raises(CallError) as info:
        pick_interface(card, "JSONRPC")
    assert info.value.message.startswith("the card offers no interface for JSONRPC (it offers: ")
    assert "urn:a2a-service:binding:unix, urn:a2a-service:binding:stdio, none of which" in (
        info.value.message
    )
    assert pick_interface(card, None).url == "h:1"
    assert "at all" in pytest.raises(CallError, pick_interface, sdk.AgentCard(), None).value.message


def _status_event(metadata: dict) -> sdk.StreamResponse:
    event = sdk.StreamResponse()
    event.status_update.status.state = sdk.TASK_STATE_INPUT_REQUIRED
    event.status_update.metadata.update(metadata)
    return event


def test_the_envelope_is_found_nested_dotted_or_in_the_task():
    assert (
        call_permission.find_envelope(_status_event({"a2a_service": {"input": ENVELOPE}}))
        == ENVELOPE
    )
    assert call_permission.find_envelope(_status_event({"a2a_service.input": ENVELOPE})) == ENVELOPE
    task = sdk.Task(id="t1")
    task.status.message.metadata.update({"a2a_service": {"input": ENVELOPE}})
    assert call_permission.find_envelope(task)["schemaVersion"] == 1  # an int again
    not_permission = {**ENVELOPE, "kind": "question"}
    assert (
        call_permission.find_envelope(_status_event({"a2a_service": {"input": not_permission}}))
        is None
    )
    assert call_permission.find_envelope(_status_event({"other": 1})) is None


def test_the_answer_holds_exactly_the_correlation_fields_and_the_decision():
    message = call_permission.answer(ENVELOPE, "deny")
    assert message.role == sdk.ROLE_USER and message.task_id == "t1" and message.context_id == "c1"
    [part] = message.parts
    assert part.media_type == "application/json"
    assert json_format.MessageToDict(part.data) == {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": "t1",
        "inputId": "i1",
        "toolUseId": "u1",
        "decision": "deny",
    }


def test_the_prompt_asks_until_allow_or_deny_and_eof_denies():
    answers = iter(["maybe\n", "a\n"])
    out = io.StringIO()
    assert call_permission.prompt(ENVELOPE, lambda: next(answers), out) == "allow_once"
    assert "target: make" in out.getvalue() and "readOnly: yes" in out.getvalue()
    assert "Answer a (allow once) or d (deny)." in out.getvalue()
    assert call_permission.prompt(ENVELOPE, lambda: "", io.StringIO()) == "deny"


def test_stored_files_and_safe_names():
    task = sdk.Task(id="t")
    art = task.artifacts.add(artifact_id="a1", name="r")
    part = art.parts.add(url="http://h/tasks/t/files/" + "ab" * 32, filename="../r.txt")
    part.metadata.update({"a2a_service": {"sha256": "AB" * 32, "byteSize": 3}})
    art.parts.add(url="http://h/no-hash", filename="x")  # not a stored file
    [stored] = call_download.stored_files(task)
    assert stored.sha256 == "ab" * 32 and stored.byte_size == 3 and stored.artifact_id == "a1"
    assert call_download.safe_name("../../etc/passwd", "f") == "passwd"
    assert call_download.safe_name("..", "fallback") == "fallback"
    assert call_download.safe_name("a\\..\\b.txt", "f") == "b.txt"


def test_errors_map_to_exit_codes():
    request = httpx.Request("POST", "http://h/")
    status_401 = httpx.HTTPStatusError("x", request=request, response=httpx.Response(401))
    try:
        raise A2AClientError("HTTP Error 401") from status_401
    except A2AClientError as exc:
        assert classify(exc).code == Exit.UNAUTHENTICATED
    try:
        raise A2AClientError("Network communication error") from httpx.ConnectError("refused")
    except A2AClientError as exc:
        assert classify(exc).code == Exit.UNREACHABLE
    assert classify(TaskNotFoundError("Task x not found.")).code == Exit.PROTOCOL
    assert "TaskNotFound" in classify(TaskNotFoundError("Task x not found.")).message


def test_the_progress_line_is_rewritten_and_cleared():
    out, err = io.StringIO(), io.StringIO()
    printer = Printer(as_json=False, out=out, err=err, progress=True)
    event = sdk.StreamResponse()
    event.status_update.status.state = sdk.TASK_STATE_WORKING
    event.status_update.status.message.parts.add(text="step 1")
    printer.event(event)
    printer.say("artifact x: y")
    printer.done()
    assert err.getvalue() == "\r\x1b[K[working] step 1\r\x1b[K\r\x1b[K[working] step 1\r\x1b[K"
    assert out.getvalue() == "artifact x: y\n"


async def test_event_ids_are_noted_across_chunk_boundaries():
    ids = EventIds()
    body = (
        b": keep-alive\n\nid: 1\ndata: {}\n\nid: 2\r\nevent: message\r\ndata: {}\r\n\r\n"
        b"data: {}\n\nid: 7\ndata: {}\n\n"
    )

    class Chunks(httpx.AsyncByteStream):
        async def __aiter__(self):
            for i in range(0, len(body), 5):  # split anywhere
                yield body[i : i + 5]

    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Chunks())
    await ids.hook(response)
    assert b"".join([c async for c in response.aiter_raw()]) == body  # passed through unchanged
    # the comment is no event; an event without id keeps the last one (SSE)
    assert [ids.take(), ids.take(), ids.take(), ids.take(), ids.take()] == [
        "1",
        "2",
        "2",
        "7",
        None,
    ]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1048576", 1 << 20),
        ("500K", 500 << 10),
        ("100m", 100 << 20),
        ("2GiB", 2 << 30),
        ("3 MB", 3 << 20),
        ("7b", 7),
    ],
)
def test_sizes_for_max_download(text, size):
    assert call_cli.byte_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "-1", "1.5G", "12X", "G"])
def test_sizes_that_are_not(text):
    with pytest.raises(argparse.ArgumentTypeError):
        call_cli.byte_size(text)


def test_a_download_is_capped_at_1_gib_unless_told():
    commands = call_cli.build_parsers()[1]
    assert commands["download"].parse_args(["http://a", "--task", "t"]).max_download == 1 << 30
    assert call_cli.normalize(["--max-download", "5M", "download", "http://a"])[0] == "download"


def test_the_parser_states_the_defaults_the_client_applies():
    # call_cli must not import the client (no a2a-sdk for --help): it repeats the numbers
    assert call_cli.DEFAULT_TIMEOUT == DEFAULT_TIMEOUT_SECONDS
    assert call_cli.DEFAULT_IDLE_TIMEOUT == DEFAULT_IDLE_SECONDS
    args = call_cli.build_parsers()[1]["get"].parse_args(["http://a", "--task", "t"])
    assert args.timeout is None and args.idle_timeout is None  # unset: the defaults apply
    assert call_cli.normalize(["--idle-timeout", "5", "http://a", "hi"])[:3] == [
        "send",
        "--idle-timeout",
        "5",
    ]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("localhost.example.com", False),
        ("127.0.0.1.nip.io", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_is_what_is_written_not_what_a_name_resolves_to(host, loopback):
    assert is_loopback(host) is loopback


def test_push_takes_its_action_word_wherever_it_stands():
    assert call_cli.normalize(["push", "http://a", "list", "--task", "t"])[:3] == [
        "push",
        "list",
        "http://a",
    ]
    assert call_cli.normalize(["--json", "push", "--task", "create", "get", "http://a"])[:2] == [
        "push",
        "get",  # `create` is the value of --task
    ]
    args = call_cli.build_parsers()[1]["send"].parse_args(
        ["http://a", "hi", "--push-url", "http://h/x", "--push-token", "t"]
    )
    assert (args.push_url, args.push_token) == ("http://h/x", "t")


def test_the_permission_lead_is_said_once():
    said = "The agent asks for permission to use make (/srv). Answer with a decision."
    envelope = {"prompt": said, "target": "/srv"}
    assert call_permission.describe(envelope)[0] == said
    assert call_permission.describe({"prompt": "Allow it?"})[0] == (
        "The agent asks for permission: Allow it?"
    )


def test_a_trailing_slash_names_a_directory_made_if_missing(tmp_path):
    file = call_download.StoredFile("a1", "r.txt", "http://x/r", "0" * 64, 1)
    out = tmp_path / "made"
    assert call_download.target_path(f"{out}/", file, False) == out / "r.txt"
    assert out.is_dir()
    assert call_download.target_path(str(tmp_path / "f.txt"), file, False) == tmp_path / "f.txt"


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (
            {"error": {"code": 503, "status": "UNAVAILABLE", "details": []}},
            "UNAVAILABLE",
        ),
        (
            {
                "error": {
                    "code": -32603,
                    "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "X"}],
                }
            },
            "X",
        ),
        ({"error": "nope"}, ""),
        ([1], ""),
        (None, ""),
    ],
)
def test_the_reason_of_an_http_error_event(document, reason):
    assert error_reason(document) == reason


def test_a_drain_error_event_is_exit_6_whatever_the_sdk_made_of_it():
    drained = {"error": {"code": 503, "status": "UNAVAILABLE", "message": "shutting down"}}
    assert classify(A2AClientError(json.dumps(drained)), drained).code == Exit.UNREACHABLE
    assert classify(A2AClientError("other")).code == Exit.PROTOCOL


async def test_error_events_are_noted_and_get_no_event_id():
    ids = EventIds()

    async def body():
        yield b"id: 1\ndata: {}\n\n"
        yield b'event: error\ndata: {"error": {"status": "UNAVAILABLE"}}\n\n'

    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_Chunks(body())
    )
    await ids.hook(response)
    async for _ in response.stream:
        pass
    assert ids.take() == "1" and ids.take() is None
    assert error_reason(ids.error) == "UNAVAILABLE"
    ids.reset()
    assert ids.error is None


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks) -> None:
        self.chunks = chunks

    async def __aiter__(self):
        async for chunk in self.chunks:
            yield chunk


def test_the_help_with_its_exit_table_needs_no_client_library():
    code = (
        "import sys; from a2a_call import cli; cli.build_parser().format_help(); "
        "loaded = {m.split('.')[0] for m in sys.modules}; "
        "assert not loaded & {'a2a', 'grpc', 'httpx'}, loaded & {'a2a', 'grpc', 'httpx'}"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
