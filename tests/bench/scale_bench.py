"""`make bench`, scale-out part: SendMessage over gRPC and JSON-RPC, driven by h2load (a
native load generator: the Python clients cost nearly a core of their own), against one
process on SQLite, one process on PostgreSQL + Redis, and `--workers 2` on PostgreSQL +
Redis; then cross-process cancel and event-delivery latency between two replicas.

h2load comes from Debian's nghttp2-client (`make bench-tools`); PostgreSQL is the
machine's (A2A_TEST_POSTGRES_URL, a fresh database per run), Redis a server of the
bench's own on a free port. A missing part skips the section with a note.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid

import grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.bench.common import HOST, METADATA, ServerProcess, percentile, send_request

PY = sys.executable
GRPC_PATH = "/lf.a2a.v1.A2AService/SendMessage"
AGENT = "tests.agents:ScriptedAgent"  # echo for load; hang / slow for the latencies


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _argv(store: str, bus: str, grpc_port: int, http_port: int, workers: int, data: str) -> list:
    argv = [PY, "-m", "service", "serve", "--host", HOST, "--grpc-port", str(grpc_port)]
    argv += ["--http-port", str(http_port), "--store", store, "--agent", AGENT]
    argv += ["--data-dir", data, "--log-level", "WARNING"]
    if bus:
        argv += ["--bus", bus]
    if workers > 1:
        argv += ["--workers", str(workers)]
    return argv


def _h2load(args: list[str]) -> dict:
    """Run h2load; requests/s, failures and the CPU h2load itself used (cores)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(["h2load", *args], capture_output=True, text=True, timeout=600).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rps = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out)
    done = re.search(
        r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out
    )
    status = re.search(r"status codes: (\d+) 2xx", out)
    return {
        "rps": float(rps.group(1)) if rps else float("nan"),
        "succeeded": int(done.group(2)) if done else 0,
        "failed": int(done.group(3)) if done else -1,
        "status_2xx": int(status.group(1)) if status else 0,
        "client_cpu_cores": cpu / wall if wall > 0 else float("nan"),
    }


def _grpc_body(tmp: str) -> str:
    payload = send_request("echo hello bench").SerializeToString()
    path = os.path.join(tmp, "send.grpc")
    with open(path, "wb") as f:
        f.write(b"\x00" + len(payload).to_bytes(4, "big") + payload)
    return path


