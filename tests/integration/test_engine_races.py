"""Engine races and failure paths, made reproducible with a slowed or failing store.

The store here is the real memory store with one method wrapped to be slow or to fail;
everything else (API, engine, runs, agent) is the real thing, called in-process.
"""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.api import CallContext
from service.app.server import Service
from service.engine.registry import encode_cursor
from service.protocol.errors import (
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)
from service.store import Scope
from service.store.base import encoded
from tests.conftest import make_settings, user_message

CALL = CallContext()


@pytest.fixture
async def service(tmp_path):
    s = Service(
        make_settings(
            tmp_path, store="memory:", agent="tests.agents:ScriptedAgent", push_notifications=False
        )
    )
    await s.start()
    yield s
    await s.stop()


def slow_saves(service: Service, delay: float) -> None:
    store = service.engine.store
    real = store.save

    async def save(scope, task, events, snapshot=None, steady=False):
        task = pb.Task.FromString(encoded(task, snapshot))  # before yielding
        await asyncio.sleep(delay)
        await real(scope, task, events)

    store.save = save


def slow_loads(service: Service, delay: float) -> None:
    store = service.engine.store
    real = store.get

    async def get(scope, task_id):
        await asyncio.sleep(delay)
        return await real(scope, task_id)

    store.get = get


def request(text: str, return_immediately: bool = False, **fields) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest(message=user_message(text, **fields))
    req.configuration.return_immediately = return_immediately
    return req


async def test_follow_up_before_interrupt_is_committed_leaves_no_waiter_behind(service):
    slow_saves(service, 0.2)
    first = asyncio.create_task(service.api.SendMessage(request("input x"), CALL))
    await asyncio.sleep(0.05)
    [run] = service.engine.runs.values()
    seen = await service.api.GetTask(pb.GetTaskRequest(id=run.task_id), CALL)
    assert seen.status.state == pb.TASK_STATE_INPUT_REQUIRED  # live, not yet committed
    await service.api.SendMessage(request("more", True, task_id=run.task_id), CALL)
    answered = await asyncio.wait_for(first, 5)
    assert answered.task.id == run.task_id


async def test_failed_commit_fails_return_immediately_instead_of_hanging(service):
    async def broken(scope, task, events):
        raise OSError("disk full")

    service.engine.store.save = broken
    with pytest.raises(InternalError):
        await asyncio.wait_for(service.api.SendMessage(request("hang", True), CALL), 5)


async def test_refused_cancel_during_a_commit_keeps_the_live_run(service):
    slow_saves(service, 0.2)
    task = (await service.api.SendMessage(request("slow 2", True), CALL)).task
    await asyncio.sleep(0.15)  # the agent is done; its COMPLETED commit is in flight
    with pytest.raises(TaskNotCancelableError):
        await service.api.CancelTask(pb.CancelTaskRequest(id=task.id), CALL)
    with pytest.raises(UnsupportedOperationError):
        await service.api.SendMessage(request("again", task_id=task.id), CALL)
    await asyncio.sleep(0.6)
    got = await service.api.GetTask(pb.GetTaskRequest(id=task.id), CALL)
    assert got.status.state == pb.TASK_STATE_COMPLETED
    assert (
        await service.engine.store.get(Scope(), task.id)
    ).status.state == pb.TASK_STATE_COMPLETED
    assert not service.engine.runs


async def test_follow_up_waits_for_a_lingering_agent(service):
    first = (await service.api.SendMessage(request("linger"), CALL)).task
    assert first.status.state == pb.TASK_STATE_INPUT_REQUIRED
    second = (await service.api.SendMessage(request("answer", task_id=first.id), CALL)).task
    assert second.status.state == pb.TASK_STATE_COMPLETED
    assert second.artifacts[-1].parts[0].text == "follow-up: answer"


async def test_a_caller_leaving_during_a_load_does_not_fail_the_others(service):
    task = (await service.api.SendMessage(request("input x"), CALL)).task
    slow_loads(service, 0.3)
    a = asyncio.create_task(service.api.CancelTask(pb.CancelTaskRequest(id=task.id), CALL))
    await asyncio.sleep(0.02)
    b = asyncio.create_task(service.api.CancelTask(pb.CancelTaskRequest(id=task.id), CALL))
    await asyncio.sleep(0.1)
    a.cancel()  # the first client goes away while the task is loading
    canceled = await asyncio.wait_for(b, 5)
    assert canceled.status.state == pb.TASK_STATE_CANCELED


async def test_out_of_range_list_values_are_invalid_params(service):
    too_late = pb.ListTasksRequest()
    too_late.status_timestamp_after.seconds = 2**60
    for req in (
        too_late,
        pb.ListTasksRequest(page_token=encode_cursor(b"k" * 32, Scope(), (10**18, "x"))),
    ):
        with pytest.raises(InvalidParamsError):
            await service.api.ListTasks(req, CALL)


