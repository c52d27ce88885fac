"""Durability: kill -9 the server with tasks stored, restart it on the same data, read them back."""

from __future__ import annotations

import asyncio

import grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.engine.registry import RESTART_MESSAGE
from tests.conftest import user_message
from tests.process import ServerProcess


async def test_kill9_and_restart_keeps_every_acknowledged_task(tmp_path):
    args = ("--data-dir", str(tmp_path / "data"), "--agent", "tests.agents:ScriptedAgent")
    first = ServerProcess(*args).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            done = [
                (
                    await stub.SendMessage(pb.SendMessageRequest(message=user_message(f"echo {i}")))
                ).task
                for i in range(20)
            ]
            waiting = (
                await stub.SendMessage(pb.SendMessageRequest(message=user_message("input more?")))
            ).task
            running_req = pb.SendMessageRequest(message=user_message("hang"))
            running_req.configuration.return_immediately = True
            running = (await stub.SendMessage(running_req)).task
            await asyncio.sleep(0.1)
    finally:
        first.kill9()

    second = ServerProcess(*args).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            for task in done:
                got = await stub.GetTask(pb.GetTaskRequest(id=task.id))
                assert got == task  # history, artifacts, status: all there, unchanged
            assert (
                await stub.GetTask(pb.GetTaskRequest(id=waiting.id))
            ).status.state == pb.TASK_STATE_INPUT_REQUIRED
            lost = await stub.GetTask(pb.GetTaskRequest(id=running.id))
            assert lost.status.state == pb.TASK_STATE_FAILED
            assert lost.status.message.parts[0].text == RESTART_MESSAGE
            listed = await stub.ListTasks(pb.ListTasksRequest(page_size=100))
            assert listed.total_size == 22
            # An interrupted task can still be continued after the restart.
            follow = pb.SendMessageRequest(message=user_message("yes", task_id=waiting.id))
            resumed = (await stub.SendMessage(follow)).task
            assert resumed.status.state == pb.TASK_STATE_COMPLETED
    finally:
        assert second.stop() == 0
    assert "marked 1 task(s) FAILED" in second.rest_of_output()
