"""Run the real service as a child process (`python -m service serve`) for process-level tests."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def shows_traceback(text: str) -> bool:
    """A server's output holds an exception: a text traceback, or a JSON record's field."""
    return "Traceback" in text or '"exception": ' in text


READY = "A2A service ready"


def is_ready_line(line: str) -> bool:
    """`serve` said it is ready: the text line, or (log in JSON) a record whose message is it."""
    if line.startswith(READY):
        return True
    if not line.startswith("{"):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and str(record.get("message", "")).startswith(READY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc): the workers of `serve --workers`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m service serve --host 127.0.0.1 ARGS` to its end (startup failures)."""
    return subprocess.run(
        [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


class ServerProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.grpc_port = free_port()
        self.args = [
            "--host",
            "127.0.0.1",
            "--grpc-port",
            str(self.grpc_port),
            "--http-port",
            "-1",
            *args,
        ]
        # No drain grace unless a test asks for one: nothing balances load in front of it.
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "A2A_DRAIN_GRACE_SECONDS": "0",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", *self.args],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server exited during startup:\n" + "".join(self.output))
            self.output.append(line)
            if is_ready_line(line):
                # Keep reading: access lines would fill the pipe and block the server.
                self._reader = threading.Thread(target=self._read_rest, daemon=True)
                self._reader.start()
                return self
        raise RuntimeError("server did not become ready:\n" + "".join(self.output))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def rest_of_output(self) -> str:
        """Everything the server wrote (call it after it stopped)."""
        assert self.proc is not None and self.proc.stdout is not None
        if self._reader is not None:
            self._reader.join(30)
            return "".join(self.output)
        return "".join(self.output) + self.proc.stdout.read()
