"""a2a-call's output: events and results as they arrive, for a person or for a program.

`--json`: one ProtoJSON object per line on stdout (a StreamResponse per event; the Task,
ListTasksResponse or AgentCard of the other commands). Otherwise text: on a terminal, status
updates rewrite one progress line on stderr while artifacts and messages are printed on
stdout as they arrive; off a terminal every status change is a line of its own.

Everything an agent sent goes through `safe.printable` on its way to the screen: each
field as it is put into a line (one-line fields: names, ids, URLs, status), and each line
once more as it is written (`say` keeps the newlines of text, `note` and the status line do
not). `--json` needs none of it: `json.dumps` escapes every control character.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from a2a.types import a2a_pb2 as sdk
from google.protobuf import json_format
from google.protobuf.message import Message

from a2a_call.errors import EXIT_OF_STATE_NAME, Exit
from a2a_call.safe import printable, redact_url

STATE_NAMES: dict[int, str] = {
    value: name.removeprefix("TASK_STATE_").lower().replace("_", "-")
    for name, value in sdk.TaskState.items()
}
EXIT_OF_STATE: dict[int, Exit] = {  # errors.EXIT_OF_STATE_NAME, by the SDK's enum values
    sdk.TaskState.Value(name): code for name, code in EXIT_OF_STATE_NAME.items()
}
CLEAR_LINE = "\r\x1b[K"


def state_name(state: int) -> str:
    return STATE_NAMES.get(state, str(state))


def to_json(message: Message) -> dict[str, Any]:
    document: dict[str, Any] = json_format.MessageToDict(message)
    return document


def part_text(part: sdk.Part) -> str:
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    if kind == "data":
        value = json_format.MessageToDict(part.data)
        if isinstance(value, dict) and value.get("kind") == "permission_ack":
            accepted = "accepted" if value.get("accepted") else "not accepted"
            return f"permission {printable(value.get('decision'))} ({accepted})"
        return json.dumps(value, sort_keys=True)
    name = printable(part.filename or "(unnamed)")
    if kind == "url":
        what = f" ({printable(part.media_type)})" if part.media_type else ""
        return f"[file {name}{what}: {printable(redact_url(part.url))}]"
    if kind == "raw":
        what = printable(part.media_type or "bytes")
        return f"[file {name} ({what}, {len(part.raw)} bytes inline)]"
    return ""


def message_text(message: sdk.Message) -> str:
    return " ".join(t for t in (part_text(p) for p in message.parts) if t)


class Printer:
    """Writes one run's output; `progress` is whether a progress line is drawn (a terminal)."""

    def __init__(
        self,
        *,
        as_json: bool,
        out: TextIO | None = None,
        err: TextIO | None = None,
        progress: bool | None = None,
    ) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.progress = (not as_json and self.err.isatty()) if progress is None else progress
        self._line = ""  # the progress line on screen
        self._artifacts: set[str] = set()

    # ------------------------------------------------------------------ lines

    def _clear(self) -> None:
        if self._line:
            self.err.write(CLEAR_LINE)
            self.err.flush()
            self._line = ""

    def say(self, text: str) -> None:
        """A line for the person (stdout); the progress line moves below it."""
        line = self._line
        self._clear()
        print(printable(text, multiline=True), file=self.out, flush=True)
        if line:
            self._status(line)

    def note(self, text: str) -> None:
        """A remark on stderr (also with --json: stdout stays machine-readable)."""
        self._clear()
        print(printable(text), file=self.err, flush=True)

    def _status(self, text: str) -> None:
        """The status line: one line whatever the agent put in it."""
        text = printable(text)
        if self.progress:
            self.err.write(CLEAR_LINE + text[:200])
            self.err.flush()
            self._line = text
        else:
            print(text, file=self.out, flush=True)

    def done(self) -> None:
        self._clear()

    # ------------------------------------------------------------------ objects

    def json_line(self, message: Message, **extra: Any) -> None:
        print(json.dumps({**extra, **to_json(message)}), file=self.out, flush=True)

    def event(self, event: sdk.StreamResponse, event_id: str | None = None) -> None:
        """One event; with --json its number (the SSE id, or on gRPC the event's
        `a2a_service.eventId`) comes first as `eventId`, the value `subscribe --after` takes."""
        if self.as_json:
            if event_id is not None:
                self.json_line(event, eventId=event_id)
            else:
                self.json_line(event)
            return
        kind = event.WhichOneof("payload")
        if kind == "task":
            task = event.task
            self._status(f"task {printable(task.id)} ({state_name(task.status.state)})")
            for artifact in task.artifacts:
                self._artifact(artifact, append=False)
            if task.status.message.parts:
                self._status(
                    f"[{state_name(task.status.state)}] {message_text(task.status.message)}"
                )
        elif kind == "status_update":
            status = event.status_update.status
            text = message_text(status.message)
            self._status(f"[{state_name(status.state)}]" + (f" {text}" if text else ""))
        elif kind == "artifact_update":
            self._artifact(event.artifact_update.artifact, append=event.artifact_update.append)
        elif kind == "message":
            self.say(f"agent: {message_text(event.message)}")

    def _artifact(self, artifact: sdk.Artifact, *, append: bool) -> None:
        text = " ".join(t for t in (part_text(p) for p in artifact.parts) if t)
        label = printable(artifact.name or artifact.artifact_id)
        if append and artifact.artifact_id in self._artifacts:
            self.say(f"  … {text}")
        else:
            self._artifacts.add(artifact.artifact_id)
            self.say(f"artifact {label}: {text}")

    def task(self, task: sdk.Task) -> None:
        if self.as_json:
            self.json_line(task)
            return
        self.say(
            f"task {printable(task.id)}  context {printable(task.context_id)}  "
            f"{state_name(task.status.state)}"
        )
        if task.status.message.parts:
            self.say(f"  status: {message_text(task.status.message)}")
        for artifact in task.artifacts:
            self._artifact(artifact, append=False)

    def tasks(self, page: sdk.ListTasksResponse) -> None:
        if self.as_json:
            self.json_line(page)
            return
        for task in page.tasks:
            self.say(
                f"{printable(task.id)}  {state_name(task.status.state):<15} "
                f"context {printable(task.context_id)}"
            )
        token = printable(page.next_page_token)
        more = f"; next page: --page-token {token}" if token else ""
        self.note(f"{len(page.tasks)} of {page.total_size} tasks{more}")

    def card(self, card: sdk.AgentCard, card_json: dict[str, Any] | None) -> None:
        if self.as_json:
            print(json.dumps(card_json if card_json is not None else to_json(card)), file=self.out)
            return
        self.say(f"{printable(card.name)}  (version {printable(card.version or '-')})")
        if card.description:
            self.say(f"  {printable(card.description, multiline=True)}")
        for i in card.supported_interfaces:
            self.say(
                f"  interface {printable(i.protocol_binding):<9} {printable(redact_url(i.url))}"
                f"  (A2A {printable(i.protocol_version or '?')})"
            )
        caps = card.capabilities
        self.say(
            f"  streaming: {'yes' if caps.streaming else 'no'}, push notifications: "
            f"{'yes' if caps.push_notifications else 'no'}"
        )
        for name in card.security_schemes:
            self.say(f"  security scheme: {printable(name)}")
        for skill in card.skills:
            about = printable(skill.description, multiline=True)
            self.say(
                f"  skill {printable(skill.id)}: {printable(skill.name)}"
                + (f" — {about}" if about else "")
            )