async def test_page_tokens_are_tamper_evident(service):
    import base64

    for i in range(3):
        await service.api.SendMessage(
            pb.SendMessageRequest(message=user_message(f"echo {i}")), CALL
        )
    first = await service.api.ListTasks(pb.ListTasksRequest(page_size=1), CALL)
    token = first.next_page_token
    second = await service.api.ListTasks(pb.ListTasksRequest(page_size=1, page_token=token), CALL)
    assert second.tasks[0].id != first.tasks[0].id
    # The old format (base64 of "micros:taskId"), any altered byte, or another caller's token.
    forged = base64.urlsafe_b64encode(f"{10**15}:{first.tasks[0].id}".encode()).decode().rstrip("=")
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[3] ^= 1
    altered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    other = encode_cursor(
        service.store.page_token_key, Scope(owner="someone-else"), (10**15, first.tasks[0].id)
    )
    for bad in (forged, altered, other, "x"):
        with pytest.raises(InvalidParamsError, match="pageToken"):
            await service.api.ListTasks(pb.ListTasksRequest(page_size=1, page_token=bad), CALL)


async def test_cancel_right_after_start_cancels(service):
    turn = await service.engine.send(Scope(), user_message("hang"), None, return_immediately=True)
    canceled = await service.engine.cancel(
        Scope(), turn.run.task_id
    )  # before the agent's first step
    assert canceled.status.state == pb.TASK_STATE_CANCELED


@pytest.mark.parametrize(("interval_ms", "most_saves"), [(60_000, 3), (0, None)])
async def test_a_running_agents_events_share_commits_and_its_end_commits_at_once(
    tmp_path, interval_ms, most_saves
):
    s = Service(
        make_settings(
            tmp_path,
            store="memory:",
            agent="tests.agents:ScriptedAgent",
            push_notifications=False,
            store_commit_interval_ms=interval_ms,
        )
    )
    await s.start()
    try:
        saves: list[int] = []
        real = s.engine.store.save

        async def counting(scope, task, events, **more):
            saves.append(len(events))
            await real(scope, task, events, **more)

        s.engine.store.save = counting
        # A pace of 60 s: the answer still comes at once, because the agent's end ends the wait.
        task = (await asyncio.wait_for(s.api.SendMessage(request("burst 200"), CALL), 10)).task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        assert len(task.artifacts[0].parts) == 200
        assert sum(saves) == 203  # snapshot, WORKING, 200 chunks, COMPLETED: nothing lost
        if most_saves is not None:
            assert len(saves) <= most_saves, saves  # the chunks shared commits
        else:
            assert len(saves) > 50, saves  # no pace: about one commit per loop iteration
    finally:
        await s.stop()


# ----------------------------------------------------- SubscribeToTask across a pause, racing


async def _names(stream) -> list[tuple[int | None, str]]:
    out = []
    async for event in stream:
        kind = event.WhichOneof("payload")
        name = (
            pb.TaskState.Name(event.status_update.status.state) if kind == "status_update" else kind
        )
        out.append((stream.seq, name))
    return out


async def test_subscribing_while_the_pause_commits_then_a_new_run_answers(service):
    slow_saves(service, 0.2)
    first = asyncio.create_task(service.api.SendMessage(request("input x"), CALL))
    await asyncio.sleep(0.05)
    [run] = service.engine.runs.values()  # the pause is emitted, its commit in flight
    stream = await service.api.SubscribeToTask(pb.SubscribeToTaskRequest(id=run.task_id), CALL)
    heard = asyncio.create_task(_names(stream))
    paused = await asyncio.wait_for(first, 5)
    assert paused.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    for _ in range(100):  # the paused run is forgotten once committed: nobody runs the task
        if not service.engine.runs:
            break
        await asyncio.sleep(0.02)
    assert not service.engine.runs
    done = await service.api.SendMessage(request("the answer", task_id=run.task_id), CALL)
    assert done.task.status.state == pb.TASK_STATE_COMPLETED
    events = await asyncio.wait_for(heard, 5)
    seqs = [seq for seq, _ in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # each once, in order
    assert [name for _, name in events][-3:] == [
        "TASK_STATE_WORKING",
        "artifact_update",
        "TASK_STATE_COMPLETED",
    ]


async def test_a_subscription_and_a_follow_up_loading_the_paused_task_together(service):
    paused = await service.api.SendMessage(request("input x"), CALL)
    task_id = paused.task.id
    slow_loads(service, 0.1)
    stream_call = asyncio.create_task(
        service.api.SubscribeToTask(pb.SubscribeToTaskRequest(id=task_id), CALL)
    )
    follow = asyncio.create_task(
        service.api.SendMessage(request("the answer", task_id=task_id), CALL)
    )
    stream = await asyncio.wait_for(stream_call, 5)
    assert (await asyncio.wait_for(follow, 5)).task.status.state == pb.TASK_STATE_COMPLETED
    events = await asyncio.wait_for(_names(stream), 5)
    assert events[0][1] == "task" and events[-1][1] == "TASK_STATE_COMPLETED"
    seqs = [seq for seq, _ in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


async def test_a_failed_commit_of_a_later_turn_ends_the_subscription_with_the_error(service):
    paused = await service.api.SendMessage(request("input x"), CALL)
    stream = await service.api.SubscribeToTask(pb.SubscribeToTaskRequest(id=paused.task.id), CALL)
    assert (await asyncio.wait_for(stream.__anext__(), 5)).HasField("task")

    async def broken(scope, task, events):
        raise OSError("disk full")

    service.engine.store.save = broken
    with pytest.raises(InternalError):
        await asyncio.wait_for(
            service.api.SendMessage(request("more", task_id=paused.task.id), CALL), 5
        )
    with pytest.raises(InternalError, match="could not be stored"):
        await asyncio.wait_for(stream.__anext__(), 5)