def _jsonrpc_body(tmp: str) -> str:
    doc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": "echo hello bench"}],
            }
        },
    }
    path = os.path.join(tmp, "send.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


async def _count_tasks(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as ch:
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        page = await stub.ListTasks(pb.ListTasksRequest(page_size=1), metadata=METADATA)
        return page.total_size


async def _load(name: str, argv: list[str], tmp: str, args, grpc_port: int, http_port: int) -> dict:
    server = ServerProcess(name, argv, _logdir(tmp))
    server.start()
    try:
        if "--workers" in argv:
            await asyncio.sleep(3)  # the second worker (the ready line is the first one's)
        n, c = args.scale_requests, args.scale_connections
        base = await _count_tasks(server.target)
        row = {"server": name}
        grpc_args = ["-n", str(n), "-c", str(c), "-m", "4", "-d", _grpc_body(tmp)]
        grpc_args += ["-H", "content-type: application/grpc", "-H", "te: trailers"]
        grpc_args += ["-H", "a2a-version: 1.0", f"http://{HOST}:{grpc_port}{GRPC_PATH}"]
        row["grpc"] = _h2load(["-n", str(n // 10), *grpc_args[2:]])  # warm-up
        row["grpc"] = await asyncio.to_thread(_h2load, grpc_args)
        http_args = ["--h1", "-n", str(n), "-c", str(c), "-d", _jsonrpc_body(tmp)]
        http_args += ["-H", "content-type: application/json", "-H", "a2a-version: 1.0"]
        http_args += [f"http://{HOST}:{http_port}/"]
        row["jsonrpc"] = await asyncio.to_thread(_h2load, http_args)
        # Every request made a task: the load generator's 2xx are real sends.
        row["tasks_made"] = await _count_tasks(server.target) - base
        return row
    finally:
        server.stop()


def _logdir(tmp: str):
    import pathlib

    return pathlib.Path(tmp)


async def _latencies(store: str, bus: str, tmp: str, samples: int) -> dict:
    """Two replicas: cancel through B of a task A runs; events of a task A runs, as B's
    subscriber receives them (status timestamps are set when the agent emits)."""
    ports = [(_free_port(), _free_port()) for _ in range(2)]
    replicas = [
        ServerProcess(f"replica-{i}", _argv(store, bus, g, h, 1, f"{tmp}/r{i}"), _logdir(tmp))
        for i, (g, h) in enumerate(ports)
    ]
    for r in replicas:
        r.start()
    try:
        async with (
            grpc.aio.insecure_channel(replicas[0].target) as ca,
            grpc.aio.insecure_channel(replicas[1].target) as cb,
        ):
            a, b = a2a_pb2_grpc.A2AServiceStub(ca), a2a_pb2_grpc.A2AServiceStub(cb)
            cancel_s: list[float] = []
            for _ in range(samples):
                req = send_request("hang")
                req.configuration.return_immediately = True
                task = (await a.SendMessage(req, metadata=METADATA)).task
                while True:
                    got = await b.GetTask(pb.GetTaskRequest(id=task.id), metadata=METADATA)
                    if got.status.state == pb.TASK_STATE_WORKING:
                        break
                    await asyncio.sleep(0.01)
                t0 = time.perf_counter()
                done = await b.CancelTask(pb.CancelTaskRequest(id=task.id), metadata=METADATA)
                cancel_s.append(time.perf_counter() - t0)
                assert done.status.state == pb.TASK_STATE_CANCELED
            event_s: list[float] = []
            while len(event_s) < samples:
                req = send_request("slow 40")
                req.configuration.return_immediately = True
                task = (await a.SendMessage(req, metadata=METADATA)).task
                stream = b.SubscribeToTask(pb.SubscribeToTaskRequest(id=task.id), metadata=METADATA)
                async for event in stream:
                    if event.HasField("status_update"):
                        ts = event.status_update.status.timestamp
                        sent = ts.seconds + ts.nanos / 1e9
                        event_s.append(time.time() - sent)
    finally:
        for r in replicas:
            r.stop()
    return {
        "cancel_p50_ms": statistics.median(cancel_s) * 1000,
        "cancel_p99_ms": percentile(cancel_s, 99),  # seconds in, milliseconds out
        "event_p50_ms": statistics.median(event_s) * 1000,
        "event_p99_ms": percentile(event_s, 99),
        "samples": samples,
    }


async def bench_scale(args, tmp) -> dict:
    tmp = str(tmp)
    if shutil.which("h2load") is None:
        return {"skipped": "h2load not installed (make bench-tools installs nghttp2-client)"}
    from tests.pg_util import create_database, drop_database
    from tests.redis_util import OwnRedis

    try:
        url, db = await create_database()
    except BaseException as exc:  # missing_part raises Skipped outside pytest too
        return {"skipped": f"PostgreSQL unreachable ({exc})"}
    redis = OwnRedis(os.path.join(tmp, "redis")).start()
    try:
        rows = []
        for name, store, bus, workers in (
            ("1 process, SQLite", f"sqlite:{tmp}/scale.db", "", 1),
            ("1 process, PostgreSQL + Redis", url, redis.url, 1),
            ("--workers 2, PostgreSQL + Redis", url, redis.url, 2),
        ):
            g, h = _free_port(), _free_port()
            argv = _argv(store, bus, g, h, workers, f"{tmp}/{len(rows)}")
            print(f"  scale: {name} ...", file=sys.stderr)
            rows.append(await _load(name, argv, tmp, args, g, h))
        print("  scale: cross-process latencies ...", file=sys.stderr)
        latency = await _latencies(url, redis.url, tmp, args.scale_samples)
    finally:
        redis.stop()
        await drop_database(db)
    by = {r["server"]: r for r in rows}
    sqlite, pg, two = (by[k] for k in list(by))
    ratios = {
        f"{kind}_pg_vs_sqlite": pg[kind]["rps"] / sqlite[kind]["rps"]
        for kind in ("grpc", "jsonrpc")
    } | {
        f"{kind}_workers2_vs_pg": two[kind]["rps"] / pg[kind]["rps"] for kind in ("grpc", "jsonrpc")
    }
    return {"rows": rows, "ratios": ratios, "latency": latency}


def report_scale(result: dict) -> str:
    if "skipped" in result:
        return f"\nScale-out: skipped ({result['skipped']})"
    lines = [
        "\nScale-out: SendMessage via h2load "
        "(gRPC: -m 4 streams per connection; JSON-RPC: HTTP/1.1 keep-alive)",
        f"{'server':34} {'gRPC req/s':>11} {'h2load CPU':>10} {'JSON-RPC req/s':>15} "
        f"{'h2load CPU':>10} {'tasks':>7}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['server']:34} {r['grpc']['rps']:11.0f} {r['grpc']['client_cpu_cores']:9.2f}c "
            f"{r['jsonrpc']['rps']:15.0f} {r['jsonrpc']['client_cpu_cores']:9.2f}c {r['tasks_made']:7d}"
        )
    ratios = result["ratios"]
    lines.append(
        "ratios: PostgreSQL/SQLite gRPC {grpc_pg_vs_sqlite:.2f}, JSON-RPC {jsonrpc_pg_vs_sqlite:.2f}"
        " (target >= 0.7); workers 2/1 gRPC {grpc_workers2_vs_pg:.2f}, JSON-RPC"
        " {jsonrpc_workers2_vs_pg:.2f} (target >= 1.3)".format(**ratios)
    )
    lat = result["latency"]
    lines.append(
        f"cross-process cancel p50 {lat['cancel_p50_ms']:.1f} ms, p99 {lat['cancel_p99_ms']:.1f} ms"
        f" (target < 50); event delivery p50 {lat['event_p50_ms']:.1f} ms,"
        f" p99 {lat['event_p99_ms']:.1f} ms (target < 20); {lat['samples']} samples each"
    )
    return "\n".join(lines)
