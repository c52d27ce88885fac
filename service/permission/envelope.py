"""The permission side-band's shapes, and the check of a caller's answer.

Pure functions of a stored task and a message: whichever process holds the task can
validate an answer (nothing lives only in the memory of the process that asked). The
shapes are documented in docs/human-in-the-loop.md:

- the request envelope (`a2a_service.input`), kept in the task's own metadata while the
  decision is pending, and sent in the INPUT_REQUIRED status update's metadata;
- the pending state (`a2a_service.permission`);
- the caller's answer: one `application/json` data part, exactly these fields;
- the acknowledgement (`permission_ack` data part, `a2a_service.inputReceived`);
- the audit record appended to the task's `a2a_service.permissionAudit`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, struct_pb2

from gen import a2a_pb2 as pb
from service.protocol.errors import invalid_field

SCHEMA_VERSION = 1
KIND = "permission"
ACK_KIND = "permission_ack"
ALLOW_ONCE = "allow_once"
DENY = "deny"
DECISIONS = (ALLOW_ONCE, DENY)
OPTIONS = [{"id": ALLOW_ONCE, "label": "Allow once"}, {"id": DENY, "label": "Deny"}]
JSON = "application/json"

# Keys in this service's namespace (`a2a_service`) of metadata.
INPUT_KEY = "input"  # the pending envelope (task metadata; the pausing status update)
PERMISSION_KEY = "permission"  # {autoApproved, pending, toolName, toolUseId[, decision]}
RECEIVED_KEY = "inputReceived"  # the acknowledging status update
AUDIT_KEY = "permissionAudit"  # task metadata: one record per decision
AUDIT_MAX = 1000  # decisions one task keeps; past it a request fails the turn

ANSWER_FIELDS = ("schemaVersion", "kind", "requestTaskId", "inputId", "toolUseId", "decision")
DISPLAY_LIMITS = {"title": 200, "purpose": 1000, "effect": 1000, "target": 2000, "summary": 2000}
NAME_LIMIT = 128


def capped(text: str, limit: int) -> str:
    """Display text cut to `limit` characters (with an ellipsis), control characters removed."""
    clean = "".join(c if c >= " " or c in "\n\t" else " " for c in text)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def now_rfc3339() -> str:
    return (
        datetime.datetime.now(datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@dataclass(frozen=True)
class PermissionDecision:
    """What `ctx.request_permission` returns: the decision on one tool use.

    `auto`: decided by the configured policy, not by the caller. `resumed`: the caller
    decided a request of an earlier turn whose agent coroutine did not survive (a restart);
    this turn is acting on it."""

    decision: str
    tool_name: str
    tool_use_id: str
    input_id: str
    target: str = ""
    auto: bool = False
    resumed: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOW_ONCE


def new_envelope(
    *,
    task_id: str,
    context_id: str,
    input_id: str,
    tool_use_id: str,
    tool_name: str,
    title: str,
    purpose: str,
    effect: str,
    target: str,
    read_only: bool,
    summary: str,
    prompt: str,
) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "kind": KIND,
        "requestTaskId": task_id,
        "contextId": context_id,
        "inputId": input_id,
        "toolUseId": tool_use_id,
        "toolName": tool_name,
        "title": capped(title, DISPLAY_LIMITS["title"]),
        "purpose": capped(purpose, DISPLAY_LIMITS["purpose"]),
        "effect": capped(effect, DISPLAY_LIMITS["effect"]),
        "target": capped(target, DISPLAY_LIMITS["target"]),
        "readOnly": read_only,
        "summary": capped(summary, DISPLAY_LIMITS["summary"]),
        "prompt": capped(prompt, DISPLAY_LIMITS["summary"]),
        "options": [dict(o) for o in OPTIONS],
    }


def default_prompt(tool_name: str, title: str, target: str) -> str:
    what = title or f"use the tool {tool_name}"
    on = f" ({capped(target, 200)})" if target else ""
    return (
        f"The agent asks for permission to {what[:1].lower()}{what[1:]}{on}. "
        f"Answer with a permission decision: {ALLOW_ONCE} or {DENY}."
    )


def permission_state(
    envelope: dict[str, Any], *, pending: bool, auto: bool, decision: str = ""
) -> dict[str, Any]:
    """The `a2a_service.permission` value."""
    out: dict[str, Any] = {
        "autoApproved": auto and decision == ALLOW_ONCE,
        "pending": pending,
        "toolName": envelope["toolName"],
        "toolUseId": envelope["toolUseId"],
    }
    if decision:
        out["decision"] = decision
    return out


def audit_record(
    envelope: dict[str, Any],
    decision: str,
    *,
    caller: str,
    tenant: str,
    policy: str,
    rule: str = "",
) -> dict[str, Any]:
    """One decision as the audit keeps it: who, where, which request, what, when, how."""
    record: dict[str, Any] = {
        "taskId": envelope["requestTaskId"],
        "contextId": envelope["contextId"],
        "inputId": envelope["inputId"],
        "toolUseId": envelope["toolUseId"],
        "toolName": envelope["toolName"],
        "target": envelope.get("target", ""),
        "decision": decision,
        "auto": policy != "ask",
        "policy": policy,
        "caller": caller,
        "tenant": tenant,
        "decidedAt": now_rfc3339(),
    }
    if rule:
        record["rule"] = rule
    return record


def with_request(ours: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """The task's namespace while `envelope` waits for the caller."""
    return {
        **ours,
        INPUT_KEY: envelope,
        PERMISSION_KEY: permission_state(envelope, pending=True, auto=False),
    }


