"""Turn slots across the permission side-band, in-process on the real SQLite store: an
answer that starts a new turn (the paused turn's coroutine is gone, as after a restart)
takes a slot and gives it back however that turn ends, including when the decision
cannot be recorded (fail closed)."""

from __future__ import annotations

import asyncio
import sqlite3

from gen import a2a_pb2 as pb
from service.agent import NOT_RECORDED_MESSAGE, Caller
from service.engine.bus import InProcessBus
from service.engine.limits import Slots
from service.engine.registry import Engine
from service.store import Scope
from service.store.sqlite import SqliteTaskStore
from tests.permission_agents import PermissionAgent
from tests.permission_util import answer, text_message

ALICE = Scope("", "alice")
CALLER = Caller(principal="alice")
WAIT = 5


def slots() -> Slots:
    return Slots(1, 1, ("max_concurrent_turns", "max_concurrent_turns_per_principal"), "turns")


async def engine_on(path: str, turns: Slots) -> Engine:
    store = SqliteTaskStore(path)
    await store.open()
    return Engine(store, PermissionAgent(), InProcessBus(), turns=turns)


async def send(engine: Engine, message: pb.Message) -> pb.Task:
    turn = await engine.send(ALICE, message, CALLER)
    result = await asyncio.wait_for(engine.wait(turn), WAIT)
    assert isinstance(result, pb.Task)
    return result


async def paused_then_restarted(tmp_path) -> tuple[Engine, Slots, pb.Task]:
    """A task paused for permission by one engine, and a second engine on the same store
    (the first one's turn coroutine is gone, as after kill -9)."""
    db = str(tmp_path / "tasks.db")
    first = await engine_on(db, slots())
    asked = await send(first, text_message("tool shell /srv"))
    assert asked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    await first.shutdown()
    await first.store.close()
    turns = slots()
    return await engine_on(db, turns), turns, asked


async def test_an_unrecorded_answer_after_a_restart_gives_its_slot_back(tmp_path):
    engine, turns, asked = await paused_then_restarted(tmp_path)
    with sqlite3.connect(tmp_path / "tasks.db") as conn:  # the ack's commit is refused
        conn.execute(
            "CREATE TRIGGER refuse_ack BEFORE INSERT ON events "
            "WHEN instr(NEW.payload, CAST('permission_ack' AS BLOB)) > 0 "
            "BEGIN SELECT RAISE(ABORT, 'audit refused by the test'); END"
        )
    try:
        failed = await send(engine, answer(asked, "allow_once"))
        assert failed.status.state == pb.TASK_STATE_FAILED
        assert failed.status.message.parts[0].text == NOT_RECORDED_MESSAGE
        assert turns.active == 0 and turns.by_key == {}
        # The slot is really free: the same principal can start work again.
        again = await send(engine, text_message("tool shell /tmp"))
        assert again.status.state == pb.TASK_STATE_INPUT_REQUIRED
    finally:
        await engine.shutdown()
        await engine.store.close()


async def test_an_allowed_answer_after_a_restart_runs_and_gives_its_slot_back(tmp_path):
    engine, turns, asked = await paused_then_restarted(tmp_path)
    try:
        done = await send(engine, answer(asked, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert turns.active == 0 and turns.by_key == {}
    finally:
        await engine.shutdown()
        await engine.store.close()


async def test_an_answer_canceled_while_its_record_commits_gives_its_slot_back(tmp_path):
    engine, turns, asked = await paused_then_restarted(tmp_path)
    try:
        sending = asyncio.ensure_future(engine.send(ALICE, answer(asked, "allow_once"), CALLER))
        for _ in range(10_000):  # until the answer holds its slot; its record is committing
            if turns.active:
                break
            await asyncio.sleep(0)
        assert turns.active == 1
        canceled = await engine.cancel(ALICE, asked.id)
        assert canceled.status.state == pb.TASK_STATE_CANCELED
        turn = await asyncio.wait_for(sending, WAIT)
        assert (await asyncio.wait_for(engine.wait(turn), WAIT)).status.state == (
            pb.TASK_STATE_CANCELED
        )
        assert turns.active == 0 and turns.by_key == {}
    finally:
        await engine.shutdown()
        await engine.store.close()
