"""The built-in command agent: stdin/stdout streaming, exit status, cancellation by signal."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys

import grpc
import httpx

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.grpc_util import drain


async def command_stub(start_service, command: str, **extra):
    service = await start_service(store="memory:", agent="command", command=command, **extra)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return service, channel, a2a_pb2_grpc.A2AServiceStub(channel)


def request(text: str, **config) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest(message=user_message(text))
    for k, v in config.items():
        setattr(req.configuration, k, v)
    return req


async def test_stdin_to_artifact_and_completed(start_service):
    _, channel, stub = await command_stub(start_service, "tr a-z A-Z")
    async with channel:
        task = (await stub.SendMessage(request("hello world"))).task
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert "".join(p.text for p in task.artifacts[0].parts) == "HELLO WORLD"


async def test_nonzero_exit_fails_with_stderr_tail(start_service):
    _, channel, stub = await command_stub(
        start_service, "sh -c 'echo partial; echo boom >&2; exit 3'"
    )
    async with channel:
        task = (await stub.SendMessage(request("x"))).task
    assert task.status.state == pb.TASK_STATE_FAILED
    assert task.status.message.parts[0].text == "The command exited with status 3: boom"
    assert "".join(p.text for p in task.artifacts[0].parts) == "partial\n"


async def test_stdout_streams_as_artifact_chunks(start_service):
    _, channel, stub = await command_stub(start_service, "sh -c 'echo one; sleep 0.2; echo two'")
    async with channel:
        events = await drain(stub.SendStreamingMessage(request("x")))
    chunks = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert "".join(c.artifact.parts[0].text for c in chunks) == "one\ntwo\n"
    assert len(chunks) >= 2  # "one" and "two" arrive separately; "two" closes the artifact
    assert chunks[0].append is False and all(c.append for c in chunks[1:])
    assert chunks[-1].last_chunk and not any(c.last_chunk for c in chunks[:-1])
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_the_artifact_has_no_empty_part(start_service):
    _, channel, stub = await command_stub(start_service, "wc -w")
    async with channel:
        task = (await stub.SendMessage(request("three little words"))).task
        events = await drain(stub.SendStreamingMessage(request("three little words")))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text.strip() for p in task.artifacts[0].parts] == ["3"]
    chunks = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert [c.artifact.parts[0].text.strip() for c in chunks] == ["3"]
    assert chunks[0].last_chunk and not chunks[0].append and len(chunks[0].artifact.parts) == 1


async def test_a_chunk_held_through_silence_still_adds_no_empty_part(start_service):
    _, channel, stub = await command_stub(start_service, "sh -c 'echo one; sleep 1'")
    async with channel:
        events = await drain(stub.SendStreamingMessage(request("x")))
    chunks = [e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"]
    assert [p.text for c in chunks for p in c.artifact.parts] == ["one\n"]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_no_output_no_artifact(start_service):
    _, channel, stub = await command_stub(start_service, "true")
    async with channel:
        task = (await stub.SendMessage(request("x"))).task
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert len(task.artifacts) == 0


async def test_each_context_has_its_own_working_directory(start_service, tmp_path):
    _, channel, stub = await command_stub(start_service, "pwd")
    async with channel:
        msg = user_message("x", context_id="ctx-7")
        task = (await stub.SendMessage(pb.SendMessageRequest(message=msg))).task
    cwd = pathlib.Path(task.artifacts[0].parts[0].text.strip())
    assert cwd.name == "ctx-ctx-7" and cwd.is_relative_to(tmp_path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def _wait_for_pid(service, context_id: str) -> int:
    pid_file = pathlib.Path(service.settings.data_dir) / "workspaces" / f"ctx-{context_id}" / "pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        await asyncio.sleep(0.02)
    raise AssertionError("command never started")


async def test_cancel_terminates_the_process(start_service):
    service, channel, stub = await command_stub(
        start_service, "sh -c 'echo $$ > pid; exec sleep 60'"
    )
    async with channel:
        msg = user_message("x", context_id="c-term")
        req = pb.SendMessageRequest(message=msg)
        req.configuration.return_immediately = True
        task = (await stub.SendMessage(req)).task
        pid = await _wait_for_pid(service, "c-term")
        canceled = await stub.CancelTask(pb.CancelTaskRequest(id=task.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert not _alive(pid)


async def test_cancel_kills_a_process_that_ignores_sigterm(start_service):
    service, channel, stub = await command_stub(
        start_service,
        "sh -c 'trap \"\" TERM; echo $$ > pid; while :; do sleep 0.05; done'",
        command_grace_seconds=0.3,
    )
    async with channel:
        msg = user_message("x", context_id="c-kill")
        req = pb.SendMessageRequest(message=msg)
        req.configuration.return_immediately = True
        task = (await stub.SendMessage(req)).task
        pid = await _wait_for_pid(service, "c-kill")
        canceled = await stub.CancelTask(pb.CancelTaskRequest(id=task.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert not _alive(pid)


# ---- A2A_OUTPUT_DIR: files the program leaves become stored file artifacts ----------


def _files_of(task: pb.Task) -> dict[str, pb.Part]:
    return {a.name: a.parts[0] for a in task.artifacts if a.parts[0].url}


async def test_output_dir_files_become_file_artifacts(start_service, tmp_path):
    script = tmp_path / "outputs.sh"
    script.write_text(
        'cd "$A2A_OUTPUT_DIR" || exit 9\n'
        "ls -A | wc -l\n"
        "printf report > report.txt\n"
        "mkdir sub && printf 'a,b' > sub/table.csv\n"
        "printf blob > data.bin\n"
        "ln -s /etc/hostname link.txt && ln -s .. dirlink && mkfifo pipe\n"
        f"{sys.executable} -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'\n"
        "pwd\n"
    )
    service, channel, stub = await command_stub(start_service, f"sh {script}", http_port=0)
    async with channel, httpx.AsyncClient(timeout=10) as http:
        task = (await stub.SendMessage(request("x"))).task
        second = (await stub.SendMessage(request("x"))).task
        assert task.status.state == pb.TASK_STATE_COMPLETED, task.status
        stdout = "".join(p.text for a in task.artifacts for p in a.parts if p.text).split()
        assert stdout[0] == "0"  # the directory starts empty
        files = _files_of(task)
        assert sorted(files) == ["data.bin", "report.txt", "sub/table.csv"]  # no link/fifo/socket
        assert files["report.txt"].media_type == "text/plain"
        assert files["sub/table.csv"].media_type == "text/csv"
        assert files["sub/table.csv"].filename == "table.csv"
        assert files["data.bin"].media_type == "application/octet-stream"
        got = await http.get(files["sub/table.csv"].url)
        assert got.status_code == 200 and got.content == b"a,b"
        # every turn has its own fresh directory, and it is gone after the turn
        again = "".join(p.text for a in second.artifacts for p in a.parts if p.text).split()
        assert again[0] == "0" and again[-1] != stdout[-1]
    gone = await asyncio.to_thread(lambda: not any(map(os.path.exists, (stdout[-1], again[-1]))))
    assert gone


async def test_a_file_over_the_per_file_cap_fails_the_task(start_service):
    script = 'head -c 2000 /dev/zero > "$A2A_OUTPUT_DIR/big.bin"'
    _, channel, stub = await command_stub(
        start_service, f"sh -c '{script}'", file_artifact_max_bytes=1000
    )
    async with channel:
        task = (await stub.SendMessage(request("x"))).task
    assert task.status.state == pb.TASK_STATE_FAILED
    message = task.status.message.parts[0].text
    assert "big.bin" in message and "file_artifact_max_bytes" in message
    assert not _files_of(task)


async def test_files_over_the_per_turn_cap_fail_the_task(start_service):
    script = (
        'head -c 600 /dev/zero > "$A2A_OUTPUT_DIR/a.bin"; '
        'head -c 600 /dev/urandom > "$A2A_OUTPUT_DIR/b.bin"'
    )
    _, channel, stub = await command_stub(
        start_service,
        f"sh -c '{script}'",
        file_artifact_max_bytes=1000,
        file_artifacts_max_bytes_per_turn=1000,
    )
    async with channel:
        task = (await stub.SendMessage(request("x"))).task
    assert task.status.state == pb.TASK_STATE_FAILED
    message = task.status.message.parts[0].text
    assert "b.bin" in message and "file_artifacts_max_bytes_per_turn" in message
    assert sorted(_files_of(task)) == ["a.bin"]  # the first fit, and stays