def with_decision(
    ours: dict[str, Any], envelope: dict[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """The task's namespace once `record` decided `envelope`: nothing pending, one more
    audit record."""
    out = {k: v for k, v in ours.items() if k != INPUT_KEY}
    out[PERMISSION_KEY] = permission_state(
        envelope, pending=False, auto=record["auto"], decision=record["decision"]
    )
    out[AUDIT_KEY] = [*audit_of(ours), record]
    return out


def without_request(ours: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """The task's namespace when a pending request ends undecided (not recorded)."""
    out = {k: v for k, v in ours.items() if k != INPUT_KEY}
    out[PERMISSION_KEY] = permission_state(envelope, pending=False, auto=False)
    return out


def audit_of(ours: dict[str, Any]) -> list[dict[str, Any]]:
    records = ours.get(AUDIT_KEY)
    return list(records) if isinstance(records, list) else []


def pending_of(ours: dict[str, Any]) -> dict[str, Any] | None:
    envelope = ours.get(INPUT_KEY)
    if isinstance(envelope, dict) and envelope.get("kind") == KIND:
        return envelope
    return None


def namespace_of(task: pb.Task | None, namespace: str) -> dict[str, Any]:
    """The `namespace` key of a task's own metadata, as plain data ({} when absent)."""
    if task is None or not task.HasField("metadata"):
        return {}
    value = task.metadata.fields.get(namespace)
    if value is None or value.WhichOneof("kind") != "struct_value":
        return {}
    out = json_format.MessageToDict(value.struct_value)
    return out if isinstance(out, dict) else {}


# ---------------------------------------------------------------- the answer


def _answer_struct(message: pb.Message) -> struct_pb2.Struct | None:
    """The data object of a message shaped like a permission answer (one data part whose
    object says kind "permission"), else None."""
    if len(message.parts) != 1 or not is_answer_part(message.parts[0]):
        return None
    return message.parts[0].data.struct_value


def is_answer_part(part: pb.Part) -> bool:
    """Whether a part is a data object that says kind "permission"."""
    if part.WhichOneof("content") != "data" or part.data.WhichOneof("kind") != "struct_value":
        return False
    kind = part.data.struct_value.fields.get("kind")
    return kind is not None and kind.string_value == KIND


def is_answer(message: pb.Message) -> bool:
    """Whether a message is shaped like a permission answer (not whether it is a valid one)."""
    return _answer_struct(message) is not None


@dataclass(frozen=True)
class Answer:
    """A caller's answer, matched against the pending request it decides."""

    envelope: dict[str, Any]
    decision: str

    def decided(self, *, auto: bool = False, resumed: bool = False) -> PermissionDecision:
        return PermissionDecision(
            decision=self.decision,
            tool_name=str(self.envelope["toolName"]),
            tool_use_id=str(self.envelope["toolUseId"]),
            input_id=str(self.envelope["inputId"]),
            target=str(self.envelope.get("target", "")),
            auto=auto,
            resumed=resumed,
        )


def check_answer(task: pb.Task, ours: dict[str, Any], message: pb.Message) -> Answer | None:
    """Match a follow-up against the task's pending permission request.

    None: nothing is pending and the message is no permission answer (an ordinary
    follow-up). An Answer: the message decides the pending request. Otherwise
    InvalidParams naming the field; nothing has changed."""
    envelope = pending_of(ours) if task.status.state == pb.TASK_STATE_INPUT_REQUIRED else None
    data = _answer_struct(message)
    if envelope is None:
        if data is None:
            return None
        input_id = _text(data, "inputId")
        decided = any(r.get("inputId") == input_id for r in audit_of(ours))
        raise invalid_field(
            "message.parts[0].data.inputId",
            f"input {input_id!r} was already decided"
            if decided and input_id
            else "no permission request is pending on this task",
        )
    where = "message.parts[0]"
    expected = (
        f"an answer to the pending permission request {envelope['inputId']} is expected: one "
        f"{JSON} data part {{schemaVersion, kind, requestTaskId, inputId, toolUseId, decision}}"
    )
    if message.role != pb.ROLE_USER:
        raise invalid_field("message.role", "a permission answer must be ROLE_USER")
    if len(message.parts) != 1:
        raise invalid_field("message.parts", f"has {len(message.parts)} parts; {expected}")
    part = message.parts[0]
    if part.WhichOneof("content") != "data":
        raise invalid_field(
            where, f"is a {part.WhichOneof('content')} part, not a decision; {expected}"
        )
    if part.media_type and part.media_type.split(";")[0].strip().lower() != JSON:
        raise invalid_field(f"{where}.mediaType", f"must be {JSON}")
    if data is None:
        if part.data.WhichOneof("kind") != "struct_value":
            raise invalid_field(f"{where}.data", f"must be a JSON object; {expected}")
        raise invalid_field(f"{where}.data.kind", f'must be "{KIND}"')
    where = f"{where}.data"
    for name in data.fields:
        if name not in ANSWER_FIELDS:
            raise invalid_field(
                f"{where}.{name}",
                f"is not a field of a permission answer (its fields: {', '.join(ANSWER_FIELDS)})",
            )
    for name in ANSWER_FIELDS:
        if name not in data.fields:
            raise invalid_field(f"{where}.{name}", "is required")
    version = data.fields["schemaVersion"]
    if version.WhichOneof("kind") != "number_value" or version.number_value != SCHEMA_VERSION:
        raise invalid_field(f"{where}.schemaVersion", f"must be {SCHEMA_VERSION}")
    request_task = _text(data, "requestTaskId")
    if request_task != message.task_id or request_task != envelope["requestTaskId"]:
        raise invalid_field(
            f"{where}.requestTaskId", "must equal the message's taskId (the task that asked)"
        )
    input_id = _text(data, "inputId")
    if input_id != envelope["inputId"]:
        decided = any(r.get("inputId") == input_id for r in audit_of(ours))
        raise invalid_field(
            f"{where}.inputId",
            f"input {input_id!r} was already decided; the pending one is {envelope['inputId']}"
            if decided and input_id
            else f"does not match the pending request {envelope['inputId']}",
        )
    if _text(data, "toolUseId") != envelope["toolUseId"]:
        raise invalid_field(
            f"{where}.toolUseId", f"does not match the pending request ({envelope['toolUseId']})"
        )
    decision = _text(data, "decision")
    offered = [o["id"] for o in envelope.get("options", OPTIONS)]
    if decision not in offered or decision not in DECISIONS:
        raise invalid_field(f"{where}.decision", f"must be one of {', '.join(offered)}")
    return Answer(envelope=envelope, decision=decision)


def _text(data: struct_pb2.Struct, name: str) -> str:
    value = data.fields.get(name)
    return (
        value.string_value
        if value is not None and value.WhichOneof("kind") == "string_value"
        else ""
    )


# ---------------------------------------------------------------- the acknowledgement


def ack_part(answer: Answer) -> pb.Part:
    part = pb.Part(media_type=JSON)
    part.data.struct_value.update(
        {
            "schemaVersion": SCHEMA_VERSION,
            "kind": ACK_KIND,
            "inputId": answer.envelope["inputId"],
            "toolUseId": answer.envelope["toolUseId"],
            "decision": answer.decision,
            "accepted": True,
        }
    )
    return part


def received(answer: Answer) -> dict[str, Any]:
    """The acknowledging status update's metadata, inside this service's namespace."""
    return {
        RECEIVED_KEY: {
            "kind": KIND,
            "inputId": answer.envelope["inputId"],
            "toolUseId": answer.envelope["toolUseId"],
            "decision": answer.decision,
            "receivedAt": now_rfc3339(),
        },
        PERMISSION_KEY: permission_state(
            answer.envelope, pending=False, auto=False, decision=answer.decision
        ),
    }


def decision_of(message: pb.Message) -> str:
    """The decision of an answer the engine already matched (allow_once or deny)."""
    data = _answer_struct(message)
    decision = _text(data, "decision") if data is not None else ""
    return decision if decision in DECISIONS else DENY  # anything unexpected: fail closed
