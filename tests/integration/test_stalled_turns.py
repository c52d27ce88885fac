"""Stalled turns on a real server: a turn that goes silent past
`turn_inactivity_timeout_seconds`, or works past `max_turn_seconds`, fails with a status
message that says which; a busy turn, and a turn paused in ctx.ask(), are left alone."""

from __future__ import annotations

import asyncio
import signal

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.process import ServerProcess, shows_traceback

SCRIPTED = "tests.agents:ScriptedAgent"


@pytest.fixture
async def stub_for(start_service):
    channels = []

    async def start(**settings):
        service = await start_service(store="memory:", agent=SCRIPTED, **settings)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        channels.append(channel)
        return a2a_pb2_grpc.A2AServiceStub(channel)

    yield start
    for channel in channels:
        await channel.close()


def text_of(task: pb.Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)


async def test_a_silent_turn_fails_after_the_inactivity_timeout(stub_for):
    stub = await stub_for(turn_inactivity_timeout_seconds=0.3)
    # Blocking send: it returns when the watchdog ends the turn (never a hang).
    done = await stub.SendMessage(
        pb.SendMessageRequest(message=user_message("sleep 60")), timeout=30
    )
    assert done.task.status.state == pb.TASK_STATE_FAILED
    assert "turn_inactivity_timeout_seconds" in text_of(done.task)
    # A streaming caller sees the same end.
    events = [
        e
        async for e in stub.SendStreamingMessage(
            pb.SendMessageRequest(message=user_message("hang")), timeout=30
        )
    ]
    last = events[-1].status_update.status
    assert last.state == pb.TASK_STATE_FAILED and "stalled" in " ".join(
        p.text for p in last.message.parts
    )
    # A turn that keeps reporting is not stalled, however long it runs in total.
    done = await stub.SendMessage(pb.SendMessageRequest(message=user_message("slow 12")))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED


async def test_a_turn_paused_in_ask_is_not_stalled(stub_for):
    stub = await stub_for(turn_inactivity_timeout_seconds=0.2, max_turn_seconds=0.5)
    asked = await stub.SendMessage(pb.SendMessageRequest(message=user_message("ask name?")))
    assert asked.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    await asyncio.sleep(1.0)  # well past both limits while it waits for the caller
    task = await stub.GetTask(pb.GetTaskRequest(id=asked.task.id))
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    answer = user_message("Ada", task_id=asked.task.id)
    done = await stub.SendMessage(pb.SendMessageRequest(message=answer))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    assert done.task.artifacts[0].parts[0].text == "you said: Ada"


async def test_a_turn_past_the_maximum_duration_fails(stub_for):
    stub = await stub_for(max_turn_seconds=0.5)
    done = await stub.SendMessage(pb.SendMessageRequest(message=user_message("tick")), timeout=30)
    assert done.task.status.state == pb.TASK_STATE_FAILED
    assert "max_turn_seconds" in text_of(done.task)
    # The follow-up rules hold for it like for any failed task.
    refused = stub.SendMessage(
        pb.SendMessageRequest(message=user_message("more", task_id=done.task.id))
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await refused
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_with_the_timeouts_off_a_quiet_turn_runs_on(stub_for):
    stub = await stub_for()
    done = await stub.SendMessage(pb.SendMessageRequest(message=user_message("sleep 0.5")))
    assert done.task.status.state == pb.TASK_STATE_COMPLETED


async def test_an_agent_that_ignores_its_cancellation_is_abandoned_at_the_timeout(tmp_path):
    """The task fails at the timeout and the caller's turn slot is free again, although the
    agent's coroutine never ends; the process still stops cleanly (exit 0), without it."""
    server = ServerProcess(
        "--data-dir",
        str(tmp_path / "d"),
        "--agent",
        SCRIPTED,
        env={"A2A_MAX_TURN_SECONDS": "0.5", "A2A_MAX_CONCURRENT_TURNS_PER_PRINCIPAL": "1"},
    ).start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            done = await stub.SendMessage(
                pb.SendMessageRequest(message=user_message("stubborn")), timeout=30
            )
            assert done.task.status.state == pb.TASK_STATE_FAILED
            assert "max_turn_seconds" in text_of(done.task)
            # The one turn slot of this caller is free again.
            again = await stub.SendMessage(pb.SendMessageRequest(message=user_message("hi")))
            assert again.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(server.proc.wait, 60)
    log = server.rest_of_output()
    assert code == 0, log
    assert "its turn is abandoned" in log and "abandoned agent coroutine" in log
    assert not shows_traceback(log)
