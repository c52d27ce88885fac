"""What a call answered, as span attributes: the task's id, context and state."""

from __future__ import annotations

from typing import Any

from gen import a2a_pb2 as pb
from service.protocol.states import state_name as _state
from service.telemetry.hub import Call


def describe(rec: Call, message: Any) -> None:
    """Note the task a response (SendMessageResponse, Task, StreamResponse) is about; a
    later one (the stream's last event) overwrites the state."""
    kind = type(message)
    if kind is pb.SendMessageResponse:
        if message.WhichOneof("payload") == "task":
            task = message.task
            rec.task(task.id, task.context_id, _state(task.status.state))
        else:
            reply = message.message
            rec.task(reply.task_id, reply.context_id)
    elif kind is pb.Task:
        rec.task(message.id, message.context_id, _state(message.status.state))
    elif kind is pb.StreamResponse:
        which = message.WhichOneof("payload")
        if which == "task":
            describe(rec, message.task)
        elif which == "status_update":
            update = message.status_update
            rec.task(update.task_id, update.context_id, _state(update.status.state))
        elif which == "message":
            rec.task(message.message.task_id, message.message.context_id)
