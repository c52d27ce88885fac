"""A turn paused for a permission decision and issue 14's limits, on a real server over
every binding: the pause gives the turn's max_concurrent_turns slot back and the answer
takes one again (refused with RESOURCE_EXHAUSTED when none is free, the task still
paused and unchanged, the same answer accepted once a slot is free); the stalled-turn
watchdog does not fail a turn that waits for the caller's decision."""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from tests import permission_agents
from tests.permission_util import BINDINGS, Client, Refused, answer, audit, text_message
from tests.push_util import eventually

AGENT = "tests.permission_agents:PermissionAgent"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_pause_frees_the_slot_and_the_answer_needs_one(start_service, binding):
    service = await start_service(
        http_port=0, store="memory:", agent=AGENT, max_concurrent_turns_per_principal=1
    )
    client = Client.of(service, binding)
    permission_agents.RELEASE = asyncio.Event()
    holding = None
    try:
        paused = await client.send(text_message("tool shell /srv"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
        other = await client.send(text_message("tool ls /tmp"))  # the pause left the slot free
        assert other.status.state == pb.TASK_STATE_INPUT_REQUIRED
        holding = asyncio.ensure_future(client.send(text_message("hold")))
        await eventually(lambda: service.engine.turns.active == 1, 10, "the hold turn at work")
        before = await client.get(paused.id)
        with pytest.raises(Refused) as refused:
            await client.send(answer(paused, "allow_once"))
        assert refused.value.reason == "RESOURCE_EXHAUSTED"
        assert await client.get(paused.id) == before  # still paused, nothing recorded
        permission_agents.RELEASE.set()
        assert (await holding).status.state == pb.TASK_STATE_COMPLETED
        done = await client.send(answer(paused, "allow_once"))  # the same answer, now
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert [r["decision"] for r in audit(done)] == ["allow_once"]
        await eventually(lambda: service.engine.turns.active == 0, 10, "every slot back")
    finally:
        permission_agents.RELEASE.set()
        if holding is not None:
            await asyncio.gather(holding, return_exceptions=True)
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_turn_waiting_for_a_decision_is_not_stalled(start_service, binding):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent=AGENT,
        turn_inactivity_timeout_seconds=0.2,
        max_turn_seconds=0.5,
    )
    client = Client.of(service, binding)
    try:
        paused = await client.send(text_message("tool shell /srv"))
        assert paused.status.state == pb.TASK_STATE_INPUT_REQUIRED
        await asyncio.sleep(1.0)  # well past both limits while it waits for the caller
        assert (await client.get(paused.id)).status.state == pb.TASK_STATE_INPUT_REQUIRED
        done = await client.send(answer(paused, "allow_once"))
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert [p.text for a in done.artifacts for p in a.parts] == ["ran shell on /srv"]
    finally:
        await client.close()
