"""Request validation shared by every binding, driven by the contract itself.

REQUIRED fields come from the proto's `google.api.field_behavior` options, so a
new required field is validated without code here. Field paths in errors use
the JSON (camelCase) names clients write.
"""

from __future__ import annotations

import re
from functools import cache

from google.api import field_behavior_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from gen import a2a_pb2 as pb
from service.protocol.errors import invalid_field

ID_PATTERN = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
ID_RULE = "must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
_REQUIRED = field_behavior_pb2.FieldBehavior.REQUIRED
_STRUCT_TYPES = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


@cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, str, bool, bool, bool, bool], ...]:
    """(name, JSON name, required, repeated, message, nested) of the fields that are
    required or may contain required fields; computed once per message type."""
    plan = []
    for field in descriptor.fields:
        behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        required = _REQUIRED in behaviors
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        nested = (
            is_message
            and field.message_type.full_name not in _STRUCT_TYPES
            and not field.message_type.GetOptions().map_entry
            and bool(_plan(field.message_type))
        )
        if required or nested:
            plan.append(
                (field.name, field.json_name, required, _is_repeated(field), is_message, nested)
            )
    return tuple(plan)


def _is_repeated(field: FieldDescriptor) -> bool:
    repeated: bool = (
        field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    )
    return repeated


def check_required(message: ProtoMessage, prefix: str = "") -> None:
    """Raise InvalidParams naming the first REQUIRED field that is missing."""
    for name, json_name, required, repeated, is_message, nested in _plan(message.DESCRIPTOR):
        value = getattr(message, name)
        if repeated:
            if required and len(value) == 0:
                raise invalid_field(f"{prefix}{json_name}", "is required and must not be empty")
            if nested:
                for i, item in enumerate(value):
                    check_required(item, f"{prefix}{json_name}[{i}].")
        elif is_message:
            present = message.HasField(name)
            if required and not present:
                raise invalid_field(f"{prefix}{json_name}", "is required")
            if present and nested:
                check_required(value, f"{prefix}{json_name}.")
        elif required and not value:
            raise invalid_field(f"{prefix}{json_name}", "is required")


def check_id(value: str, field: str, *, required: bool = False) -> None:
    if not value:
        if required:
            raise invalid_field(field, "is required")
        return
    if not ID_PATTERN.fullmatch(value):
        raise invalid_field(field, ID_RULE)


# Not tenant names: `/v1/...` paths belong to the v0.3 REST binding (gateway/rest_v03.py).
RESERVED_TENANTS = frozenset({"v1"})


def check_tenant(request: ProtoMessage) -> str:
    """The request's tenant (`tenant` field, or the `/{tenant}/...` REST path), checked like
    the other ids: empty (no tenant) or 1-128 characters of letters, digits, `_ . : -`;
    never a reserved name."""
    tenant = getattr(request, "tenant", "")
    check_id(tenant, "tenant")
    if tenant in RESERVED_TENANTS:
        raise invalid_field(
            "tenant", f"{tenant!r} is reserved: /{tenant}/... is the A2A v0.3 REST binding"
        )
    return tenant


def check_history_length(request: ProtoMessage, field: str = "historyLength") -> int | None:
    if not request.HasField("history_length"):
        return None
    length: int = request.history_length
    if length < 0:
        raise invalid_field(field, f"must not be negative (got {length})")
    return length


def check_message(message: pb.Message, prefix: str = "message") -> None:
    """What the contract cannot say about an incoming message."""
    # Every send passes here: a field's name is only spelled out when it is refused.
    message_id = message.message_id
    if not message_id or not ID_PATTERN.fullmatch(message_id):
        check_id(message_id, f"{prefix}.messageId", required=True)
    task_id = message.task_id
    if task_id and not ID_PATTERN.fullmatch(task_id):
        check_id(task_id, f"{prefix}.taskId")
    context_id = message.context_id
    if context_id and not ID_PATTERN.fullmatch(context_id):
        check_id(context_id, f"{prefix}.contextId")
    for i, ref in enumerate(message.reference_task_ids):
        check_id(ref, f"{prefix}.referenceTaskIds[{i}]", required=True)
    for i, part in enumerate(message.parts):
        if part.WhichOneof("content") is None:
            raise invalid_field(
                f"{prefix}.parts[{i}]", "has no content: set text, raw, url or data"
            )
