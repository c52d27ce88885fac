"""Runs a configured program once per turn and streams what it prints.

stdin is the message text; stdout becomes one artifact, chunk by chunk (no
artifact when it prints nothing, never an empty part); exit status 0 completes
the task, anything else fails it with the tail of stderr. Cancellation sends
SIGTERM, then SIGKILL after a grace period. The program runs
in the message's working directory (metadata a2a_service.cwd, checked by
service.inputs.workspace) when it names one; otherwise each context gets its own
directory under the data directory, kept across turns.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import pathlib
import shlex
import shutil
import signal
import time
from collections.abc import Sequence

from service.agent import TurnContext, cwd_of

WORKDIR_PREFIX = "ctx-"
EVICTED_PREFIX = ".evicted-"  # a workspace being deleted (idle eviction), out of workdir()'s way
CHUNK_BYTES = 64 * 1024
FLUSH_SECONDS = 0.5  # a held-back stdout chunk goes out after this much silence
STDERR_TAIL = 2000


class CommandAgent:
    name = "Command"
    description = "Runs a configured program for each message and streams its output."
    skills = [
        {
            "id": "command",
            "name": "Run command",
            "description": "Feeds the message text to a program and returns what it prints.",
            "tags": ["command", "process"],
        }
    ]

    def __init__(
        self,
        argv: Sequence[str] | str = (),
        workspace_root: str | pathlib.Path = "data/workspaces",
        kill_grace_seconds: float = 5.0,
    ) -> None:
        self.argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise ValueError("the command agent needs a program to run (--command / A2A_COMMAND)")
        self.workspace_root = pathlib.Path(workspace_root)
        self.kill_grace_seconds = kill_grace_seconds

    def workdir(self, context_id: str) -> pathlib.Path:
        # Prefixed so that ids such as '..' can never name a directory outside the root.
        path = self.workspace_root / f"{WORKDIR_PREFIX}{context_id}"
        path.mkdir(parents=True, exist_ok=True)
        os.utime(path)  # used now: idle eviction goes by this time
        return path

    async def evict_idle_contexts(self, idle_seconds: float, active: set[str]) -> int:
        """Remove the directories of contexts unused for `idle_seconds` (context_idle_timeout)
        and not in `active` (contexts with a turn in this process). Old ones are found and
        deleted on a thread; the move out of the way happens on the loop, where workdir()
        runs, after a last look, so a turn never gets a directory that is being deleted."""
        cutoff = time.time() - idle_seconds
        root = self.workspace_root
        candidates = await asyncio.to_thread(_idle_workdirs, root, cutoff)
        doomed = []
        for path in candidates:
            if path.name[len(WORKDIR_PREFIX) :] in active:
                continue
            try:
                if path.stat().st_mtime >= cutoff:
                    continue  # used since the scan
                target = root / f"{EVICTED_PREFIX}{path.name}"
                path.rename(target)
            except OSError:
                continue
            doomed.append(target)
        if doomed:
            await asyncio.to_thread(_remove_all, doomed)
        return len(doomed)

    async def run(self, ctx: TurnContext) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=cwd_of(ctx.metadata) or self.workdir(ctx.context_id),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            await ctx.working()
            feed = asyncio.ensure_future(self._feed(proc, ctx.text.encode()))
            tail = asyncio.ensure_future(self._stderr_tail(proc))
            await self._stream_stdout(proc, ctx)
            code = await proc.wait()
            await feed
            err = await tail
        except asyncio.CancelledError:
            await self._stop(proc)
            raise
        if code == 0:
            await ctx.complete()
        else:
            detail = f": {err}" if err else ""
            await ctx.fail(f"The command exited with status {code}{detail}")

    async def _feed(self, proc: asyncio.subprocess.Process, data: bytes) -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()

    async def _stream_stdout(self, proc: asyncio.subprocess.Process, ctx: TurnContext) -> None:
        """stdout as one artifact whose last chunk carries last_chunk (and no empty part).

        Each chunk is held back until the next one arrives, so the one before end of file
        can be sent as the last; a chunk held for FLUSH_SECONDS of silence goes out anyway
        (streaming stays live), and if the program then exits without printing more, the
        artifact ends without a last_chunk marker: the task's final status closes it. No
        output at all: no artifact.
        """
        assert proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        artifact_id: str | None = None
        held = ""

        async def send(text: str, last: bool) -> None:
            nonlocal artifact_id
            artifact_id = await ctx.artifact(
                text,
                artifact_id=artifact_id,
                name="stdout",
                append=artifact_id is not None,
                last_chunk=last,
            )

        read = asyncio.ensure_future(proc.stdout.read(CHUNK_BYTES))
        try:
            while True:
                if held and not (await asyncio.wait({read}, timeout=FLUSH_SECONDS))[0]:
                    await send(held, False)
                    held = ""
                chunk = await read
                if not chunk:
                    break
                read = asyncio.ensure_future(proc.stdout.read(CHUNK_BYTES))
                text = decoder.decode(chunk)
                if text:
                    if held:
                        await send(held, False)
                    held = text
        finally:
            read.cancel()
        held += decoder.decode(b"", final=True)
        if held:
            await send(held, True)

    async def _stderr_tail(self, proc: asyncio.subprocess.Process) -> str:
        assert proc.stderr is not None
        tail = b""
        while chunk := await proc.stderr.read(CHUNK_BYTES):
            tail = (tail + chunk)[-STDERR_TAIL:]
        return tail.decode("utf-8", errors="replace").strip()

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM to the command's whole process group, SIGKILL after the grace period."""
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.kill_grace_seconds)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def _idle_workdirs(root: pathlib.Path, cutoff: float) -> list[pathlib.Path]:
    """Context directories under `root` last used before `cutoff` (and leftovers of an
    eviction that was interrupted)."""
    found = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.name.startswith(EVICTED_PREFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif (
                entry.name.startswith(WORKDIR_PREFIX)
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < cutoff
            ):
                found.append(pathlib.Path(entry.path))
        except OSError:
            continue
    return found


def _remove_all(paths: list[pathlib.Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
