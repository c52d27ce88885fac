"""Stalled turns on a real server: a turn that goes silent past
`turn_inactivity_timeout_seconds`, or works past `max_turn_seconds`, fails with a status
message that says which; a busy turn, and a turn paused in ctx.ask(), are left alone."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message

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
