"""`make bench`, burst part: does one flooding principal take the server from everyone else?

Our server (HTTP gateway, SQLite store, bearer auth with two principals) is measured
twice, with the per-principal limits off and on. Each time a second caller ("probe")
first measures `GET /tasks?pageSize=1`, `GET /health` and the agent card on an idle
server, then again while the other principal ("flood") sends `GET /tasks?pageSize=1`
from many keep-alive connections as fast as the server answers, ignoring Retry-After
(a hostile client). The flood is bounded: a fixed number of connections for a fixed time.

The load generator is `wrk` when installed (`make bench-tools`; one thread, so it
leaves the server a core) or else a bounded asyncio flood in a subprocess
(`python tests/bench/burst_bench.py flood ...`); its CPU is reported with the figures.
The target (issue 14): with the limits on, the probe's p99 during the flood stays
within 3x its idle p99. The p99 is also given for the flood once it has settled (probe
requests sent from `ONSET_S` after the flood started): the first seconds are the flood's
500 connections arriving at once, each with a request, which no per-principal limit can
refuse before it has been read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.bench.common import HOST, ROOT, ServerProcess, percentile, serve_argv
from tests.bench.http_bench import Connection

PY = sys.executable
TOKENS = {"flood": "flood-token-0123456789abcdef", "probe": "probe-token-0123456789abcdef"}
# Limits on: generous for a normal caller, far below what the flood asks for.
LIMITS_ON = {
    "A2A_RATE_LIMIT_PER_PRINCIPAL": "100",
    "A2A_RATE_LIMIT_BURST": "200",
    "A2A_MAX_CONCURRENT_TURNS_PER_PRINCIPAL": "16",
    "A2A_MAX_STREAMS_PER_PRINCIPAL": "16",
}
PROBES = {
    "tasks": "/tasks?pageSize=1",  # authenticated, another principal than the flood's
    "health": "/health",
    "card": "/.well-known/agent-card.json",
}
# One probe caller sends a request every PROBE_EVERY_S (50/s): an ordinary caller, well
# under the per-principal rate limit on (100/s), whatever the server's latency.
PROBE_EVERY_S = 0.02
ONSET_S = 3.0  # the flood's onset, left out of the "settled" p99 (shorter in a short run)


def get_request(port: int, path: str, token: str | None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{auth}A2A-Version: 1.0\r\n\r\n"
    ).encode()


def server_argv(tmp: pathlib.Path, name: str) -> list[str]:
    return serve_argv(
        "--http-port",
        "0",
        "--store",
        f"sqlite:{tmp / f'{name}.db'}",
        "--data-dir",
        str(tmp / f"{name}-data"),
        "--agent",
        "echo",
        "--log-level",
        "WARNING",
    )


async def probe(
    port: int, seconds: float, since: float | None = None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """One sequential caller per probe path for `seconds`: their latencies, and when each
    request was sent (perf_counter seconds after `since`)."""
    found: dict[str, list[float]] = {name: [] for name in PROBES}
    sent: dict[str, list[float]] = {name: [] for name in PROBES}
    origin = time.perf_counter() if since is None else since

    async def one(name: str, path: str) -> None:
        token = TOKENS["probe"] if name == "tasks" else None
        request = get_request(port, path, token)
        conn = await Connection.open(port)
        due = time.perf_counter()
        deadline = due + seconds
        try:
            while due < deadline:  # on a fixed cadence, whatever each answer took
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                due += PROBE_EVERY_S
                t0 = time.perf_counter()
                if t0 >= deadline:
                    break
                status, body = await conn.send(request)
                if status != 200:
                    raise AssertionError(f"probe {path}: HTTP {status}: {body[:200]!r}")
                found[name].append(time.perf_counter() - t0)
                sent[name].append(t0 - origin)
        finally:
            conn.close()

    await asyncio.gather(*(one(name, path) for name, path in PROBES.items()))
    return found, sent


def start_flood(port: int, args, polite: bool) -> tuple[subprocess.Popen, str]:
    url = f"http://{HOST}:{port}{PROBES['tasks']}"
    wrk = shutil.which("wrk")
    if wrk and not args.burst_asyncio and not polite:
        argv = [
            wrk,
            "-t1",
            f"-c{args.burst_connections}",
            f"-d{args.burst_seconds:g}s",
            "-H",
            f"Authorization: Bearer {TOKENS['flood']}",
            "-H",
            "A2A-Version: 1.0",
            url,
        ]
        name = "wrk (1 thread)"
    else:
        argv = [
            PY,
            str(pathlib.Path(__file__).resolve()),
            "flood",
            "--port",
            str(port),
            "--connections",
            str(args.burst_connections),
            "--seconds",
            str(args.burst_seconds),
            *(["--polite"] if polite else []),
        ]
        name = "asyncio flood" + (", honours Retry-After" if polite else "")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, name


def flood_result(output: str, seconds: float) -> dict:
    """Requests and refusals from wrk's summary (or the asyncio flood's JSON line)."""
    if output.lstrip().startswith("{"):
        return json.loads(output.strip().splitlines()[-1])
    total = re.search(r"(\d+) requests in", output)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    requests = int(total.group(1)) if total else 0
    return {
        "requests": requests,
        "refused": int(non2xx.group(1)) if non2xx else 0,
        "rps": requests / seconds,
        "socket_errors": errors.group(1) if errors else "",
    }


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summarize(latencies: dict[str, list[float]]) -> dict[str, dict]:
    return {
        name: {"n": len(v), "p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99)}
        for name, v in latencies.items()
    }


async def measure(
    label: str, key: str, env: dict, args, tmp: pathlib.Path, polite: bool = False
) -> dict:
    server = ServerProcess(
        f"burst_{key}",
        server_argv(tmp, key),
        tmp,
        env={"A2A_AUTH_BEARER_TOKENS": ",".join(f"{n}={t}" for n, t in TOKENS.items()), **env},
    ).start()
    try:
        port = server.http_port
        await probe(port, min(0.5, args.burst_idle_seconds))  # warm-up
        idle = summarize((await probe(port, args.burst_idle_seconds))[0])
        cpu0, gen0, t0 = server.cpu_seconds(), children_cpu(), time.perf_counter()
        flood, generator = start_flood(port, args, polite)
        await asyncio.sleep(min(0.5, args.burst_seconds / 4))  # the flood is on
        latencies, sent = await probe(port, args.burst_seconds * 0.7, since=t0)
        during = summarize(latencies)
        onset = min(ONSET_S, args.burst_seconds * 0.35)
        settled = summarize(
            {
                name: [v for v, when in zip(values, sent[name], strict=True) if when >= onset]
                for name, values in latencies.items()
            }
        )
        output = await asyncio.to_thread(flood.communicate)
        elapsed = time.perf_counter() - t0
        cpu1, gen1 = server.cpu_seconds(), children_cpu()
    finally:
        server.stop()
    result = flood_result(output[0], args.burst_seconds)
    return {
        "key": key,
        "label": label,
        "idle": idle,
        "flood": during,
        "ratio_p99": during["tasks"]["p99_ms"] / idle["tasks"]["p99_ms"],
        "settled": settled,
        "onset_s": onset,
        "ratio_p99_settled": settled["tasks"]["p99_ms"] / idle["tasks"]["p99_ms"],
        "flood_rps": result["rps"],
        "flood_refused_pct": 100 * result["refused"] / max(1, result["requests"]),
        "flood_requests": result["requests"],
        "generator": generator,
        "generator_cpu_pct": 100
        * (gen1 - gen0)
        / elapsed,  # the flood was reaped, the server not yet
        "server_cpu_pct": 100 * (cpu1 - cpu0) / elapsed,
        "connections": args.burst_connections,
        "seconds": args.burst_seconds,
    }


async def bench_burst(args, tmp: pathlib.Path) -> list[dict]:
    return [
        await measure("limits off", "burst_limits_off", {}, args, tmp),
        await measure("limits on (100/s, burst 200)", "burst_limits_on", LIMITS_ON, args, tmp),
        await measure(
            "limits on, the flood backs off",
            "burst_limits_on_polite",
            LIMITS_ON,
            args,
            tmp,
            polite=True,
        ),
    ]


def report_burst(rows: list[dict]) -> str:
    if not rows:
        return ""
    first = rows[0]
    out = [
        f"\nBurst: one principal floods GET /tasks?pageSize=1 from {first['connections']} "
        f"connections for {first['seconds']:g} s; a second caller's latency, idle -> during "
        "the flood (ms)"
    ]
    head = [
        "limits",
        "load generator",
        "tasks p50",
        "tasks p99",
        "health p99",
        "card p99",
        "p99 x idle",
        "settled p99",
        "x idle",
    ]
    head += ["flood req/s", "flood 429 %", "srv CPU%", "loadgen CPU%"]
    lines = []
    for r in rows:
        i, f = r["idle"], r["flood"]

        def pair(name: str, q: str, i: dict = i, f: dict = f) -> str:
            return f"{i[name][q]:.1f} -> {f[name][q]:.1f}"

        lines.append(
            [
                r["label"],
                r["generator"],
                pair("tasks", "p50_ms"),
                pair("tasks", "p99_ms"),
                pair("health", "p99_ms"),
                pair("card", "p99_ms"),
                f"{r['ratio_p99']:.1f}",
                f"{r['settled']['tasks']['p99_ms']:.1f}",
                f"{r['ratio_p99_settled']:.1f}",
                f"{r['flood_rps']:.0f}",
                f"{r['flood_refused_pct']:.0f}",
                f"{r['server_cpu_pct']:.0f}",
                f"{r['generator_cpu_pct']:.0f}",
            ]
        )
    widths = [max(len(h), *(len(row[c]) for row in lines)) for c, h in enumerate(head)]
    out.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in lines]
    verdicts = [
        f"{r['label']}: {r['ratio_p99']:.1f}x ({'met' if r['ratio_p99'] <= 3 else 'NOT met'}), "
        f"settled {r['ratio_p99_settled']:.1f}x "
        f"({'met' if r['ratio_p99_settled'] <= 3 else 'NOT met'})"
        for r in rows
        if r["key"].startswith("burst_limits_on")
    ]
    if verdicts:
        out.append(
            f"target: second caller's tasks p99 within 3x idle (settled: requests sent "
            f"{first['onset_s']:g} s or more after the flood began) -> " + "; ".join(verdicts)
        )
    return "\n".join(out)


def burst_rows_bad(rows: list[dict]) -> list[str]:
    return [
        f"burst/{r['key']}"
        for r in rows
        if not r["flood_requests"]
        or not all(v["n"] for v in (*r["idle"].values(), *r["flood"].values()))
    ]


# ------------------------------------------------------------------ the asyncio flood


_RETRY_AFTER = re.compile(rb"\r\nretry-after: *(\d+)")


async def flood_main(port: int, connections: int, seconds: float, polite: bool) -> None:
    """Bounded flood without wrk: `connections` keep-alive callers for `seconds`; `polite`:
    each waits as long as a refusal's Retry-After says."""
    request = get_request(port, PROBES["tasks"], TOKENS["flood"])
    counts = {"requests": 0, "refused": 0}
    deadline = time.perf_counter() + seconds

    async def one() -> None:
        conn = await Connection.open(port)
        try:
            while time.perf_counter() < deadline:
                status, head, _ = await conn.exchange(request)
                counts["requests"] += 1
                counts["refused"] += status != 200
                wait = _RETRY_AFTER.search(head.lower()) if polite and status == 429 else None
                if wait is not None:
                    await asyncio.sleep(min(int(wait.group(1)), deadline - time.perf_counter()))
        finally:
            conn.close()

    await asyncio.gather(*(one() for _ in range(connections)), return_exceptions=True)
    print(json.dumps({**counts, "rps": counts["requests"] / seconds}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="the asyncio load generator of the burst bench")
    sub = parser.add_subparsers(dest="cmd", required=True)
    flood = sub.add_parser("flood")
    flood.add_argument("--port", type=int, required=True)
    flood.add_argument("--connections", type=int, default=500)
    flood.add_argument("--seconds", type=float, default=15)
    flood.add_argument("--polite", action="store_true", help="wait as Retry-After says")
    args = parser.parse_args()
    asyncio.run(flood_main(args.port, args.connections, args.seconds, args.polite))


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
