"""Parked turns, in-process (paused_turn_idle_seconds): a turn left waiting in ctx.ask() is
released — its coroutine cancelled, its cleanup run, nothing of the task left in the
process — and the answer starts a new turn that receives it, with the question in
`ctx.task`; an answer within the idle time reaches the live coroutine. The bindings and a
restart: tests/integration/test_parked_turns.py."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.engine.bus import InProcessBus
from service.engine.driver import PARKED_MESSAGE
from service.engine.limits import Slots
from service.engine.registry import Engine
from service.store import Scope
from service.store.memory import MemoryTaskStore
from service.store.sqlite import SqliteTaskStore
from tests.conftest import user_message
from tests.permission_util import answer

ALICE = Scope("", "alice")
CALLER = Caller()
WAIT = 10
PARK = 0.05  # seconds: parked soon after the question (the tests wait for it, not for a time)


class AskingAgent:
    """Asks a question and records what each turn saw: `asked`, `released` (the finally of
    a turn that asked), `live ANSWER` (ask() returned) and `new ANSWER QUESTION STATE` (a
    turn started by the answer to an earlier turn's question). `ask-then-work`: its cleanup
    emits after the cancellation (a misbehaving agent)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def run(self, ctx: TurnContext) -> None:
        if ctx.task is not None and ctx.task.status.state:
            question = ctx.task.status.message.parts[0].text
            state = pb.TaskState.Name(ctx.task.status.state)
            self.log.append(f"new {ctx.text} {question} {state}")
            await ctx.complete(f"got {ctx.text}")
            return
        try:
            answer = await ctx.ask("which?", metadata={"step": 2})
            self.log.append(f"live {answer.parts[0].text}")
            await ctx.complete(f"got {answer.parts[0].text}")
        finally:
            self.log.append("released")
            if ctx.text == "ask-then-work" and not ctx.cancel_requested:
                await ctx.working("cleaning up")


async def until(predicate, what: str) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


async def send(engine: Engine, text: str, **fields) -> pb.Message | pb.Task:
    turn = await engine.send(ALICE, user_message(text, **fields), CALLER)
    return await asyncio.wait_for(engine.wait(turn), WAIT)


@pytest.fixture
async def make():
    engines: list[Engine] = []

    def build(agent, park_after: float = PARK, store=None, **kw) -> Engine:
        engine = Engine(
            store if store is not None else MemoryTaskStore(),
            agent,
            InProcessBus(),
            park_after=park_after,
            **kw,
        )
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.shutdown()


async def test_a_parked_turns_answer_starts_a_new_turn_that_receives_it(make):
    agent = AskingAgent()
    engine = make(agent)
    task = await send(engine, "ask")
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    await until(lambda: "released" in agent.log, "the paused turn parked")
    await until(lambda: len(engine.runs) == 0, "the run dropped")
    stored = await engine.get(ALICE, task.id)
    assert stored.status.state == pb.TASK_STATE_INPUT_REQUIRED  # the question is kept
    assert stored.status.message.parts[0].text == "which?"

    done = await send(engine, "blue", task_id=task.id)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert done.status.message.parts[0].text == "got blue"
    assert agent.log == ["released", "new blue which? TASK_STATE_INPUT_REQUIRED"]


async def test_an_answer_within_the_idle_time_reaches_the_live_coroutine(make):
    agent = AskingAgent()
    engine = make(agent, park_after=3600)
    task = await send(engine, "ask")
    assert len(engine.runs) == 1  # the coroutine waits in ask()
    done = await send(engine, "red", task_id=task.id)
    assert done.status.message.parts[0].text == "got red"
    assert agent.log == ["live red", "released"]


async def test_zero_never_parks(make):
    agent = AskingAgent()
    engine = make(agent, park_after=0)
    task = await send(engine, "ask")
    assert engine.runs.get(ALICE, task.id) is not None
    run = engine.runs.get(ALICE, task.id)
    assert run is not None and run.park_handle is None  # no timer: nothing will park it
    done = await send(engine, "red", task_id=task.id)
    assert agent.log == ["live red", "released"]
    assert done.status.state == pb.TASK_STATE_COMPLETED


async def test_a_parked_task_can_be_canceled_and_its_turn_slot_is_free(make):
    agent = AskingAgent()
    turns = Slots(1, 0, ("max_concurrent_turns", "max_concurrent_turns_per_principal"), "turns")
    engine = make(agent, turns=turns)
    task = await send(engine, "ask")
    await until(lambda: len(engine.runs) == 0, "the run dropped")
    assert turns.active == 0
    canceled = await engine.cancel(ALICE, task.id)
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert agent.log == ["released"]  # no turn ran for the cancel


async def test_cleanup_that_moves_the_task_on_fails_it_saying_so(make):
    agent = AskingAgent()
    engine = make(agent)
    task = await send(engine, "ask-then-work")
    await until(lambda: len(engine.runs) == 0, "the run dropped")
    stored = await engine.get(ALICE, task.id)
    assert stored.status.state == pb.TASK_STATE_FAILED
    assert stored.status.message.parts[0].text == PARKED_MESSAGE


async def test_a_parked_permission_request_resumes_with_the_decision(make):
    seen: list[object] = []

    class Permitting:
        async def run(self, ctx: TurnContext) -> None:
            decision = await ctx.request_permission(
                tool_name="command", title="Run", target="/bin/true"
            )
            seen.append((decision.decision, decision.resumed, ctx.resumed_decision is not None))

    engine = make(Permitting())
    task = await send(engine, "go")
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    await until(lambda: len(engine.runs) == 0, "the run dropped")
    turn = await engine.send(ALICE, answer(task, "allow_once"), CALLER)
    done = await asyncio.wait_for(engine.wait(turn), WAIT)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert seen == [("allow_once", True, True)]


@pytest.mark.parametrize("park_after", [PARK, 0])
async def test_parked_tasks_leave_no_objects_in_the_process(make, tmp_path, park_after):
    """Objects and Python memory retained per paused task: about nothing once parked, a
    lot while live (the check is not vacuous: the live case must exceed the bound)."""
    store = SqliteTaskStore(str(tmp_path / "tasks.db"))
    await store.open()
    try:
        agent = AskingAgent()
        engine = make(agent, park_after=park_after, store=store)
        agent.log = _Discard()  # the test agent's own log is not the engine's state
        live = park_after == 0
        for _ in range(20):  # warm up: caches, the store's statements
            await send(engine, "ask")
        await until(lambda: live or len(engine.runs) == 0, "every run dropped")
        gc.collect()
        objects = len(gc.get_objects())
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            count = 200
            for _ in range(count):
                await send(engine, "ask")
            await until(lambda: live or len(engine.runs) == 0, "every run dropped")
            gc.collect()
            grown = len(gc.get_objects()) - objects
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        held = sum(s.size_diff for s in after.compare_to(before, "filename"))
        per_task = (grown / count, held / count)
        print(f"park_after={park_after}: per task {per_task[0]:g} objects, {per_task[1]:g} B")
        if live:
            assert per_task[0] > 10 and per_task[1] > 3000, per_task
        else:
            assert per_task[0] < 2 and per_task[1] < 256, per_task
    finally:
        await engine.shutdown()
        await store.close()


class _Discard(list):
    """A log that keeps nothing."""

    def append(self, item: object) -> None:
        pass
