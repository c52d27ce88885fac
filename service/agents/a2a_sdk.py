"""Run an a2a-sdk `AgentExecutor` unchanged behind this engine.

`agent = "a2a_sdk:package.module:attr"` names an executor instance, class or zero-argument
factory. Each turn calls `execute(RequestContext, EventQueue)`; every event the executor
enqueues becomes one of the engine's emissions through the turn's `TurnContext`, so it is
numbered, stored, published, pushed, limited and traced like any agent's:

- `Message`: a direct reply (`ctx.reply`); on an existing task it completes the task;
- `Task`: creates the task if it does not exist yet (its state and artifacts applied); a
  Task for an existing one is ignored, as a2a-sdk's server ignores a replacement;
- `TaskStatusUpdateEvent`: the state with its message and metadata (SUBMITTED only makes
  sure the task exists: a task is never moved back to SUBMITTED);
- `TaskArtifactUpdateEvent`: the artifact with `append` / `last_chunk` and its metadata.

CancelTask reaches the turn as `CancelledError`: as a2a-sdk's server does, the executor's
`cancel()` is awaited first (with the queue still open, so its CANCELED status is the
task's), then the running `execute()` is cancelled; the engine cancels the task if
`cancel()` did not. A stop by the server (shutdown, a stalled turn) cancels `execute()`
without calling `cancel()`. An executor that raises fails the task with a sanitized
message (the engine's, with a reference to the log).

Imported only when an `a2a_sdk:` agent is chosen: a2a-sdk stays an optional package.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import Any

from a2a.auth.user import User
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.agent import Agent, Caller, TurnContext, import_object
from service.protocol.errors import InvalidAgentResponseError

log = logging.getLogger("service.agents.a2a_sdk")

# How long a canceled turn waits for the executor's `cancel()`, then for its cancelled
# `execute()` to end, before the engine settles the task regardless.
CANCEL_GRACE_SECONDS = 5.0


def load_executor(spec: str) -> Agent:
    """`package.module:attr` (an executor, its class or a factory) behind the adapter."""
    target = import_object(spec, "a2a_sdk agent")
    executor = target
    if isinstance(target, type) or (callable(target) and not _is_executor(target)):
        executor = target()
    if not _is_executor(executor):
        raise ValueError(
            f"a2a_sdk agent {spec!r}: not an AgentExecutor (async execute(context, "
            "event_queue) and async cancel(context, event_queue))"
        )
    return SdkExecutorAgent(executor)


def _is_executor(obj: object) -> bool:
    return isinstance(obj, AgentExecutor) or all(
        inspect.iscoroutinefunction(getattr(obj, name, None)) for name in ("execute", "cancel")
    )


class CallerUser(User):
    """The turn's caller as a2a-sdk's `User`: the authenticated principal ('' anonymous)."""

    def __init__(self, principal: str) -> None:
        self.principal = principal

    @property
    def is_authenticated(self) -> bool:
        return bool(self.principal)

    @property
    def user_name(self) -> str:
        return self.principal


def call_context_of(caller: Caller) -> ServerCallContext:
    """a2a-sdk's call context for a turn: the user, tenant, requested extensions, and in
    `state["headers"]` the call's metadata (HTTP headers or gRPC metadata, credentials
    removed) as a2a-sdk's HTTP server puts its request headers there."""
    return ServerCallContext(
        user=CallerUser(caller.principal),
        tenant=caller.tenant,
        requested_extensions=set(caller.extensions),
        state={"headers": dict(caller.metadata)},
    )


def request_context_of(ctx: TurnContext) -> RequestContext:
    """The executor's RequestContext of a turn: a copy of the message, the task as it was
    before this turn (None for a new task), the ids, the caller, the request's metadata."""
    message = pb.Message()
    message.CopyFrom(ctx.message)
    request = pb.SendMessageRequest(message=message)
    if ctx.caller.request_metadata:
        request.metadata.update(ctx.caller.request_metadata)
    return RequestContext(
        call_context=call_context_of(ctx.caller),
        request=request,
        task_id=ctx.task_id,
        context_id=ctx.context_id,
        task=ctx.task,
    )


def _metadata(
    event: pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent,
) -> dict[str, Any] | None:
    return json_format.MessageToDict(event.metadata) if event.HasField("metadata") else None


