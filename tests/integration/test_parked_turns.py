"""Parked turns over a real server (paused_turn_idle_seconds): a turn left waiting in
ctx.ask() is released, and the answer — SendMessage with the task id, on gRPC, JSON-RPC and
REST — starts a new turn that receives it; an answer within the idle time reaches the live
coroutine; a parked task is answered after a restart of a server on a SQLite data dir.
(The engine's side, and that nothing is left in the process: tests/unit/test_parked_turns.py.)

ParkingAgent is ScriptedAgent: `ask what?` asks, and answers `you said: X` when ask()
returns X, `follow-up: X` when X starts a new turn; it records each released turn."""

from __future__ import annotations

import asyncio
import pathlib
import time

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.agents import ParkingAgent
from tests.conftest import user_message
from tests.integration.test_gateway_http import V1, message, rpc
from tests.integration.test_subscribe_through_pause import read_to_end
from tests.process import ServerProcess

WAIT = 20  # seconds: a condition not reached by then fails the test
IDLE = "0.2"  # paused_turn_idle_seconds in these tests
BINDINGS = ["GRPC", "JSONRPC", "HTTP+JSON"]


async def until_released(task_id: str) -> None:
    for _ in range(WAIT * 100):
        if task_id in ParkingAgent.released:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the turn of task {task_id} was not parked")


class Client:
    """SendMessage on one binding, returning the task as a dict of (state, answer text)."""

    def __init__(self, binding: str, stub, http: httpx.AsyncClient) -> None:
        self.binding, self.stub, self.http = binding, stub, http

    async def send(self, text: str, task_id: str = "") -> tuple[str, str, str]:
        """(task id, state name, text of the `answer` artifact or '')."""
        if self.binding == "GRPC":
            msg = user_message(text, task_id=task_id) if task_id else user_message(text)
            task = (await self.stub.SendMessage(pb.SendMessageRequest(message=msg))).task
            arts = [a for a in task.artifacts if a.name == "answer"]
            answer = arts[-1].parts[0].text if arts else ""
            return task.id, pb.TaskState.Name(task.status.state), answer
        body = message(text, **({"taskId": task_id} if task_id else {}))
        if self.binding == "JSONRPC":
            r = await self.http.post("/", json=rpc("SendMessage", body), headers=V1)
            r.raise_for_status()
            task = r.json()["result"]["task"]
        else:
            r = await self.http.post("/message:send", json=body, headers=V1)
            r.raise_for_status()
            task = r.json()["task"]
        arts = [a for a in task.get("artifacts", []) if a.get("name") == "answer"]
        answer = arts[-1]["parts"][0]["text"] if arts else ""
        return task["id"], task["status"]["state"], answer


@pytest.fixture
async def connect(start_service):
    opened = []

    async def start(binding: str, **settings) -> Client:
        service = await start_service(
            http_port=0, store="memory:", agent="tests.agents:ParkingAgent", **settings
        )
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", timeout=WAIT)
        opened.append((channel, http))
        return Client(binding, a2a_pb2_grpc.A2AServiceStub(channel), http)

    yield start
    for channel, http in opened:
        await channel.close()
        await http.aclose()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_parked_turns_answer_starts_a_new_turn_that_receives_it(connect, binding):
    client = await connect(binding, paused_turn_idle_seconds=float(IDLE))
    task_id, state, _ = await client.send("ask what?")
    assert state == "TASK_STATE_INPUT_REQUIRED"
    await until_released(task_id)
    answered = await client.send("the answer", task_id)
    assert answered == (task_id, "TASK_STATE_COMPLETED", "follow-up: the answer")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_answer_within_the_idle_time_reaches_the_live_turn(connect, binding):
    client = await connect(binding, paused_turn_idle_seconds=3600.0)
    task_id, state, _ = await client.send("ask what?")
    assert state == "TASK_STATE_INPUT_REQUIRED"
    answered = await client.send("the answer", task_id)
    assert answered == (task_id, "TASK_STATE_COMPLETED", "you said: the answer")
    assert task_id not in ParkingAgent.released


async def test_a_subscription_through_the_parking_hears_the_new_turn(connect):
    """SubscribeToTask opened while the turn waits (idle long enough for that), kept open
    while the turn is parked: it receives the turn the answer starts, to the end."""
    client = await connect("GRPC", paused_turn_idle_seconds=2.0)
    task_id, _, _ = await client.send("ask what?")
    stream = client.stub.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id))
    first = await asyncio.wait_for(stream.read(), WAIT)
    assert first.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    await until_released(task_id)
    assert (await client.send("the answer", task_id))[2] == "follow-up: the answer"
    events = await read_to_end(stream)
    texts = [
        e.artifact_update.artifact.parts[0].text for e in events if e.HasField("artifact_update")
    ]
    assert texts == ["follow-up: the answer"]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


def released_in(path: pathlib.Path, task_id: str) -> None:
    """Wait until the server in another process has parked the task's turn."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists() and task_id in path.read_text().split():
            return
        time.sleep(0.02)
    raise AssertionError(f"the turn of task {task_id} was not parked")


async def test_a_parked_task_is_answered_after_a_restart(tmp_path):
    log = tmp_path / "parked.log"
    args = ("--data-dir", str(tmp_path / "data"), "--agent", "tests.agents:ParkingAgent")
    env = {"A2A_PAUSED_TURN_IDLE_SECONDS": IDLE, "PARKED_LOG": str(log)}
    first = ServerProcess(*args, env=env).start()
    try:
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            sent = pb.SendMessageRequest(message=user_message("ask what?"))
            task = (await stub.SendMessage(sent)).task
            assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
            await asyncio.to_thread(released_in, log, task.id)
    finally:
        assert first.stop() == 0

    second = ServerProcess(*args, env={"A2A_PAUSED_TURN_IDLE_SECONDS": IDLE}).start()
    try:
        async with grpc.aio.insecure_channel(second.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            kept = await stub.GetTask(pb.GetTaskRequest(id=task.id))
            assert kept.status.state == pb.TASK_STATE_INPUT_REQUIRED
            assert kept.status.message.parts[0].text == "what?"
            follow = pb.SendMessageRequest(message=user_message("the answer", task_id=task.id))
            done = (await stub.SendMessage(follow)).task
            assert done.status.state == pb.TASK_STATE_COMPLETED
            assert done.artifacts[-1].parts[0].text == "follow-up: the answer"
    finally:
        assert second.stop() == 0
    assert "task(s) FAILED" not in second.rest_of_output()  # a paused task is not lost work
