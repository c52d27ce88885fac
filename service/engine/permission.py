"""The engine's half of the permission side-band: a follow-up to a task paused for a
permission decision is matched against the request stored in the task
(service.permission.envelope), then acknowledged and audited in one commit before the
agent may act on it. A decision whose commit fails is not acted on: the turn fails."""

from __future__ import annotations

import asyncio

from gen import a2a_pb2 as pb
from service.agent import NAMESPACE, NOT_RECORDED_MESSAGE, Caller, agent_message
from service.engine.run import TaskRun
from service.permission.envelope import (
    Answer,
    ack_part,
    audit_record,
    check_answer,
    received,
    with_decision,
    without_request,
)


def answer_for(run: TaskRun, message: pb.Message) -> Answer | None:
    """The answer `message` gives to the task's pending permission request; None for an
    ordinary follow-up; InvalidParams (nothing changed) for a wrong or missing answer."""
    assert run.task is not None
    return check_answer(run.task, run.service_metadata(), message)


def record(run: TaskRun, answer: Answer, caller: Caller) -> None:
    """The decision in the task's snapshot: one more audit record, nothing pending (stored
    with the acknowledgement's commit)."""
    entry = audit_record(
        answer.envelope,
        answer.decision,
        caller=caller.principal,
        tenant=caller.tenant,
        policy="ask",
    )
    run.set_service_metadata(with_decision(run.service_metadata(), answer.envelope, entry))


def acknowledge(run: TaskRun, answer: Answer) -> int:
    """A WORKING update carrying a permission_ack part and `a2a_service.inputReceived`;
    returns its sequence number, the commit to wait for before acting."""
    ack = agent_message([ack_part(answer)], run.task_id, run.context_id)
    run.status(pb.TASK_STATE_WORKING, ack, {NAMESPACE: received(answer)})
    return run.seq


async def not_recorded(
    run: TaskRun, answer: Answer, previous: pb.Task, message: pb.Message
) -> asyncio.Future[pb.Message | None]:
    """Fail closed: the acknowledgement did not commit. The task goes back to what the store
    holds (plus the caller's message), the agent is stopped without learning the decision,
    and the task fails saying so; returns the future of that final status."""
    assert run.task is not None
    outcome = run.start_turn()  # the failed commit resolved the previous one with an error
    run.task.CopyFrom(previous)
    run.task.history.append(message)
    run.set_service_metadata(without_request(run.service_metadata(), answer.envelope))
    run.force_state(pb.TASK_STATE_FAILED, NOT_RECORDED_MESSAGE)
    if run.agent_alive:
        await run.stop_agent(cancel=False)  # its turn is already settled; _drive finishes it
    else:
        await run.finish()
    return outcome
