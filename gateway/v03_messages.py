"""A2A v0.3 JSON straight into and out of the 1.0 protobuf messages: the hot calls' fast path.

v03_shapes.py states each translation rule on dicts (v0.3 JSON ⇄ 1.0 ProtoJSON), and a
request then goes through `transcode.build_request` (a walk for unknown members, then
`json_format.ParseDict`), an answer through `json_format.MessageToDict` before it is
reshaped. Here the same rules read and write the messages' attributes directly, which
costs a fraction of those generic walks:

- `send_request` builds `SendMessageRequest` from `message/send` params when every value
  is of the plain kind a client sends (strings, text and data parts, objects for
  metadata, ...). It answers None for anything else (a file part, a push config, a value
  of the wrong type), and the caller takes the dict path, so errors and odd inputs keep
  their exact messages and results.
- `send_result`, `task` render an answer with the same members, in the same order, as
  `v03_shapes.send_result_out(to_json_dict(...))`; tests/unit/test_v03_messages.py holds
  the two paths equal.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.v03_shapes import DATA_PART_COMPAT, FINAL_STATES, ROLE_IN, ROLE_OUT, STATE_OUT, Json
from gen import a2a_pb2 as pb

_ROLE_IN = {name: pb.Role.Value(value) for name, value in ROLE_IN.items()}
_ROLE_OUT = {pb.Role.Value(value): name for value, name in ROLE_OUT.items()}
_STATE_OUT = {pb.TaskState.Value(name): value for name, value in STATE_OUT.items()}
_FINAL = frozenset(pb.TaskState.Value(name) for name in FINAL_STATES)
_INT32 = range(-(2**31), 2**31)
_MAX_DEPTH = 100  # json_format's default, counted from the request message (depth 1)
# Members of a v0.3 message/part/configuration this path reads; any other is ignored, as
# the dict path ignores it (v03_shapes copies only what it knows).
_MESSAGE_STRINGS = (("messageId", "message_id"), ("contextId", "context_id"), ("taskId", "task_id"))


# ------------------------------------------------------------------------------ v0.3 → 1.0


def _parse(value: dict[str, Any], target: Message, depth: int) -> None:
    """`value` into the sub-message `target` (set, as the whole-request parse sets it),
    which sits `depth` messages below the request: the same nesting limit holds."""
    target.SetInParent()
    json_format.ParseDict(value, target, max_recursion_depth=_MAX_DEPTH - depth)


def _strings(value: Any) -> bool:
    return type(value) is list and all(type(s) is str for s in value)


def _part(part: Any, target: pb.Part) -> bool:
    """A text or data part into `target`; False for any other (the dict path's to read)."""
    if type(part) is not dict:
        return False
    kind = part.get("kind")
    if kind is None:
        kind = next((k for k in ("text", "file", "data") if k in part), None)
    metadata = part.get("metadata")
    if kind == "text":
        text = part.get("text")
        if type(text) is not str:
            return False
        target.text = text
    elif kind == "data":
        data = part.get("data")
        if type(data) is not dict or (type(metadata) is dict and metadata.get(DATA_PART_COMPAT)):
            return False  # a wrapped non-object value: the dict path unwraps it
        _parse(data, target.data, 3)
    else:
        return False
    if metadata:
        if type(metadata) is not dict:
            return False
        _parse(metadata, target.metadata, 3)
    return True


def _message(message: Any, target: pb.Message) -> bool:
    if type(message) is not dict or message.get("kind", "message") != "message":
        return False
    name = message.get("role")
    role = _ROLE_IN.get(name) if isinstance(name, str) else None
    parts = message.get("parts")
    if role is None or type(parts) is not list:
        return False
    target.SetInParent()
    target.role = role
    for part in parts:
        if not _part(part, target.parts.add()):
            return False
    for member, field in _MESSAGE_STRINGS:
        value = message.get(member)
        if value is not None:
            if type(value) is not str:
                return False
            setattr(target, field, value)
    for member, repeated in (
        ("referenceTaskIds", target.reference_task_ids),
        ("extensions", target.extensions),
    ):
        value = message.get(member)
        if value is not None:
            if not _strings(value):
                return False
            repeated.extend(value)
    metadata = message.get("metadata")
    if metadata is not None:
        if type(metadata) is not dict:
            return False
        _parse(metadata, target.metadata, 2)
    return True


def _configuration(config: Any, target: pb.SendMessageRequest) -> bool:
    if type(config) is not dict or config.get("pushNotificationConfig") is not None:
        return False
    modes = config.get("acceptedOutputModes")
    length = config.get("historyLength")
    blocking = config.get("blocking")
    if (
        (modes is not None and not _strings(modes))
        or (length and (type(length) is not int or length not in _INT32))
        or (blocking is not None and type(blocking) is not bool)
    ):
        return False
    if modes is not None or length or blocking is False:  # else no configuration is set
        converted = target.configuration
        converted.SetInParent()
        if modes:
            converted.accepted_output_modes.extend(modes)
        if length:  # 0 (and null) is unlimited in v0.3: left out, 1.0's "all"
            converted.history_length = length
        if blocking is False:
            converted.return_immediately = True
    return True


def send_request(params: Mapping[str, Any]) -> pb.SendMessageRequest | None:
    """MessageSendParams → SendMessageRequest, as `build_request(send_in(params))` builds
    it; None when the params hold anything but the plain case (the dict path answers)."""
    request = pb.SendMessageRequest()
    try:
        if not _message(params.get("message"), request.message):
            return None
        metadata = params.get("metadata")
        if metadata is not None:
            if type(metadata) is not dict:
                return None
            _parse(metadata, request.metadata, 1)
        config = params.get("configuration")
        if config is not None and not _configuration(config, request):
            return None
    except (json_format.ParseError, TypeError, ValueError, AttributeError):
        return None  # the dict path raises its InvalidParams
    return request


# ------------------------------------------------------------------------------ 1.0 → v0.3


def _struct(message: Message) -> Any:
    return json_format.MessageToDict(message)


def _part_out(part: pb.Part) -> Json:
    content = part.WhichOneof("content")
    metadata = _struct(part.metadata) if part.HasField("metadata") else None
    out: Json
    if content == "text":
        out = {"kind": "text", "text": part.text}
    elif content == "raw" or content == "url":
        file: Json = (
            {"bytes": base64.b64encode(part.raw).decode("utf-8")}
            if content == "raw"
            else {"uri": part.url}
        )
        if part.media_type:
            file["mimeType"] = part.media_type
        if part.filename:
            file["name"] = part.filename
        out = {"kind": "file", "file": file}
    elif content == "data":
        data = _struct(part.data)
        if not isinstance(data, dict):  # v0.3 data is an object
            data = {"value": data}
            metadata = {**(metadata or {}), DATA_PART_COMPAT: True}
        out = {"kind": "data", "data": data}
    else:  # a part with no content: an empty text
        out = {"kind": "text", "text": ""}
    if metadata:
        out["metadata"] = metadata
    return out


def message(message: pb.Message) -> Json:
    out: Json = {
        "kind": "message",
        "messageId": message.message_id,
        "role": _ROLE_OUT.get(message.role, "agent"),
        "parts": [_part_out(p) for p in message.parts],
    }
    if message.context_id:
        out["contextId"] = message.context_id
    if message.task_id:
        out["taskId"] = message.task_id
    if message.reference_task_ids:
        out["referenceTaskIds"] = list(message.reference_task_ids)
    if message.HasField("metadata"):
        out["metadata"] = _struct(message.metadata)
    if message.extensions:
        out["extensions"] = list(message.extensions)
    return out


def _status(status: pb.TaskStatus) -> Json:
    out: Json = {"state": _STATE_OUT.get(status.state, "unknown")}
    if status.HasField("message"):
        out["message"] = message(status.message)
    if status.HasField("timestamp"):
        out["timestamp"] = status.timestamp.ToJsonString()
    return out


def _artifact(artifact: pb.Artifact) -> Json:
    out: Json = {
        "artifactId": artifact.artifact_id,
        "parts": [_part_out(p) for p in artifact.parts],
    }
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    if artifact.HasField("metadata"):
        out["metadata"] = _struct(artifact.metadata)
    if artifact.extensions:
        out["extensions"] = list(artifact.extensions)
    return out


def task(task: pb.Task) -> Json:
    out: Json = {
        "kind": "task",
        "id": task.id,
        "contextId": task.context_id,
        "status": _status(task.status),
    }
    if task.artifacts:
        out["artifacts"] = [_artifact(a) for a in task.artifacts]
    if task.history:
        out["history"] = [message(m) for m in task.history]
    if task.HasField("metadata"):
        out["metadata"] = _struct(task.metadata)
    return out


def _status_update(event: pb.TaskStatusUpdateEvent) -> Json:
    out: Json = {
        "kind": "status-update",
        "taskId": event.task_id,
        "contextId": event.context_id,
        "status": _status(event.status),
        "final": event.status.state in _FINAL,
    }
    if event.HasField("metadata"):
        out["metadata"] = _struct(event.metadata)
    return out


def _artifact_update(event: pb.TaskArtifactUpdateEvent) -> Json:
    out: Json = {
        "kind": "artifact-update",
        "taskId": event.task_id,
        "contextId": event.context_id,
        "artifact": _artifact(event.artifact),
        "append": event.append,
        "lastChunk": event.last_chunk,
    }
    if event.HasField("metadata"):
        out["metadata"] = _struct(event.metadata)
    return out


def send_result(response: Message) -> Json:
    """SendMessageResponse / StreamResponse (its one payload) → a v0.3 result."""
    assert isinstance(response, (pb.SendMessageResponse, pb.StreamResponse))
    payload = response.WhichOneof("payload")
    if payload == "task":
        return task(response.task)
    if payload == "message":
        return message(response.message)
    if isinstance(response, pb.StreamResponse):
        if payload == "status_update":
            return _status_update(response.status_update)
        if payload == "artifact_update":
            return _artifact_update(response.artifact_update)
    raise ValueError("a response with no payload")  # the API always sets one


def task_result(response: Message) -> Json:
    """A Task answer (GetTask, CancelTask) → the v0.3 task."""
    assert isinstance(response, pb.Task)
    return task(response)
