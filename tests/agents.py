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
  leak             raises with AGENT_SECRET in the message (kept out of the log and the answer)
  break            emits after completing (a protocol violation)
  reject           rejects the task
  exts             artifact listing the extensions the caller requested
  linger           INPUT_REQUIRED, then keeps running 0.1 s before returning
  meta             artifact listing the call metadata keys the agent sees
  file NAME TEXT   a stored file artifact named NAME holding TEXT (ctx.file_artifact)
  keepfile NAME T  like file, then ends the turn INPUT_REQUIRED (the task stays unfinished)
  bytes N          a stored file artifact data.bin of N bytes (a repeating pattern)
  tools            a tool call (started, input, finished) with secrets and paths in its input
                   and result, a failed one, then token usage (the a2a_service extension)
  sleep N          says it is working, then sleeps N seconds without a word, then completes
  tick             a status update every 0.05 s until canceled (busy, never silent)
  block N          blocks the event loop N seconds (time.sleep: a careless agent), then
                   completes (the server's loop runs that late: event-loop lag)
  stubborn         says it is working, then ignores every cancellation (a misbehaving agent)
  permit TARGET    asks for a permission decision with the h13 envelope (a2a_service.input),
                   acks it (permission_ack), then completes (allow_once) or rejects (deny);
                   an answer that is not exactly the expected one fails the task
  permit2 TARGET   as permit, twice in one turn (two decisions)
  later KEY        says nothing until the test sets GATES[KEY] (an asyncio.Event), then
                   answers with a direct Message `later KEY` (the first-event grace)
  print TEXT       writes TEXT to the process's stdout (print, and a raw write to descriptor
                   1, as a C library would), then echoes it (stdio keeps stdout its own)
  stored NAME BASE TEXT  a stored-file artifact as the files branch makes them: a url part
                   BASE/SHA256 named NAME with a2a_service.byteSize / sha256 of TEXT
                   (the test serves the bytes at BASE)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

from gen import a2a_pb2 as pb
from service.agent import TurnContext

GATES: dict[str, asyncio.Event] = {}  # `later KEY` waits on GATES[KEY] (made on first use)
AGENT_SECRET = "sk_live_51Hx9f8e7d6c5b4a39281706f5e4d3c"  # what a careless agent may raise with


def tool_steps(use_id: str) -> list[tuple[str, str, str]]:
    """(status, name, toolUseId) of each a2a_service.tool update of the `tools` command."""
    return [
        ("started", "read_file", use_id),
        ("input_delta", "read_file", use_id),
        ("input_complete", "read_file", use_id),
        ("completed", "read_file", use_id),
        ("started", "search", "call-2"),
        ("failed", "search", "call-2"),
    ]


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
        elif word == "print":
            print(rest, flush=True)
            os.write(1, f"{rest}\n".encode())
            await ctx.artifact(rest, name="echo")
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
        elif word == "leak":
            raise RuntimeError(f"upstream refused our key {AGENT_SECRET}")
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
        elif word == "file":
            filename, _, content = rest.partition(" ")
            await ctx.file_artifact(content.encode(), filename=filename)
        elif word == "keepfile":
            filename, _, content = rest.partition(" ")
            await ctx.file_artifact(content.encode(), filename=filename)
            await ctx.require_input("anything else?")
        elif word == "bytes":
            size = int(rest)
            pattern = bytes(range(256))
            data = pattern * (size // 256) + pattern[: size % 256]
            await ctx.file_artifact(data, filename="data.bin")
        elif word == "tools":
            use = await ctx.tool_started(
                "read_file", input={"path": "/home/alice/notes.txt", "api_key": "sk-live-123"}
            )
            await ctx.tool_input_delta(use, '{"limit": 10}')
            await ctx.tool_input_complete(use, input={"path": "/home/alice/notes.txt", "limit": 10})
            await ctx.tool_finished(
                use, result={"text": "read /home/alice/notes.txt", "token": "abc", "lines": 3}
            )
            failed = await ctx.tool_started("search", tool_use_id="call-2")
            await ctx.tool_finished(failed, failed=True, result="Bearer abcdefghijklmnopqrst")
            await ctx.usage(input_tokens=120, output_tokens=30)
            await ctx.artifact("done", name="answer")
        elif word == "sleep":
            await ctx.working("sleeping")
            await asyncio.sleep(float(rest or 30))
        elif word == "block":
            time.sleep(float(rest or 1))  # noqa: ASYNC251 - on purpose: the whole loop waits
            await ctx.artifact("unblocked", name="echo")
        elif word == "tick":
            i = 0
            while True:
                await ctx.working(f"tick {i}")
                i += 1
                await asyncio.sleep(0.05)
        elif word == "stubborn":
            await ctx.working("not stopping")
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    pass  # noqa: ASYNC - swallowed on purpose: the server must not wait forever
        elif word == "later":
            await GATES.setdefault(rest, asyncio.Event()).wait()
            await ctx.reply(f"later {rest}")
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


class ParkingAgent(ScriptedAgent):
    """ScriptedAgent that records each turn released while it waited (cancelled, but not by
    CancelTask: parked) in `ParkingAgent.released`, and as a line in the file the
    environment variable PARKED_LOG names (for a server in another process)."""

    name = "Parking test agent"
    released: list[str] = []

    async def run(self, ctx: TurnContext) -> None:
        try:
            await super().run(ctx)
        except asyncio.CancelledError:
            if not ctx.cancel_requested:
                ParkingAgent.released.append(ctx.task_id)
                _note_parked(ctx.task_id)
            raise


def _note_parked(task_id: str) -> None:
    """A line in the PARKED_LOG file (a few bytes, appended once per parked turn)."""
    path = os.environ.get("PARKED_LOG")
    if path:
        with open(path, "a") as log:
            log.write(task_id + "\n")


class RecordingAgent:
    """Echoes, and records the text of every turn it ran (tests read `RecordingAgent.turns`)."""

    name = "Recording test agent"
    turns: list[str] = []

    async def run(self, ctx: TurnContext) -> None:
        RecordingAgent.turns.append(ctx.text)
        await ctx.artifact(ctx.text, name="echo")


async def _permission(ctx: TurnContext, target: str) -> str | None:
    """Ask the caller for permission to run TARGET through the server's own side-band
    (ctx.request_permission: the envelope, the answer check and the ack are the engine's)."""
    decision = await ctx.request_permission(
        tool_name="command",
        title="Run a command",
        purpose="to test the CLI",
        effect="runs a program",
        target=target,
        read_only=False,
        summary=f"run {target}",
        prompt=f"Allow running {target}?",
    )
    return decision.decision
