"""The default agent: answers each message with its own text, as a task with one artifact."""

from __future__ import annotations

from service.agent import TurnContext


class EchoAgent:
    name = "Echo"
    description = "Replies with the text it receives, as a completed task with one artifact."
    skills = [
        {
            "id": "echo",
            "name": "Echo",
            "description": "Returns the text of the message it was sent.",
            "tags": ["echo", "diagnostics"],
            "examples": ["hello"],
        }
    ]

    async def run(self, ctx: TurnContext) -> None:
        await ctx.artifact(ctx.text, name="echo")
