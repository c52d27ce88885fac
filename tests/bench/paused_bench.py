"""`make bench`, paused part: what a task paused in `ctx.ask()` costs the server, live and
parked, and how fast 1,000 of them resume.

Our server runs as a subprocess on a fresh SQLite store with AskAgent (asks one question,
completes with the answer). For each count N and each mode — `live` (`paused_turn_idle_seconds
= 0`: every paused turn keeps its coroutine) and `parked` (a short idle time: each is parked
soon after it asked) — a server is warmed up (200 tasks asked and answered; 20 with
`--quick`), its RSS taken
as the baseline, then N tasks are sent (SendMessage over gRPC, `--concurrency` in flight;
each returns at INPUT_REQUIRED). Parked: the bench waits until the idle time has passed for
the last one. "KiB/task" = (RSS now - baseline) / N; "peak" is the process's RSS high-water
mark over the same baseline. Then R of them (`--paused-resume`, default 1,000) are answered
(SendMessage with the task id, the same concurrency): the wall time and the answers' p50 / p99;
every answer must come from the expected path (`got` from the live coroutine, `resumed`
from a new turn). RSS includes what the allocator keeps after freeing; the store's file is
on disk (its size per task is reported too).

Standalone: python tests/bench/paused_bench.py [--counts 10000,100000] [--resume 1000]
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
from tests.bench.common import METADATA, ServerProcess, percentile, serve_argv  # noqa: E402

ASK_AGENT = "tests.bench.agents:AskAgent"
MODES = ("live", "parked")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--paused-counts",
        help="comma list of paused tasks per row (default 10000; --quick 300); 100000 takes minutes",
    )
    p.add_argument(
        "--paused-resume", type=int, help="parked or live tasks answered per row (default 1000)"
    )
    p.add_argument(
        "--paused-idle",
        type=float,
        default=1.0,
        help="paused_turn_idle_seconds of the parked rows (default 1)",
    )


def apply_defaults(args: argparse.Namespace) -> None:
    args.paused_warmup = 20 if args.quick else 200
    if args.paused_counts is None:
        args.paused_counts = "300" if args.quick else "10000"
    if isinstance(args.paused_counts, str):
        args.paused_counts = [int(x) for x in args.paused_counts.split(",") if x]
    if args.paused_resume is None:
        args.paused_resume = 100 if args.quick else 1000


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, KiB."""
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def file_bytes(directory: pathlib.Path, prefix: str) -> int:
    """The size of a SQLite store: its file, WAL and shared memory."""
    return sum(p.stat().st_size for p in directory.glob(f"{prefix}*"))


def message(text: str, task_id: str = "") -> pb.SendMessageRequest:
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, task_id=task_id)
    msg.parts.add(text=text)
    return pb.SendMessageRequest(message=msg)


async def gather_limited(count: int, concurrency: int, call) -> list:
    """`call(i)` for i in range(count), `concurrency` at once; the results in order."""
    results: list = [None] * count
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            results[i] = await call(i)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    return results


async def pause_tasks(stub, count: int, concurrency: int) -> list[str]:
    async def one(i: int) -> str:
        task = (await stub.SendMessage(message(f"q{i}"), metadata=METADATA)).task
        if task.status.state != pb.TASK_STATE_INPUT_REQUIRED:
            raise RuntimeError(f"task {task.id} is {task.status.state}, not INPUT_REQUIRED")
        return task.id

    return await gather_limited(count, concurrency, one)


async def answer_tasks(
    stub, task_ids: list[str], concurrency: int, expect: tuple[str, ...]
) -> tuple[list[float], float]:
    """Answer each task; (latencies, wall seconds). Raises if an answer took the other path."""

    async def one(i: int) -> float:
        began = time.perf_counter()
        task = (await stub.SendMessage(message(f"a{i}", task_ids[i]), metadata=METADATA)).task
        took = time.perf_counter() - began
        said = task.status.message.parts[0].text if task.status.message.parts else ""
        if task.status.state != pb.TASK_STATE_COMPLETED or said not in [
            f"{path} a{i}" for path in expect
        ]:
            raise RuntimeError(f"task {task.id}: {task.status.state} {said!r}, want {expect!r}")
        return took

    began = time.perf_counter()
    latencies = await gather_limited(len(task_ids), concurrency, one)
    return latencies, time.perf_counter() - began


