"""Shared bits of the benchmark: subprocess servers on loopback, canned requests."""

from __future__ import annotations

import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gen import a2a_pb2 as pb  # noqa: E402

HOST = "127.0.0.1"  # the bench never targets anything else
READY = re.compile(r"A2A service ready: grpc=(\d+)(?: http=(\d+))?")
METADATA = (("a2a-version", "1.0"),)


def user_message(text: str) -> pb.Message:
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
    msg.parts.add(text=text)
    return msg


def send_request(text: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=user_message(text))


def canned_response(text: str = "hello bench") -> pb.SendMessageResponse:
    """What the echo agent answers: a completed task with the message and one artifact."""
    task = pb.Task(id=str(uuid.uuid4()), context_id=str(uuid.uuid4()))
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.GetCurrentTime()
    msg = task.history.add()
    msg.CopyFrom(user_message(text))
    msg.task_id, msg.context_id = task.id, task.context_id
    art = task.artifacts.add(artifact_id=uuid.uuid4().hex, name="echo")
    art.parts.add(text=text)
    return pb.SendMessageResponse(task=task)


class ServerProcess:
    """A server subprocess that prints `A2A service ready: grpc=PORT` when it listens.

    stdout and stderr go to a log file (no pipe can fill up and stall the server).
    """

    def __init__(self, name: str, argv: list[str], log_dir: pathlib.Path, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.log"
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.http_port = 0  # servers with an HTTP gateway print `http=PORT` too

    def start(self, timeout: float = 60.0) -> ServerProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env or {})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text(errors="replace"))
            if match:
                self.port = int(match.group(1))
                self.http_port = int(match.group(2) or 0)
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server {self.name!r} did not become ready:\n{self.log_tail()}")

    @property
    def target(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """user + system CPU time of the server process so far (Linux /proc)."""
        try:
            fields = pathlib.Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


async def announce_and_wait(ready_line: str) -> None:
    """Print the line the bench waits for, then block until SIGINT or SIGTERM."""
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(ready_line, flush=True)
    await stop.wait()


def port_from_argv() -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    return parser.parse_args().port


async def run_load(
    workers: list, call_once, duration: float, count: int
) -> tuple[list[float], float, int, str]:
    """Drive `call_once(worker)` from every worker until `count` calls (if set) or
    `duration` seconds. `call_once` returns None on success or an error text.
    Returns (latencies of the successful calls, elapsed, errors, first error)."""
    import asyncio

    latencies: list[float] = []
    errors = 0
    first_error = ""
    issued = 0
    start = time.perf_counter()
    deadline = start + duration

    async def loop(worker) -> None:
        nonlocal errors, first_error, issued
        while True:
            if count:
                if issued >= count:
                    return
                issued += 1
            elif time.perf_counter() >= deadline:
                return
            t0 = time.perf_counter()
            error = await call_once(worker)
            if error is not None:
                errors += 1
                first_error = first_error or error
                await asyncio.sleep(0.01)
                continue
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(loop(w) for w in workers))
    return latencies, time.perf_counter() - start, errors, first_error


async def measured_round(server: ServerProcess, load) -> dict:
    """One measured round: `load()` (a `run_load` coroutine) with the server's and this
    process's CPU taken around it, as `summarize_rounds` reads a round."""
    cpu0, cli0 = server.cpu_seconds(), time.process_time()
    latencies, elapsed, errors, first_error = await load()
    cpu1, cli1 = server.cpu_seconds(), time.process_time()
    return {
        "requests": len(latencies),
        "elapsed_s": elapsed,
        "errors": errors,
        "first_error": first_error,
        "latencies": latencies,
        "server_cpu_s": cpu1 - cpu0,
        "client_cpu_s": cli1 - cli0,
    }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of seconds, returned in milliseconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] * 1000


def summarize_rounds(key: str, label: str, rounds: list[dict]) -> dict:
    """One table row from a server's measured rounds (each a dict from a measure function)."""
    import statistics

    latencies = [x for r in rounds for x in r["latencies"]]
    rates = [r["requests"] / r["elapsed_s"] for r in rounds]
    elapsed = sum(r["elapsed_s"] for r in rounds)
    server_cpu = sum(r["server_cpu_s"] for r in rounds)
    return {
        "key": key,
        "server": label,
        "rps": statistics.median(rates),
        "rps_rounds": rates,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "requests": len(latencies),
        "errors": sum(r["errors"] for r in rounds),
        "first_error": next((r["first_error"] for r in rounds if r["first_error"]), ""),
        "server_cpu_pct": 100 * server_cpu / elapsed,
        "client_cpu_pct": 100 * sum(r["client_cpu_s"] for r in rounds) / elapsed,
        "server_cpu_ms_per_req": 1000 * server_cpu / max(1, len(latencies)),
    }


def serve_argv(*flags: str) -> list[str]:
    """`python -m service serve` on the bench's host with a free gRPC port, then `flags`."""
    return [sys.executable, "-m", "service", "serve", "--host", HOST, "--grpc-port", "0", *flags]
