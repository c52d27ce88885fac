"""JSON-RPC over stdin/stdout (`serve --transport stdio`, docs/transports.md), through a real
subprocess's pipes: the shared scenario set, end of stdin draining (what is in flight
answered, an open stream ended resumable, exit 0), and stdout holding frames only.

The process is the connection: the scenarios share one process, each "connection" a
client on its pipes that takes the answers to its own request ids (and the id-less
answers to malformed or oversized frames). A dropped connection cannot be had short of
ending the process, so the resume scenario's old stream simply goes on unread.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest

from tests.process import ROOT, is_ready_line, shows_traceback
from tests.transport_scenarios import (
    ALICE,
    CONNECTION_SCENARIOS,
    SCENARIO_SETTINGS,
    FrameClient,
    drain_mid_stream,
    message,
    result,
)

NOISE = "noise-for-stdout-0451"


def toml_of(settings: dict[str, Any]) -> str:
    """The scenario settings as a config file (tables of lists last, as TOML wants)."""
    plain, tables = [], []
    for key, value in settings.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for table in value:
                tables.append(f"[[{key}]]")
                tables += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
        else:
            plain.append(f"{key} = {json.dumps(value)}")
    return "\n".join(plain + tables) + "\n"


class StdioServer:
    """`serve --transport stdio` with its three pipes; answers routed to the client whose
    request id they carry."""

    def __init__(self, workdir: pathlib.Path) -> None:
        config = workdir / "scenario.toml"
        config.write_text(toml_of({**SCENARIO_SETTINGS, "push_notifications": True}))
        self.args = [
            sys.executable, "-m", "service", "serve", "--config", str(config),
            "--transport", "stdio", "--grpc-port", "-1", "--http-port", "-1",
            "--store", "memory:", "--data-dir", str(workdir / "data"),
        ]  # fmt: skip
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "A2A_DRAIN_GRACE_SECONDS": "0",
            "A2A_DRAIN_SECONDS": "1",
            "A2A_LOG_FORMAT": "json",
        }
        self.stderr: list[str] = []
        self.stray: list[bytes] = []  # stdout lines that are not answer frames
        self.clients: set[PipeClient] = set()
        self.owners: dict[Any, PipeClient] = {}
        self.lock = threading.Lock()
        self.writing = threading.Lock()
        self.ready = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> StdioServer:
        self.proc = subprocess.Popen(
            self.args,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self.ready.wait(60):
            self.proc.kill()
            raise RuntimeError("not ready:\n" + "".join(self.stderr))
        return self

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.stderr.append(line)
            if is_ready_line(line):
                self.ready.set()

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                frame = json.loads(line)
            except ValueError:
                frame = None
            if not isinstance(frame, dict) or not isinstance(frame.get("final"), bool):
                self.stray.append(line)
                continue
            with self.lock:
                rid = frame.get("id")
                owner = self.owners.get(rid) if rid is not None else None
                targets = [owner] if owner is not None else list(self.clients)
            for client in targets:
                client.inbox.put(line)
        with self.lock:
            for client in self.clients:
                client.inbox.put(None)

    def send(self, raw: bytes, client: PipeClient) -> None:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        with self.lock:
            if isinstance(doc, dict) and doc.get("id") is not None:
                self.owners[doc["id"]] = client
        assert self.proc is not None and self.proc.stdin is not None
        with self.writing:  # one line at a time
            self.proc.stdin.write(raw + b"\n")
            self.proc.stdin.flush()

    def end_input(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    async def connect(self) -> PipeClient:
        client = PipeClient(self)
        client.start()
        return client


class PipeClient(FrameClient):
    """One "connection" on the server's pipes: its own requests' answers."""

    def __init__(self, server: StdioServer) -> None:
        super().__init__()
        self.server = server
        self.inbox: queue.Queue[bytes | None] = queue.Queue()
        with server.lock:
            server.clients.add(self)

    async def write(self, raw: bytes) -> None:
        await asyncio.to_thread(self.server.send, raw, self)

    async def read(self) -> bytes | None:
        return await asyncio.to_thread(self.inbox.get)

    async def aclose(self) -> None:
        with self.server.lock:
            self.server.clients.discard(self)
        self.inbox.put(None)  # wakes the thread waiting in read()
        await super().aclose()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = StdioServer(tmp_path_factory.mktemp("stdio")).start()
    yield running
    if running.proc is not None and running.proc.poll() is None:
        running.end_input()
        running.wait()


@pytest.mark.parametrize("scenario", CONNECTION_SCENARIOS, ids=lambda s: s.__name__)
async def test_scenario(server, scenario):
    await scenario(server.connect)


async def test_the_card_lists_stdio_alone(server):
    """gRPC and HTTP off: the card read over stdio names stdio as its only interface."""
    client = await server.connect()
    try:
        card = result(await client.call("GetExtendedAgentCard", {}, ALICE))
    finally:
        await client.aclose()
    assert card["supportedInterfaces"] == [
        {
            "url": "stdio:",
            "protocolBinding": "urn:a2a-service:binding:stdio",
            "protocolVersion": "1.0",
        }
    ]


async def test_stdout_holds_answer_frames_only(server):
    """What the agent prints (print() and a raw write to descriptor 1) and the ready line
    go to stderr; at the end of stdin the process exits 0; stdout held frames only."""
    client = await server.connect()
    try:
        answer = await client.call("SendMessage", message(f"print {NOISE}"), ALICE)
        assert result(answer)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await client.aclose()
    server.end_input()
    assert server.wait() == 0
    err = "".join(server.stderr)
    assert server.stray == [], server.stray
    assert err.count(NOISE) == 2 and any(is_ready_line(line) for line in server.stderr)
    assert not shows_traceback(err), err


async def test_end_of_input_answers_what_is_in_flight_then_drains(tmp_path):
    """End of stdin: the unary call read before it is answered, the open stream ends with
    the resumable error (drain_mid_stream), the process exits 0."""
    server = StdioServer(tmp_path).start()
    try:
        other = await server.connect()
        unary: list[str] = []

        async def end_input() -> None:
            unary.append(await other.request("SendMessage", message("slow 4"), ALICE))
            await asyncio.to_thread(server.end_input)

        await drain_mid_stream(server.connect, end_input)
        answered = await other.next(unary[0])
        assert result(answered)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await other.aclose()
        assert await asyncio.to_thread(server.wait) == 0
        assert server.stray == [] and not shows_traceback("".join(server.stderr))
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
