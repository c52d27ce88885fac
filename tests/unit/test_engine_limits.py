"""Turn slots in the engine, in-process: every way a turn ends gives its slot back exactly
once (completion, failure, cancel before and after the agent's first step, a pause in
ctx.ask(), a stall, shutdown), and a refused send leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.agent import Caller
from service.engine.bus import InProcessBus
from service.engine.limits import Slots
from service.engine.registry import Engine
from service.protocol.errors import OverloadedError
from service.store import Scope, TaskQuery
from service.store.memory import MemoryTaskStore
from tests.agents import ScriptedAgent
from tests.conftest import user_message

ALICE, BOB = Scope("", "alice"), Scope("", "bob")
CALLER = Caller()
WAIT = 5


def slots(total: int = 0, per: int = 0) -> Slots:
    return Slots(
        total, per, ("max_concurrent_turns", "max_concurrent_turns_per_principal"), "turns"
    )


async def send(engine: Engine, scope: Scope, text: str, **fields) -> pb.Message | pb.Task:
    turn = await engine.send(scope, user_message(text, **fields), CALLER)
    return await asyncio.wait_for(engine.wait(turn), WAIT)


async def until(predicate) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


@pytest.fixture
async def make():
    engines: list[Engine] = []

    def build(turns: Slots, **kw) -> Engine:
        engine = Engine(MemoryTaskStore(), ScriptedAgent(), InProcessBus(), turns=turns, **kw)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.shutdown()


async def test_ended_turns_give_their_slot_back(make):
    turns = slots(per=1)
    engine = make(turns)
    for text in ("echo a", "fail", "raise", "reply hi", "input more", "reject"):
        await send(engine, ALICE, text)
        await until(lambda: turns.active == 0)
    assert turns.by_key == {}


async def test_a_refused_send_stores_nothing_and_other_principals_go_on(make):
    turns = slots(per=1)
    engine = make(turns)
    hanging = await engine.send(ALICE, user_message("hang"), CALLER, return_immediately=True)
    await engine.accepted(hanging.run)
    with pytest.raises(OverloadedError):
        await engine.send(ALICE, user_message("echo"), CALLER)
    assert (await engine.store.list(ALICE, TaskQuery())).total_size == 1
    assert isinstance(await send(engine, BOB, "echo bob"), pb.Task)
    await engine.cancel(ALICE, hanging.run.task_id)
    assert turns.active == 0


async def test_cancel_before_the_first_step_and_shutdown_free_the_slots(make):
    turns = slots(total=5)
    engine = make(turns)
    turn = await engine.send(ALICE, user_message("hang"), CALLER, return_immediately=True)
    await engine.cancel(ALICE, turn.run.task_id)  # the agent coroutine never ran
    assert turns.active == 0
    for _ in range(3):
        await engine.send(BOB, user_message("hang"), CALLER, return_immediately=True)
    assert turns.active == 3
    await engine.shutdown()
    assert turns.active == 0 and turns.by_key == {}


async def test_a_pause_frees_the_slot_and_the_answer_takes_one(make):
    turns = slots(per=1)
    engine = make(turns)
    asked = await send(engine, ALICE, "ask name?")
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert turns.active == 0  # paused in ctx.ask(): waiting for alice, not at work
    blocker = await engine.send(ALICE, user_message("hang"), CALLER, return_immediately=True)
    with pytest.raises(OverloadedError):  # the answer needs a slot too
        await engine.send(ALICE, user_message("Ada", task_id=asked.id), CALLER)
    await engine.cancel(ALICE, blocker.run.task_id)
    done = await send(engine, ALICE, "Ada", task_id=asked.id)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    await until(lambda: turns.active == 0)


async def test_a_stalled_turn_fails_and_gives_its_slot_back(make):
    turns = slots(per=1)
    engine = make(turns, inactivity_timeout=0.1)
    task = await send(engine, ALICE, "sleep 60")
    assert task.status.state == pb.TASK_STATE_FAILED
    assert "turn_inactivity_timeout_seconds" in task.status.message.parts[0].text
    await until(lambda: turns.active == 0)
    assert (await send(engine, ALICE, "echo after")).status.state == pb.TASK_STATE_COMPLETED
