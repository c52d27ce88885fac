"""The command agent with command_approval and A2A_OUTPUT_DIR together, against the real
server: the turn's output directory exists only while the program may run, so a task
paused for the decision holds none (nothing is left behind by a deny or by a kill -9
during the pause), and an allowed program's files still become stored file artifacts,
also when the answer comes after a restart."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from gen import a2a_pb2 as pb
from service.agents.command import DENIED_MESSAGE
from tests.permission_util import BINDINGS, Client, answer, text_message
from tests.process import ServerProcess, free_port

PROGRAM = "sh -c 'printf made > \"$A2A_OUTPUT_DIR/out.txt\"; cat'"


def turn_dirs(data) -> set[str]:
    """The turn output directories under DATA_DIR/outputs."""
    outputs = data / "outputs"
    return {p.name for p in outputs.iterdir()} if outputs.exists() else set()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_paused_approval_holds_no_output_dir_and_deny_leaves_none(
    start_service, tmp_path, binding
):
    service = await start_service(
        http_port=0, store="memory:", agent="command", command=PROGRAM, command_approval=True
    )
    client = Client.of(service, binding)
    try:
        paused = await client.send(text_message("hello"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert turn_dirs(tmp_path / "data") == set()  # waiting for the caller, not running
        done = await client.send(answer(paused, "deny"))
        assert done.status.state == pb.TASK_STATE_REJECTED
        assert done.status.message.parts[0].text == DENIED_MESSAGE
        assert len(done.artifacts) == 0 and turn_dirs(tmp_path / "data") == set()
    finally:
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_allow_after_a_kill9_during_the_pause_stores_the_outputs(tmp_path, binding):
    data = tmp_path / "data"
    http_port = free_port()
    args = (
        "--data-dir",
        str(data),
        "--agent",
        "command",
        "--command",
        PROGRAM,
        "--http-port",
        str(http_port),
    )
    env = {"A2A_COMMAND_APPROVAL": "true"}
    first = ServerProcess(*args, env=env).start()
    client = Client(binding, first.address, f"http://127.0.0.1:{http_port}")
    try:
        paused = await client.send(text_message("hello"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
    finally:
        await client.close()
        first.kill9()
    assert turn_dirs(data) == set()  # the crash left no turn directory behind

    second = ServerProcess(*args, env=env).start()
    client = Client(binding, second.address, f"http://127.0.0.1:{http_port}")
    try:
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        [stdout] = [a for a in done.artifacts if a.parts[0].WhichOneof("content") == "text"]
        assert "".join(p.text for p in stdout.parts) == "hello"
        [stored] = [a for a in done.artifacts if a.parts[0].WhichOneof("content") == "url"]
        part = stored.parts[0]
        assert part.filename == "out.txt"
        async with httpx.AsyncClient() as http:
            got = await http.get(part.url)
        assert got.status_code == 200 and got.content == b"made"
        assert got.headers["etag"].strip('"') == hashlib.sha256(b"made").hexdigest()
        assert turn_dirs(data) == set()  # removed after the turn
    finally:
        await client.close()
        assert second.stop() == 0
