"""Retention on a real server: finished tasks older than `task_retention` go with their
events and push configs (and through the purge hooks, whatever else is kept per task),
unfinished ones stay, the purge runs in batches while the server keeps serving; idle
context bookkeeping (command-agent workspaces) is evicted after `context_idle_timeout`."""

from __future__ import annotations

import asyncio
import sqlite3

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.engine.retention import PURGE_BATCH
from service.protocol.timeutil import micros_to_timestamp, now_micros
from service.store import Scope
from service.store.sqlite import SqliteTaskStore
from tests.conftest import user_message
from tests.push_util import eventually

ANYONE = Scope("", "")  # authentication off: every caller is the principal ""
DAY_US = 86400 * 1_000_000


def old_task(task_id: str, state: int, context_id: str = "ctx-old") -> pb.Task:
    task = pb.Task(id=task_id, context_id=context_id)
    task.status.state = state
    micros_to_timestamp(now_micros() - 3 * DAY_US, task.status.timestamp)
    return task


def event(task: pb.Task) -> pb.StreamResponse:
    return pb.StreamResponse(task=task)


async def seed(path, tasks: list[pb.Task]) -> None:
    """Write tasks (one event and one push config each) into the service's database file."""
    from service.store.base import StoredEvent

    store = SqliteTaskStore(str(path))
    await store.open()
    try:
        await asyncio.gather(*(store.save(ANYONE, t, [StoredEvent(1, event(t))]) for t in tasks))
        await asyncio.gather(
            *(
                store.put_push_config(
                    ANYONE,
                    pb.TaskPushNotificationConfig(task_id=t.id, id="cfg", url="https://x/hook"),
                )
                for t in tasks
            )
        )
    finally:
        await store.close()


async def _missing(stub, task_id: str) -> bool:
    try:
        await stub.GetTask(pb.GetTaskRequest(id=task_id))
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND, err
        return True
    return False


async def test_finished_tasks_are_purged_with_their_events_and_configs(tmp_path, start_service):
    db = tmp_path / "data" / "tasks.db"
    states = [
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    ]
    finished = [old_task(f"old-{i}", s) for i, s in enumerate(states)]
    waiting = old_task("old-waiting", pb.TASK_STATE_INPUT_REQUIRED)
    await seed(db, [*finished, waiting])
    purged: list[tuple[Scope, str]] = []

    async def release(batch: list[tuple[Scope, str]]) -> None:  # e.g. the file store's hook
        purged.extend(batch)

    service = await start_service(
        purge_hooks=[release], agent="tests.agents:ScriptedAgent", task_retention="1s"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        # Tasks made now: one finishes (and goes a second later), one waits for input (stays).
        done = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("echo")))).task
        paused = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("input")))).task
        assert done.status.state == pb.TASK_STATE_COMPLETED
        for task in finished:
            await eventually(lambda t=task: _missing(stub, t.id), 15, f"{task.id} purged")
        await eventually(lambda: _missing(stub, done.id), 15, "the new finished task purged")
        assert {task_id for _, task_id in purged} == {t.id for t in finished} | {done.id}
        assert all(scope == ANYONE for scope, _ in purged)
        for task_id in (waiting.id, paused.id):
            kept = await stub.GetTask(pb.GetTaskRequest(id=task_id))
            assert kept.status.state == pb.TASK_STATE_INPUT_REQUIRED
        listed = await stub.ListTasks(pb.ListTasksRequest())
        assert listed.total_size == 2 and {t.id for t in listed.tasks} == {waiting.id, paused.id}
        by_state = await stub.ListTasks(pb.ListTasksRequest(status=pb.TASK_STATE_COMPLETED))
        assert by_state.total_size == 0 and not by_state.tasks
    await service.stop()
    with sqlite3.connect(db) as raw:
        assert {r[0] for r in raw.execute("SELECT DISTINCT task_id FROM events")} == {
            waiting.id,
            paused.id,
        }
        assert {r[0] for r in raw.execute("SELECT task_id FROM push_configs")} == {waiting.id}
    raw.close()


async def test_a_large_purge_goes_in_batches_and_the_server_serves_between_them(
    tmp_path, start_service
):
    count = PURGE_BATCH * 6 + 17
    await seed(
        tmp_path / "data" / "tasks.db",
        [old_task(f"bulk-{i:05d}", pb.TASK_STATE_COMPLETED, f"c{i % 7}") for i in range(count)],
    )
    batches: list[int] = []
    served: list[str] = []
    started = asyncio.Event()
    port: list[int] = []

    async def between_batches(batch: list[tuple[Scope, str]]) -> None:
        batches.append(len(batch))
        if len(batches) == 2:  # mid-purge: real calls go through this very loop
            await asyncio.wait_for(started.wait(), 30)  # startup completes meanwhile
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port[0]}") as channel:
                listed = await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                    pb.ListTasksRequest(page_size=1)
                )
                health = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest()
                )
            served.append(f"{listed.total_size} {health.status}")

    # The purge starts during startup: the second batch's hook waits until it is done.
    service = await start_service(purge_hooks=[between_batches], agent="echo", task_retention="1d")
    port.append(service.grpc_port)
    started.set()
    await eventually(lambda: sum(batches) == count, 60, "every task purged")
    assert len(batches) >= count // PURGE_BATCH and max(batches) <= PURGE_BATCH
    assert len(served) == 1
    remaining, status = served[0].split()
    assert 0 < int(remaining) < count  # answered while the purge was under way
    assert int(status) == health_pb2.HealthCheckResponse.SERVING
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        listed = await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(pb.ListTasksRequest())
    assert listed.total_size == 0 and not listed.tasks


async def test_idle_command_workspaces_are_evicted(tmp_path, start_service):
    service = await start_service(
        agent="command", command="sh -c 'pwd'", store="memory:", context_idle_timeout="1s"
    )
    root = tmp_path / "data" / "workspaces"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        first = (await stub.SendMessage(pb.SendMessageRequest(message=user_message("x")))).task
        assert first.status.state == pb.TASK_STATE_COMPLETED
        workdir = root / f"ctx-{first.context_id}"
        assert workdir.is_dir()
        (workdir / "left-behind.txt").write_text("state of the context")
        await eventually(lambda: not workdir.exists(), 20, "the idle workspace evicted")
        assert not any(p.name.startswith(".evicted-") for p in root.iterdir())
        # The context can go on: its next turn gets a fresh directory.
        again = user_message("y", context_id=first.context_id)
        second = (await stub.SendMessage(pb.SendMessageRequest(message=again))).task
        assert second.status.state == pb.TASK_STATE_COMPLETED
        assert workdir.is_dir()


async def test_the_heap_trim_runs_by_default_and_can_be_turned_off(tmp_path, start_service):
    """`heap_trim_seconds` (service.app.memory): the housekeeping job that gives the C
    heap's free memory back, on Linux every 30 s unless set to 0."""
    service = await start_service(store="memory:", agent="tests.agents:ScriptedAgent")
    assert service.housekeeping.jobs["heap trim"] == 30.0
    quiet = await start_service(
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        heap_trim_seconds=0,
        data_dir=str(tmp_path / "quiet"),
    )
    assert "heap trim" not in quiet.housekeeping.jobs
