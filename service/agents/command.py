"""Runs a configured program once per turn and streams what it prints.

stdin is the message text; stdout becomes one artifact, chunk by chunk (no
artifact when it prints nothing, never an empty part); exit status 0 completes
the task, anything else fails it with the tail of stderr. Cancellation sends
SIGTERM, then SIGKILL after a grace period. The program runs
in the message's working directory (metadata a2a_service.cwd, checked by
service.inputs.workspace) when it names one; otherwise each context gets its own
directory under the data directory, kept across turns.

Each turn also gets a fresh, empty directory named by the environment variable
`A2A_OUTPUT_DIR`; every regular file the program leaves there (subdirectories
included) becomes a stored file artifact (service.engine.files; media type guessed
from the name, artifact name = the path inside the directory), after the program
exited, whatever its status. Symbolic links and special files are ignored. A file
over the size limits fails the turn, saying which and why. The directory is made just
before the program starts (after any permission pause) and removed after the turn; one
left by a process that died during its turn goes with the idle contexts
(`context_idle_timeout`).

The program's environment is not the server's: only PATH, HOME, LANG, LC_*, TZ and
TMPDIR are passed on, plus what `command_env` names (`program_environment`), so the
server's credentials (A2A_* settings, OTEL_* exporter headers) never reach the program.

With `approval` (`command_approval = true`) each turn first asks permission
(`ctx.request_permission`, tool name `command`, target = the command line, summary = the
message text summarised, secrets masked in both): `allow_once` runs the program, `deny`
rejects the task without running it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import pathlib
import re
import shlex
import shutil
import signal
import stat
import time
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.agent import FileArtifactLimitError, TurnContext, cwd_of, text_of
from service.permission.envelope import is_answer
from service.protocol.ids import uuid7

WORKDIR_PREFIX = "ctx-"
OUTPUTS_PREFIX = "turn-"  # a turn's A2A_OUTPUT_DIR under the output root
EVICTED_PREFIX = ".evicted-"  # a workspace being deleted (idle eviction), out of workdir()'s way
CHUNK_BYTES = 64 * 1024
FLUSH_SECONDS = 0.5  # a held-back stdout chunk goes out after this much silence
STDERR_TAIL = 2000
OUTPUT_DIR_ENV = "A2A_OUTPUT_DIR"
DENIED_MESSAGE = "The caller denied permission to run the command; it was not run."
# What the program gets of the server's environment unless `command_env` names more.
INHERITED_ENV = frozenset(("PATH", "HOME", "LANG", "TZ", "TMPDIR"))
INHERITED_ENV_PREFIX = "LC_"
# The server's own variables: its settings (credentials among them) and its telemetry's
# (exporter headers, client keys). Refused even when `command_env` names them.
SERVER_ENV_PREFIXES = ("A2A_", "OTEL_")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_NAME = (
    r"[A-Za-z0-9_.-]*(?:pass(?:word|wd)?|secret|token|key|auth|credential|private)[A-Za-z0-9_.-]*"
)
_SECRET_FLAG = re.compile(rf"-{{1,2}}{_SECRET_NAME}", re.IGNORECASE)
_SECRETS = [
    (re.compile(rf"\b({_SECRET_NAME})([=:])\S+", re.IGNORECASE), r"\1\2***"),  # NAME=value
    (re.compile(r"(\w+://)[^/@\s]+@"), r"\1***@"),  # URL credentials
    (re.compile(r"\b(bearer|basic)\s+\S+", re.IGNORECASE), r"\1 ***"),  # auth header values
]


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
        output_root: str | pathlib.Path | None = None,
        approval: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`env`: the program's environment without A2A_OUTPUT_DIR (`program_environment`;
        default: what it passes on of this process's environment)."""
        self.env = dict(program_environment() if env is None else env)
        self.argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise ValueError("the command agent needs a program to run (--command / A2A_COMMAND)")
        self.workspace_root = pathlib.Path(workspace_root)
        self.output_root = (
            pathlib.Path(output_root)
            if output_root is not None
            else self.workspace_root.parent / "outputs"
        )
        self.kill_grace_seconds = kill_grace_seconds
        self.approval = approval
        self._live_outputs: set[str] = set()  # names of the turn directories in use now

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
        # A turn's output directory outlives it only when the process died during the turn
        # (kill -9): no turn of this process uses it, so it goes once it is as old.
        await asyncio.to_thread(
            _remove_stale_outputs, self.output_root, cutoff, set(self._live_outputs)
        )
        return len(doomed)

    async def run(self, ctx: TurnContext) -> None:
        request = _turn_message(ctx)
        text = text_of(request)
        cwd = cwd_of(_metadata(request)) or self.workdir(ctx.context_id)
        if self.approval:
            decision = await ctx.request_permission(
                tool_name="command",
                title="Run a command",
                purpose="The command agent runs its configured program for each message.",
                effect="Runs the program with the message text on its standard input.",
                target=masked(shlex.join(self.argv)),
                read_only=False,
                summary=summarise(text),
            )
            if not decision.allowed:
                await ctx.reject(DENIED_MESSAGE)
                return
        # Made only now, after any permission pause: a task waiting for its decision (for
        # days, or across a kill -9) holds no directory. Absolute: the program runs in its
        # working directory, not in ours.
        outputs = self.output_root.absolute() / f"{OUTPUTS_PREFIX}{uuid7()}"
        self._live_outputs.add(outputs.name)
        try:
            outputs.mkdir(mode=0o700, parents=True)
            await self._run_program(ctx, text, cwd, outputs)
        finally:
            await asyncio.to_thread(shutil.rmtree, outputs, True)
            self._live_outputs.discard(outputs.name)

    async def _run_program(
        self, ctx: TurnContext, text: str, cwd: str | pathlib.Path, outputs: pathlib.Path
    ) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env={**self.env, OUTPUT_DIR_ENV: str(outputs)},
        )
        try:
            await ctx.working()
            feed = asyncio.ensure_future(self._feed(proc, text.encode()))
            tail = asyncio.ensure_future(self._stderr_tail(proc))
            await self._stream_stdout(proc, ctx)
            code = await proc.wait()
            await feed
            err = await tail
        except asyncio.CancelledError:
            await self._stop(proc)
            raise
        try:
            await self._store_outputs(ctx, outputs)
        except FileArtifactLimitError as exc:
            await ctx.fail(f"An output file of the command was not stored: {exc}")
            return
        if code == 0:
            await ctx.complete()
        else:
            detail = f": {err}" if err else ""
            await ctx.fail(f"The command exited with status {code}{detail}")

    async def _store_outputs(self, ctx: TurnContext, outputs: pathlib.Path) -> None:
        """Every regular file left in the output directory, as a stored file artifact."""
        for relative, path in await asyncio.to_thread(_regular_files, outputs):
            try:
                await ctx.file_artifact(path, name=relative)
            except FileArtifactLimitError:
                raise
            except (ValueError, OSError):
                continue  # since the listing: removed, or replaced by a link or a FIFO

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


