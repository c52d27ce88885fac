"""The agent plug-in API.

An agent is any object with `async def run(self, ctx: TurnContext) -> None`.
The engine calls it once per turn. The agent reports progress through the
context; the engine turns every call into a numbered, persisted task event and
enforces the protocol (legal transitions, ordering, ids). If `run` returns
without settling the task, the engine completes it. If it raises, the task
fails with a sanitized message. CancelTask reaches the agent as
`asyncio.CancelledError` inside `run`.

Load one by import path: `package.module:attr`, where attr is an agent object,
or a class / zero-argument factory that returns one. Built-ins: `echo`, `command`.
An a2a-sdk `AgentExecutor` runs unchanged as `a2a_sdk:package.module:attr` (through
`service.agents.a2a_sdk`, which needs the optional a2a-sdk package).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from google.protobuf import json_format, struct_pb2

from gen import a2a_pb2 as pb
from service import agent_metadata
from service.permission.envelope import (
    AUDIT_MAX,
    DISPLAY_LIMITS,
    INPUT_KEY,
    NAME_LIMIT,
    PERMISSION_KEY,
    audit_of,
    audit_record,
    capped,
    decision_of,
    default_prompt,
    new_envelope,
    permission_state,
    with_decision,
    with_request,
)
from service.permission.envelope import (
    PermissionDecision as PermissionDecision,  # re-exported: what request_permission returns
)
from service.permission.policy import ASK, PermissionPolicy
from service.protocol.ids import uuid7
from service.store.blobs import BlobSource

PartsLike = str | pb.Part | Iterable[pb.Part]
FileSource = BlobSource  # what ctx.file_artifact stores: bytes, a path, a binary file object


class FileArtifactLimitError(ValueError):
    """A file artifact is over the configured size limits; it was not stored (the message
    names the file and the setting)."""


@runtime_checkable
class Agent(Protocol):
    async def run(self, ctx: TurnContext) -> None: ...


class TurnSink(Protocol):
    """What the engine offers a turn; TurnContext is the friendly face of it."""

    cancel_requested: bool  # the caller canceled the task (CancelTask)

    def materialize(self) -> None: ...
    def status(
        self, state: pb.TaskState, message: pb.Message | None, metadata: dict[str, Any] | None
    ) -> None: ...
    def artifact(
        self, artifact: pb.Artifact, append: bool, last_chunk: bool, metadata: dict[str, Any] | None
    ) -> None: ...
    def reply(self, message: pb.Message) -> None: ...
    async def flushed(self) -> None: ...
    async def next_input(self) -> pb.Message: ...
    async def store_file(
        self, source: FileSource, filename: str, media_type: str | None
    ) -> pb.Part: ...
    def service_metadata(self) -> dict[str, Any]:
        """This service's namespace (`a2a_service`) of the task's own metadata ({} if none)."""

    def set_service_metadata(self, values: dict[str, Any]) -> None:
        """Replace that namespace; it is stored with the task's next event."""


@dataclass(frozen=True)
class Caller:
    """Who sent the turn: the authenticated principal ('' when anonymous) and tenant."""

    principal: str = ""
    tenant: str = ""
    extensions: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    # The SendMessageRequest's own `metadata` (not the message's), as plain data.
    request_metadata: dict[str, Any] = field(default_factory=dict)


def _add_parts(into: Any, content: PartsLike) -> None:
    """Text, one Part or several, appended to a repeated Part field."""
    if isinstance(content, str):
        into.add(text=content)
    elif isinstance(content, pb.Part):
        into.append(content)
    else:
        into.extend(content)


def agent_message(content: PartsLike | pb.Message, task_id: str, context_id: str) -> pb.Message:
    if isinstance(content, pb.Message):
        msg = pb.Message()
        msg.CopyFrom(content)
        if not msg.message_id:
            msg.message_id = uuid7()
        msg.role = msg.role or pb.ROLE_AGENT
    else:
        msg = pb.Message(message_id=uuid7(), role=pb.ROLE_AGENT)
        _add_parts(msg.parts, content)
    if task_id:
        msg.task_id = task_id
    msg.context_id = context_id
    return msg


