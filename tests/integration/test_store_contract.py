"""The TaskStore contract, run against every implementation, plus SQLite-only
durability, concurrency and query-plan checks."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import random
import shutil
import signal
import sqlite3
import sys
import textwrap
from pathlib import Path

import asyncpg
import pytest

from gen import a2a_pb2 as pb
from service.protocol.timeutil import micros_to_timestamp, status_micros
from service.store import open_store
from service.store.base import Scope, StoredEvent, TaskQuery
from service.store.event_blob import pack_events as _pack_events
from service.store.event_blob import unpack_events as _unpack_events
from service.store.memory import MemoryTaskStore
from service.store.sqlite import SqliteTaskStore
from service.store.sqlite_reads import count_query, page_query
from service.store.sqlite_schema import _SCHEMA, SCHEMA_VERSION, SNAPSHOT_EVERY
from service.store.sqlite_writes import SqliteWriter
from tests.conftest import missing_part
from tests.pg_util import create_database, drop_database

REPO = Path(__file__).resolve().parents[2]

A = Scope("t1", "alice")
B = Scope("t1", "bob")  # same tenant, other owner
C = Scope("t2", "alice")  # same owner, other tenant
D = Scope("", "")

SUBMITTED = pb.TASK_STATE_SUBMITTED
WORKING = pb.TASK_STATE_WORKING
COMPLETED = pb.TASK_STATE_COMPLETED
FAILED = pb.TASK_STATE_FAILED
CANCELED = pb.TASK_STATE_CANCELED
INPUT_REQUIRED = pb.TASK_STATE_INPUT_REQUIRED


def make_task(
    task_id: str, *, context_id: str = "ctx", state: int = SUBMITTED, us: int = 1_000_000
) -> pb.Task:
    task = pb.Task(id=task_id, context_id=context_id)
    task.status.state = state
    micros_to_timestamp(us, task.status.timestamp)
    return task


def status_event(task: pb.Task, seq: int) -> StoredEvent:
    update = pb.TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id)
    update.status.CopyFrom(task.status)
    return StoredEvent(seq, pb.StreamResponse(status_update=update))


def make_config(task_id: str, config_id: str, url: str = "https://example.com/hook"):
    return pb.TaskPushNotificationConfig(task_id=task_id, id=config_id, url=url, token="tok")


def reference(tasks: dict[str, pb.Task], q: TaskQuery) -> list[str]:
    """Expected ListTasks ids (all pages), independent of any store."""
    rows = [
        (status_micros(t), t.id)
        for t in tasks.values()
        if (not q.context_id or t.context_id == q.context_id)
        and (not q.state or t.status.state == q.state)
        and (q.status_after_us is None or status_micros(t) > q.status_after_us)
    ]
    rows.sort(reverse=True)
    return [task_id for _, task_id in rows]


async def list_all(store, scope: Scope, q: TaskQuery) -> tuple[list[str], list[int], int]:
    """Follow next_cursor to the end: (ids, total_size of each page, page count)."""
    ids: list[str] = []
    totals: list[int] = []
    pages = 0
    cursor = None
    while True:
        page = await store.list(scope, _with(q, cursor=cursor))
        pages += 1
        ids += [t.id for t in page.tasks]
        totals.append(page.total_size)
        if page.next_cursor is None:
            return ids, totals, pages
        assert page.tasks, "a page with a next cursor must not be empty"
        last = page.tasks[-1]
        assert page.next_cursor == (status_micros(last), last.id)
        cursor = page.next_cursor
        assert pages < 1000


def _with(q: TaskQuery, **changes) -> TaskQuery:
    fields = {f: getattr(q, f) for f in q.__dataclass_fields__}
    fields.update(changes)
    return TaskQuery(**fields)


def _in_thread(coro):
    """Run a coroutine to the end on a loop of its own (fixtures resolved inside a test's
    running loop cannot start another one on its thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def postgres_database():
    """One fresh PostgreSQL database for the run (each test gets its own schema in it)."""
    url, name = _in_thread(create_database())
    yield url
    _in_thread(drop_database(name))


async def fresh_schema_url(base: str) -> str:
    """A URL whose search_path is a new, empty schema of the run's database."""
    schema = f"s_{os.urandom(6).hex()}"
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    return f"{base}?search_path={schema}"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryTaskStore()
    elif request.param == "sqlite":
        s = SqliteTaskStore(str(tmp_path / "nested" / "dir" / "tasks.db"))
    else:
        s = open_store(await fresh_schema_url(request.getfixturevalue("postgres_database")))
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sqlite_store(tmp_path):
    s = SqliteTaskStore(str(tmp_path / "tasks.db"))
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# ------------------------------------------------------------------ contract


async def test_save_get_roundtrip(store):
    task = make_task("task-1", context_id="ctx-1", state=WORKING, us=1_234_567)
    task.history.add(message_id="m1", role=pb.ROLE_USER).parts.add(text="hello")
    task.artifacts.add(artifact_id="a1", name="out").parts.add(text="world")
    task.metadata["k"] = "v"
    await store.save(A, task, [status_event(task, 1)])
    got = await store.get(A, "task-1")
    assert got == task
    assert await store.get(A, "missing") is None


async def test_save_snapshots_at_call_time(store):
    task = make_task("t", state=SUBMITTED)
    await store.save(A, task, [])
    task.status.state = COMPLETED  # caller mutates its object afterwards
    assert (await store.get(A, "t")).status.state == SUBMITTED


async def test_upsert_replaces_snapshot(store):
    await store.save(A, make_task("t", state=SUBMITTED, us=10), [])
    second = make_task("t", state=COMPLETED, us=20)
    second.history.add(message_id="m2").parts.add(text="done")
    await store.save(A, second, [])
    assert await store.get(A, "t") == second
    page = await store.list(A, TaskQuery())
    assert [t.id for t in page.tasks] == ["t"]
    assert page.total_size == 1
    assert (await store.list(A, TaskQuery(state=SUBMITTED))).total_size == 0
    assert (await store.list(A, TaskQuery(state=COMPLETED))).total_size == 1


async def test_a_snapshot_alone_changes_and_the_given_encoding_is_stored(store):
    """The same state and status time, a new snapshot (an artifact chunk): stored, in one
    batch with a task that changes state too, the counts unchanged; `snapshot` bytes,
    when given, are what is stored."""
    first = make_task("t", state=WORKING, us=10)
    other = make_task("u", state=WORKING, us=10)
    await store.save(A, first, [status_event(first, 1)])
    await store.save(A, other, [status_event(other, 1)])
    chunked = make_task("t", state=WORKING, us=10)
    chunked.artifacts.add(artifact_id="a").parts.add(text="one")
    done = make_task("u", state=COMPLETED, us=20)
    await asyncio.gather(
        store.save(
            A,
            make_task("t", state=WORKING, us=10),
            [status_event(first, 2)],
            snapshot=chunked.SerializeToString(),
        ),
        store.save(A, done, [status_event(done, 2)]),
    )
    assert await store.get(A, "t") == chunked
    assert await store.get(A, "u") == done
    assert (await store.list(A, TaskQuery(state=WORKING))).total_size == 1
    assert (await store.list(A, TaskQuery(state=COMPLETED))).total_size == 1
    assert (await store.list(A, TaskQuery())).total_size == 2


def chunk_event(task: pb.Task, seq: int, artifact_id: str, text: str, append: bool) -> StoredEvent:
    update = pb.TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, append=append)
    update.artifact.artifact_id = artifact_id
    update.artifact.parts.add(text=text)
    return StoredEvent(seq, pb.StreamResponse(artifact_update=update))