def program_environment(
    entries: Sequence[str] = (),
    source: Mapping[str, str] | None = None,
    secret_files: Sequence[str] = (),
) -> dict[str, str]:
    """The program's environment (A2A_OUTPUT_DIR is added per turn): PATH, HOME, LANG, LC_*,
    TZ and TMPDIR of `source` (default: this process's environment), then the `command_env`
    `entries`: `NAME` passes the variable of `source` on when it is set, `NAME=VALUE` sets it.

    An allow-list, because the server's environment holds its credentials. ValueError for
    a name of the server's own (A2A_*, OTEL_*, in any case) and for a value that names one
    of the server's `secret_files`: the operator asked for something that must not leak.
    """
    source = os.environ if source is None else source
    env = {
        name: value
        for name, value in source.items()
        if name in INHERITED_ENV or name.startswith(INHERITED_ENV_PREFIX)
    }
    protected = {os.path.realpath(path) for path in secret_files}
    for entry in entries:
        name, assigned, value = entry.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{entry!r} is not NAME or NAME=VALUE (NAME: letters, digits, _)")
        if name.upper().startswith(SERVER_ENV_PREFIXES):
            raise ValueError(
                f"{name}: the server's own variables (A2A_*, OTEL_*) are never passed to the "
                "program; give it a name of its own (NAME=VALUE)"
            )
        if not assigned:
            if name not in source:
                continue
            value = source[name]
        if protected and _names_one_of(value, protected):
            raise ValueError(
                f"{name}: its value names a file holding the server's keys or secrets; "
                "the program must not be pointed at it"
            )
        env[name] = value
    return env


def _names_one_of(value: str, paths: set[str]) -> bool:
    """Whether `value`, or one entry of it as a PATH-like list, is one of `paths` (resolved)."""
    candidates = {value, *value.split(os.pathsep)}
    return any(os.path.realpath(c) in paths for c in candidates if c)


def _regular_files(root: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """(path inside root with '/', path) of every regular file below root, sorted; links
    (to files or directories) and special files are left out."""
    found: list[tuple[str, pathlib.Path]] = []
    for directory, _dirs, files in os.walk(root, followlinks=False):
        base = pathlib.Path(directory)
        for name in files:
            path = base / name
            try:
                if stat.S_ISREG(path.lstat().st_mode):
                    found.append((path.relative_to(root).as_posix(), path))
            except OSError:
                continue
    return sorted(found)


def _turn_message(ctx: TurnContext) -> pb.Message:
    """The message this turn runs the program for: the turn's own, or, when the turn was
    started by the answer to a permission request of a lost turn, the caller's last message
    before it."""
    if ctx.resumed_decision is not None and ctx.task is not None:
        message: pb.Message  # (protobuf's repeated fields are untyped)
        for message in reversed(ctx.task.history):
            if message.role == pb.ROLE_USER and not is_answer(message):
                return message
    return ctx.message


def _metadata(message: pb.Message) -> dict[str, Any]:
    if not message.HasField("metadata"):
        return {}
    out: dict[str, Any] = json_format.MessageToDict(message.metadata)
    return out


def masked(text: str) -> str:
    """Text for a permission prompt with secret-looking values replaced by ***: values of
    flags and NAME=value pairs whose name says password, token, key…, URL credentials, and
    Authorization values."""
    words = text.split(" ")
    for i, word in enumerate(words[:-1]):
        if _SECRET_FLAG.fullmatch(word):
            words[i + 1] = "***"
    out = " ".join(words)
    for pattern, replacement in _SECRETS:
        out = pattern.sub(replacement, out)
    return out


def summarise(text: str) -> str:
    """The message text in one short line, secrets masked, with its size."""
    lines = text.splitlines() or [""]
    first = masked(lines[0].strip())
    if len(first) > 80:
        first = first[:79] + "…"
    size = len(text.encode())
    more = f", {len(lines)} lines" if len(lines) > 1 else ""
    return f"stdin: {first!r} ({size} bytes{more})"


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


def _remove_stale_outputs(root: pathlib.Path, cutoff: float, live: set[str]) -> None:
    """Turn output directories under `root` older than `cutoff` that no turn uses."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        try:
            if (
                entry.name.startswith(OUTPUTS_PREFIX)
                and entry.name not in live
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < cutoff
            ):
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


def _remove_all(paths: list[pathlib.Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
