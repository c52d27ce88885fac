"""Startup recovery: a task whose turn was running when its process died is FAILED with a
clear message. Which tasks that is depends on who else runs tasks (`Elsewhere.sweep`):
one process recovers every unsettled task at startup; several recover only those of a
process that is gone (service.engine.peers).
"""

from __future__ import annotations

from gen import a2a_pb2 as pb
from service.engine.elsewhere import Elsewhere
from service.engine.runs import Runs
from service.store import Scope

RESTART_MESSAGE = "The server stopped while this task was running; the turn was lost. Send a new message to retry."


class Recovery:
    def __init__(self, runs: Runs, elsewhere: Elsewhere) -> None:
        self.runs = runs
        self.elsewhere = elsewhere

    async def recover(self) -> int:
        """Tasks that were running when the process died are FAILED; returns how many."""
        return await self.elsewhere.sweep(at_start=True)

    async def recover_task(self, scope: Scope, task: pb.Task) -> None:
        """Move one task nobody runs any more to FAILED (the restart message)."""
        run = self.runs.new(scope, task.id, task.context_id, task)
        run.loaded(task, await self.runs.store.last_seq(scope, task.id))
        run.force_state(pb.TASK_STATE_FAILED, RESTART_MESSAGE)
        await run.finish()
