"""a2a-call and the permission side-band: find the envelope a paused task carries, show it,
ask the terminal user (or take --approve / --deny), and build the one-part answer.

The envelope is `a2a_service.input` (`kind: "permission"`) in the metadata of the
INPUT_REQUIRED status update, or of the task's status message; the answer is a ROLE_USER
message on `requestTaskId` with one application/json data part holding exactly
`{schemaVersion, kind, requestTaskId, inputId, toolUseId, decision}`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from a2a.types import a2a_pb2 as sdk
from google.protobuf import json_format, struct_pb2

from a2a_call.metadata import namespace_of
from a2a_call.safe import printable

INPUT_KEY = "input"
KIND = "permission"
SCHEMA_VERSION = 1
ALLOW = "allow_once"
DENY = "deny"
DISPLAY_FIELDS = ("toolName", "title", "purpose", "effect", "target", "readOnly", "summary")
ANSWER_FIELDS = ("requestTaskId", "inputId", "toolUseId")
LEAD = "The agent asks for permission"


def _is_envelope(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("kind") == KIND
        and value.get("schemaVersion") == SCHEMA_VERSION
        and all(isinstance(value.get(k), str) and value.get(k) for k in ANSWER_FIELDS)
    )


def _metadatas(event: sdk.StreamResponse | sdk.Task) -> Iterable[struct_pb2.Struct]:
    if isinstance(event, sdk.Task):
        yield event.status.message.metadata
        yield event.metadata
        return
    if event.HasField("status_update"):
        yield event.status_update.metadata
        yield event.status_update.status.message.metadata
    elif event.HasField("task"):
        yield from _metadatas(event.task)


def find_envelope(event: sdk.StreamResponse | sdk.Task) -> dict[str, Any] | None:
    """The permission envelope an INPUT_REQUIRED event or task carries, else None."""
    for metadata in _metadatas(event):
        envelope = namespace_of(metadata).get(INPUT_KEY)
        if isinstance(envelope, dict) and _is_envelope(envelope):
            return dict(envelope)
    return None


def answer(envelope: dict[str, Any], decision: str, context_id: str = "") -> sdk.Message:
    """The caller's decision: one data part with exactly the fields the agent checks."""
    data = {
        "schemaVersion": SCHEMA_VERSION,
        "kind": KIND,
        **{k: envelope[k] for k in ANSWER_FIELDS},
        "decision": decision,
    }
    message = sdk.Message(
        message_id=str(uuid.uuid4()),
        role=sdk.ROLE_USER,
        task_id=envelope["requestTaskId"],
        context_id=str(envelope.get("contextId") or context_id),
    )
    part = message.parts.add(media_type="application/json")
    json_format.ParseDict(data, part.data)
    return message


def options_of(envelope: dict[str, Any]) -> list[str]:
    ids = [
        o.get("id") for o in envelope.get("options") or [] if isinstance(o, dict) and o.get("id")
    ]
    return [str(i) for i in ids] or [ALLOW, DENY]


def describe(envelope: dict[str, Any]) -> list[str]:
    """The display fields, one per line, for a person to decide on: each field is one line
    (`printable`), so none can hide, rewrite or pose as another line of what is approved."""
    asked = printable(envelope.get("prompt") or envelope.get("title") or "")
    # The server's default prompt already says it ("The agent asks for permission to …"):
    # then it is the line, said once.
    if asked.lower().startswith(LEAD.lower()):
        lines = [asked]
    else:
        lines = [f"{LEAD}: {asked}".rstrip()]
    for key in DISPLAY_FIELDS:
        value = envelope.get(key)
        if value is None or value == "":
            continue
        if key == "readOnly":
            value = "yes" if value else "no (it may change things)"
        lines.append(f"  {key:>9}: {printable(value)}")
    return lines


def prompt(
    envelope: dict[str, Any],
    read_line: Callable[[], str],
    out: TextIO,
) -> str:
    """Ask until the answer is allow or deny; EOF denies."""
    for line in describe(envelope):
        print(line, file=out)
    choices = [printable(choice) for choice in options_of(envelope)]
    while True:
        print(
            f"Allow? [a]llow once / [d]eny ({', '.join(choices)}): ", end="", file=out, flush=True
        )
        try:
            reply = read_line()
        except EOFError:
            reply = ""
        if not reply:
            print("", file=out)
            return DENY
        word = reply.strip().lower()
        if word in ("a", "allow", "y", "yes", ALLOW):
            return ALLOW
        if word in ("d", "deny", "n", "no", DENY):
            return DENY
        print("Answer a (allow once) or d (deny).", file=out)
