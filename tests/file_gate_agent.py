"""An agent that holds its turn until a file says go, for tests across processes (a replica
killed while it surely holds a request): the message text is `gate DIR`."""

from __future__ import annotations

import asyncio
import os
import pathlib

from service.agent import TurnContext


class FileGateAgent:
    """Writes `DIR/started-PID` when a turn starts, waits until `DIR/release` exists, then
    answers naming the process that answered."""

    async def run(self, ctx: TurnContext) -> None:
        folder = pathlib.Path(ctx.text.split(" ", 1)[1].strip())
        (folder / f"started-{os.getpid()}").write_text("")
        while not (folder / "release").exists():  # noqa: ASYNC110 - a file, another process
            await asyncio.sleep(0.05)
        await ctx.complete(f"answered by {os.getpid()}")
