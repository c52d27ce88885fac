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
  sleep N          says it is working, then sleeps N seconds without a word, then completes
  tick             a status update every 0.05 s until canceled (busy, never silent)
"""

from __future__ import annotations

import asyncio

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
        elif word == "sleep":
            await ctx.working("sleeping")
            await asyncio.sleep(float(rest or 30))
        elif word == "tick":
            i = 0
            while True:
                await ctx.working(f"tick {i}")
                i += 1
                await asyncio.sleep(0.05)
        elif word == "reject":
            await ctx.reject("no thanks")
        elif word == "burst":  # many chunks, yielding to the loop between them
            art = None
            for i in range(int(rest or 10)):
                art = await ctx.artifact(f"b{i}", artifact_id=art, append=i > 0)
                await asyncio.sleep(0)
        else:
            await ctx.artifact(ctx.text, name="echo")


class RecordingAgent:
    """Echoes, and records the text of every turn it ran (tests read `RecordingAgent.turns`)."""

    name = "Recording test agent"
    turns: list[str] = []

    async def run(self, ctx: TurnContext) -> None:
        RecordingAgent.turns.append(ctx.text)
        await ctx.artifact(ctx.text, name="echo")
