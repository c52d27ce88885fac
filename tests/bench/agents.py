"""Agents for the benchmark, loaded with `--agent tests.bench.agents:ChunkAgent`.

ChunkAgent: the message text is `N` or `N K`; the agent emits one artifact in N chunks
(append / lastChunk, like a model streaming tokens) as fast as it can, handing the
event loop back every K chunks (default 1, so the engine's flusher can run while the
agent is still producing; K=0 never yields), then the turn completes.

AskAgent: asks a question (ctx.ask) and completes with `got ANSWER` when ask() returns it, or
with `resumed ANSWER` when the answer starts a new turn (the paused turn was parked).

FileAgent: the message text is `file N` (bytes) or `file NMiB`; the agent stores that many
random bytes as one file artifact (ctx.file_artifact), then the turn completes.
"""

from __future__ import annotations

import asyncio
import os

from gen import a2a_pb2 as pb
from service.agent import TurnContext

CHUNK_TEXT = "token "


class ChunkAgent:
    name = "Chunk bench agent"
    description = "Streams one artifact in N chunks as fast as it can."

    async def run(self, ctx: TurnContext) -> None:
        words = ctx.text.split()
        n = int(words[0]) if words else 100
        every = int(words[1]) if len(words) > 1 else 1
        art = None
        for i in range(n):
            art = await ctx.artifact(
                CHUNK_TEXT, artifact_id=art, name="stream", append=i > 0, last_chunk=i == n - 1
            )
            if every and (i + 1) % every == 0:
                await asyncio.sleep(0)


class FileAgent:
    name = "File bench agent"
    description = "Stores N random bytes as one file artifact."

    async def run(self, ctx: TurnContext) -> None:
        spec = ctx.text.split()[-1]
        size = int(spec[:-3]) * 1024 * 1024 if spec.endswith("MiB") else int(spec)
        await ctx.file_artifact(os.urandom(size), filename="bench.bin")


class AskAgent:
    name = "Ask bench agent"
    description = "Asks one question, then completes with the answer."

    async def run(self, ctx: TurnContext) -> None:
        if ctx.task is not None and ctx.task.status.state == pb.TASK_STATE_INPUT_REQUIRED:
            await ctx.complete(f"resumed {ctx.text}")  # a parked turn's answer: a new turn
            return
        answer = await ctx.ask("Which one?")
        await ctx.complete(f"got {answer.parts[0].text}")
