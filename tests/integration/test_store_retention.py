"""TaskStore.purge_finished (retention), on every store: only old finished tasks go, with
their events and push configs, in batches of at most `limit`, and ListTasks counts stay
right."""

from __future__ import annotations

import sqlite3

import pytest

from gen import a2a_pb2 as pb
from service.store import open_store
from service.store.base import Scope, TaskQuery
from service.store.memory import MemoryTaskStore
from service.store.sqlite import SqliteTaskStore
from tests.integration.test_store_contract import (
    fresh_schema_url,
    make_config,
    make_task,
    postgres_database,  # noqa: F401 - the session fixture, used by name
    reference,
    status_event,
)

A = Scope("t1", "alice")
B = Scope("t1", "bob")
D = Scope("", "")
OLD, CUTOFF, NEW = 1_000_000, 2_000_000, 3_000_000
FINISHED = [
    pb.TASK_STATE_COMPLETED,
    pb.TASK_STATE_FAILED,
    pb.TASK_STATE_CANCELED,
    pb.TASK_STATE_REJECTED,
]
OPEN = [
    pb.TASK_STATE_SUBMITTED,
    pb.TASK_STATE_WORKING,
    pb.TASK_STATE_INPUT_REQUIRED,
    pb.TASK_STATE_AUTH_REQUIRED,
]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryTaskStore()
    elif request.param == "sqlite":
        s = SqliteTaskStore(str(tmp_path / "t.db"))
    else:
        s = open_store(await fresh_schema_url(request.getfixturevalue("postgres_database")))
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def _seed(store) -> tuple[dict, set]:
    """Tasks of every kind in three scopes; returns ({scope: {id: task}}, ids due)."""
    tasks: dict[Scope, dict[str, pb.Task]] = {A: {}, B: {}, D: {}}
    due: set[tuple[Scope, str]] = set()
    n = 0
    for scope in tasks:
        for states, age in ((FINISHED, OLD), (FINISHED, NEW), (OPEN, OLD)):
            for state in states:
                n += 1
                task = make_task(f"t{n}", context_id=f"c{n % 3}", state=state, us=age + n)
                await store.save(scope, task, [status_event(task, 1), status_event(task, 2)])
                await store.put_push_config(scope, make_config(task.id, "cfg"))
                tasks[scope][task.id] = task
                if state in FINISHED and age == OLD:
                    due.add((scope, task.id))
    return tasks, due


async def _counts_match(store, tasks: dict) -> None:
    for scope, mine in tasks.items():
        for context_id in ["", "c0", "c1", "c2"]:
            for state in [0, *FINISHED, *OPEN]:
                q = TaskQuery(context_id=context_id, state=state, page_size=100)
                page = await store.list(scope, q)
                assert page.total_size == len(reference(mine, q)), (scope, q)
                assert [t.id for t in page.tasks] == reference(mine, q)


async def test_purge_takes_old_finished_tasks_in_batches_and_keeps_the_rest(store):
    tasks, due = await _seed(store)
    purged: list[tuple[Scope, str]] = []
    while True:
        batch = await store.purge_finished(OLD + CUTOFF, 5)
        assert len(batch) <= 5
        purged += batch
        if len(batch) < 5:
            break
    assert len(purged) == len(set(purged)) == len(due)
    assert set(purged) == due
    for scope, task_id in due:
        assert await store.get(scope, task_id) is None
        assert await store.events_after(scope, task_id, 0) == []
        assert await store.last_seq(scope, task_id) == 0
        assert await store.list_push_configs(scope, task_id, 10, None) == ([], None)
        del tasks[scope][task_id]
    for scope, mine in tasks.items():
        for task_id, task in mine.items():
            assert await store.get(scope, task_id) == task
            assert await store.last_seq(scope, task_id) == 2
            assert await store.get_push_config(scope, task_id, "cfg") is not None
    await _counts_match(store, tasks)
    assert await store.purge_finished(OLD + CUTOFF, 5) == []  # nothing left to do
    # A purged task's id may be used again from scratch.
    again = make_task(purged[0][1], state=pb.TASK_STATE_WORKING, us=NEW)
    await store.save(purged[0][0], again, [status_event(again, 1)])
    assert await store.get(purged[0][0], again.id) == again


async def test_sqlite_purge_drops_counter_rows_that_reach_zero(tmp_path):
    path = tmp_path / "t.db"
    store = SqliteTaskStore(str(path))
    await store.open()
    try:
        for i in range(4):
            task = make_task(f"t{i}", context_id=f"ctx{i}", state=pb.TASK_STATE_COMPLETED, us=OLD)
            await store.save(A, task, [status_event(task, 1)])
        assert len(await store.purge_finished(CUTOFF, 100)) == 4
        with sqlite3.connect(path) as raw:
            assert raw.execute("SELECT count(*) FROM task_counts").fetchone()[0] == 0
            assert raw.execute("SELECT count(*) FROM events").fetchone()[0] == 0
        raw.close()
        assert (await store.list(A, TaskQuery())).total_size == 0
    finally:
        await store.close()


async def test_push_configs_of_tasks_never_stored_are_purged_in_batches(store):
    kept = make_task("kept")
    await store.save(A, kept, [status_event(kept, 1)])
    await store.put_push_config(A, make_config("kept", "cfg"))
    await store.put_push_config(B, make_config("kept", "cfg"))  # same id, another owner's
    for i in range(5):
        await store.put_push_config(A, make_config(f"never-{i}", "cfg"))
    assert await store.purge_orphans(3) == 3
    assert await store.purge_orphans(3) == 3  # B's, and the last two of A's
    assert await store.purge_orphans(3) == 0
    assert await store.get_push_config(A, "kept", "cfg") is not None
    assert await store.get_push_config(B, "kept", "cfg") is None
    for i in range(5):
        assert await store.get_push_config(A, f"never-{i}", "cfg") is None
