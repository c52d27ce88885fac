"""PostgreSQL store beyond the shared contract: migrations under concurrent startup, the
write fence between processes, shared secrets, query plans, and outages (the machine's
PostgreSQL; a fresh database per test)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import asyncpg
import pytest

from gen import a2a_pb2 as pb
from service.protocol.errors import UnavailableError
from service.store import WriteConflict, is_shared, open_store, pg_writes, redact_url
from service.store.base import Scope, TaskQuery
from service.store.pg_reads import count_query, page_query
from service.store.pg_schema import MIGRATIONS, SCHEMA_VERSION
from service.store.postgres import PostgresTaskStore
from tests.integration import test_store_contract as contract
from tests.pg_util import cut_access, fresh_database, restore_access

A = Scope("t1", "alice")


def make_task(task_id: str, state: int = pb.TASK_STATE_WORKING, us: int = 1_000_000) -> pb.Task:
    return contract.make_task(task_id, state=state, us=us)


event = contract.status_event


@pytest.fixture
async def database():
    async with fresh_database() as found:
        yield found


async def test_open_store_selects_postgresql_and_redacts_passwords():
    assert isinstance(open_store("postgresql://u@h/db"), PostgresTaskStore)
    assert isinstance(open_store("postgres://u@h/db"), PostgresTaskStore)
    assert is_shared("postgresql://u@h/db") and not is_shared("sqlite:x.db")
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://***@h:5432/db"
    with pytest.raises(ValueError) as info:
        open_store("mysql://u:secret@h/db")
    assert "secret" not in str(info.value)


async def test_processes_starting_at_once_migrate_once(database):
    url, _ = database
    stores = [PostgresTaskStore(url) for _ in range(6)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        conn = await asyncpg.connect(url)
        try:
            versions = await conn.fetch("SELECT version FROM a2a_schema_migrations ORDER BY 1")
        finally:
            await conn.close()
        assert [r[0] for r in versions] == [v for v, _ in MIGRATIONS]
        # Every process reads the one page-token key (tokens work on any replica).
        assert len({s.page_token_key for s in stores}) == 1
        assert len(stores[0].page_token_key) == 32
        await stores[0].save(A, make_task("t"), [])
        assert (await stores[5].get(A, "t")).id == "t"
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_a_newer_schema_is_refused_by_name(database):
    url, _ = database
    s = PostgresTaskStore(url)
    await s.open()
    await s.close()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("INSERT INTO a2a_schema_migrations (version) VALUES ($1)", 999)
    finally:
        await conn.close()
    with pytest.raises(
        RuntimeError, match=f"version 999, newer than this server's {SCHEMA_VERSION}"
    ):
        await PostgresTaskStore(url).open()


async def test_two_writers_of_one_task_cannot_both_append(database):
    # Two processes that both think they run the task: the second append of seq 2 loses
    # and its snapshot is not written either.
    url, _ = database
    first, second = PostgresTaskStore(url), PostgresTaskStore(url)
    await first.open()
    await second.open()
    try:
        task = make_task("t")
        await first.save(A, task, [event(task, 1)])
        mine = make_task("t", pb.TASK_STATE_COMPLETED, 2_000_000)
        theirs = make_task("t", pb.TASK_STATE_FAILED, 3_000_000)
        await first.save(A, mine, [event(mine, 2)])
        with pytest.raises(WriteConflict):
            await second.save(A, theirs, [event(theirs, 2)])
        assert (await second.get(A, "t")).status.state == pb.TASK_STATE_COMPLETED
        assert [e.seq for e in await second.events_after(A, "t", 0)] == [1, 2]
        # A conflict inside a group commit fails only its own call.
        other = make_task("u")
        results = await asyncio.gather(
            second.save(A, theirs, [event(theirs, 2)]),
            second.save(A, other, [event(other, 1)]),
            second.put_push_config(
                A, pb.TaskPushNotificationConfig(task_id="u", id="c", url="https://x")
            ),
            return_exceptions=True,
        )
        assert isinstance(results[0], WriteConflict) and results[1:] == [None, None]
        assert (await first.get(A, "u")) is not None
        assert (await first.get_push_config(A, "u", "c")) is not None
    finally:
        await first.close()
        await second.close()


def count_batches(monkeypatch) -> list[int]:
    """The size of every batch the store commits from now on (one statement each)."""
    batches: list[int] = []
    run_batch = pg_writes._run_batch

    async def counted(conn, batch):
        batches.append(len(batch))
        return await run_batch(conn, batch)

    monkeypatch.setattr(pg_writes, "_run_batch", counted)
    return batches


async def test_concurrent_saves_share_commits_and_keep_call_order(database, monkeypatch):
    url, _ = database
    s = PostgresTaskStore(url)
    await s.open()
    batches = count_batches(monkeypatch)
    try:
        tasks = [make_task(f"t{i}", us=i) for i in range(200)]
        await asyncio.gather(*(s.save(A, t, [event(t, 1)]) for t in tasks))
        # All queued at once: the first commit takes the first, the next all the others.
        assert sum(batches) == 200 and len(batches) <= 3, batches
        # Later saves of one task, queued together, end with the last one.
        last = [make_task("t0", state, 10_000 + i) for i, state in enumerate([3, 4, 2, 6])]
        await asyncio.gather(*(s.save(A, t, [event(t, 2 + i)]) for i, t in enumerate(last)))
        assert (await s.get(A, "t0")) == last[-1]
        assert await s.last_seq(A, "t0") == 5
        assert (await s.list(A, TaskQuery())).total_size == 200
    finally:
        await s.close()


async def test_independent_callers_share_a_paced_commit_and_a_lone_caller_does_not_wait(
    database, monkeypatch
):
    url, _ = database
    s = PostgresTaskStore(url, commit_interval=0.2)  # a long slot: what it gathers is plain
    await s.open()
    batches = count_batches(monkeypatch)
    try:
        pair = [make_task(f"p{i}") for i in range(2)]  # two at once: independent writers
        await asyncio.gather(*(s.save(A, t, [event(t, 1)]) for t in pair))
        batches.clear()
        saves = []
        for i in range(10):  # then callers arriving 10 ms apart, each commit ~1 ms
            task = make_task(f"spread{i}")
            saves.append(asyncio.ensure_future(s.save(A, task, [event(task, 1)])))
            await asyncio.sleep(0.01)
        await asyncio.gather(*saves)
    finally:
        await s.close()
        monkeypatch.undo()
    # Unpaced, each would have had a commit of its own; the slot gathered them.
    assert sum(batches) == 10 and len(batches) <= 2, batches
    # A lone caller: its saves commit on the next loop iteration, not after a slot (the
    # pacer tries one slot a second, its probe for other writers).
    s = PostgresTaskStore(url)
    await s.open()
    waits: list[float | None] = []
    on_write = s._writer.commits.pacer.on_write

    def recorded(now: float, pending: int, scheduled: bool) -> float | None:
        waits.append(on_write(now, pending, scheduled))
        return waits[-1]

    monkeypatch.setattr(s._writer.commits.pacer, "on_write", recorded)
    started = time.monotonic()
    try:
        for i in range(20):
            task = make_task(f"lone-{i}")
            await s.save(A, task, [event(task, 1)])
    finally:
        await s.close()
    probes = 1 + int(time.monotonic() - started)
    assert len(waits) == 20 and sum(1 for w in waits if w) <= probes, waits


async def test_list_queries_read_an_index_without_sorting(database):
    url, _ = database
    s = PostgresTaskStore(url)
    await s.open()
    try:
        states = [pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING, pb.TASK_STATE_COMPLETED]
        for chunk in range(10):
            await asyncio.gather(
                *(
                    s.save(
                        Scope(f"t{i % 5}", "o"),
                        _ctx(make_task(f"k{chunk}-{i}", states[i % 3], i), i),
                        [],
                    )
                    for i in range(300)
                )
            )
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ANALYZE a2a_tasks")
            # Small tables: the planner may prefer a sort; forbid the alternatives so the plan
            # shows whether an index serves filters and order (a sort would still appear if not).
            for setting in ("enable_seqscan", "enable_sort", "enable_bitmapscan"):
                await conn.execute(f"SET {setting} = off")
            for context_id, state, after, cursor in itertools.product(
                ["", "c3"], [0, pb.TASK_STATE_WORKING], [None, 50], [None, (120, "k1-120")]
            ):
                q = TaskQuery(
                    context_id=context_id, state=state, status_after_us=after, cursor=cursor
                )
                sql, params = page_query(Scope("t1", "o"), q)
                plan = await _plan(conn, sql, params)
                assert "Sort" not in plan, (q, plan)
                assert "a2a_tasks_by_" in plan, (q, plan)
                sql, params = count_query(Scope("t1", "o"), q)
                assert "a2a_tasks_by_" in await _plan(conn, sql, params)
            plan = await _plan(
                conn, "SELECT snapshot FROM a2a_tasks WHERE state = ANY($1::int[])", [[1, 2]]
            )
            assert "a2a_tasks_unsettled" in plan
        finally:
            await conn.close()
    finally:
        await s.close()


def _ctx(task: pb.Task, i: int) -> pb.Task:
    task.context_id = f"c{i % 7}"
    return task


async def _plan(conn: asyncpg.Connection, sql: str, params: list) -> str:
    rows = await conn.fetch("EXPLAIN (FORMAT JSON) " + sql, *params)
    return json.dumps(json.loads(rows[0][0]))


async def test_an_outage_fails_calls_fast_and_the_store_comes_back(database):
    url, name = database
    s = PostgresTaskStore(url)
    await s.open()
    try:
        await s.save(A, make_task("before"), [])
        assert await s.health() is None
        assert await cut_access(name) >= 1
        for call in (
            s.get(A, "before"),
            s.save(A, make_task("during"), []),
            s.list(A, TaskQuery()),
        ):
            with pytest.raises(UnavailableError, match="PostgreSQL"):
                await asyncio.wait_for(call, 20)
        assert await s.health() == "PostgreSQL unreachable"
        await restore_access(name)
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # back-off: the next attempt comes within the longest pause
            try:
                got = await s.get(A, "before")
                break
            except UnavailableError:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
        assert got is not None and got.id == "before"
        assert await s.get(A, "during") is None  # never acknowledged, never stored
        await s.save(A, make_task("after"), [])
        assert await s.health() is None
    finally:
        await restore_access(name)
        await s.close()


async def test_an_unreachable_server_is_named_at_open():
    s = PostgresTaskStore("postgresql://postgres@127.0.0.1:1/none")
    with pytest.raises(RuntimeError, match="PostgreSQL unreachable"):
        await s.open()


async def test_close_commits_the_writes_waiting_for_their_slot(database):
    url, _ = database
    s = PostgresTaskStore(url, commit_interval=60.0)
    await s.open()
    await s.save(A, make_task("first"), [])  # an idle store commits at once
    second = asyncio.ensure_future(s.save(A, make_task("second"), []))
    third = asyncio.ensure_future(s.save(A, make_task("third"), []))
    await asyncio.sleep(0.2)
    assert not second.done() and not third.done()  # they wait for the next commit slot
    await asyncio.wait_for(s.close(), 10)  # which commits everything queued
    assert second.done() and third.done()
    assert second.exception() is None and third.exception() is None
    again = PostgresTaskStore(url)
    await again.open()
    try:
        stored = {t.id for t in (await again.list(A, TaskQuery())).tasks}
        assert stored == {"first", "second", "third"}
    finally:
        await again.close()


async def test_a_cancelled_close_fails_what_is_queued_and_the_store_reopens(database):
    url, _ = database
    s = PostgresTaskStore(url)
    await s.open()
    await s.save(A, make_task("held"), [])
    blocker = await asyncpg.connect(url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM a2a_tasks WHERE id = 'held' FOR UPDATE")
        # On the wire and waiting for the row lock; the next write queues behind it.
        on_the_wire = asyncio.ensure_future(s.save(A, make_task("held"), []))
        await asyncio.sleep(0.2)
        queued = asyncio.ensure_future(s.save(A, make_task("queued"), []))
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(s.close())
        await asyncio.sleep(0.2)
        assert not closing.done()  # it waits for the commit on the wire
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        with pytest.raises(RuntimeError, match="task store is closed"):
            await asyncio.wait_for(queued, 5)
        await tx.rollback()
        await asyncio.wait_for(asyncio.gather(on_the_wire, return_exceptions=True), 10)
    finally:
        await blocker.close()
    await s.open()
    try:
        await asyncio.wait_for(s.save(A, make_task("after"), []), 5)
        assert (await s.get(A, "after")).id == "after"
        assert await s.get(A, "queued") is None
    finally:
        await s.close()