def artifact_event(task: pb.Task, seq: int, text: str) -> StoredEvent:
    return chunk_event(task, seq, "a", text, append=True)


async def test_saves_of_artifact_events_alone_store_the_snapshot_and_keep_the_counts(store):
    """Saves whose events are all artifact updates (a streaming agent's chunks: the
    task's state and status time unchanged): the snapshot stored, events too, the counts
    as they were. Also when the snapshot does change state or is not stored yet (the events
    do not say so): the store goes by the snapshot."""
    tasks = {name: make_task(name, state=WORKING, us=10) for name in ("t", "u", "v")}
    for task in tasks.values():
        await store.save(A, task, [status_event(task, 1)])
    grown = {}
    for name, task in tasks.items():
        grown[name] = pb.Task()
        grown[name].CopyFrom(task)
        grown[name].artifacts.add(artifact_id="a").parts.add(text=f"{name} 0 1")
    grown["u"].status.state = COMPLETED  # a state the events do not tell of
    micros_to_timestamp(20, grown["u"].status.timestamp)
    fresh = make_task("w", context_id="other", state=WORKING, us=30)  # not stored before
    await asyncio.gather(
        *(
            store.save(A, grown[name], [artifact_event(task, 2, "0"), artifact_event(task, 3, "1")])
            for name, task in tasks.items()
        ),
        store.save(A, fresh, [artifact_event(fresh, 5, "x")]),
    )
    for name in tasks:
        assert await store.get(A, name) == grown[name]
        assert [e.seq for e in await store.events_after(A, name, 0)] == [1, 2, 3]
    assert await store.get(A, "w") == fresh
    assert await store.last_seq(A, "w") == 5
    # A second round, steady again, in one batch per task.
    for name in ("t", "v"):
        grown[name].artifacts[0].parts.add(text="2")
        await store.save(A, grown[name], [artifact_event(tasks[name], 4, "2")])
        assert await store.get(A, name) == grown[name]
    assert (await store.list(A, TaskQuery(state=WORKING))).total_size == 3
    assert (await store.list(A, TaskQuery(state=COMPLETED))).total_size == 1
    assert (await store.list(A, TaskQuery(context_id="other"))).total_size == 1
    assert (await store.list(A, TaskQuery())).total_size == 4
    got = await store.list(A, TaskQuery(state=WORKING))
    assert sorted(t.id for t in got.tasks) == ["t", "v", "w"]


def apply_chunk(task: pb.Task, event: StoredEvent) -> None:
    """What the engine does to its live task with one chunk (TaskRun.artifact)."""
    update = event.event.artifact_update
    found = [a for a in task.artifacts if a.artifact_id == update.artifact.artifact_id]
    if not found:
        task.artifacts.append(update.artifact)
    elif update.append:
        found[0].parts.extend(update.artifact.parts)
    else:
        found[0].CopyFrom(update.artifact)


async def test_steady_saves_read_back_whole_wherever_the_snapshot_was_kept(store):
    """A streaming task's chunks saved one per save as `steady`: every read (get, list,
    unsettled) sees every chunk, whichever saves the store kept its snapshot for; appends,
    a replaced artifact and new ones; then the final state."""
    live = make_task("s", state=WORKING, us=10)
    other = make_task("o", state=WORKING, us=5)  # listed beside it, never steady
    await store.save(A, live, [status_event(live, 1)])
    await store.save(A, other, [status_event(other, 1)])
    for seq in range(2, 80):
        if seq == 40:
            event = chunk_event(live, seq, "a", "replaced", append=False)
        elif seq % 10 == 0:
            event = chunk_event(live, seq, f"new-{seq}", f"{seq}", append=True)
        else:
            event = chunk_event(live, seq, "a", f"{seq} ", append=True)
        apply_chunk(live, event)
        # `task` without the chunks (as a live run passes it), the whole task in `snapshot`
        head = make_task("s", state=WORKING, us=10)
        await store.save(A, head, [event], snapshot=live.SerializeToString, steady=True)
        if seq % 7 == 0 or seq in (31, 32, 33, 79):
            assert await store.get(A, "s") == live, seq
            page = await store.list(A, TaskQuery(state=WORKING))
            assert [t for t in page.tasks if t.id == "s"] == [live], seq
            assert page.total_size == 2
            assert {t.id: t for _, t in await store.unsettled()}["s"] == live, seq
    assert [e.seq for e in await store.events_after(A, "s", 0)] == list(range(1, 80))
    done = pb.Task()
    done.CopyFrom(live)
    done.status.state = COMPLETED
    await store.save(A, done, [status_event(done, 80)])
    assert await store.get(A, "s") == done
    assert (await store.list(A, TaskQuery(state=COMPLETED))).tasks == [done]