def text_of(message: pb.Message) -> str:
    """The text parts of a message, joined by newlines."""
    return "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text")


class TurnContext:
    """One turn of one task, as the agent sees it."""

    def __init__(
        self,
        sink: TurnSink,
        *,
        message: pb.Message,
        task_id: str,
        context_id: str,
        task: pb.Task | None,
        caller: Caller,
        permissions: PermissionPolicy = ASK,
        resumed_decision: PermissionDecision | None = None,
    ) -> None:
        self._sink = sink
        self.message = message
        self.task_id = task_id
        self.context_id = context_id
        self.task = task  # snapshot before this turn (None for a new task)
        self.caller = caller
        self.permissions = permissions  # who decides request_permission (permission_mode)
        # Set when this turn was started by the caller's answer to a permission request of an
        # earlier turn whose coroutine is gone (the server restarted while the task waited).
        self.resumed_decision = resumed_decision
        self._resumed_taken = False

    @property
    def text(self) -> str:
        return text_of(self.message)

    @property
    def metadata(self) -> dict[str, Any]:
        return (
            json_format.MessageToDict(self.message.metadata)
            if self.message.HasField("metadata")
            else {}
        )

    def _msg(self, content: PartsLike | pb.Message | None) -> pb.Message | None:
        if content is None:
            return None
        return agent_message(content, self.task_id, self.context_id)

    async def working(
        self,
        content: PartsLike | pb.Message | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Report progress (TASK_STATE_WORKING), optionally with an agent message."""
        self._sink.status(pb.TASK_STATE_WORKING, self._msg(content), metadata)

    async def artifact(
        self,
        content: PartsLike | pb.Artifact,
        *,
        artifact_id: str | None = None,
        name: str = "",
        description: str = "",
        append: bool = False,
        last_chunk: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Emit an artifact or a chunk of one; returns the artifact id to append to.
        `content` may be a whole `pb.Artifact` (its own metadata and extensions kept; the
        keyword arguments given override its id, name and description)."""
        if isinstance(content, pb.Artifact):
            art = pb.Artifact()
            art.CopyFrom(content)
            art.artifact_id = artifact_id or art.artifact_id or uuid7()
            art.name = name or art.name
            art.description = description or art.description
        else:
            art = pb.Artifact(
                artifact_id=artifact_id or uuid7(), name=name, description=description
            )
            _add_parts(art.parts, content)
        self._sink.artifact(art, append, last_chunk, metadata)
        return art.artifact_id

    async def file_artifact(
        self,
        data_or_path: FileSource,
        *,
        filename: str | None = None,
        media_type: str | None = None,
        name: str | None = None,
        description: str = "",
        artifact_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Store a file (bytes, a path, or a binary file object read to its end) and emit an
        artifact whose part is a `url` to download it, with `filename`, `mediaType` and the
        metadata `a2a_service.byteSize` / `a2a_service.sha256`; the bytes never travel in the
        task. `filename` defaults to the path's name; `media_type` is guessed from the file
        name. FileArtifactLimitError when over the size limits. Returns the artifact id."""
        if filename is None:
            if not isinstance(data_or_path, (str, os.PathLike)):
                raise ValueError("file_artifact: give a filename for bytes or a file object")
            filename = os.path.basename(os.fspath(data_or_path))
        part = await self._sink.store_file(data_or_path, filename, media_type)
        return await self.artifact(
            part,
            artifact_id=artifact_id,
            name=part.filename if name is None else name,
            description=description,
            metadata=metadata,
        )

    async def reply(self, content: PartsLike | pb.Message) -> None:
        """Answer directly with a Message; no task is stored when this is the turn's only output."""
        self._sink.reply(agent_message(content, self.task_id, self.context_id))

    async def complete(self, content: PartsLike | pb.Message | None = None) -> None:
        self._sink.status(pb.TASK_STATE_COMPLETED, self._msg(content), None)

    async def fail(self, content: PartsLike | pb.Message | None = None) -> None:
        self._sink.status(pb.TASK_STATE_FAILED, self._msg(content), None)

    async def reject(self, content: PartsLike | pb.Message | None = None) -> None:
        self._sink.status(pb.TASK_STATE_REJECTED, self._msg(content), None)

    async def require_input(
        self,
        content: PartsLike | pb.Message | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """End the turn waiting for the caller's next message (a new turn will handle it)."""
        self._sink.status(pb.TASK_STATE_INPUT_REQUIRED, self._msg(content), metadata)

    async def require_auth(
        self,
        content: PartsLike | pb.Message | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._sink.status(pb.TASK_STATE_AUTH_REQUIRED, self._msg(content), metadata)

    async def create_task(self) -> None:
        """Make sure the task exists (SUBMITTED, the caller's message in its history) without
        changing its state: an answer that is a task, not a direct message. No-op if it
        exists."""
        self._sink.materialize()

    async def set_state(
        self,
        state: pb.TaskState,
        content: PartsLike | pb.Message | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Move the task to `state` (any but SUBMITTED and UNSPECIFIED), optionally with an
        agent message: what the named methods above do, for code that holds a state value
        (e.g. the a2a-sdk adapter). An agent that sets CANCELED ends the task as canceled."""
        self._sink.status(state, self._msg(content), metadata)

    @property
    def cancel_requested(self) -> bool:
        """True once the caller canceled the task (CancelTask): the `CancelledError` this turn
        gets is that cancel, not the server stopping the turn (shutdown, a stalled turn)."""
        return self._sink.cancel_requested

    async def ask(
        self, content: PartsLike | pb.Message, *, metadata: dict[str, Any] | None = None
    ) -> pb.Message:
        """Pause mid-turn: the task goes INPUT_REQUIRED, the carrying request ends, and
        this call returns the caller's follow-up message when it arrives (on any binding)."""
        self._sink.status(pb.TASK_STATE_INPUT_REQUIRED, self._msg(content), metadata)
        message = await self._sink.next_input()
        self.message = message
        return message

    async def flushed(self) -> None:
        """Wait until everything emitted so far is committed (rarely needed)."""
        await self._sink.flushed()

    async def request_permission(
        self,
        *,
        tool_name: str,
        title: str,
        purpose: str = "",
        effect: str = "",
        target: str = "",
        read_only: bool = False,
        summary: str = "",
        tool_use_id: str | None = None,
        prompt: str | None = None,
    ) -> PermissionDecision:
        """Ask whether the agent may use a tool, and return the decision (`.allowed`).

        With `permission_mode = "ask"` (and for tools the rules leave to the caller) the task
        goes INPUT_REQUIRED with the request envelope, and this returns once the caller's
        answer was matched, recorded in the task's audit and committed. Otherwise the policy
        decides at once (recorded and committed the same way). Display texts are capped; they
        must not contain secrets. On a turn resumed by the answer to an earlier turn's request
        (`resumed_decision`), the first request for the same tool and target returns that
        decision without asking again. Raises PermissionNotRecordedError (the task has
        failed) when the decision could not be recorded: it must not be acted on."""
        resumed = self._take_resumed(tool_name, target, tool_use_id)
        if resumed is not None:
            return resumed
        if not 0 < len(tool_name) <= NAME_LIMIT:
            raise ValueError(f"tool_name must be 1 to {NAME_LIMIT} characters")
        ours = self._sink.service_metadata()
        if len(audit_of(ours)) >= AUDIT_MAX:
            await self.fail(AUDIT_FULL_MESSAGE)
            raise PermissionNotRecordedError(AUDIT_FULL_MESSAGE)
        envelope = new_envelope(
            task_id=self.task_id,
            context_id=self.context_id,
            input_id=uuid7(),
            tool_use_id=tool_use_id or uuid7(),
            tool_name=tool_name,
            title=title,
            purpose=purpose,
            effect=effect,
            target=target,
            read_only=read_only,
            summary=summary,
            prompt=prompt or default_prompt(tool_name, title, target),
        )
        auto = self.permissions.decide(tool_name)
        if auto is None:
            self._sink.set_service_metadata(with_request(ours, envelope))
            pending = permission_state(envelope, pending=True, auto=False)
            # The engine matches, records and commits the answer before this resumes.
            answer = await self.ask(
                envelope["prompt"],
                metadata={NAMESPACE: {INPUT_KEY: envelope, PERMISSION_KEY: pending}},
            )
            return self._decision(envelope, decision_of(answer), auto=False)
        record = audit_record(
            envelope,
            auto.decision,
            caller=self.caller.principal,
            tenant=self.caller.tenant,
            policy=auto.policy,
            rule=auto.rule,
        )
        self._sink.set_service_metadata(with_decision(ours, envelope, record))
        decided = permission_state(envelope, pending=False, auto=True, decision=auto.decision)
        self._sink.status(pb.TASK_STATE_WORKING, None, {NAMESPACE: {PERMISSION_KEY: decided}})
        try:
            await self._sink.flushed()  # fail closed: acted on only once the audit is durable
        except Exception:
            self._sink.set_service_metadata(ours)
            await self.fail(NOT_RECORDED_MESSAGE)
            raise PermissionNotRecordedError(NOT_RECORDED_MESSAGE) from None
        return self._decision(envelope, auto.decision, auto=True)

    @staticmethod
    def _decision(envelope: dict[str, Any], decision: str, *, auto: bool) -> PermissionDecision:
        return PermissionDecision(
            decision=decision,
            tool_name=envelope["toolName"],
            tool_use_id=envelope["toolUseId"],
            input_id=envelope["inputId"],
            target=envelope["target"],
            auto=auto,
        )

    def _take_resumed(
        self, tool_name: str, target: str, tool_use_id: str | None
    ) -> PermissionDecision | None:
        """The resumed decision, once, for the request it decided."""
        decided = self.resumed_decision
        if decided is None or self._resumed_taken:
            return None
        if decided.tool_name != tool_name or decided.target != capped(
            target, DISPLAY_LIMITS["target"]
        ):
            return None
        if tool_use_id and tool_use_id != decided.tool_use_id:
            return None
        self._resumed_taken = True
        return decided

    # ---- the a2a_service metadata extension: tool progress and token usage ----------
    # Each call is a WORKING status update whose metadata is `a2a_service.tool` or
    # `a2a_service.usage` (service/agent_metadata.py caps and sanitises every value).
    async def tool_started(
        self, name: str, *, tool_use_id: str | None = None, input: Any = None
    ) -> str:
        """A tool call began; returns its toolUseId (generated unless given). Only the
        shape of `input` is sent (keys, types, lengths), never its values."""
        use_id = tool_use_id or f"tool-{uuid7()}"
        self._tool_names()[use_id] = name
        await self._tool("started", use_id, input=input, has_input=input is not None)
        return use_id

    async def tool_input_delta(self, tool_use_id: str, delta: str) -> None:
        """More of a streamed tool input arrived: only its size (characters) is sent."""
        await self._tool("input_delta", tool_use_id, input_chars=len(delta))

    async def tool_input_complete(self, tool_use_id: str, *, input: Any = None) -> None:
        """The tool's input is complete (its shape is sent when given)."""
        await self._tool("input_complete", tool_use_id, input=input, has_input=input is not None)

    async def tool_finished(
        self, tool_use_id: str, *, result: Any = None, failed: bool = False
    ) -> None:
        """The tool call ended (`failed`: with an error). `result`, when given, is sent
        sanitised: strings capped, credentials and local paths removed."""
        status = "failed" if failed else "completed"
        await self._tool(status, tool_use_id, result=result, has_result=result is not None)
        self._tool_names().pop(tool_use_id, None)

    async def usage(
        self, *, input_tokens: int, output_tokens: int, total_tokens: int | None = None
    ) -> None:
        """Token usage so far (the total is the sum unless given)."""
        metadata = agent_metadata.usage_metadata(input_tokens, output_tokens, total_tokens)
        self._sink.status(pb.TASK_STATE_WORKING, None, metadata)

    def _tool_names(self) -> dict[str, str]:
        """The names of this turn's tool calls by toolUseId (later steps repeat the name)."""
        names: dict[str, str] = self.__dict__.setdefault("_tool_calls", {})
        return names

    async def _tool(self, status: str, tool_use_id: str, **fields: Any) -> None:
        name = self._tool_names().get(tool_use_id)
        if name is None:
            raise ValueError(f"tool_use_id {tool_use_id!r} names no tool started in this turn")
        metadata = agent_metadata.tool_metadata(status, tool_use_id, name, **fields)
        self._sink.status(pb.TASK_STATE_WORKING, None, metadata)


class PermissionNotRecordedError(Exception):
    """A permission decision could not be recorded (or the task's audit is full): the
    agent must not act on it. The task has been failed with a message saying so."""


NOT_RECORDED_MESSAGE = (
    "The permission decision could not be recorded, so it was not acted on; the turn was stopped."
)
AUDIT_FULL_MESSAGE = (
    f"This task has recorded {AUDIT_MAX} permission decisions, the most one task keeps; "
    "start a new task."
)


NAMESPACE = agent_metadata.NAMESPACE  # this service's key in message metadata
CWD_KEY = "cwd"


def cwd_of(metadata: dict[str, Any] | None) -> str | None:
    """The accepted working directory of a turn, from its message metadata
    (`a2a_service.cwd`, checked against workspace_roots before the agent runs)."""
    ours = (metadata or {}).get(NAMESPACE)
    value = ours.get(CWD_KEY) if isinstance(ours, dict) else None
    return value if isinstance(value, str) and value else None


def metadata_struct(metadata: dict[str, Any] | None) -> struct_pb2.Struct | None:
    if not metadata:
        return None
    s = struct_pb2.Struct()
    s.update(metadata)
    return s


BUILTIN_AGENTS = {
    "echo": "service.agents.echo:EchoAgent",
    "command": "service.agents.command:CommandAgent",
}

# `prefix:package.module:attr` runs an agent written against another framework through an
# adapter: the adapter's loader gets the rest of the spec. Named as strings, imported only
# when chosen, so the server never imports the framework unless asked to.
A2A_SDK_PREFIX = "a2a_sdk"
ADAPTERS = {A2A_SDK_PREFIX: "service.agents.a2a_sdk:load_executor"}
A2A_SDK_MISSING = (
    "agent {spec!r}: running an a2a-sdk AgentExecutor needs the a2a-sdk package, which is "
    "not installed; install it with the `a2a-sdk` extra: pip install '.[a2a-sdk]' "
    "(or the `client` extra, the same pin)"
)


def import_object(spec: str, what: str) -> Any:
    """The object an import path `package.module:attr` names (a ValueError, saying which
    `what` and why, when it cannot be found)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} {spec!r}: expected 'package.module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r} ({exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(
            f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None


def load_agent(spec: str, **options: Any) -> Agent:
    """Resolve `echo`, `command`, `package.module:attr` or `a2a_sdk:package.module:attr` (an
    a2a-sdk AgentExecutor instance, class or factory) to an agent object."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in ADAPTERS and ":" in rest:
        return _load_adapted(prefix, rest, spec)
    path = BUILTIN_AGENTS.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"agent {spec!r}: expected 'package.module:attr' or one of {sorted(BUILTIN_AGENTS)}"
        )
    target = import_object(path, "agent")
    agent = (
        target(**options)
        if isinstance(target, type) or (callable(target) and not hasattr(target, "run"))
        else target
    )
    if not isinstance(agent, Agent):
        raise ValueError(f"agent {spec!r}: object has no 'async def run(self, ctx)' method")
    return agent


def _load_adapted(prefix: str, rest: str, spec: str) -> Agent:
    """An agent of another framework behind its adapter (ValueError saying why not)."""
    module_name = ADAPTERS[prefix].partition(":")[0]
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if prefix == A2A_SDK_PREFIX and (exc.name or "").split(".")[0] == "a2a":
            raise ValueError(A2A_SDK_MISSING.format(spec=spec)) from None
        raise
    loader = import_object(ADAPTERS[prefix], "agent adapter")
    agent = loader(rest)
    if not isinstance(agent, Agent):
        raise ValueError(f"agent {spec!r}: the adapter did not give an agent")
    return agent
