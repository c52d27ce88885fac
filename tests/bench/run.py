"""`make bench`: side-by-side performance figures for the A2A service, in one run.

1. SendMessage throughput over gRPC with N requests in flight (one grpc.aio channel,
   N coroutines) against: a bare grpc.aio handler returning a canned response (the
   ceiling), the a2a-sdk 1.3.0 gRPC server with an echo executor, and our server with
   the SQLite store and with the memory store (echo agent), and ours (SQLite) with
   `telemetry = "otlp"` exporting traces and metrics to a stand-in collector on loopback
   (otlp_collector.py), reported against telemetry off. Each server is a
   subprocess on an ephemeral 127.0.0.1 port; rounds are interleaved so machine noise
   hits every server alike.
2. Streaming events per second to one subscriber (SendStreamingMessage, ChunkAgent).
3. ListTasks latency on a SQLite store filled with 100k tasks, against 1k tasks.
4. SendMessage over HTTP through the gateway (JSON-RPC and REST) against a bare starlette
   handler returning a fixed JSON body and the a2a-sdk 1.3.0 JSON-RPC server (http_bench.py).
5. Push notifications delivered per second to a fast loopback receiver, local-file queue and
   redis-streams (push_bench.py).
6. A stored 10 MiB file artifact downloaded from the gateway against starlette's FileResponse
   serving the same file, and GetTask latency by artifact size (file_bench.py).
7. Burst: a second caller's latency (GET /tasks, /health, the card) while another principal
   floods the gateway, with the per-principal limits off and on (burst_bench.py).
8. Scale-out: SendMessage over gRPC and JSON-RPC driven by h2load against one process on
   SQLite, one on PostgreSQL + Redis and `--workers 2`; cross-process cancel and event
   latency (scale_bench.py).
9. An a2a-sdk AgentExecutor (TaskUpdater, one artifact in N chunks) streaming behind our
   server (`--agent a2a_sdk:...`) and behind a2a-sdk 1.3.0's own gRPC server: events per
   second to one subscriber (sdk_agent_bench.py).
10. Paused tasks (an agent waiting in ctx.ask()): server memory per task live and parked
   (paused_turn_idle_seconds), and the time to answer 1,000 of them (paused_bench.py).
11. Concurrency (concurrency_bench.py, `--only concurrency`): memory and CPU per open stream
   at 60 and 600 events, ours against a2a-sdk 1.3.0 over gRPC and SSE, delivery lag at 2,000
   streams, time to the first event with a silent and an immediate agent, the send rows.
12. SendMessage per transport against one server: the unix socket (N connections with one
   request in flight each, and one connection with N in flight) and WebSocket against
   JSON-RPC over HTTP (transports_bench.py, the clients in unix_bench.py and ws_bench.py).

Prints a table and writes JSON (default build/bench.json). Ratios matter more than
absolute numbers: the client shares the machine with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402

from gen import a2a_pb2 as pb  # noqa: E402
from gen import a2a_pb2_grpc  # noqa: E402
from tests.bench.burst_bench import bench_burst, burst_rows_bad, report_burst  # noqa: E402
from tests.bench.common import (
    HOST,
    METADATA,
    ROOT,
    ServerProcess,
    measured_round,
    percentile,
    run_load,
    send_request,
    serve_argv,  # noqa: E402
    summarize_rounds,
)
from tests.bench.concurrency_bench import add_arguments as add_conc_arguments  # noqa: E402
from tests.bench.concurrency_bench import (  # noqa: E402
    bench_concurrency,
    concurrency_rows_bad,
    report_concurrency,
)
from tests.bench.file_bench import add_arguments as add_file_arguments  # noqa: E402
from tests.bench.file_bench import apply_defaults as file_defaults  # noqa: E402
from tests.bench.file_bench import bench_files, file_rows_bad, report_files  # noqa: E402
from tests.bench.http_bench import bench_http  # noqa: E402
from tests.bench.paused_bench import add_arguments as add_paused_arguments  # noqa: E402
from tests.bench.paused_bench import apply_defaults as paused_defaults  # noqa: E402
from tests.bench.paused_bench import bench_paused, paused_rows_bad, report_paused  # noqa: E402
from tests.bench.push_bench import bench_push, push_rows_bad, report_push  # noqa: E402
from tests.bench.scale_bench import bench_scale, report_scale  # noqa: E402
from tests.bench.sdk_agent_bench import bench_sdk_agent  # noqa: E402
from tests.bench.transports_bench import (  # noqa: E402
    bench_transports,
    report_transports,
    transport_rows_bad,
)

PY = sys.executable
CHUNK_AGENT = "tests.bench.agents:ChunkAgent"
ECHO_TEXT = "hello bench"


# ----------------------------------------------------------------------------- helpers


def ours_argv(store: str, agent: str = "echo") -> list[str]:
    return serve_argv(
        "--http-port",
        "-1",
        "--store",
        store,
        "--agent",
        agent,
        "--log-level",
        "WARNING",
    )


async def wait_ready(channel: grpc.aio.Channel) -> None:
    await asyncio.wait_for(channel.channel_ready(), 20.0)


def channel(target: str) -> grpc.aio.Channel:
    assert target.startswith(f"{HOST}:"), target
    return grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20)]
    )


# ------------------------------------------------------------------ 1. SendMessage throughput


def check_echo(response: pb.SendMessageResponse, sent: str | None) -> None:
    """Every server must do the same job: a completed task with one artifact."""
    task = response.task
    if task.status.state != pb.TASK_STATE_COMPLETED or len(task.artifacts) != 1:
        raise AssertionError(f"unexpected SendMessage response: {response}")
    if sent is not None and task.artifacts[0].parts[0].text != sent:
        raise AssertionError(f"artifact does not echo {sent!r}: {task.artifacts[0]}")


async def drive(
    stub, concurrency: int, duration: float, count: int
) -> tuple[list[float], float, int, str]:
    """`concurrency` SendMessage callers on one channel; see run_load."""

    async def call_once(_worker) -> str | None:
        try:
            await stub.SendMessage(send_request(ECHO_TEXT), metadata=METADATA, timeout=30)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        return None

    return await run_load(list(range(concurrency)), call_once, duration, count)


async def measure_send(server: ServerProcess, args, sent_check: bool) -> dict:
    async with channel(server.target) as ch:
        await wait_ready(ch)
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        check_echo(
            await stub.SendMessage(send_request(ECHO_TEXT), metadata=METADATA, timeout=30),
            ECHO_TEXT if sent_check else None,
        )
        await drive(stub, args.concurrency, args.warmup, 0)
        return await measured_round(
            server, lambda: drive(stub, args.concurrency, args.duration, args.requests)
        )


async def bench_send(args, tmp: pathlib.Path) -> list[dict]:
    specs = [
        (
            "bare",
            "bare grpc.aio handler (ceiling)",
            [PY, str(ROOT / "tests/bench/bare_server.py")],
            False,
        ),
        (
            "sdk",
            "a2a-sdk 1.3.0 gRPC, in-memory store",
            [PY, str(ROOT / "tests/bench/sdk_server.py")],
            True,
        ),
        (
            "ours_sqlite",
            "ours, SQLite store, echo agent",
            ours_argv(f"sqlite:{tmp / 'send.db'}"),
            True,
        ),
        ("ours_memory", "ours, memory store, echo agent", ours_argv("memory:"), True),
        (
            "ours_sqlite_otel",
            "ours, SQLite, telemetry otlp (traces+metrics)",
            ours_argv(f"sqlite:{tmp / 'send_otel.db'}"),
            True,
        ),
    ]
    collector = ServerProcess(
        "otlp_collector", [PY, str(ROOT / "tests/bench/otlp_collector.py")], tmp
    )
    servers = []
    try:
        collector.start()
        telemetry_env = {
            "A2A_TELEMETRY": "otlp",
            "A2A_OTLP_PROTOCOL": "grpc",
            "A2A_OTLP_ENDPOINT": f"http://{collector.target}",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",  # ms: metrics leave during every window
        }
        for key, label, argv, check in specs:
            env = telemetry_env if key.endswith("_otel") else None
            servers.append((key, label, ServerProcess(key, argv, tmp, env).start(), check))
        runs: dict[str, list[dict]] = {key: [] for key, *_ in specs}
        for rnd in range(args.rounds):
            for key, label, server, check in servers:
                result = await measure_send(server, args, check)
                runs[key].append(result)
                print(
                    f"  round {rnd + 1}/{args.rounds} {label}: "
                    f"{result['requests'] / result['elapsed_s']:.0f} req/s",
                    file=sys.stderr,
                )
    finally:
        for *_, server, _check in servers:
            server.stop()
        collector.stop()
    rows = [summarize_rounds(key, label, runs[key]) for key, label, *_ in specs]
    received = [line for line in collector.log_tail(5).splitlines() if line.startswith("received")]
    rows[-1]["collector"] = received[-1] if received else "nothing received"
    # Ratio per round (each server against the bare ceiling of the same round), then the
    # median: rounds are interleaved, so drift in machine load cancels out.
    bare_rates = rows[0]["rps_rounds"]
    for row in rows:
        row["vs_bare_rounds"] = [
            r / b if b else float("nan") for r, b in zip(row["rps_rounds"], bare_rates, strict=True)
        ]
        row["vs_bare"] = statistics.median(row["vs_bare_rounds"])
    # Telemetry on against off: the same store and agent, in the same rounds.
    on, off = rows[-1], next(r for r in rows if r["key"] == "ours_sqlite")
    on["vs_off_rounds"] = [
        a / b if b else float("nan")
        for a, b in zip(on["rps_rounds"], off["rps_rounds"], strict=True)
    ]
    on["vs_off"] = statistics.median(on["vs_off_rounds"])
    return rows


# ------------------------------------------------------------------------- 2. streaming


async def stream_turn(stub, chunks: int, every: int) -> tuple[int, float, float]:
    """One SendStreamingMessage turn: (events, elapsed s, time to first event s)."""
    request = send_request(f"{chunks} {every}")
    t0 = time.perf_counter()
    first = 0.0
    events = artifacts = 0
    last = None
    async for event in stub.SendStreamingMessage(request, metadata=METADATA, timeout=120):
        if not events:
            first = time.perf_counter() - t0
        events += 1
        artifacts += event.HasField("artifact_update")
        last = event
    elapsed = time.perf_counter() - t0
    if (
        artifacts != chunks
        or last is None
        or last.status_update.status.state != pb.TASK_STATE_COMPLETED
    ):
        raise AssertionError(f"stream ended after {artifacts}/{chunks} chunks; last event {last}")
    return events, elapsed, first


async def measure_stream(server: ServerProcess, chunks: int, every: int, duration: float) -> dict:
    async with channel(server.target) as ch:
        await wait_ready(ch)
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        await stream_turn(stub, min(chunks, 100), every)  # warm-up
        total_events = 0
        total_time = 0.0
        turns: list[float] = []
        firsts: list[float] = []
        cpu0 = server.cpu_seconds()
        while not turns or total_time < duration:
            events, elapsed, first = await stream_turn(stub, chunks, every)
            total_events += events
            total_time += elapsed
            turns.append(elapsed)
            firsts.append(first)
        cpu = server.cpu_seconds() - cpu0
    return {
        "events": total_events,
        "elapsed_s": total_time,
        "turns": len(turns),
        "events_per_s": total_events / total_time,
        "turn_ms": statistics.median(turns) * 1000,
        "first_event_ms": statistics.median(firsts) * 1000,
        "server_cpu_pct": 100 * cpu / total_time,
    }


async def bench_stream(args, tmp: pathlib.Path) -> list[dict]:
    rows = []
    for store_key, store in (("sqlite", f"sqlite:{tmp / 'stream.db'}"), ("memory", "memory:")):
        server = ServerProcess(f"stream_{store_key}", ours_argv(store, CHUNK_AGENT), tmp)
        try:
            server.start()
            for chunks in args.stream_chunks:
                result = await measure_stream(
                    server, chunks, args.stream_yield_every, args.stream_duration
                )
                result.update(
                    store=store_key, chunks_per_turn=chunks, yield_every=args.stream_yield_every
                )
                rows.append(result)
                print(
                    f"  stream {store_key} N={chunks}: {result['events_per_s']:.0f} events/s",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    return rows


async def sdk_agent_bench(args, tmp: pathlib.Path) -> list[dict]:
    """Section 9, measured as section 2 measures."""
    return await bench_sdk_agent(args, tmp, measure_stream)


# ------------------------------------------------------------------------- 3. ListTasks

CONTEXTS = 10
PAGE = 50
STATES = (
    pb.TASK_STATE_COMPLETED,
    pb.TASK_STATE_COMPLETED,
    pb.TASK_STATE_COMPLETED,
    pb.TASK_STATE_FAILED,
    pb.TASK_STATE_CANCELED,
    pb.TASK_STATE_INPUT_REQUIRED,
)


def make_task(i: int, status_us: int, context_id: str) -> pb.Task:
    task = pb.Task(id=str(uuid.uuid4()), context_id=context_id)
    task.status.state = STATES[i % len(STATES)]
    task.status.timestamp.seconds, rest = divmod(status_us, 1_000_000)
    task.status.timestamp.nanos = rest * 1000
    msg = task.history.add(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER, task_id=task.id, context_id=context_id
    )
    msg.parts.add(text=f"bench message {i}")
    art = task.artifacts.add(artifact_id=uuid.uuid4().hex, name="echo")
    art.parts.add(text=f"bench message {i}")
    return task


async def fill_store(path: pathlib.Path, n: int, batch: int) -> dict:
    """Write n tasks straight into a SQLite store file, before any server opens it."""
    from service.store import Scope, open_store

    rng = random.Random(n)
    now_us = time.time_ns() // 1000
    span_us = 30 * 86400 * 1_000_000  # status timestamps over the last 30 days
    contexts = [f"bench-ctx-{c}" for c in range(CONTEXTS)]
    store = open_store(f"sqlite:{path}")
    await store.open()
    keys: list[tuple[int, str]] = []
    t0 = time.perf_counter()
    try:
        scope = Scope()
        for start in range(0, n, batch):
            tasks = []
            for i in range(start, min(n, start + batch)):
                status_us = now_us - rng.randrange(span_us)
                task = make_task(i, status_us, contexts[i % CONTEXTS])
                tasks.append(task)
                keys.append((status_us, task.id))
            await asyncio.gather(*(store.save(scope, t, []) for t in tasks))
    finally:
        await store.close()
    elapsed = time.perf_counter() - t0
    keys.sort(reverse=True)
    return {
        "tasks": n,
        "fill_s": elapsed,
        "tasks_per_s": n / elapsed,
        "keys": keys,
        "context_id": contexts[0],
        "page_token_key": store.page_token_key,
    }


def list_queries(fill: dict) -> dict:
    """name: (request, id of the first task expected, total_size expected, rows from the page on)."""
    from service.engine.registry import encode_cursor  # the token format is the server's own
    from service.store import Scope

    keys = fill["keys"]
    n = fill["tasks"]
    middle = n // 2
    in_context = sum(1 for i in range(n) if i % CONTEXTS == 0)
    return {
        "first_page": (pb.ListTasksRequest(page_size=PAGE), keys[0][1], n, n),
        "deep_page": (
            pb.ListTasksRequest(
                page_size=PAGE,
                page_token=encode_cursor(fill["page_token_key"], Scope(), keys[middle - 1]),
            ),
            keys[middle][1],
            n,
            n - middle,
        ),
        "context_filter": (
            pb.ListTasksRequest(page_size=PAGE, context_id=fill["context_id"]),
            None,
            in_context,
            in_context,
        ),
    }


def check_page(
    name: str, response: pb.ListTasksResponse, first_id: str | None, total: int, left: int
) -> None:
    if (
        len(response.tasks) != min(PAGE, left)
        or response.total_size != total
        or bool(response.next_page_token) != (left > PAGE)
    ):
        raise AssertionError(
            f"ListTasks {name}: {len(response.tasks)} tasks, total "
            f"{response.total_size} (expected {min(PAGE, left)} of {total})"
        )
    if first_id is not None and response.tasks[0].id != first_id:
        raise AssertionError(
            f"ListTasks {name}: page starts at {response.tasks[0].id}, expected {first_id}"
        )


async def measure_list(targets: dict[int, tuple[ServerProcess, dict]], args) -> dict[int, dict]:
    """Each query against every store, one call in flight, calls alternating between the
    stores so that machine noise hits them alike."""
    out: dict[int, dict] = {n: {} for n in targets}
    channels = {n: channel(server.target) for n, (server, _) in targets.items()}
    try:
        stubs = {}
        for n, ch in channels.items():
            await wait_ready(ch)
            stubs[n] = a2a_pb2_grpc.A2AServiceStub(ch)
        queries = {n: list_queries(fill) for n, (_, fill) in targets.items()}
        for name in queries[next(iter(targets))]:
            latencies: dict[int, list[float]] = {n: [] for n in targets}
            for i in range(args.list_warmup + args.list_calls):
                for n, stub in stubs.items():
                    request, first_id, total, left = queries[n][name]
                    t0 = time.perf_counter()
                    response = await stub.ListTasks(request, metadata=METADATA, timeout=30)
                    elapsed = time.perf_counter() - t0
                    if i == 0:
                        check_page(name, response, first_id, total, left)
                    if i >= args.list_warmup:
                        latencies[n].append(elapsed)
            for n, values in latencies.items():
                out[n][name] = {
                    "p50_ms": percentile(values, 50),
                    "p99_ms": percentile(values, 99),
                    "mean_ms": statistics.fmean(values) * 1000,
                    "calls": len(values),
                }
    finally:
        for ch in channels.values():
            await ch.close()
    return out


async def bench_list(args, tmp: pathlib.Path) -> dict:
    sizes: dict[int, dict] = {}
    fills: dict[int, dict] = {}
    for n in (args.small_tasks, args.large_tasks):
        fill = await fill_store(tmp / f"list_{n}.db", n, args.fill_batch)
        fills[n] = fill
        print(
            f"  filled {n} tasks in {fill['fill_s']:.1f} s ({fill['tasks_per_s']:.0f} tasks/s)",
            file=sys.stderr,
        )
    servers = {}
    try:
        for n in fills:
            servers[n] = ServerProcess(
                f"list_{n}", ours_argv(f"sqlite:{tmp / f'list_{n}.db'}"), tmp
            ).start()
        t0 = time.perf_counter()
        measured = await measure_list({n: (servers[n], fills[n]) for n in fills}, args)
        print(f"  ListTasks measured in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    for n, fill in fills.items():
        sizes[n] = {
            "fill_s": fill["fill_s"],
            "fill_tasks_per_s": fill["tasks_per_s"],
            "db_bytes": db_bytes(tmp, f"list_{n}.db"),
            "queries": measured[n],
        }
    small, large = sizes[args.small_tasks], sizes[args.large_tasks]
    rows = []
    for name in large["queries"]:
        s, big = small["queries"][name], large["queries"][name]
        rows.append(
            {
                "query": name,
                "small_p50_ms": s["p50_ms"],
                "small_p99_ms": s["p99_ms"],
                "large_p50_ms": big["p50_ms"],
                "large_p99_ms": big["p99_ms"],
                "ratio_p50": big["p50_ms"] / s["p50_ms"],
                "ratio_p99": big["p99_ms"] / s["p99_ms"],
            }
        )
    return {
        "small_tasks": args.small_tasks,
        "large_tasks": args.large_tasks,
        "sizes": sizes,
        "rows": rows,
    }


# ---------------------------------------------------------------------------- report


def fmt(value: float, digits: int = 1) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:,.{digits}f}"
    )


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def report(results: dict, args) -> str:
    out = []
    if "send_message" in results:
        out.append(
            f"\nSendMessage over gRPC: {args.concurrency} in flight on one grpc.aio channel, "
            + (f"{args.requests} requests" if args.requests else f"{args.duration:g} s")
            + f" x {args.rounds} interleaved round(s) after {args.warmup:g} s warm-up each\n"
            "(req/s and 'vs bare' = median over rounds, the ratio taken within each round; "
            "latencies pooled over rounds; CPU% = CPU time / wall time, 100% = one core)"
        )
        out.append(
            table(
                [
                    "server",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "vs bare",
                    "srv CPU%",
                    "srv CPU ms/req",
                    "client CPU%",
                    "errors",
                ],
                [
                    [
                        r["server"],
                        fmt(r["rps"], 0),
                        fmt(r["p50_ms"], 2),
                        fmt(r["p99_ms"], 2),
                        f"{r['vs_bare'] * 100:.0f}%",
                        fmt(r["server_cpu_pct"], 0),
                        fmt(r["server_cpu_ms_per_req"], 3),
                        fmt(r["client_cpu_pct"], 0),
                        str(r["errors"]),
                    ]
                    for r in results["send_message"]
                ],
            )
        )
        ours = next(r for r in results["send_message"] if r["key"] == "ours_sqlite")
        sdk = next(r for r in results["send_message"] if r["key"] == "sdk")
        out.append(
            f"target: ours (SQLite) >= 50% of bare -> {ours['vs_bare'] * 100:.0f}% "
            f"({'met' if ours['vs_bare'] >= 0.5 else 'NOT met'}); "
            f"a2a-sdk {sdk['vs_bare'] * 100:.0f}% of bare; ours/a2a-sdk = {ours['rps'] / sdk['rps']:.1f}x"
            "\n(the bare ceiling is bounded by this Python client: see its client CPU%)"
        )
        otel = next(r for r in results["send_message"] if r["key"] == "ours_sqlite_otel")
        spread = ", ".join(f"{x * 100:.0f}%" for x in otel["vs_off_rounds"])
        out.append(
            f"telemetry: traces + metrics over OTLP/gRPC to a loopback collector, against off "
            f"(SQLite) -> {otel['vs_off'] * 100:.0f}% (rounds: {spread}); target >= 90% "
            f"({'met' if otel['vs_off'] >= 0.9 else 'NOT met'}); collector {otel['collector']}"
        )
    if "streaming" in results:
        out.append(
            f"\nStreaming to one subscriber: SendStreamingMessage, ChunkAgent (one artifact in N "
            f"append chunks, yields every {args.stream_yield_every}), >= {args.stream_duration:g} s per row"
        )
        out.append(
            table(
                [
                    "store",
                    "chunks/turn",
                    "events/s",
                    "turn ms",
                    "first event ms",
                    "turns",
                    "srv CPU%",
                ],
                [
                    [
                        r["store"],
                        str(r["chunks_per_turn"]),
                        fmt(r["events_per_s"], 0),
                        fmt(r["turn_ms"], 1),
                        fmt(r["first_event_ms"], 2),
                        str(r["turns"]),
                        fmt(r["server_cpu_pct"], 0),
                    ]
                    for r in results["streaming"]
                ],
            )
        )
    if "sdk_agent" in results:
        out.append(
            "\nAn a2a-sdk AgentExecutor streaming (ChunkExecutor: TaskUpdater, one artifact in N "
            f"append chunks, yields every {args.stream_yield_every}) over gRPC to one subscriber, "
            f"behind our server and behind a2a-sdk's own, >= {args.stream_duration:g} s per row"
        )
        out.append(
            table(
                ["server", "chunks/turn", "events/s", "vs a2a-sdk", "turn ms", "first event ms"],
                [
                    [
                        r["server"],
                        str(r["chunks_per_turn"]),
                        fmt(r["events_per_s"], 0),
                        f"{r['vs_sdk'] * 100:.0f}%",
                        fmt(r["turn_ms"], 1),
                        fmt(r["first_event_ms"], 2),
                    ]
                    for r in results["sdk_agent"]
                ],
            )
        )
    if "http" in results:
        out.append(
            f"\nSendMessage over HTTP: {args.concurrency} keep-alive connections, one request in flight "
            "each, same uvicorn settings everywhere, "
            + (f"{args.requests} requests" if args.requests else f"{args.duration:g} s")
            + f" x {args.rounds} interleaved round(s)\n(req/s, 'vs bare' and 'vs a2a-sdk' = median "
            "over rounds, ratios taken within each round)"
        )
        out.append(
            table(
                [
                    "server",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "vs bare",
                    "vs a2a-sdk",
                    "srv CPU%",
                    "client CPU%",
                    "errors",
                ],
                [
                    [
                        r["server"],
                        fmt(r["rps"], 0),
                        fmt(r["p50_ms"], 2),
                        fmt(r["p99_ms"], 2),
                        f"{r['vs_bare'] * 100:.0f}%",
                        f"{r['vs_sdk']:.1f}x",
                        fmt(r["server_cpu_pct"], 0),
                        fmt(r["client_cpu_pct"], 0),
                        str(r["errors"]),
                    ]
                    for r in results["http"]
                ],
            )
        )
        rows = {r["key"]: r for r in results["http"]}
        verdicts = [
            f"{rows[k]['server']}: {rows[k]['vs_sdk']:.1f}x ({'met' if rows[k]['vs_sdk'] >= 3 else 'NOT met'})"
            for k in ("http_jsonrpc", "http_rest")
        ]
        out.append(
            "target: gateway SendMessage >= 3x the a2a-sdk JSON-RPC server -> "
            + "; ".join(verdicts)
        )
        if "http_jsonrpc_v03" in rows:  # the v0.3 layer's translation, same server, same run
            v03, v10 = rows["http_jsonrpc_v03"], rows["http_jsonrpc"]
            per_round = [
                a / b for a, b in zip(v03["rps_rounds"], v10["rps_rounds"], strict=True) if b
            ]
            ratio = statistics.median(per_round) if per_round else float("nan")
            out.append(
                f"target: v0.3 message/send costs <= 15% against 1.0 SendMessage -> "
                f"{ratio * 100:.0f}% of its rate ({'met' if ratio >= 0.85 else 'NOT met'})"
            )
    if "list_tasks" in results:
        lt = results["list_tasks"]
        small, large = lt["small_tasks"], lt["large_tasks"]
        out.append(
            f"\nListTasks (our server, SQLite store, page size {PAGE}, 1 call in flight, "
            f"{args.list_calls} calls per query and store, alternating between the two stores;\n"
            f"ratio = {large:,} tasks / {small:,} tasks; deep page = pageToken at task {large // 2:,}, "
            f"context filter = 1 of {CONTEXTS} contexts)"
        )
        out.append(
            table(
                [
                    "query",
                    f"{small:,} p50",
                    f"{small:,} p99",
                    f"{large:,} p50",
                    f"{large:,} p99",
                    "ratio p50",
                    "ratio p99",
                ],
                [
                    [
                        r["query"],
                        fmt(r["small_p50_ms"], 2),
                        fmt(r["small_p99_ms"], 2),
                        fmt(r["large_p50_ms"], 2),
                        fmt(r["large_p99_ms"], 2),
                        fmt(r["ratio_p50"], 2),
                        fmt(r["ratio_p99"], 2),
                    ]
                    for r in lt["rows"]
                ],
            )
        )
        for n, s in lt["sizes"].items():
            out.append(
                f"store of {n:,} tasks: filled in {s['fill_s']:.1f} s "
                f"({s['fill_tasks_per_s']:,.0f} tasks/s via store.save), {s['db_bytes'] / 1e6:.1f} MB"
            )
    if "push" in results:
        out.append(report_push(results["push"]))
    if "files" in results:
        out.append(report_files(results["files"], args))
    if "burst" in results:
        out.append(report_burst(results["burst"]))
    if "scale" in results:
        out.append(report_scale(results["scale"]))
    if "paused" in results:
        out.append(report_paused(results["paused"], args))
    if "concurrency" in results:
        out.append(report_concurrency(results["concurrency"], table))
    if "transports" in results:
        out.append(report_transports(results["transports"], args, table))
    return "\n".join(out)


def numbers_ok(results: dict) -> list[str]:
    """Names of rows that lack a number or saw errors (the smoke test checks this too)."""
    bad = []
    for r in results.get("send_message", []):
        if r["errors"] or not all(
            math.isfinite(r[k]) and r[k] > 0 for k in ("rps", "p50_ms", "p99_ms", "vs_bare")
        ):
            bad.append(f"send_message/{r['key']}: {r.get('first_error') or 'missing numbers'}")
    for r in results.get("http", []):
        if r["errors"] or not all(
            math.isfinite(r[k]) and r[k] > 0 for k in ("rps", "p50_ms", "p99_ms", "vs_bare")
        ):
            bad.append(f"http/{r['key']}: {r.get('first_error') or 'missing numbers'}")
    for r in results.get("streaming", []):
        if not (math.isfinite(r["events_per_s"]) and r["events_per_s"] > 0):
            bad.append(f"streaming/{r['store']}/{r['chunks_per_turn']}")
    for r in results.get("sdk_agent", []):
        if not (math.isfinite(r["events_per_s"]) and r["events_per_s"] > 0):
            bad.append(f"sdk_agent/{r['server']}/{r['chunks_per_turn']}")
    for r in results.get("list_tasks", {}).get("rows", []):
        if not all(math.isfinite(r[k]) and r[k] > 0 for k in r if k != "query"):
            bad.append(f"list_tasks/{r['query']}")
    bad += push_rows_bad(results.get("push", []))
    bad += file_rows_bad(results.get("files", {}))
    bad += burst_rows_bad(results.get("burst", []))
    bad += paused_rows_bad(results.get("paused", []))
    if "concurrency" in results:
        bad += concurrency_rows_bad(results["concurrency"])
    bad += transport_rows_bad(results.get("transports", []))
    return bad


# ------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick", action="store_true", help="~20 s smoke run (shorter windows, smaller store)"
    )
    p.add_argument(
        "--only",
        default="send,stream,list,http,push,files,burst,scale,sdkagent,paused,concurrency,transports",
        help="comma list of: send, stream, list, http, push, files, burst, scale, sdkagent,"
        " paused, concurrency, transports",
    )
    p.add_argument(
        "--duration",
        type=float,
        help="SendMessage measuring window per server per round, s (default 4)",
    )
    p.add_argument(
        "--warmup", type=float, help="SendMessage warm-up per server per round, s (default 1)"
    )
    p.add_argument(
        "--requests",
        type=int,
        default=0,
        help="fixed request count per round instead of --duration",
    )
    p.add_argument(
        "--rounds", type=int, help="interleaved rounds over the four servers (default 3)"
    )
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    p.add_argument(
        "--stream-chunks", help="comma list of chunks per streamed turn (default 1000,10000)"
    )
    p.add_argument(
        "--stream-yield-every",
        type=int,
        default=1,
        help="ChunkAgent yields to the loop every K chunks",
    )
    p.add_argument(
        "--stream-duration", type=float, help="minimum streaming time per row, s (default 3)"
    )
    p.add_argument(
        "--large-tasks", type=int, help="tasks in the big ListTasks store (default 100000)"
    )
    p.add_argument(
        "--small-tasks", type=int, help="tasks in the small ListTasks store (default 1000)"
    )
    p.add_argument(
        "--list-calls", type=int, help="measured ListTasks calls per query (default 200)"
    )
    p.add_argument(
        "--list-warmup", type=int, default=10, help="unmeasured ListTasks calls per query"
    )
    p.add_argument(
        "--fill-batch",
        type=int,
        default=5000,
        help="store.save calls gathered at once when filling",
    )
    p.add_argument(
        "--burst-connections", type=int, default=500, help="flood connections (default 500)"
    )
    p.add_argument("--burst-seconds", type=float, help="flood length, s (default 15)")
    p.add_argument("--burst-idle-seconds", type=float, help="idle probe window, s (default 3)")
    p.add_argument(
        "--burst-asyncio",
        action="store_true",
        help="flood with the asyncio load generator even when wrk is installed",
    )
    p.add_argument(
        "--scale-requests", type=int, help="h2load requests per scale-out row (default 10000)"
    )
    p.add_argument(
        "--scale-connections",
        type=int,
        default=64,
        help="h2load connections (default 64: the kernel spreads connections over --workers"
        " by a hash, and a few connections can split unevenly)",
    )
    p.add_argument(
        "--scale-samples", type=int, help="cancel and event latency samples (default 100)"
    )
    p.add_argument(
        "--json", default=str(ROOT / "build" / "bench.json"), help="where to write the JSON results"
    )
    add_file_arguments(p)
    add_paused_arguments(p)
    add_conc_arguments(p)
    args = p.parse_args(argv)
    file_defaults(args)
    paused_defaults(args)
    quick = args.quick
    defaults = dict(
        duration=2.0 if quick else 4.0,
        warmup=0.5 if quick else 1.0,
        rounds=1 if quick else 3,
        stream_chunks="500,2000" if quick else "1000,10000",
        stream_duration=1.0 if quick else 3.0,
        large_tasks=20_000 if quick else 100_000,
        small_tasks=1000,
        list_calls=50 if quick else 200,
        burst_seconds=2.0 if quick else 15.0,
        burst_idle_seconds=0.5 if quick else 3.0,
        scale_requests=600 if quick else 10000,
        scale_samples=20 if quick else 100,
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not 0 < args.small_tasks < args.large_tasks:
        p.error("--small-tasks must be positive and smaller than --large-tasks")
    args.stream_chunks = [int(x) for x in str(args.stream_chunks).split(",") if x]
    args.only = {x.strip() for x in args.only.split(",") if x.strip()}
    parts = {
        "send",
        "stream",
        "list",
        "http",
        "push",
        "files",
        "burst",
        "scale",
        "sdkagent",
        "paused",
        "concurrency",
        "transports",
    }
    if not args.only <= parts:
        p.error(f"--only: unknown part(s) {sorted(args.only - parts)}")
    return args


def db_bytes(tmp: pathlib.Path, name: str) -> int:
    return sum(p.stat().st_size for p in tmp.glob(f"{name}*"))


def print_server_logs(tmp: pathlib.Path) -> None:
    for log in sorted(tmp.glob("*.log")):
        print(
            f"--- {log.name} (tail) ---\n"
            + "\n".join(log.read_text(errors="replace").splitlines()[-20:]),
            file=sys.stderr,
        )


async def amain(args) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmpdir:
        tmp = pathlib.Path(tmpdir)
        sections = (
            ("send", "send_message", "SendMessage throughput", bench_send),
            ("stream", "streaming", "Streaming", bench_stream),
            ("list", "list_tasks", "ListTasks", bench_list),
            ("http", "http", "SendMessage over HTTP", bench_http),
            ("push", "push", "Push delivery", bench_push),
            ("files", "files", "Stored file artifacts", bench_files),
            ("burst", "burst", "Burst (limits off and on)", bench_burst),
            ("scale", "scale", "Scale-out", bench_scale),
            ("sdkagent", "sdk_agent", "a2a-sdk executor streaming", sdk_agent_bench),
            ("paused", "paused", "Paused tasks, live and parked", bench_paused),
            ("concurrency", "concurrency", "Concurrency (open streams)", bench_concurrency),
            ("transports", "transports", "SendMessage per transport", bench_transports),
        )
        try:
            for name, key, title, bench in sections:
                if name in args.only:
                    print(f"{title} ...", file=sys.stderr)
                    results[key] = await bench(args, tmp)
            conc = results.get("concurrency", {})
            # its send rows (when the send and http parts did not run) print as theirs
            for own, key in (("send", "send_message"), ("http", "http")):
                if own in conc:
                    results[key] = conc.pop(own)
        except BaseException:
            print_server_logs(tmp)
            raise
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"note: load average is {load:.2f} before the bench started; other processes compete for "
            "the CPUs, which lowers the bare ceiling most (it needs client and server at full speed)",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    results = asyncio.run(amain(args))
    wall = time.perf_counter() - t0
    print(report(results, args))
    print(
        f"\n(total bench time {wall:.0f} s on {os.cpu_count()} CPU(s), Python {platform.python_version()}, "
        f"grpcio {grpc.__version__}; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after)"
    )
    doc = {
        "meta": {
            "wall_s": wall,
            "cpus": os.cpu_count(),
            "loadavg_before": load,
            "loadavg_after": os.getloadavg()[0],
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "platform": platform.platform(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "args": {k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items()},
        },
        **results,
    }
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"results written to {path}")
    bad = numbers_ok(results)
    if bad:
        print("rows without numbers or with errors: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