def _query(path, sql: str) -> list[tuple]:
    """Rows of `sql` read straight from the SQLite file."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute(sql).fetchall()
    raw.close()
    return rows


def _file_at_version(path, version: int, statements: list[tuple[str, tuple]]) -> None:
    """A SQLite file as schema `version` left it: the first schema, `statements`, the
    version number."""
    with sqlite3.connect(path) as raw:
        for stmt in _SCHEMA:
            raw.execute(stmt)
        for stmt, params in statements:
            raw.execute(stmt, params)
        raw.execute(f"PRAGMA user_version = {version}")
    raw.close()


async def test_sqlite_keeps_a_streaming_snapshot_between_multiples_and_reopens_caught_up(
    tmp_path,
):
    """SQLite writes a steady save's snapshot only when its events reach a multiple of
    SNAPSHOT_EVERY; in between, the row stays as it was and the file alone (reopened, as
    after kill -9) still reads back every chunk."""
    path = str(tmp_path / "tasks.db")
    store = SqliteTaskStore(path)
    await store.open()
    live = make_task("s", state=WORKING, us=10)
    await store.save(A, live, [status_event(live, 1)])
    calls = 0

    def counted(snapshot: bytes):
        def now() -> bytes:
            nonlocal calls
            calls += 1
            return snapshot

        return now

    last = SNAPSHOT_EVERY + 5
    for seq in range(2, last + 1):
        event = chunk_event(live, seq, "a", f"{seq} ", append=seq > 2)
        apply_chunk(live, event)
        await store.save(
            A,
            make_task("s", state=WORKING, us=10),
            [event],
            snapshot=counted(live.SerializeToString()),
            steady=True,
        )
    assert calls == 1  # the save of event SNAPSHOT_EVERY alone
    assert _query(path, "SELECT snapshot_seq FROM tasks WHERE id = 's'") == [(SNAPSHOT_EVERY,)]
    await store.close()
    store = SqliteTaskStore(path)
    await store.open()
    try:
        assert await store.get(A, "s") == live
        assert [t for _, t in await store.unsettled()] == [live]
        # a save that is not steady stores its snapshot whatever its sequence
        live.status.state = INPUT_REQUIRED
        await store.save(A, live, [status_event(live, last + 1)])
        assert _query(path, "SELECT snapshot_seq FROM tasks WHERE id = 's'") == [(last + 1,)]
        assert await store.get(A, "s") == live
    finally:
        await store.close()


async def test_scope_isolation(store):
    task = make_task("shared", context_id="ctx", state=WORKING)
    await store.save(A, task, [status_event(task, 1), status_event(task, 2)])
    await store.put_push_config(A, make_config("shared", "cfg"))
    for other in (B, C, D, Scope("t1", ""), Scope("", "alice")):
        assert await store.get(other, "shared") is None
        for q in (
            TaskQuery(),
            TaskQuery(context_id="ctx"),
            TaskQuery(state=WORKING),
            TaskQuery(status_after_us=0),
            TaskQuery(context_id="ctx", state=WORKING),
        ):
            page = await store.list(other, q)
            assert (page.tasks, page.total_size, page.next_cursor) == ([], 0, None)
        assert await store.events_after(other, "shared", 0) == []
        assert await store.last_seq(other, "shared") == 0
        assert await store.get_push_config(other, "shared", "cfg") is None
        assert await store.list_push_configs(other, "shared", 10, None) == ([], None)
        assert await store.delete_push_config(other, "shared", "cfg") is False
    # Nothing above touched A's data.
    assert await store.get(A, "shared") == task
    assert await store.last_seq(A, "shared") == 2
    assert await store.get_push_config(A, "shared", "cfg") == make_config("shared", "cfg")

    # The same task id in another scope is a different task.
    other_task = make_task("shared", context_id="ctx", state=COMPLETED)
    await store.save(B, other_task, [status_event(other_task, 7)])
    assert await store.get(A, "shared") == task
    assert await store.get(B, "shared") == other_task
    assert [e.seq for e in await store.events_after(A, "shared", 0)] == [1, 2]
    assert [e.seq for e in await store.events_after(B, "shared", 0)] == [7]
    assert (await store.list(A, TaskQuery())).total_size == 1
    assert (await store.list(B, TaskQuery(state=WORKING))).total_size == 0
    unsettled = {(s, t.id) for s, t in await store.unsettled()}
    assert unsettled == {(A, "shared")}


async def _seed(store, scope: Scope) -> dict[str, pb.Task]:
    """40 tasks over 3 contexts, 4 states and colliding timestamps."""
    states = [SUBMITTED, WORKING, COMPLETED, FAILED]
    tasks = {}
    for i in range(40):
        task = make_task(
            f"task-{i:02d}",
            context_id=f"ctx-{i % 3}",
            state=states[(i * 7) % 4],
            us=1_000_000 + (i // 4) * 1000,  # 4 tasks share each timestamp
        )
        tasks[task.id] = task
    for task in tasks.values():
        await store.save(scope, task, [])
    await store.save(B, make_task("noise", context_id="ctx-0", us=5_000_000), [])
    return tasks


FILTERS = [
    TaskQuery(),
    TaskQuery(context_id="ctx-1"),
    TaskQuery(state=COMPLETED),
    TaskQuery(status_after_us=1_005_000),
    TaskQuery(context_id="ctx-2", state=SUBMITTED),
    TaskQuery(context_id="ctx-0", status_after_us=1_003_000),
    TaskQuery(state=WORKING, status_after_us=1_002_000),
    TaskQuery(context_id="ctx-1", state=FAILED, status_after_us=1_001_000),
    TaskQuery(context_id="no-such-context"),
    TaskQuery(state=CANCELED),
    TaskQuery(status_after_us=9_999_999),
]


@pytest.mark.parametrize("query", FILTERS, ids=repr)
async def test_list_filters(store, query):
    tasks = await _seed(store, A)
    expected = reference(tasks, query)
    page = await store.list(A, _with(query, page_size=100))
    assert [t.id for t in page.tasks] == expected
    assert page.total_size == len(expected)
    assert page.next_cursor is None
    for t in page.tasks:
        assert t == tasks[t.id]


async def test_status_after_is_strict(store):
    await store.save(A, make_task("old", us=100), [])
    await store.save(A, make_task("edge", us=200), [])
    await store.save(A, make_task("new", us=300), [])
    page = await store.list(A, TaskQuery(status_after_us=200))
    assert [t.id for t in page.tasks] == ["new"]
    assert page.total_size == 1
    page = await store.list(A, TaskQuery(status_after_us=199))
    assert [t.id for t in page.tasks] == ["new", "edge"]


async def test_list_order_ties_broken_by_id_desc(store):
    for task_id in ["b", "a", "d", "c"]:
        await store.save(A, make_task(task_id, us=500), [])
    await store.save(A, make_task("z-older", us=499), [])
    await store.save(A, make_task("0-newer", us=501), [])
    page = await store.list(A, TaskQuery())
    assert [t.id for t in page.tasks] == ["0-newer", "d", "c", "b", "a", "z-older"]


async def test_ids_compare_by_code_point(store):
    ids = ["a", "Z", "z", "é", "😀", "10", "9", "task-ü"]
    for task_id in ids:
        await store.save(A, make_task(task_id, us=7), [status_event(make_task(task_id), 1)])
    page = await store.list(A, TaskQuery())
    assert [t.id for t in page.tasks] == sorted(ids, reverse=True)
    for task_id in ids:  # and every one of them round-trips
        assert (await store.get(A, task_id)).id == task_id
        assert await store.last_seq(A, task_id) == 1


@pytest.mark.parametrize("page_size", [1, 3, 10, 40, 100])
@pytest.mark.parametrize("query", FILTERS[:6], ids=repr)
async def test_paging_no_gaps_no_duplicates(store, query, page_size):
    tasks = await _seed(store, A)
    expected = reference(tasks, query)
    ids, totals, pages = await list_all(store, A, _with(query, page_size=page_size))
    assert ids == expected
    assert set(totals) == {len(expected)}
    # No trailing empty page, even when the size divides the count.
    assert pages == max(1, -(-len(expected) // page_size))


async def test_page_size_zero_returns_no_rows(store):
    await _seed(store, A)
    page = await store.list(A, TaskQuery(page_size=0))
    assert (page.tasks, page.total_size, page.next_cursor) == ([], 40, None)


async def test_total_size_follows_state_changes(store):
    tasks: dict[str, pb.Task] = {}
    lifecycle = [SUBMITTED, WORKING, INPUT_REQUIRED, WORKING, WORKING, COMPLETED, COMPLETED]
    us = itertools.count(1_000)
    for step, state in enumerate(lifecycle):
        for i in range(6):
            if i > step:  # tasks appear over time
                continue
            task = make_task(f"t{i}", context_id=f"c{i % 2}", state=state, us=next(us))
            if i == 5 and step == len(lifecycle) - 1:
                task.status.state = FAILED
            tasks[task.id] = task
            await store.save(A, task, [])
        # A task that moves to another context (not expected in practice, still counted right).
        if step == 4:
            moved = make_task("t0", context_id="c-moved", state=CANCELED, us=next(us))
            tasks["t0"] = moved
            await store.save(A, moved, [])
        for context_id in ["", "c0", "c1", "c-moved"]:
            for state in [0, *set(lifecycle), FAILED, CANCELED]:
                q = TaskQuery(context_id=context_id, state=state)
                page = await store.list(A, q)
                assert page.total_size == len(reference(tasks, q)), (step, q)
                assert [t.id for t in page.tasks] == reference(tasks, q)


async def test_events_after_and_last_seq(store):
    task = make_task("t")
    assert await store.last_seq(A, "t") == 0
    assert await store.events_after(A, "t", 0) == []
    first = [status_event(task, 1), status_event(task, 2)]
    await store.save(A, task, first)
    task.status.state = WORKING
    await store.save(A, task, [])  # a snapshot without new events
    second = [status_event(task, 3), status_event(task, 4), status_event(task, 5)]
    await store.save(A, task, second)
    assert await store.last_seq(A, "t") == 5
    got = await store.events_after(A, "t", 0)
    assert [e.seq for e in got] == [1, 2, 3, 4, 5]
    assert got == first + second
    assert [e.seq for e in await store.events_after(A, "t", 2)] == [3, 4, 5]
    assert await store.events_after(A, "t", 5) == []
    assert await store.events_after(A, "other", 0) == []


async def test_unsettled(store):
    await store.save(A, make_task("sub", state=SUBMITTED), [])
    await store.save(A, make_task("work", state=WORKING), [])
    await store.save(A, make_task("done", state=COMPLETED), [])
    await store.save(A, make_task("input", state=INPUT_REQUIRED), [])
    await store.save(C, make_task("work", state=WORKING), [])
    await store.save(D, make_task("fail", state=FAILED), [])
    found = {(scope, t.id): t for scope, t in await store.unsettled()}
    assert set(found) == {(A, "sub"), (A, "work"), (C, "work")}
    assert found[(A, "work")].status.state == WORKING
    await store.save(A, make_task("work", state=COMPLETED), [])
    assert {(s, t.id) for s, t in await store.unsettled()} == {(A, "sub"), (C, "work")}


async def test_push_config_crud(store):
    assert await store.get_push_config(A, "t", "c1") is None
    await store.put_push_config(A, make_config("t", "c1", "https://one"))
    await store.put_push_config(A, make_config("t", "c2", "https://two"))
    await store.put_push_config(A, make_config("t2", "c1", "https://other-task"))
    assert (await store.get_push_config(A, "t", "c1")).url == "https://one"
    assert (await store.get_push_config(A, "t2", "c1")).url == "https://other-task"
    await store.put_push_config(A, make_config("t", "c1", "https://one-v2"))  # upsert
    assert (await store.get_push_config(A, "t", "c1")).url == "https://one-v2"
    configs, nxt = await store.list_push_configs(A, "t", 10, None)
    assert [(c.id, c.url) for c in configs] == [("c1", "https://one-v2"), ("c2", "https://two")]
    assert nxt is None
    assert await store.delete_push_config(A, "t", "c1") is True
    assert await store.delete_push_config(A, "t", "c1") is False
    assert await store.get_push_config(A, "t", "c1") is None
    assert await store.get_push_config(A, "t2", "c1") is not None
    configs, nxt = await store.list_push_configs(A, "t", 10, None)
    assert [c.id for c in configs] == ["c2"]


async def test_a_new_tasks_configs_are_stored_with_its_first_events(store):
    # Two tasks created in one batch (the group commit), each with its config.
    one, two = make_task("one"), make_task("two")
    await asyncio.gather(
        store.save(A, one, [status_event(one, 1)], configs=[make_config("one", "c1")]),
        store.save(A, two, [status_event(two, 1)], configs=[make_config("two", "c2")]),
    )
    assert (await store.get_push_config(A, "one", "c1")).token == "tok"
    assert (await store.get_push_config(A, "two", "c2")) is not None
    if isinstance(store, MemoryTaskStore):
        return  # no second writer to refuse a sequence
    # A save another writer beat (its sequence is taken) stores none of its configs either.
    again = make_task("one", state=WORKING)
    with pytest.raises(RuntimeError):
        await store.save(A, again, [status_event(again, 1)], configs=[make_config("one", "c9")])
    assert await store.get_push_config(A, "one", "c9") is None
    assert (await store.get(A, "one")).status.state == SUBMITTED


async def test_push_config_paging(store):
    ids = ["g", "a", "e", "c", "b", "f", "d"]
    for config_id in ids:
        await store.put_push_config(A, make_config("t", config_id))
    seen, after, pages = [], None, 0
    while True:
        configs, after = await store.list_push_configs(A, "t", 3, after)
        pages += 1
        seen += [c.id for c in configs]
        if after is None:
            break
        assert after == configs[-1].id
    assert seen == sorted(ids)
    assert pages == 3
    # Exact division: no trailing empty page.
    configs, after = await store.list_push_configs(A, "t", 7, None)
    assert (len(configs), after) == (7, None)
    configs, after = await store.list_push_configs(A, "t", 6, None)
    assert (len(configs), after) == (6, "f")
    # after_id need not exist.
    configs, after = await store.list_push_configs(A, "t", 10, "cc")
    assert [c.id for c in configs] == ["d", "e", "f", "g"]
    assert after is None


async def test_open_and_close_are_idempotent(store):
    await store.open()
    await store.save(A, make_task("t"), [])
    await store.open()
    assert await store.get(A, "t") is not None
    await store.close()
    await store.close()
    await store.open()  # the fixture closes it again


# --------------------------------------------------------------- SQLite only


async def test_open_store_url(tmp_path):
    s = open_store(f"sqlite:///{tmp_path}/via-url.db")
    assert isinstance(s, SqliteTaskStore)
    await s.open()
    await s.save(A, make_task("t"), [])
    await s.close()
    assert (tmp_path / "via-url.db").exists()


async def test_data_survives_close_and_reopen(tmp_path):
    path = str(tmp_path / "deep" / "a2a.db")
    s = SqliteTaskStore(path)
    await s.open()
    task = make_task("t", context_id="c", state=WORKING, us=42)
    await s.save(A, task, [status_event(task, 1)])
    await s.save(A, make_task("u", context_id="c", state=COMPLETED, us=43), [])
    await s.put_push_config(A, make_config("t", "cfg"))
    await s.close()

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    for _ in range(2):  # open() on an existing file keeps everything
        s = SqliteTaskStore(path)
        await s.open()
        assert await s.get(A, "t") == task
        assert [e.seq for e in await s.events_after(A, "t", 0)] == [1]
        assert await s.get_push_config(A, "t", "cfg") == make_config("t", "cfg")
        page = await s.list(A, TaskQuery(context_id="c"))
        assert ([t.id for t in page.tasks], page.total_size) == (["u", "t"], 2)
        assert (await s.list(A, TaskQuery(state=WORKING))).total_size == 1
        assert [t.id for _, t in await s.unsettled()] == ["t"]
        await s.close()


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from gen import a2a_pb2 as pb
    from service.store.base import Scope, StoredEvent
    from service.store.sqlite import SqliteTaskStore
    from service.protocol.timeutil import micros_to_timestamp

    async def main(path, n):
        store = SqliteTaskStore(path)
        await store.open()
        async def save(i):
            task = pb.Task(id=f"task-{i}", context_id="ctx")
            task.status.state = pb.TASK_STATE_WORKING
            micros_to_timestamp(1_000_000 + i, task.status.timestamp)
            event = pb.StreamResponse(task=task)
            await store.save(Scope("t", "o"), task, [StoredEvent(1, event)])
        half = n // 2
        for i in range(half):  # one by one
            await save(i)
        await asyncio.gather(*(save(i) for i in range(half, n)))  # group commits
        print("saved", flush=True)
        time.sleep(60)  # blocks the loop: nothing else gets a chance to run

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


async def test_saves_survive_kill_9(tmp_path):
    path = str(tmp_path / "killed" / "a2a.db")
    n = 300
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        path,
        str(n),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        if line.strip() != b"saved":
            proc.kill()
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
            pytest.fail(f"child did not save: {line!r} {stderr.decode(errors='replace')}")
        os.kill(proc.pid, signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    s = SqliteTaskStore(path)
    await s.open()
    try:
        scope = Scope("t", "o")
        ids, totals, _ = await list_all(s, scope, TaskQuery(page_size=100))
        assert sorted(ids) == sorted(f"task-{i}" for i in range(n))
        assert set(totals) == {n}
        assert (await s.list(scope, TaskQuery(context_id="ctx", state=WORKING))).total_size == n
        for i in (0, n // 2, n - 1):
            assert await s.last_seq(scope, f"task-{i}") == 1
        assert len(await s.unsettled()) == n
    finally:
        await s.close()


async def test_concurrent_saves_all_commit(sqlite_store, monkeypatch):
    batches: list[int] = []
    commit_batch = SqliteWriter._commit_batch

    def counting(self, conn, batch):
        batches.append(len(batch))
        return commit_batch(self, conn, batch)

    monkeypatch.setattr(SqliteWriter, "_commit_batch", counting)
    n = 500
    tasks = [make_task(f"t{i:03d}", context_id=f"c{i % 5}", us=i) for i in range(n)]
    await asyncio.gather(*(sqlite_store.save(A, t, [status_event(t, 1)]) for t in tasks))
    page = await sqlite_store.list(A, TaskQuery(page_size=1000))
    assert page.total_size == n
    assert sorted(t.id for t in page.tasks) == sorted(t.id for t in tasks)
    assert (await sqlite_store.list(A, TaskQuery(context_id="c3"))).total_size == n // 5
    assert sum(batches) == n
    assert len(batches) < n // 5, batches  # group commit: many saves per transaction
    # Reads from another store on the same file see every acknowledged write.
    other = SqliteTaskStore(sqlite_store._path)
    await other.open()
    try:
        assert (await other.list(A, TaskQuery())).total_size == n
    finally:
        await other.close()


async def test_call_order_is_commit_order(sqlite_store):
    # Many saves of one task issued back to back: the last call wins.
    states = [SUBMITTED, WORKING, INPUT_REQUIRED, WORKING, COMPLETED] * 40
    saves = []
    for i, state in enumerate(states):
        saves.append(sqlite_store.save(A, make_task("t", state=state, us=i), []))
    await asyncio.gather(*saves)
    got = await sqlite_store.get(A, "t")
    assert (got.status.state, status_micros(got)) == (COMPLETED, len(states) - 1)
    for state in [0, SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED]:
        expected = 1 if state in (0, COMPLETED) else 0
        assert (await sqlite_store.list(A, TaskQuery(state=state))).total_size == expected


async def test_failed_write_does_not_sink_its_batch(sqlite_store, caplog):
    caplog.set_level(logging.DEBUG, logger="service.store.sqlite")
    first = make_task("dup", state=SUBMITTED)
    await sqlite_store.save(A, first, [status_event(first, 1)])
    good = [make_task(f"ok{i}", state=WORKING) for i in range(50)]
    bad = make_task("dup", state=COMPLETED)  # re-uses event seq 1: rejected
    await sqlite_store.put_push_config(A, make_config("ok0", "old"))
    # Hold the write lock from outside so that every call below lands in ONE batch.
    raw = sqlite3.connect(sqlite_store._path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    blocker = asyncio.ensure_future(sqlite_store.save(A, make_task("blocker"), []))
    await asyncio.sleep(0.1)  # `blocker` found the lock taken and waits (the loop does not)
    pending = asyncio.gather(
        *(sqlite_store.save(A, t, []) for t in good[:25]),
        sqlite_store.put_push_config(A, make_config("ok0", "new")),
        sqlite_store.save(A, bad, [status_event(bad, 2), status_event(bad, 1)]),
        sqlite_store.delete_push_config(A, "ok0", "old"),
        sqlite_store.delete_push_config(A, "ok0", "never-existed"),
        *(sqlite_store.save(A, t, []) for t in good[25:]),
        return_exceptions=True,
    )
    await asyncio.sleep(0.1)  # all of them queued
    raw.execute("COMMIT")
    raw.close()
    await blocker
    results = await pending
    assert "locked by another process" in caplog.text
    assert "batch of 55 failed" in caplog.text  # one batch (with `blocker`), replayed call by call
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert str(errors[0]) == "task store unavailable"
    assert results[25:29] == [None, errors[0], True, False]
    configs, _ = await sqlite_store.list_push_configs(A, "ok0", 10, None)
    assert [c.id for c in configs] == ["new"]
    # The failed call left nothing behind: old snapshot, old events, old counters.
    assert await sqlite_store.get(A, "dup") == first
    assert await sqlite_store.last_seq(A, "dup") == 1
    assert (await sqlite_store.list(A, TaskQuery(state=COMPLETED))).total_size == 0
    assert (await sqlite_store.list(A, TaskQuery(state=WORKING))).total_size == 50
    assert (await sqlite_store.list(A, TaskQuery())).total_size == 52


def test_event_runs_pack_and_unpack():
    sizes = [0, 1, 127, 128, 300, 16383, 16384, 70000]
    events = [
        (seq, bytes([seq % 251]) * size)
        for seq, size in zip([1, 127, 128, 16383, 16384, 2**21, 2**35, 7], sizes, strict=True)
    ]
    assert _unpack_events(_pack_events(events)) == events
    assert _unpack_events(b"") == []


async def test_commit_interval_groups_writes_and_close_commits_them(tmp_path):
    path = str(tmp_path / "interval.db")
    s = SqliteTaskStore(path, commit_interval=60.0)
    await s.open()
    await s.save(A, make_task("first"), [])  # an idle store commits at once
    second = asyncio.ensure_future(s.save(A, make_task("second"), []))
    third = asyncio.ensure_future(s.save(A, make_task("third"), []))
    await asyncio.sleep(0.2)
    assert not second.done() and not third.done()  # they wait for the next commit slot
    await s.close()  # which commits everything queued
    assert second.done() and third.done() and second.exception() is None
    again = SqliteTaskStore(path)
    await again.open()
    try:
        assert {t.id for t in (await again.list(A, TaskQuery())).tasks} == {
            "first",
            "second",
            "third",
        }
    finally:
        await again.close()


async def test_a_lock_held_too_long_fails_the_writes_not_the_store(sqlite_store, monkeypatch):
    monkeypatch.setattr("service.store.sqlite_writes._BUSY_TIMEOUT_S", 0.3)
    monkeypatch.setattr("service.store.sqlite_writes._MAX_BATCH", 1)
    raw = sqlite3.connect(sqlite_store._path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        waiting = [
            asyncio.ensure_future(sqlite_store.save(A, make_task(f"late{i}"), [])) for i in range(3)
        ]
        ticks = 0
        while not waiting[0].done():  # the event loop keeps running while the writes wait
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks >= 5
        await asyncio.sleep(0)
        assert all(w.done() for w in waiting)  # all queued writes give up together
        for w in waiting:
            with pytest.raises(RuntimeError, match="task store unavailable"):
                await w
        assert await sqlite_store.get(A, "late0") is None  # reads still work
    finally:
        raw.execute("ROLLBACK")
        raw.close()
    await sqlite_store.save(A, make_task("after"), [])  # the lock is free again
    assert (await sqlite_store.get(A, "after")).id == "after"


async def test_a_cancelled_close_fails_what_is_queued_and_the_store_reopens(tmp_path):
    path = str(tmp_path / "cancelled-close.db")
    s = SqliteTaskStore(path)
    await s.open()
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")  # the queued write cannot commit
    try:
        queued = asyncio.ensure_future(s.save(A, make_task("queued"), []))
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(s.close())
        await asyncio.sleep(0.05)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        with pytest.raises(RuntimeError, match="task store is closed"):
            await asyncio.wait_for(queued, 5)
    finally:
        raw.execute("ROLLBACK")
        raw.close()
    await s.open()
    try:
        await asyncio.wait_for(s.save(A, make_task("after"), []), 5)
        assert (await s.get(A, "after")).id == "after"
        assert await s.get(A, "queued") is None
    finally:
        await s.close()


STRACED_CHILD = textwrap.dedent(
    """
    import asyncio, sys, threading
    import service.store.sqlite as sq
    import service.store.sqlite_checkpoint as cp
    from gen import a2a_pb2 as pb
    from service.store.base import Scope, StoredEvent

    cp._CHECKPOINT_BYTES = 64 * 1024
    cp._CHECKPOINT_CHECK_S = 0.0

    async def main(path):
        store = sq.SqliteTaskStore(path)
        await store.open()
        for round_ in range(30):
            tasks = [pb.Task(id=f"t{round_}-{i}", context_id="c") for i in range(20)]
            for t in tasks:
                t.metadata["pad"] = "x" * 3000
            await asyncio.gather(*(store.save(Scope("", ""), t, [StoredEvent(1, pb.StreamResponse(task=t))])
                                   for t in tasks))
        await store.close()
        print("loop thread", threading.get_native_id(), flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_the_event_loop_thread_never_syncs_to_disk(tmp_path):
    # Commits run on the event loop; fsyncs (checkpoints, the first write into a fresh
    # WAL, the final close) must all happen on helper threads. strace tells which thread.
    strace = shutil.which("strace")
    if strace is None:
        missing_part("STRACE NOT INSTALLED: cannot see which thread syncs; test NOT RUN")
    trace = tmp_path / "syncs.txt"
    proc = await asyncio.create_subprocess_exec(
        strace,
        "-f",
        "-e",
        "trace=fsync,fdatasync",
        "-o",
        str(trace),
        sys.executable,
        "-c",
        STRACED_CHILD,
        str(tmp_path / "traced.db"),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode(errors="replace")
    loop_tid = out.decode().split("loop thread", 1)[1].split()[0]
    syncs = [line for line in trace.read_text().splitlines() if "sync(" in line]
    assert len(syncs) >= 3, syncs  # checkpoints happened (the test would prove nothing otherwise)
    on_loop = [line for line in syncs if line.split()[0] == loop_tid]
    assert not on_loop, on_loop


async def test_the_wal_is_checkpointed_and_starts_over(sqlite_store, monkeypatch):
    monkeypatch.setattr("service.store.sqlite_checkpoint._CHECKPOINT_BYTES", 256 * 1024)
    monkeypatch.setattr("service.store.sqlite_checkpoint._CHECKPOINT_CHECK_S", 0.0)
    wal = sqlite_store._path + "-wal"
    blob = "x" * 4000
    largest = 0
    for round_ in range(40):
        tasks = [make_task(f"t{round_}-{i}", us=i) for i in range(20)]
        for t in tasks:
            t.metadata["pad"] = blob
        await asyncio.gather(*(sqlite_store.save(A, t, [status_event(t, 1)]) for t in tasks))
        largest = max(largest, os.stat(wal).st_size)
    # 40 rounds wrote > 3 MiB of frames; checkpoints kept restarting the WAL well below that.
    assert largest < 2 * 1024 * 1024, largest
    assert (await sqlite_store.list(A, TaskQuery())).total_size == 800


async def test_errors_do_not_leak_paths(tmp_path, caplog):
    path = tmp_path / "secret-location" / "not-a-db.db"
    path.parent.mkdir()
    path.write_bytes(b"this is not an sqlite database file, not at all" * 100)
    s = SqliteTaskStore(str(path))
    with pytest.raises(RuntimeError) as info:
        await s.open()
    # What failed, for the operator's one startup line, without the local path.
    assert str(info.value) == "task store unavailable: file is not a database"
    assert "secret-location" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "secret-location" not in caplog.text
    await s.close()  # never opened: a no-op


async def test_calls_after_close_fail(tmp_path):
    s = SqliteTaskStore(str(tmp_path / "a.db"))
    await s.open()
    await s.close()
    with pytest.raises(RuntimeError):
        await s.save(A, make_task("t"), [])
    with pytest.raises(RuntimeError):
        await s.get(A, "t")


def _plan(conn: sqlite3.Connection, sql: str, params: list) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


async def test_list_queries_use_an_index(sqlite_store, tmp_path):
    # Some data so the planner is not reasoning about empty tables.
    for i in range(200):
        state = [SUBMITTED, WORKING, COMPLETED][i % 3]
        await sqlite_store.save(
            A, make_task(f"t{i}", context_id=f"c{i % 7}", state=state, us=i), []
        )
    with sqlite3.connect(tmp_path / "tasks.db") as conn:
        conn.execute("ANALYZE")
        for context_id, state, after, cursor in itertools.product(
            ["", "c3"], [0, WORKING], [None, 50], [None, (120, "t120")]
        ):
            q = TaskQuery(context_id=context_id, state=state, status_after_us=after, cursor=cursor)
            queries = [page_query(A, q)]
            if after is not None:
                queries.append(count_query(A, q))
            for sql, params in queries:
                plan = _plan(conn, sql, params)
                assert len(plan) == 1, (q, plan)
                assert plan[0].startswith("SEARCH tasks USING "), (q, plan)
                assert "INDEX tasks_by_" in plan[0], (q, plan)
                assert "tenant=? AND owner=?" in plan[0], (q, plan)
                if context_id:
                    assert "context_id=?" in plan[0], (q, plan)
                if state:
                    assert "state=?" in plan[0], (q, plan)
                if after is not None:
                    assert "status_us>?" in plan[0], (q, plan)
                if cursor is not None and sql == queries[0][0]:
                    assert "(status_us,id)<(?,?)" in plan[0], (q, plan)
                assert not any("TEMP B-TREE" in line or "SCAN" in line for line in plan)
            sql, params = count_query(A, _with(q, status_after_us=None))
            assert _plan(conn, sql, params)[0].startswith("SEARCH task_counts USING PRIMARY KEY")
        plan = _plan(conn, "SELECT snapshot FROM tasks WHERE state IN (1, 2)", [])
        assert "tasks_unsettled" in plan[0]


async def test_counters_match_the_rows_after_random_churn(sqlite_store, tmp_path):
    rng = random.Random(7)
    scopes = [A, B, D]
    contexts = ["", "c1", "c2", "c3"]
    states = [0, SUBMITTED, WORKING, COMPLETED, FAILED, INPUT_REQUIRED]
    for _ in range(30):  # rounds of concurrent saves (group commits mixing many tasks)
        saves = []
        for _ in range(rng.randrange(1, 40)):
            task = make_task(
                f"t{rng.randrange(25)}",
                context_id=rng.choice(contexts),
                state=rng.choice(states),
                us=rng.randrange(1000),
            )
            saves.append(sqlite_store.save(rng.choice(scopes), task, []))
        await asyncio.gather(*saves)
    with sqlite3.connect(tmp_path / "tasks.db") as conn:
        counted = {
            row[:4]: row[4]
            for row in conn.execute("SELECT tenant, owner, context_id, state, n FROM task_counts")
        }
        assert all(n >= 0 for n in counted.values())
        rows = conn.execute("SELECT tenant, owner, context_id, state FROM tasks").fetchall()
    expected: dict[tuple, int] = {}
    for tenant, owner, context_id, state in rows:
        for key in {("", 0), (context_id, 0), ("", state), (context_id, state)}:
            full = (tenant, owner, *key)
            expected[full] = expected.get(full, 0) + 1
    assert {k: n for k, n in counted.items() if n} == expected
    for scope in scopes:  # and list() agrees with the rows
        for context_id in contexts:
            for state in states:
                q = TaskQuery(context_id=context_id, state=state, page_size=100)
                page = await sqlite_store.list(scope, q)
                assert page.total_size == len(page.tasks)
                assert page.total_size == expected.get(
                    (scope.tenant, scope.owner, context_id, state), 0
                )


# Version 1 of the schema kept task_counts with triggers like these (simplified here:
# one upsert per counter row; tasks do not change context).
def _v1_upsert(context: str, state: str, sign: str) -> str:
    return (
        f"INSERT INTO task_counts VALUES (NEW.tenant, NEW.owner, {context}, {state}, {sign}1)"
        f" ON CONFLICT DO UPDATE SET n = n {sign} 1;"
    )


_V1_COUNT_TRIGGERS = [
    "CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks BEGIN "
    + "".join(_v1_upsert(c, st, "+") for c in ("''", "NEW.context_id") for st in ("0", "NEW.state"))
    + " END",
    "CREATE TRIGGER tasks_count_update AFTER UPDATE OF state ON tasks"
    " WHEN OLD.state IS NOT NEW.state BEGIN "
    + "".join(
        _v1_upsert(c, st, sign)
        for c in ("''", "NEW.context_id")
        for st, sign in (("OLD.state", "-"), ("NEW.state", "+"))
    )
    + " END",
]


async def test_a_version_1_database_keeps_its_counts_without_triggers(tmp_path):
    path = tmp_path / "tasks.db"
    rows = [
        (
            "INSERT INTO tasks VALUES ('t1', 'alice', ?, 'c', ?, ?, ?)",
            (
                f"t{i}",
                state,
                i,
                make_task(f"t{i}", context_id="c", state=state, us=i).SerializeToString(),
            ),
        )
        for i, state in enumerate([WORKING, WORKING, COMPLETED])
    ]
    # as version 1 left it: counted by triggers
    _file_at_version(path, 1, [(stmt, ()) for stmt in _V1_COUNT_TRIGGERS] + rows)

    s = SqliteTaskStore(str(path))
    await s.open()
    try:
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
            assert (
                raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
                == []
            )
        raw.close()
        await s.save(A, make_task("t0", context_id="c", state=COMPLETED, us=5), [])  # a change
        await s.save(A, make_task("t3", context_id="c", state=WORKING, us=6), [])  # a new task
        for state, n in [(0, 4), (WORKING, 2), (COMPLETED, 2)]:
            for context_id in ["", "c"]:
                page = await s.list(A, TaskQuery(context_id=context_id, state=state))
                assert page.total_size == len(page.tasks) == n, (context_id, state)
    finally:
        await s.close()


async def test_a_version_3_database_gets_the_sequence_of_its_running_snapshots(tmp_path):
    """Schema 4 records which event a snapshot holds last: a running task's is its last
    event's (so later steady saves are counted from there), a finished one's none."""
    path = tmp_path / "tasks.db"
    running, done = make_task("run", state=WORKING), make_task("done", state=COMPLETED)
    running.artifacts.add(artifact_id="a").parts.add(text="all of it")
    tasks = [
        (
            "INSERT INTO tasks VALUES ('t1', 'alice', ?, 'ctx', ?, 1000000, ?)",
            (task.id, task.status.state, task.SerializeToString()),
        )
        for task in (running, done)
    ]
    events = [
        (
            "INSERT INTO events VALUES ('t1', 'alice', 'run', ?, ?, ?)",
            (e.seq, e.seq, _pack_events([(e.seq, e.event.SerializeToString())])),
        )
        for e in (status_event(running, 1), chunk_event(running, 2, "a", "x", append=False))
    ]
    _file_at_version(path, 3, tasks + events)  # as version 3 left it: no snapshot_seq

    s = SqliteTaskStore(str(path))
    await s.open()
    try:
        assert dict(_query(path, "SELECT id, snapshot_seq FROM tasks")) == {"run": 2, "done": None}
        assert await s.get(A, "run") == running  # its events are not applied twice
        assert await s.get(A, "done") == done
    finally:
        await s.close()


async def test_a_second_creation_of_a_task_is_refused_and_counted_once(sqlite_store):
    # Events from 1 mean "this task is being created": such a save inserts the task row
    # (no look-up of an earlier state), so one for an existing task must fail, alone.
    task = make_task("t", context_id="c", state=WORKING)
    await sqlite_store.save(A, task, [status_event(task, 1)])
    again = make_task("t", context_id="c", state=COMPLETED, us=2_000_000)
    other = make_task("u", context_id="c", state=COMPLETED)
    results = await asyncio.gather(
        sqlite_store.save(A, again, [status_event(again, 1), status_event(again, 2)]),
        sqlite_store.save(A, other, [status_event(other, 1)]),
        return_exceptions=True,
    )
    assert isinstance(results[0], RuntimeError) and results[1] is None
    assert await sqlite_store.get(A, "t") == task and await sqlite_store.last_seq(A, "t") == 1
    for state, n in [(0, 2), (WORKING, 1), (COMPLETED, 1)]:
        page = await sqlite_store.list(A, TaskQuery(context_id="c", state=state))
        assert page.total_size == len(page.tasks) == n, state


async def test_sqlite_page_token_key_is_made_once_and_kept(tmp_path):
    from service.store import open_store

    path = tmp_path / "keyed.db"
    first = open_store(f"sqlite:{path}")
    await first.open()
    key = first.page_token_key
    await first.close()
    again = open_store(f"sqlite:{path}")
    await again.open()
    try:
        assert len(key) == 32 and again.page_token_key == key
    finally:
        await again.close()
    other = open_store(f"sqlite:{tmp_path / 'other.db'}")
    await other.open()
    try:
        assert other.page_token_key != key
    finally:
        await other.close()


def test_a_store_used_from_another_loop_or_thread_refuses_the_write(tmp_path):
    """The SQLite store writes on the loop that opened it only (its group commit runs
    there): another loop, later on the same thread or on another thread, is told so."""
    store = SqliteTaskStore(str(tmp_path / "tasks.db"))
    task = make_task("t", state=WORKING)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(store.open())
        loop.run_until_complete(store.save(A, task, [status_event(task, 1)]))

        async def save_elsewhere() -> None:
            await store.save(A, task, [status_event(task, 2)])

        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(save_elsewhere())  # the same thread, its loop not running
        with pytest.raises(RuntimeError, match="another event loop"):
            _in_thread(save_elsewhere())
        loop.run_until_complete(store.save(A, task, [status_event(task, 2)]))
        assert loop.run_until_complete(store.last_seq(A, "t")) == 2
    finally:
        loop.run_until_complete(store.close())
        loop.close()