async def measure(
    tmp: pathlib.Path,
    mode: str,
    count: int,
    resume: int,
    idle: float,
    concurrency: int,
    warmup: int,
) -> dict:
    db = tmp / f"paused_{mode}_{count}.db"
    argv = serve_argv(
        "--http-port", "-1", "--store", f"sqlite:{db}", "--agent", ASK_AGENT,
        "--log-level", "WARNING",
    )  # fmt: skip
    env = {"A2A_PAUSED_TURN_IDLE_SECONDS": "0" if mode == "live" else f"{idle:g}"}
    server = ServerProcess(f"paused_{mode}_{count}", argv, tmp, env=env).start()
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            warm = await pause_tasks(stub, warmup, concurrency)
            await answer_tasks(stub, warm, concurrency, ("got", "resumed"))
            base, _ = rss_kib(server.pid)
            began, cpu0 = time.perf_counter(), server.cpu_seconds()
            ids = await pause_tasks(stub, count, concurrency)
            sent_s = time.perf_counter() - began
            if mode == "parked":
                await asyncio.sleep(2 * idle + 0.2)  # the last ones park too
            rss, peak = rss_kib(server.pid)
            cpu = server.cpu_seconds() - cpu0
            step = max(1, count // resume)
            chosen = ids[::step][:resume]
            latencies, wall = await answer_tasks(
                stub, chosen, concurrency, ("got",) if mode == "live" else ("resumed",)
            )
        db_bytes = file_bytes(tmp, db.name)
    finally:
        server.stop()
    return {
        "mode": mode,
        "tasks": count,
        "baseline_mib": base / 1024,
        "rss_mib": rss / 1024,
        "kib_per_task": (rss - base) / count,
        "peak_kib_per_task": (peak - base) / count,
        "paused_per_s": count / sent_s,
        "server_cpu_s": cpu,
        "db_kib_per_task": db_bytes / 1024 / (count + warmup),
        "resumed": len(chosen),
        "resume_s": wall,
        "resume_p50_ms": percentile(latencies, 50),
        "resume_p99_ms": percentile(latencies, 99),
    }


async def bench_paused(args, tmp: pathlib.Path) -> list[dict]:
    rows = []
    for count in args.paused_counts:
        for mode in MODES:
            row = await measure(
                tmp,
                mode,
                count,
                args.paused_resume,
                args.paused_idle,
                args.concurrency,
                args.paused_warmup,
            )
            rows.append(row)
            print(
                f"  paused {mode} N={count}: {row['kib_per_task']:.1f} KiB/task, "
                f"{row['resumed']} resumed in {row['resume_s']:.2f} s",
                file=sys.stderr,
            )
    return rows


def report_paused(rows: list[dict], args) -> str:
    out = [
        "\nPaused tasks: a task waiting in ctx.ask(), live (paused_turn_idle_seconds = 0) and "
        f"parked (idle {args.paused_idle:g} s), SQLite store, {args.concurrency} sends in flight; "
        "memory = server RSS over a warmed-up baseline; resume = answering "
        f"{args.paused_resume} of them"
    ]
    header = (
        f"{'mode':<8}{'tasks':>9}{'KiB/task':>10}{'peak KiB':>10}{'RSS MiB':>9}{'paused/s':>10}"
        f"{'db KiB':>8}{'resume s':>10}{'p50 ms':>8}{'p99 ms':>8}"
    )
    out += [header, "-" * len(header)]
    for r in rows:
        out.append(
            f"{r['mode']:<8}{r['tasks']:>9,}{r['kib_per_task']:>10.2f}"
            f"{r['peak_kib_per_task']:>10.2f}{r['rss_mib']:>9.0f}{r['paused_per_s']:>10.0f}"
            f"{r['db_kib_per_task']:>8.1f}{r['resume_s']:>10.2f}{r['resume_p50_ms']:>8.1f}"
            f"{r['resume_p99_ms']:>8.1f}"
        )
    return "\n".join(out)


def paused_rows_bad(rows: list[dict]) -> list[str]:
    return [
        f"paused/{r['mode']}/{r['tasks']}"
        for r in rows
        if not (r["resume_s"] > 0 and r["resumed"] > 0 and r["paused_per_s"] > 0)
    ]


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--concurrency", type=int, default=32)
    add_arguments(parser)
    parsed = parser.parse_args()
    apply_defaults(parsed)
    with tempfile.TemporaryDirectory(prefix="a2a-paused-") as d:
        result = asyncio.run(bench_paused(parsed, pathlib.Path(d)))
    print(report_paused(result, parsed))
    print(f"(load average {os.getloadavg()[0]:.2f} after)")
