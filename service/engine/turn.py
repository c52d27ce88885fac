"""A started turn: what `Engine.send` hands back, on this process or forwarded to another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gen import a2a_pb2 as pb
from service.engine.run import TaskRun


@dataclass
class Turn:
    """A started turn: its run, its outcome future, and (for streams) its subscription."""

    run: TaskRun
    outcome: asyncio.Future[pb.Message | None]
    events: AsyncIterator[pb.StreamResponse] | None = None
    remote: bool = False  # the turn runs on another process (`run` is a detached copy)
