"""Test agents whose behaviour is chosen by the message text, so one server covers every path.

Commands (the first word of the message):
  echo TEXT        artifact with TEXT, then completed (default for anything else)
  reply TEXT       direct Message reply, no task
  ask TEXT         asks a question (pauses mid-turn), then echoes the answer and completes
  input TEXT       ends the turn with INPUT_REQUIRED; the follow-up turn echoes and completes
  auth             ends the turn with AUTH_REQUIRED
  slow N           N status updates, 0.05 s apart, then completes
  hang             waits until canceled
  chunks N         one artifact in N chunks (append / lastChunk), then completes
  fail             fails the task
  raise            raises an exception (the engine must fail the task, sanitized)
  break            emits after completing (a protocol violation)
  reject           rejects the task
  exts             artifact listing the extensions the caller requested
  linger           INPUT_REQUIRED, then keeps running 0.1 s before returning
  meta             artifact listing the call metadata keys the agent sees
  permit TARGET    asks for a permission decision with the h13 envelope (a2a_service.input),
                   acks it (permission_ack), then completes (allow_once) or rejects (deny);
                   an answer that is not exactly the expected one fails the task
  permit2 TARGET   as permit, twice in one turn (two decisions)
  stored NAME BASE TEXT  a stored-file artifact as the files branch makes them: a url part
                   BASE/SHA256 named NAME with a2a_service.byteSize / sha256 of TEXT
                   (the test serves the bytes at BASE)
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.agent import TurnContext


class ScriptedAgent:
    name = "Scripted test agent"
    description = "Behaviour chosen by the first word of the message."

    async def run(self, ctx: TurnContext) -> None:
        word, _, rest = ctx.text.partition(" ")
        if ctx.task is not None and ctx.task.status.state:
            # A follow-up turn after INPUT_REQUIRED / AUTH_REQUIRED.
            await ctx.artifact(f"follow-up: {ctx.text}", name="answer")
            return
        if word == "reply":
            await ctx.reply(rest or "hi")
        elif word == "ask":
            answer = await ctx.ask(rest or "what?")
            await ctx.artifact(f"you said: {answer.parts[0].text}", name="answer")
        elif word == "input":
            await ctx.require_input(rest or "more please")
        elif word == "auth":
            await ctx.require_auth("please authenticate")
        elif word == "slow":
            for i in range(int(rest or 3)):
                await ctx.working(f"step {i}")
                await asyncio.sleep(0.05)
        elif word == "hang":
            await ctx.working("hanging")
            await asyncio.Event().wait()
        elif word == "chunks":
            art = None
            n = int(rest or 3)
            for i in range(n):
                art = await ctx.artifact(
                    f"c{i}", artifact_id=art, append=i > 0, last_chunk=i == n - 1
                )
        elif word == "fail":
            await ctx.fail("it failed on purpose")
        elif word == "raise":
            raise RuntimeError("secret /etc/passwd detail")
        elif word == "break":
            await ctx.complete("done")
            await ctx.working("after the end")
        elif word == "exts":
            await ctx.artifact(" ".join(ctx.caller.extensions), name="extensions")
        elif word == "linger":
            await ctx.require_input("need more")
            await asyncio.sleep(0.1)  # still winding down (cleanup) after the turn settled
        elif word == "meta":
            await ctx.artifact(" ".join(sorted(ctx.caller.metadata)), name="metadata")
        elif word == "reject":
            await ctx.reject("no thanks")
        elif word in ("permit", "permit2"):
            for _ in range(2 if word == "permit2" else 1):
                decision = await _permission(ctx, rest or "/bin/true")
                if decision is None:
                    return
                if decision != "allow_once":
                    await ctx.reject("the caller denied it")
                    return
            await ctx.artifact(f"ran {rest}", name="tool")
        elif word == "stored":
            name, base, body = (rest.split(" ", 2) + ["", ""])[:3]
            digest = hashlib.sha256(body.encode()).hexdigest()
            part = pb.Part(url=f"{base}/{digest}", filename=name, media_type="text/plain")
            part.metadata.update({"a2a_service": {"byteSize": len(body), "sha256": digest}})
            await ctx.artifact(part, name=name)
        elif word == "burst":  # many chunks, yielding to the loop between them
            art = None
            for i in range(int(rest or 10)):
                art = await ctx.artifact(f"b{i}", artifact_id=art, append=i > 0)
                await asyncio.sleep(0)
        else:
            await ctx.artifact(ctx.text, name="echo")


class HumanLoopAgent(ScriptedAgent):
    """ScriptedAgent that also takes application/json parts (the permission answer)."""

    name = "Human-in-the-loop test agent"
    input_modes = ["text/plain", "application/json"]


class RecordingAgent:
    """Echoes, and records the text of every turn it ran (tests read `RecordingAgent.turns`)."""

    name = "Recording test agent"
    turns: list[str] = []

    async def run(self, ctx: TurnContext) -> None:
        RecordingAgent.turns.append(ctx.text)
        await ctx.artifact(ctx.text, name="echo")


PERMISSION_ANSWER_FIELDS = {
    "schemaVersion",
    "kind",
    "requestTaskId",
    "inputId",
    "toolUseId",
    "decision",
}


async def _permission(ctx: TurnContext, target: str) -> str | None:
    """The h13 permission envelope, as the permission branch specifies it; None when the
    answer was wrong (the task is failed with the reason)."""
    input_id, tool_use_id = uuid.uuid4().hex, uuid.uuid4().hex
    envelope = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": ctx.task_id,
        "contextId": ctx.context_id,
        "inputId": input_id,
        "toolUseId": tool_use_id,
        "toolName": "command",
        "title": "Run a command",
        "purpose": "to test the CLI",
        "effect": "runs a program",
        "target": target,
        "readOnly": False,
        "summary": f"run {target}",
        "prompt": f"Allow running {target}?",
        "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}],
    }
    metadata = {
        "a2a_service": {
            "input": envelope,
            "permission": {
                "autoApproved": False,
                "pending": True,
                "toolName": "command",
                "toolUseId": tool_use_id,
            },
        }
    }
    question = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_AGENT)
    question.parts.add(text=envelope["prompt"])
    question.metadata.update(metadata)
    answer = await ctx.ask(question, metadata=metadata)
    parts = list(answer.parts)
    data = (
        json_format.MessageToDict(parts[0].data)
        if len(parts) == 1 and parts[0].WhichOneof("content") == "data"
        else None
    )
    expected = {
        "schemaVersion": 1,
        "kind": "permission",
        "requestTaskId": ctx.task_id,
        "inputId": input_id,
        "toolUseId": tool_use_id,
    }
    if (
        not isinstance(data, dict)
        or parts[0].media_type != "application/json"
        or answer.task_id != ctx.task_id
        or set(data) != PERMISSION_ANSWER_FIELDS
        or any(data[k] != v for k, v in expected.items())
        or data["decision"] not in ("allow_once", "deny")
    ):
        await ctx.fail(f"not the expected permission answer: {data}")
        return None
    ack = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_AGENT)
    ack.parts.add(media_type="application/json").data.struct_value.update(
        {
            "schemaVersion": 1,
            "kind": "permission_ack",
            "inputId": input_id,
            "toolUseId": tool_use_id,
            "decision": data["decision"],
            "accepted": True,
        }
    )
    await ctx.working(ack, metadata={"a2a_service": {"inputReceived": {"inputId": input_id}}})
    return str(data["decision"])
