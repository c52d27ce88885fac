"""`make bench`, push part: notifications delivered per second to a fast local receiver,
with the `local-file` queue and with `redis-streams`.

Our server runs as a subprocess (SQLite store, ChunkAgent, push enabled, the loopback
receiver allowed by `push_allow_networks`). T streaming turns, 8 at a time, each with a
push config pointing at a minimal asyncio HTTP/1.1 receiver in this process that answers
`200` at once; every task event becomes one POST. The rate is unique notifications
received / (last arrival - first arrival); "lag" is how long after the last turn ended the
last notification arrived. Both queues run under the same conditions; the Redis row needs
Redis at REDIS_URL (default redis://127.0.0.1:6379/0) and is marked skipped without it
(an error under CI=true).

Standalone: python tests/bench/push_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402

from gen import a2a_pb2 as pb  # noqa: E402
from gen import a2a_pb2_grpc  # noqa: E402
from tests.bench.common import (  # noqa: E402
    HOST,
    METADATA,
    ServerProcess,
    serve_argv,
    user_message,
)
from tests.push_util import delete_prefix  # noqa: E402

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class FastReceiver:
    """Counts POSTs by idempotency key and answers 200 with no body."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.requests = 0
        self.first = self.last = 0.0
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._want = 0
        self.complete = asyncio.Event()

    def expect(self, n: int) -> None:
        self._want = n
        if len(self.keys) >= n:
            self.complete.set()

    async def start(self) -> FastReceiver:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length, key = 0, ""
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"idempotency-key":
                        key = value.strip().decode()
                await reader.readexactly(length)
                now = time.perf_counter()
                self.first = self.first or now
                self.last = now
                self.requests += 1
                self.keys.add(key)
                if self._want and len(self.keys) >= self._want:
                    self.complete.set()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


async def _redis_ok() -> str:
    try:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            await asyncio.wait_for(client.ping(), 3)
        finally:
            await client.aclose()
        return ""
    except Exception as exc:
        return f"Redis not reachable at {REDIS_URL}: {exc}"


async def _turn(stub, url: str, chunks: int) -> int:
    request = pb.SendMessageRequest(message=user_message(str(chunks)))
    request.configuration.task_push_notification_config.url = url
    return len([e async for e in stub.SendStreamingMessage(request, metadata=METADATA)])


async def measure_queue(queue: str, tmp: pathlib.Path, tasks: int, chunks: int) -> dict:
    row: dict = {"queue": queue, "tasks": tasks, "chunks_per_task": chunks}
    env = {
        "A2A_PUSH_NOTIFICATIONS": "true",
        "A2A_PUSH_ALLOW_NETWORKS": f"{HOST}/32",
        "A2A_PUSH_QUEUE": queue,
    }
    prefix = ""
    if queue == "redis-streams":
        problem = await _redis_ok()
        if problem:
            return row | {"skipped": problem}
        prefix = f"bench-push:{uuid.uuid4().hex[:8]}"
        env |= {"A2A_PUSH_REDIS_URL": REDIS_URL, "A2A_PUSH_REDIS_PREFIX": prefix}
    argv = serve_argv(
        "--http-port",
        "-1",
        "--data-dir",
        str(tmp / f"push-{queue}"),
        "--agent",
        "tests.bench.agents:ChunkAgent",
        "--log-level",
        "WARNING",
    )
    receiver = await FastReceiver().start()
    server = ServerProcess(f"push-{queue}", argv, tmp, env=env).start()
    try:
        url = f"http://{HOST}:{receiver.port}/hook"
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            cpu0 = server.cpu_seconds()
            limit = asyncio.Semaphore(8)

            async def one() -> int:
                async with limit:
                    return await _turn(stub, url, chunks)

            expected = sum(await asyncio.gather(*(one() for _ in range(tasks))))
            produced = time.perf_counter()
            receiver.expect(expected)
            try:
                await asyncio.wait_for(receiver.complete.wait(), max(60.0, expected / 100))
            except TimeoutError:
                pass
            cpu1 = server.cpu_seconds()
        got = len(receiver.keys)
        span = receiver.last - receiver.first
        row |= {
            "notifications": expected,
            "received": got,
            "requests": receiver.requests,
            "per_s": (got - 1) / span if span > 0 else float("nan"),
            "lag_s": max(0.0, receiver.last - produced),
            "server_cpu_s": cpu1 - cpu0,
        }
        if got < expected:
            row["error"] = f"only {got} of {expected} notifications arrived"
        return row
    finally:
        server.stop()
        await receiver.stop()
        if prefix:
            await delete_prefix(prefix)


async def bench_push(args, tmp: pathlib.Path) -> list[dict]:
    tasks, chunks = (4, 100) if getattr(args, "quick", False) else (20, 500)
    rows = []
    for queue in ("local-file", "redis-streams"):
        row = await measure_queue(queue, tmp, tasks, chunks)
        print(
            f"  push {queue}: " + (row.get("skipped") or f"{row['per_s']:.0f} notifications/s"),
            file=sys.stderr,
        )
        rows.append(row)
    return rows


def report_push(rows: list[dict]) -> str:
    out = [
        "\nPush delivery: notifications per second to a fast loopback receiver (answers 200 at once), "
        "SQLite store, one POST per task event, 8 streaming turns at a time"
    ]
    header = f"{'queue':<15}{'tasks x chunks':>16}{'notifications':>15}{'per s':>10}{'lag s':>8}{'srv CPU s':>11}"
    out += [header, "-" * len(header)]
    for r in rows:
        shape = f"{r['tasks']} x {r['chunks_per_task']}"
        if "skipped" in r:
            out.append(f"{r['queue']:<15}{shape:>16}  skipped: {r['skipped']}")
            continue
        out.append(
            f"{r['queue']:<15}{shape:>16}{r['received']:>15}{r['per_s']:>10.0f}{r['lag_s']:>8.2f}"
            f"{r['server_cpu_s']:>11.1f}" + (f"  ERROR: {r['error']}" if "error" in r else "")
        )
    return "\n".join(out)


def push_rows_bad(rows: list[dict]) -> list[str]:
    ci = os.environ.get("CI", "").lower() == "true"
    bad = [f"push/{r['queue']}: {r['error']}" for r in rows if "error" in r]
    bad += [f"push/{r['queue']}: {r['skipped']}" for r in rows if "skipped" in r and ci]
    return bad


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    cli_args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="a2a-push-bench-") as d:
        result = asyncio.run(bench_push(cli_args, pathlib.Path(d)))
    print(report_push(result))
    sys.exit(1 if push_rows_bad(result) else 0)
