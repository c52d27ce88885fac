"""A task's event log never skips a number, whatever the store does to a commit: an outage
is retried until the store takes the events again, a commit whose answer was lost is not
written twice, another writer of the task stops the run, and a shutdown gives up on a
store that never comes back. In-process: an `Engine` on the memory store with faults of
the store's own making (the only fake: the external part)."""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.protocol.errors import UnavailableError
from service.store import Scope, StoredEvent, WriteConflict
from service.store.memory import MemoryTaskStore
from tests.conftest import user_message

SCOPE = Scope()
CALLER = Caller()
WAIT = 10


class FaultyStore(MemoryTaskStore):
    """A memory store whose commits fail while `down` is set (UnavailableError, as the
    PostgreSQL store says it), and which can store a commit yet lose its answer once."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.lose_answer_at: int | None = None  # a commit holding this seq: stored, then failed
        self.attempts = 0

    async def save(self, scope, task, events, configs=(), snapshot=None, steady=False) -> None:
        self.attempts += 1
        if self.down:
            raise UnavailableError("the task store (test) is unreachable", retry_after=1.0)
        stored = await self.last_seq(scope, task.id)
        if events and events[0].seq <= stored:
            raise WriteConflict("another writer already stored these events of the task")
        await super().save(scope, task, events, configs, snapshot)
        if self.lose_answer_at is not None and any(e.seq == self.lose_answer_at for e in events):
            self.lose_answer_at = None
            raise UnavailableError("the connection dropped before the answer", retry_after=1.0)


class Steps:
    """`steps` working updates, waiting for `gate` after the first `hold` of them."""

    name = "steps"

    def __init__(self, steps: int, hold: int) -> None:
        self.steps, self.hold = steps, hold
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def run(self, ctx: TurnContext) -> None:
        for i in range(self.steps):
            if i == self.hold:
                self.held.set()
                await self.gate.wait()
            await ctx.working(f"step {i}")
            await asyncio.sleep(0)


async def seqs(store: MemoryTaskStore, task_id: str) -> list[int]:
    return [e.seq for e in await store.events_after(SCOPE, task_id, 0)]


async def until(predicate, what: str) -> None:
    for _ in range(WAIT * 100):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_an_outage_mid_turn_is_retried_and_the_log_stays_contiguous():
    store, agent = FaultyStore(), Steps(steps=6, hold=2)
    engine = Engine(store, agent, InProcessBus())
    try:
        turn = await engine.send(SCOPE, user_message("go"), CALLER)
        task_id = turn.run.task_id
        await asyncio.wait_for(agent.held.wait(), WAIT)
        await until(lambda: _at_least(store, task_id, 3), "the first steps stored")
        store.down = True
        agent.gate.set()  # the agent goes on emitting while the store is away
        with pytest.raises(UnavailableError):  # the caller is told at once, and may retry
            await asyncio.wait_for(engine.wait(turn), WAIT)
        failed_attempts = store.attempts
        await until(lambda: _true(store.attempts >= failed_attempts + 2), "a retry")
        store.down = False  # the store is back: everything emitted is stored, in order
        await until(lambda: _state(store, task_id, pb.TASK_STATE_COMPLETED), "COMPLETED")
        # snapshot, six steps (WORKING updates), COMPLETED: no number skipped
        assert await seqs(store, task_id) == list(range(1, 9))
        assert turn.run.failed_commit is None
    finally:
        await engine.shutdown()


async def test_a_commit_whose_answer_was_lost_is_not_stored_twice():
    store, agent = FaultyStore(), Steps(steps=4, hold=1)
    engine = Engine(store, agent, InProcessBus())
    store.lose_answer_at = 3  # the commit of event 3 goes through; the engine hears a failure
    try:
        turn = await engine.send(SCOPE, user_message("go"), CALLER)
        task_id = turn.run.task_id
        await asyncio.wait_for(agent.held.wait(), WAIT)
        agent.gate.set()
        await until(lambda: _state(store, task_id, pb.TASK_STATE_COMPLETED), "COMPLETED")
        assert await seqs(store, task_id) == list(range(1, 7))  # snapshot, 4 steps, COMPLETED
        stored = await store.events_after(SCOPE, task_id, 0)
        assert len({e.seq for e in stored}) == len(stored)
    finally:
        await engine.shutdown()


class RivalStore(MemoryTaskStore):
    """From event `at` on, another writer (a process that took the task over) has stored
    its own event under the same number."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    async def save(self, scope, task, events, configs=(), snapshot=None, steady=False) -> None:
        if any(e.seq >= self.at for e in events):
            if await self.last_seq(scope, task.id) < self.at:
                rival = pb.StreamResponse()
                rival.status_update.task_id = task.id
                rival.status_update.status.state = pb.TASK_STATE_FAILED
                await super().save(scope, task, [StoredEvent(self.at, rival)])
            raise WriteConflict("another writer already stored these events of the task")
        await super().save(scope, task, events, configs, snapshot)


async def test_another_writer_of_the_task_stops_the_run_without_writing_past_it():
    store, agent = RivalStore(at=4), Steps(steps=10, hold=2)
    engine = Engine(store, agent, InProcessBus())
    try:
        turn = await engine.send(SCOPE, user_message("go"), CALLER)
        task_id = turn.run.task_id
        await asyncio.wait_for(agent.held.wait(), WAIT)
        agent.gate.set()
        with pytest.raises(Exception, match="could not be stored"):
            await asyncio.wait_for(engine.wait(turn), WAIT)
        await until(lambda: _true(not turn.run.agent_alive), "the agent stopped")
        assert turn.run.broken
        assert await seqs(store, task_id) == [1, 2, 3, 4]  # ours to 3, then the rival's
        last = (await store.events_after(SCOPE, task_id, 3))[0].event
        assert last.status_update.status.state == pb.TASK_STATE_FAILED
    finally:
        await engine.shutdown()


async def test_shutdown_gives_up_on_a_store_that_does_not_come_back():
    store, agent = FaultyStore(), Steps(steps=5, hold=1)
    engine = Engine(store, agent, InProcessBus())
    turn = await engine.send(SCOPE, user_message("go"), CALLER)
    task_id = turn.run.task_id
    await asyncio.wait_for(agent.held.wait(), WAIT)
    await until(lambda: _at_least(store, task_id, 2), "the first step stored")
    store.down = True
    agent.gate.set()
    await until(lambda: _true(turn.run.failed_commit is not None), "a failed commit")
    await asyncio.wait_for(engine.shutdown(), WAIT)  # does not wait for the store forever
    assert await seqs(store, task_id) == [1, 2]
    # What was not stored is dropped, numbers and all: a later writer continues from 2.
    assert turn.run.seq == turn.run.committed_seq == 2


async def _at_least(store: MemoryTaskStore, task_id: str, seq: int) -> bool:
    return await store.last_seq(SCOPE, task_id) >= seq


async def _state(store: MemoryTaskStore, task_id: str, state: int) -> bool:
    task = await store.get(SCOPE, task_id)
    return task is not None and task.status.state == state


async def _true(value: bool) -> bool:
    return value
