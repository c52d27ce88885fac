"""A2A v0.3 JSON shapes ⇄ the 1.0 ProtoJSON documents the API speaks, both ways.

The v0.3 layer translates at the edge: a v0.3 request's `params` become the 1.0 request
message's ProtoJSON (then parsed like any 1.0 request, transcode.build_request), and a 1.0
answer's ProtoJSON becomes the v0.3 result. Only dicts change here, so the cost is a walk
over the document; nothing knows JSON-RPC or HTTP. The facts come from the v0.3
definitions (the v0.3 JSON schema and `a2a_v0_3.proto`):

- objects carry a `kind`: `task`, `message`, `status-update`, `artifact-update`;
- parts are `{"kind": "text", "text"}`, `{"kind": "file", "file": {"bytes" | "uri",
  "mimeType", "name"}}`, `{"kind": "data", "data": {...}}` (an object: a 1.0 data part
  that is not one travels as `{"value": x}` with metadata `data_part_compat: true`, the
  convention a2a-sdk's v0.3 layer reads back);
- roles `user` / `agent`; states in kebab case (`input-required`, `unknown`);
- a status update says `final: true` when it is the last of its stream: a terminal or
  an interrupted state (`input-required`, `auth-required`), where a 1.0 stream ends;
- `configuration.blocking` defaults to true (1.0: `returnImmediately` false);
  `historyLength: 0` means unlimited (1.0: no history), so 0 is left out;
- a push config is `{taskId, pushNotificationConfig: {url, id, token, authentication:
  {schemes: [...], credentials}}}`; 1.0 has one `scheme`, so the first is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.protocol.errors import A2AError, invalid_field

Json = dict[str, Any]

ROLE_IN = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
ROLE_OUT = {v: k for k, v in ROLE_IN.items()}
STATE_OUT = {
    "TASK_STATE_UNSPECIFIED": "unknown",
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
STATE_IN = {v: k for k, v in STATE_OUT.items()}
# Where a 1.0 stream ends: the last status update of a v0.3 stream says `final: true`.
FINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_FAILED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
DATA_PART_COMPAT = "data_part_compat"  # metadata of a data part wrapping a non-object value

# The JSON-RPC error codes v0.3 defines; any other (-32000, -32008, -32009) is sent as
# -32603 with the 1.0 reason leading its message.
V03_ERROR_CODES = frozenset(
    {-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004, -32005, -32006, -32007}
)


# ------------------------------------------------------------------------------ v0.3 → 1.0


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid_field(path, "must be an object")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise invalid_field(path, "must be a string")
    return value


def _copy(source: Mapping[str, Any], target: Json, *names: str) -> None:
    for name in names:
        if name in source and source[name] is not None:
            target[name] = source[name]


def part_in(part: Any, path: str) -> Json:
    """A v0.3 part as a 1.0 Part (kind, or the member present when `kind` is left out)."""
    part = _object(part, path)
    kind = part.get("kind")
    if kind is None:
        kind = next((k for k in ("text", "file", "data") if k in part), None)
    out: Json = {}
    metadata = part.get("metadata")
    if kind == "text":
        out["text"] = _string(part.get("text"), f"{path}.text")
    elif kind == "file":
        file = _object(part.get("file"), f"{path}.file")
        if "bytes" in file and file["bytes"] is not None:
            out["raw"] = _string(file["bytes"], f"{path}.file.bytes")
        elif "uri" in file and file["uri"] is not None:
            out["url"] = _string(file["uri"], f"{path}.file.uri")
        else:
            raise invalid_field(f"{path}.file", "needs `bytes` (base64) or `uri`")
        if file.get("mimeType"):
            out["mediaType"] = _string(file["mimeType"], f"{path}.file.mimeType")
        if file.get("name"):
            out["filename"] = _string(file["name"], f"{path}.file.name")
    elif kind == "data":
        data = _object(part.get("data"), f"{path}.data")
        if isinstance(metadata, Mapping) and metadata.get(DATA_PART_COMPAT):
            metadata = {k: v for k, v in metadata.items() if k != DATA_PART_COMPAT}
            out["data"] = data.get("value")
        else:
            out["data"] = data
    else:
        raise invalid_field(f"{path}.kind", 'must be "text", "file" or "data"')
    if metadata:
        out["metadata"] = metadata
    return out


def message_in(message: Any, path: str = "message") -> Json:
    message = _object(message, path)
    kind = message.get("kind", "message")
    if kind != "message":
        raise invalid_field(f"{path}.kind", 'must be "message"')
    role = message.get("role")
    if role not in ROLE_IN:
        raise invalid_field(f"{path}.role", 'must be "user" or "agent"')
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise invalid_field(f"{path}.parts", "must be an array of parts")
    out: Json = {
        "role": ROLE_IN[role],
        "parts": [part_in(p, f"{path}.parts[{i}]") for i, p in enumerate(parts)],
    }
    _copy(
        message,
        out,
        "messageId",
        "contextId",
        "taskId",
        "referenceTaskIds",
        "metadata",
        "extensions",
    )
    return out


def push_config_in(config: Any, path: str, task_id: str = "") -> Json:
    """A v0.3 PushNotificationConfig as a 1.0 TaskPushNotificationConfig."""
    config = _object(config, path)
    out: Json = {}
    if task_id:
        out["taskId"] = task_id
    _copy(config, out, "url", "id", "token")
    auth = config.get("authentication")
    if auth is not None:
        auth = _object(auth, f"{path}.authentication")
        schemes = auth.get("schemes")
        if not isinstance(schemes, list) or not all(isinstance(s, str) for s in schemes):
            raise invalid_field(f"{path}.authentication.schemes", "must be an array of strings")
        converted: Json = {}
        if schemes:
            converted["scheme"] = schemes[0]
        if auth.get("credentials"):
            converted["credentials"] = auth["credentials"]
        out["authentication"] = converted
    return out


def _history_length(params: Mapping[str, Any], out: Json) -> None:
    length = params.get("historyLength")
    if length:  # 0 (and null) is unlimited in v0.3: left out, 1.0's "all"
        out["historyLength"] = length


def send_in(params: Mapping[str, Any]) -> Json:
    """MessageSendParams → SendMessageRequest."""
    out: Json = {"message": message_in(params.get("message"))}
    _copy(params, out, "metadata")
    config = params.get("configuration")
    converted: Json = {}
    if config is not None:
        config = _object(config, "configuration")
        _copy(config, converted, "acceptedOutputModes")
        _history_length(config, converted)
        push = config.get("pushNotificationConfig")
        if push is not None:
            converted["taskPushNotificationConfig"] = push_config_in(
                push, "configuration.pushNotificationConfig"
            )
        blocking = config.get("blocking")
        if blocking is not None and not isinstance(blocking, bool):
            raise invalid_field("configuration.blocking", "must be true or false")
        if blocking is False:  # v0.3 blocks unless told not to, as 1.0 does
            converted["returnImmediately"] = True
    if converted:
        out["configuration"] = converted
    return out


def task_query_in(params: Mapping[str, Any]) -> Json:
    """TaskQueryParams → GetTaskRequest."""
    out: Json = {}
    _copy(params, out, "id")
    _history_length(params, out)
    return out


def task_id_in(params: Mapping[str, Any], *, metadata: bool = False) -> Json:
    """TaskIdParams → CancelTaskRequest (with its metadata) or SubscribeToTaskRequest."""
    out: Json = {}
    _copy(params, out, "id")
    if metadata:
        _copy(params, out, "metadata")
    return out


def set_push_in(params: Mapping[str, Any]) -> Json:
    """TaskPushNotificationConfig (v0.3) → TaskPushNotificationConfig (1.0)."""
    task_id = params.get("taskId")
    if task_id is not None:
        _string(task_id, "taskId")
    return push_config_in(
        params.get("pushNotificationConfig"), "pushNotificationConfig", task_id or ""
    )


def push_ref_in(params: Mapping[str, Any]) -> Json:
    """{id, pushNotificationConfigId} → {taskId, id} (Get/Delete); {id} → {taskId} (List)."""
    out: Json = {}
    if "id" in params:
        out["taskId"] = params["id"]
    if params.get("pushNotificationConfigId") is not None:
        out["id"] = params["pushNotificationConfigId"]
    return out


# ------------------------------------------------------------------------------ 1.0 → v0.3


def part_out(part: Mapping[str, Any]) -> Json:
    metadata = part.get("metadata")
    out: Json
    if "text" in part:
        out = {"kind": "text", "text": part["text"]}
    elif "raw" in part or "url" in part:
        file: Json = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    elif "data" in part:
        data = part["data"]
        if not isinstance(data, dict):  # v0.3 data is an object
            data = {"value": data}
            metadata = {**(metadata or {}), DATA_PART_COMPAT: True}
        out = {"kind": "data", "data": data}
    else:  # a part with no content: an empty text
        out = {"kind": "text", "text": ""}
    if metadata:
        out["metadata"] = metadata
    return out


def message_out(message: Mapping[str, Any]) -> Json:
    out: Json = {
        "kind": "message",
        "messageId": message.get("messageId", ""),
        "role": ROLE_OUT.get(message.get("role", ""), "agent"),
        "parts": [part_out(p) for p in message.get("parts", ())],
    }
    _copy(message, out, "contextId", "taskId", "referenceTaskIds", "metadata", "extensions")
    return out


def status_out(status: Mapping[str, Any]) -> Json:
    out: Json = {"state": STATE_OUT.get(status.get("state", ""), "unknown")}
    if "message" in status:
        out["message"] = message_out(status["message"])
    _copy(status, out, "timestamp")
    return out


def artifact_out(artifact: Mapping[str, Any]) -> Json:
    out: Json = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": [part_out(p) for p in artifact.get("parts", ())],
    }
    _copy(artifact, out, "name", "description", "metadata", "extensions")
    return out


def task_out(task: Mapping[str, Any]) -> Json:
    out: Json = {
        "kind": "task",
        "id": task.get("id", ""),
        "contextId": task.get("contextId", ""),
        "status": status_out(task.get("status", {})),
    }
    if task.get("artifacts"):
        out["artifacts"] = [artifact_out(a) for a in task["artifacts"]]
    if "history" in task:
        out["history"] = [message_out(m) for m in task["history"]]
    _copy(task, out, "metadata")
    return out


def status_update_out(event: Mapping[str, Any]) -> Json:
    status = event.get("status", {})
    out: Json = {
        "kind": "status-update",
        "taskId": event.get("taskId", ""),
        "contextId": event.get("contextId", ""),
        "status": status_out(status),
        "final": status.get("state") in FINAL_STATES,
    }
    _copy(event, out, "metadata")
    return out


def artifact_update_out(event: Mapping[str, Any]) -> Json:
    out: Json = {
        "kind": "artifact-update",
        "taskId": event.get("taskId", ""),
        "contextId": event.get("contextId", ""),
        "artifact": artifact_out(event.get("artifact", {})),
        "append": bool(event.get("append", False)),
        "lastChunk": bool(event.get("lastChunk", False)),
    }
    _copy(event, out, "metadata")
    return out


def send_result_out(response: Mapping[str, Any]) -> Json:
    """SendMessageResponse / StreamResponse (its one payload) → a v0.3 result."""
    if "task" in response:
        return task_out(response["task"])
    if "message" in response:
        return message_out(response["message"])
    if "statusUpdate" in response:
        return status_update_out(response["statusUpdate"])
    if "artifactUpdate" in response:
        return artifact_update_out(response["artifactUpdate"])
    raise ValueError("a response with no payload")  # the API always sets one


def push_config_out(config: Mapping[str, Any]) -> Json:
    """TaskPushNotificationConfig (1.0) → TaskPushNotificationConfig (v0.3)."""
    inner: Json = {"url": config.get("url", "")}
    _copy(config, inner, "id", "token")
    auth = config.get("authentication")
    if auth is not None:
        converted: Json = {"schemes": [auth["scheme"]] if auth.get("scheme") else []}
        _copy(auth, converted, "credentials")
        inner["authentication"] = converted
    return {"taskId": config.get("taskId", ""), "pushNotificationConfig": inner}


def push_configs_out(response: Mapping[str, Any]) -> list[Json]:
    """ListTaskPushNotificationConfigsResponse → the v0.3 result, an array."""
    return [push_config_out(c) for c in response.get("configs", ())]


# ------------------------------------------------------------------------------ errors


def error_out(err: A2AError, data: Any) -> Json:
    """A JSON-RPC error object in v0.3's codes: one v0.3 lacks is -32603, its message led
    by the 1.0 reason (VERSION_NOT_SUPPORTED: ...); `data` keeps the typed details."""
    code = err.jsonrpc_code
    message = err.message
    if code not in V03_ERROR_CODES:
        code = -32603
        message = f"{err.reason}: {message}"
    return {"code": code, "message": message, "data": data}