class TurnQueue(EventQueue):
    """The EventQueue an executor is given: each event goes to the turn's context at once
    (the engine orders, stores and publishes it). Closed once the turn is over: later
    events are dropped with a warning, as a2a-sdk drops events on a closed queue."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx
        self.closed = False
        self.has_task = ctx.task is not None

    async def enqueue_event(self, event: Event) -> None:
        if self.closed:
            log.warning(
                "task %s: the executor enqueued %s after its turn ended; dropped",
                self.ctx.task_id,
                type(event).__name__,
            )
            return
        await self.apply(event)

    async def close(self, immediate: bool = False) -> None:
        """Accepted for executors written for older a2a-sdk versions; the turn ends when
        `execute()` returns."""

    def is_closed(self) -> bool:
        return self.closed

    async def apply(self, event: Event) -> None:
        ctx = self.ctx
        if isinstance(event, pb.Message):
            await ctx.reply(event)
        elif isinstance(event, pb.Task):
            self._check_ids(event.id, event.context_id, "Task")
            if self.has_task:
                return  # a2a-sdk's server ignores a Task for an existing task too
            await self._new_task(event)
        elif isinstance(event, pb.TaskStatusUpdateEvent):
            self._check_ids(event.task_id, event.context_id, "TaskStatusUpdateEvent")
            status = event.status
            message = status.message if status.HasField("message") else None
            if status.state == pb.TASK_STATE_SUBMITTED:
                await ctx.create_task()
            else:
                await ctx.set_state(status.state, message, metadata=_metadata(event))
            self.has_task = True
        elif isinstance(event, pb.TaskArtifactUpdateEvent):
            self._check_ids(event.task_id, event.context_id, "TaskArtifactUpdateEvent")
            await ctx.artifact(
                event.artifact,
                append=event.append,
                last_chunk=event.last_chunk,
                metadata=_metadata(event),
            )
            self.has_task = True
        else:
            raise InvalidAgentResponseError(
                f"The agent enqueued a {type(event).__name__}, which is not an A2A event."
            )

    async def _new_task(self, task: pb.Task) -> None:
        """The executor's first Task: created (the engine's snapshot, with the caller's
        message), then its state and artifacts applied as events."""
        ctx = self.ctx
        await ctx.create_task()
        self.has_task = True
        state = task.status.state
        if state not in (pb.TASK_STATE_UNSPECIFIED, pb.TASK_STATE_SUBMITTED):
            message = task.status.message if task.status.HasField("message") else None
            await ctx.set_state(state, message)
        for artifact in task.artifacts:
            await ctx.artifact(artifact)

    def _check_ids(self, task_id: str, context_id: str, kind: str) -> None:
        """An event names this turn's task and context (or leaves them empty)."""
        if task_id and task_id != self.ctx.task_id:
            raise InvalidAgentResponseError(
                f"The agent's {kind} names task {task_id}, not this task ({self.ctx.task_id})."
            )
        if context_id and context_id != self.ctx.context_id:
            raise InvalidAgentResponseError(
                f"The agent's {kind} names context {context_id}, not this task's "
                f"({self.ctx.context_id})."
            )


class SdkExecutorAgent:
    """An `Agent` that runs an a2a-sdk AgentExecutor: one `execute()` per turn."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor

    async def run(self, ctx: TurnContext) -> None:
        request = request_context_of(ctx)
        queue = TurnQueue(ctx)
        # Its own task, so a cancel can reach `cancel()` before `execute()` is cancelled.
        execute = asyncio.get_running_loop().create_task(self.executor.execute(request, queue))
        try:
            await asyncio.shield(execute)
        except asyncio.CancelledError:
            if ctx.cancel_requested and not execute.done():
                await self._cancel(request, queue)
            await _stop(execute)
            raise
        finally:
            queue.closed = True

    async def _cancel(self, request: RequestContext, queue: TurnQueue) -> None:
        """The executor's `cancel()`, bounded; what it raises is logged (the engine still
        cancels the task)."""
        context = RequestContext(
            call_context=request.call_context,
            task_id=request.task_id,
            context_id=request.context_id,
            task=request.current_task,
        )
        try:
            await asyncio.wait_for(self.executor.cancel(context, queue), CANCEL_GRACE_SECONDS)
        except Exception:
            log.exception("task %s: the executor's cancel() failed", request.task_id)


async def _stop(execute: asyncio.Task[None]) -> None:
    """Cancel a running `execute()` and give it a moment to end."""
    if execute.done():
        with contextlib.suppress(BaseException):
            execute.result()
        return
    execute.cancel()
    await asyncio.wait([execute], timeout=CANCEL_GRACE_SECONDS)
    if execute.done() and not execute.cancelled():
        with contextlib.suppress(BaseException):
            execute.exception()
