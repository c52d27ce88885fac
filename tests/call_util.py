"""Running `a2a-call` in tests: the console script as a process, its JSON lines."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests.bench.common import ServerProcess
from tests.process import ROOT

SCRIPT = str(pathlib.Path(sys.executable).parent / "a2a-call")  # the console script


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_CALL_")}
    return {**env, "PYTHONPATH": str(ROOT), **(extra or {})}


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess:
    """Run the `a2a-call` console script with ARGS (stdin not a terminal)."""
    return subprocess.run(
        [SCRIPT, *args],
        cwd=ROOT,
        env=cli_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def state_of(event: dict) -> str | None:
    if "task" in event:
        return event["task"]["status"]["state"]
    if "statusUpdate" in event:
        return event["statusUpdate"]["status"]["state"]
    return None


def serve_for_cli(
    tmp: pathlib.Path, name: str, agent: str, *args: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """A real server process for the CLI to call: both ports free, its data under tmp/name,
    a quick drain at the end."""
    argv = [
        sys.executable,
        "-m",
        "service",
        "serve",
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--data-dir",
        str(tmp / name),
        "--agent",
        agent,
        *args,
    ]
    extra = {"A2A_DRAIN_GRACE_SECONDS": "0", "A2A_DRAIN_SECONDS": "1", **(env or {})}
    return ServerProcess(name, argv, tmp, env=extra).start()
