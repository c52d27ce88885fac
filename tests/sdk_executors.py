"""a2a-sdk 1.3.0 AgentExecutors written the way its docs and samples write them, run both
behind our engine (`agent = "a2a_sdk:tests.sdk_executors:<Name>"`) and behind a2a-sdk's own
server, to compare what a client sees.

  HelloWorldExecutor   enqueues one Message (the SDK's helloworld sample)
  StreamingExecutor    Task, start_work, an artifact in three chunks, complete (TaskUpdater)
  AskExecutor          asks for input and returns; the follow-up's execute() completes
  OutOfBandExecutor    AUTH_REQUIRED, stays running until released out of band, then completes
  RaisingExecutor      starts work, then raises (with a path and a secret in the message)
  SlowStreamExecutor   streams a chunk, then waits until cancelled; cancel() emits CANCELED
  NoCancelExecutor     the same, but its cancel() raises UnsupportedOperationError
  ContextExecutor      an artifact describing what the RequestContext carried
"""

from __future__ import annotations

import asyncio
import json

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as sdk
from a2a.utils.errors import UnsupportedOperationError

# Out-of-band signals by task id: a test sets one to let OutOfBandExecutor continue.
RELEASE: dict[str, asyncio.Event] = {}
# Task ids whose executor's cancel() was called, in order.
CANCELLED: list[str] = []
SECRET = "sk-live-DO-NOT-LEAK"


def release(task_id: str) -> asyncio.Event:
    return RELEASE.setdefault(task_id, asyncio.Event())


async def _task_of(context: RequestContext, event_queue: EventQueue) -> sdk.Task:
    """The samples' opening: the current task, or a new one enqueued from the message."""
    task = context.current_task
    if task is None:
        assert context.message is not None
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
    return task


class HelloWorldExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_text_message("Hello World"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise UnsupportedOperationError("cancel not supported")


class StreamingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work(updater.new_agent_message([new_text_part("thinking")]))
        words = (context.get_user_input().split() + ["."] * 3)[:3]
        for i, word in enumerate(words):
            await updater.add_artifact(
                [new_text_part(word)],
                artifact_id="answer",
                name="answer",
                append=i > 0,
                last_chunk=i == 2,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class AskExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        first = context.current_task is None
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if first:
            await updater.requires_input(
                updater.new_agent_message([new_text_part("What is your name?")])
            )
            return
        await updater.add_artifact(
            [new_text_part(f"Hello, {context.get_user_input()}")], name="greeting"
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class OutOfBandExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await updater.requires_auth(
            updater.new_agent_message([new_text_part("Sign in at https://example.com")])
        )
        await release(task.id).wait()  # the out-of-band sign-in
        await updater.start_work(updater.new_agent_message([new_text_part("signed in")]))
        await updater.add_artifact([new_text_part("secret data")], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class RaisingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        raise RuntimeError(f"cannot read /home/agent/.config/creds: token {SECRET}")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise UnsupportedOperationError("cancel not supported")


class SlowStreamExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        i = 0
        while True:
            await updater.add_artifact(
                [new_text_part(f"chunk {i}")], artifact_id="stream", append=i > 0
            )
            i += 1
            await asyncio.sleep(30)  # a slow producer: the test cancels it meanwhile

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        CANCELLED.append(context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(updater.new_agent_message([new_text_part("stopped on request")]))


class NoCancelExecutor(SlowStreamExecutor):
    """The samples' `cancel()` that refuses: raises UnsupportedOperationError."""

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        CANCELLED.append(context.task_id or "")
        raise UnsupportedOperationError("cancel not supported")


class ContextExecutor(AgentExecutor):
    """Answers with what it was given: for the RequestContext mapping."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = await _task_of(context, event_queue)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        call = context.call_context
        seen = {
            "task_id": context.task_id,
            "context_id": context.context_id,
            "message_task_id": context.message.task_id if context.message else None,
            "input": context.get_user_input(),
            "current_task": context.current_task.id if context.current_task else None,
            "related": len(context.related_tasks),
            "user": call.user.user_name,
            "authenticated": call.user.is_authenticated,
            "tenant": context.tenant,
            "extensions": sorted(context.requested_extensions),
            "metadata": context.metadata,
            "headers": sorted(call.state.get("headers", {})),
        }
        await updater.add_artifact([new_text_part(json.dumps(seen))], name="context")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()
