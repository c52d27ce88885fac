"""The command agent's turn output directories (A2A_OUTPUT_DIR) and a crash, on a real
server: a directory left by a kill -9 during its turn is removed by the idle-context
eviction of the restarted server (context_idle_timeout), while the directory of a turn
that is still running is left alone and its files still become artifacts."""

from __future__ import annotations

import asyncio
import os
import time

import grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.integration.test_command_approval_outputs import turn_dirs
from tests.process import ServerProcess
from tests.push_util import eventually

# Writes its output file, then waits until the test creates `go` in its working directory.
PROGRAM = (
    "sh -c 'printf made > \"$A2A_OUTPUT_DIR/out.txt\"; while [ ! -e go ]; do sleep 0.05; done; cat'"
)


def written(data) -> set[str]:
    """Turn directories whose program has written its file."""
    return {name for name in turn_dirs(data) if (data / "outputs" / name / "out.txt").exists()}


async def test_a_crashed_turns_output_dir_is_evicted_but_a_running_ones_is_not(tmp_path):
    data = tmp_path / "data"
    args = ("--data-dir", str(data), "--agent", "command", "--command", PROGRAM)
    first = ServerProcess(*args).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            request = pb.SendMessageRequest(message=user_message("x", context_id="crashed"))
            request.configuration.return_immediately = True
            await stub.SendMessage(request)
            await eventually(lambda: len(written(data)) == 1, 20, "the program's output file")
    finally:
        first.kill9()
    [stale] = turn_dirs(data)  # the crash left it behind

    second = ServerProcess(*args, env={"A2A_CONTEXT_IDLE_TIMEOUT": "1s"}).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            message = user_message("hello", context_id="running")
            sending = asyncio.ensure_future(
                stub.SendMessage(pb.SendMessageRequest(message=message))
            )
            await eventually(lambda: len(written(data) - {stale}) == 1, 20, "the running turn")
            [running] = turn_dirs(data) - {stale}
            await eventually(lambda: stale not in turn_dirs(data), 20, "the stale dir evicted")
            # Once the running turn's directory is older than the timeout too, one more sweep
            # (seen by a planted old directory going) leaves it alone: its turn still runs.
            since = (data / "outputs" / running).stat().st_mtime
            await eventually(lambda: time.time() - since > 2, 20, "the running dir to age")
            planted = data / "outputs" / "turn-planted"
            planted.mkdir()
            os.utime(planted, (since - 60, since - 60))
            await eventually(lambda: not planted.exists(), 20, "a sweep after the dir aged")
            assert running in turn_dirs(data)
            (data / "workspaces" / "ctx-running" / "go").touch()
            done = (await asyncio.wait_for(sending, 20)).task
        assert done.status.state == pb.TASK_STATE_COMPLETED
        names = sorted(a.name for a in done.artifacts)
        assert "out.txt" in names, names
        assert turn_dirs(data) == set()
    finally:
        assert second.stop() == 0
