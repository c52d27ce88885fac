"""Chunks appended to a live task's artifacts are kept encoded by its run
(service.engine.chunks) and composed into the stored snapshot: on every store, what is
stored, what GetTask shows of the live task, a subscription's snapshot, the finished task
and the task read back after the run is gone all hold every chunk, in order, also across
a read in the middle, a replaced artifact and a second artifact."""

from __future__ import annotations

import asyncio

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.store import Scope
from tests.conftest import user_message
from tests.integration.test_store_contract import (  # noqa: F401 (fixtures)
    postgres_database,
    store,
)

ALICE = Scope("", "alice")
WAIT = 10


class Script:
    """Emits what the test releases, one group at a time."""

    def __init__(self) -> None:
        self.go = asyncio.Queue[str]()
        self.done = asyncio.Queue[None]()

    async def run(self, ctx: TurnContext) -> None:
        while (step := await self.go.get()) != "end":
            kind, art, text = step.split(" ", 2)
            await ctx.artifact(text, artifact_id=art, name=art, append=kind == "append")
            self.done.put_nowait(None)
        await ctx.complete("done")

    async def emit(self, run, *steps: str) -> None:
        for step in steps:
            self.go.put_nowait(step)
            await asyncio.wait_for(self.done.get(), WAIT)
        await asyncio.wait_for(run.flushed(), WAIT)


def texts(task: pb.Task) -> dict[str, list[str]]:
    return {a.artifact_id: [p.text for p in a.parts] for a in task.artifacts}


async def test_appended_chunks_are_in_every_view_of_the_task(store):  # noqa: F811
    agent = Script()
    engine = Engine(store, agent, InProcessBus())
    try:
        turn = await engine.send(ALICE, user_message("go"), Caller(), stream=True)
        run, task_id = turn.run, turn.run.task_id
        await agent.emit(run, "new a a0", "append a a1", "append a a2")
        stored = await store.get(ALICE, task_id)
        assert stored is not None and texts(stored) == {"a": ["a0", "a1", "a2"]}

        live = await engine.get(ALICE, task_id)  # the live task: the chunks merged in
        assert texts(live) == {"a": ["a0", "a1", "a2"]}
        await agent.emit(run, "append a a3", "new b b0", "append b b1", "append a a4")
        expected = {"a": ["a0", "a1", "a2", "a3", "a4"], "b": ["b0", "b1"]}
        stored = await store.get(ALICE, task_id)
        assert stored is not None and texts(stored) == expected

        subscription = await engine.subscribe(ALICE, task_id)
        first = await asyncio.wait_for(anext(subscription), WAIT)
        assert texts(first.task) == expected
        await subscription.aclose()

        await agent.emit(run, "replace a A", "append a A1", "append b b2")
        expected = {"a": ["A", "A1"], "b": ["b0", "b1", "b2"]}
        stored = await store.get(ALICE, task_id)
        assert stored is not None and texts(stored) == expected

        agent.go.put_nowait("end")
        assert turn.events is not None
        async for _ in turn.events:
            pass
        done = await engine.get(ALICE, task_id)
        assert done.status.state == pb.TASK_STATE_COMPLETED and texts(done) == expected
        await asyncio.wait_for(run.finish(), WAIT)
    finally:
        await engine.shutdown()
    stored = await store.get(ALICE, task_id)
    assert stored is not None and texts(stored) == expected
    assert stored.status.state == pb.TASK_STATE_COMPLETED
