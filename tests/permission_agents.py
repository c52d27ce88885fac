"""A test agent for the permission side-band, behaviour chosen by the message text.

  tool NAME [TARGET]   asks permission to use NAME on TARGET; allowed: artifact "ran NAME",
                       then completed; denied: rejected "denied NAME"
  twice NAME           asks for two uses of NAME (targets one, two) in one turn
  ask                  a plain question (ctx.ask), not a permission request
  hold                 works (holding its turn slot) until the test sets RELEASE, then completes

On a turn started by the answer to a lost turn's request (after a restart), it asks again
for the same tool and target and gets the decision without a new pause; its artifact says
so ("resumed"). Auto decisions say "auto".
"""

from __future__ import annotations

import asyncio

from gen import a2a_pb2 as pb
from service.agent import TurnContext, text_of
from service.permission.envelope import is_answer

# "hold" turns end when a test (in the server's process) sets it; a test using them puts a
# fresh one here first (an Event belongs to the event loop of the test that made it).
RELEASE = asyncio.Event()


def _request_text(ctx: TurnContext) -> str:
    if ctx.resumed_decision is not None and ctx.task is not None:
        for message in reversed(ctx.task.history):
            if message.role == pb.ROLE_USER and not is_answer(message):
                return text_of(message)
    return ctx.text


class PermissionAgent:
    name = "Permission test agent"
    description = "Asks permission before using a tool."

    async def run(self, ctx: TurnContext) -> None:
        word, _, rest = _request_text(ctx).partition(" ")
        if word == "hold":
            await ctx.working()
            await RELEASE.wait()
            return
        if word == "ask":
            answer = await ctx.ask("what?")
            await ctx.artifact(f"you said: {text_of(answer)}", name="answer")
            return
        name, _, target = rest.partition(" ")
        targets = ["one", "two"] if word == "twice" else [target or "somewhere"]
        for where in targets:
            decision = await ctx.request_permission(
                tool_name=name or "tool",
                title=f"Use {name or 'tool'}",
                purpose="a test asks",
                effect="nothing happens",
                target=where,
                read_only=True,
                summary=f"uses {name} on {where}",
            )
            if not decision.allowed:
                await ctx.reject(f"denied {name}")
                return
            notes = "".join(
                f" ({note})"
                for note, on in (("resumed", decision.resumed), ("auto", decision.auto))
                if on
            )
            await ctx.artifact(f"ran {name} on {where}{notes}", name="result")
