"""What the engine does for a task another process runs: cancel it there, hand a follow-up
to its paused turn there, and recover the tasks of processes that died.

`Peers` is the engine's `Elsewhere` (service.engine.elsewhere) for several processes.
The engine stays the protocol's single source of rules: a forwarded call runs the same
engine methods on the owning process (seen here as a `Local`, given at `start`), and
its A2A error comes back by reason. See service.engine.cluster for membership,
ownership and the fence.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from typing import Any

from gen import a2a_pb2 as pb
from service.agent import Caller
from service.engine.cluster import Cluster
from service.engine.elsewhere import Local
from service.engine.redis_bus import redis_outage
from service.engine.run import TaskRun, task_key
from service.engine.stream import EventStream
from service.engine.turn import Turn
from service.protocol.errors import BY_REASON, A2AError, UnavailableError
from service.protocol.states import TERMINAL, ends_stream
from service.protocol.timeutil import now_micros, status_micros
from service.store import Scope, snapshot_with_seq

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 10.0  # how long a forwarded call waits for the owning process
NO_ANSWER = (
    "The server process running this task did not answer; try again (if it died, its "
    "tasks are recovered within the configured lease)."
)


class Peers:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._engine: Local | None = None
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}

    @property
    def engine(self) -> Local:
        """This process's engine, once started."""
        if self._engine is None:
            raise RuntimeError("Peers used before start(engine)")
        return self._engine

    async def start(self, engine: Local) -> None:
        """Join the cluster; `engine` answers the calls the other processes forward here."""
        self._engine = engine
        await self.cluster.start(
            self.engine.live_keys,
            self.sweep,
            {"cancel": self._on_cancel, "resume": self._on_resume, "answer": self._on_answer},
        )

    # ---------------------------------------------------------------- ownership

    def claim_new(self, key: str) -> None:
        self.cluster.claim_new(key)

    def release(self, key: str) -> None:
        self.cluster.release(key)

    async def take(self, key: str) -> str | None:
        with redis_outage("cluster"):
            return await self.cluster.take(key)

    # ---------------------------------------------------------------- recovery

    async def sweep(self, at_start: bool = False) -> int:
        """Move the unsettled tasks of dead processes to FAILED; returns how many. Exactly
        one survivor takes each (compare-and-set on its owner key)."""
        cluster = self.cluster
        trusted = cluster.settled_in()
        recovered = 0
        now = now_micros()
        for scope, task in await self.engine.store.unsettled():
            key = task_key(scope, task.id)
            owner, alive = await cluster.recorded_owner(key)
            if alive:
                continue
            if owner is None:
                # Unrecorded: a new task whose owner is still on its way, or a Redis that
                # forgot every key (each live process re-asserts its own within a third of
                # a lease). Only after a whole lease of both.
                if not trusted or now - status_micros(task) < cluster.lease * 1e6:
                    continue
            elif not (trusted or at_start):
                continue
            if await cluster.take(key) is not None:
                continue  # another process took it (or is alive after all)
            found = await snapshot_with_seq(self.engine.store, scope, task.id)
            if found is not None and found[0].status.state in (
                pb.TASK_STATE_SUBMITTED,
                pb.TASK_STATE_WORKING,
            ):
                log.warning("task %s: its process is gone; recovering it", task.id)
                await self.engine.recover_task(scope, found[0])
                recovered += 1
            cluster.release(key)
        return recovered

    # ---------------------------------------------------------------- cancel

    async def cancel_elsewhere(self, scope: Scope, task_id: str) -> pb.Task | None:
        """Cancel a task on the live process that runs it and return the settled task;
        None when no other live process runs it (the caller cancels here)."""
        key = task_key(scope, task_id)
        with redis_outage("cluster"):
            owner = await self.cluster.live_owner(key)
        if owner is None:
            return None
        found = await snapshot_with_seq(self.engine.store, scope, task_id)
        if found is None or found[0].status.state in TERMINAL:
            return None  # the local path gives the usual answer
        sub = self.engine.bus.subscribe(key)
        try:
            await self._ask(owner, "cancel", scope, task_id, {})
            await asyncio.wait_for(self._until_terminal(scope, task_id, sub, found[1]), 10)
        except TimeoutError:
            raise UnavailableError(NO_ANSWER, retry_after=1.0) from None
        finally:
            sub.close()
        return await self.engine.get(scope, task_id)

    async def _until_terminal(self, scope: Scope, task_id: str, sub: Any, seen: int) -> None:
        async for stored in self.engine.live_events(scope, task_id, sub, seen):
            update = stored.event.status_update
            if stored.event.HasField("status_update") and update.status.state in TERMINAL:
                return

    async def _on_cancel(self, body: dict[str, Any]) -> None:
        scope = Scope(body["tenant"], body["owner"])
        try:
            await self.engine.cancel(scope, body["task_id"])
            await self._answer(body, None)
        except A2AError as exc:
            await self._answer(body, exc)

    # ---------------------------------------------------------------- follow-ups

    async def resume_elsewhere(
        self, owner: str, run: TaskRun, message: pb.Message, caller: Caller, stream: bool
    ) -> Turn:
        """Hand a follow-up to the turn paused on process `owner`; the returned turn follows
        that process's events (the caller's stream, and the outcome of a blocking call)."""
        scope, task_id, seen = run.scope, run.task_id, run.committed_seq
        bus = self.engine.bus
        watch = bus.subscribe(run.key)
        events = bus.subscribe(run.key) if stream else None
        try:
            await self._ask(
                owner,
                "resume",
                scope,
                task_id,
                {
                    "message": base64.b64encode(message.SerializeToString()).decode(),
                    "caller": {
                        "principal": caller.principal,
                        "tenant": caller.tenant,
                        "extensions": list(caller.extensions),
                        "metadata": caller.metadata,
                        "request_metadata": caller.request_metadata,
                    },
                },
            )
        except BaseException:
            watch.close()
            if events is not None:
                events.close()
            raise
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[pb.Message | None] = loop.create_future()
        waiter = loop.create_task(self._settles(scope, task_id, watch, seen, outcome))
        outcome.add_done_callback(lambda _: waiter.cancel())
        turn = Turn(run, outcome, remote=True)
        if events is not None:
            turn.events = EventStream(self.engine.follow_remote(scope, task_id, events, seen))
        return turn

    async def _settles(
        self,
        scope: Scope,
        task_id: str,
        sub: Any,
        seen: int,
        outcome: asyncio.Future[pb.Message | None],
    ) -> None:
        try:
            async for stored in self.engine.live_events(scope, task_id, sub, seen):
                if ends_stream(stored.event):
                    if not outcome.done():
                        reply = stored.event
                        outcome.set_result(reply.message if reply.HasField("message") else None)
                    return
        except BaseException as exc:
            if not outcome.done() and not isinstance(exc, asyncio.CancelledError):
                outcome.set_exception(exc)
            raise
        finally:
            sub.close()

    async def _on_resume(self, body: dict[str, Any]) -> None:
        scope = Scope(body["tenant"], body["owner"])
        message = pb.Message.FromString(base64.b64decode(body["message"]))
        c = body["caller"]
        caller = Caller(
            c["principal"],
            c["tenant"],
            tuple(c["extensions"]),
            dict(c["metadata"]),
            dict(c.get("request_metadata") or {}),
        )
        try:
            turn = await self.engine.send(scope, message, caller)
            turn.outcome.add_done_callback(_ignore)
            await self._answer(body, None)
        except A2AError as exc:
            await self._answer(body, exc)

    # ---------------------------------------------------------------- questions

    async def _ask(
        self, member: str, kind: str, scope: Scope, task_id: str, body: dict[str, Any]
    ) -> None:
        """Send `kind` to `member` and wait for its answer; its A2A error is raised here."""
        ask_id = uuid.uuid4().hex
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[ask_id] = answer
        try:
            with redis_outage("cluster"):
                await self.cluster.tell(
                    member,
                    kind,
                    {
                        **body,
                        "tenant": scope.tenant,
                        "owner": scope.owner,
                        "task_id": task_id,
                        "ask": ask_id,
                        "from": self.cluster.me,
                    },
                )
            try:
                found = await asyncio.wait_for(answer, ANSWER_TIMEOUT_S)
            except TimeoutError:
                raise UnavailableError(NO_ANSWER, retry_after=1.0) from None
        finally:
            self._answers.pop(ask_id, None)
        error = found.get("error")
        if error:
            cls = BY_REASON.get(error.get("reason", ""), UnavailableError)
            raise cls(str(error.get("message", "")) or None)

    async def _answer(self, body: dict[str, Any], error: A2AError | None) -> None:
        await self.cluster.tell(
            body["from"],
            "answer",
            {
                "ask": body["ask"],
                "error": None
                if error is None
                else {"reason": error.reason, "message": error.message},
            },
        )

    async def _on_answer(self, body: dict[str, Any]) -> None:
        answer = self._answers.get(body.get("ask", ""))
        if answer is not None and not answer.done():
            answer.set_result(body)


def _ignore(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: the forwarding process reports the outcome
