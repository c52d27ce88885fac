"""`make bench`, transports part: SendMessage requests/s over each transport of our own against
JSON-RPC over HTTP, all against ONE server (echo agent, memory store) in interleaved rounds,
so the rows differ only in how the request travels.

A row is a `Row`: how to open its callers against the server and the call each makes. The
HTTP row uses the HTTP part's minimal keep-alive client (http_bench.py); the unix socket's
client is unix_bench.py. Another transport adds its client module and its rows here (and
its setting to `server_env`).
"""

from __future__ import annotations

import asyncio
import pathlib
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tests.bench.common import (
    ServerProcess,
    measured_round,
    run_load,
    serve_argv,
    summarize_rounds,
)
from tests.bench.http_bench import Connection, RequestTemplate, _jsonrpc_body
from tests.bench.unix_bench import LineCaller, SharedLine
from tests.bench.ws_bench import SharedSocket, WsCaller

SOCKET_NAME = "bench.sock"
WS_PATH = "/a2a/ws"


@dataclass
class Row:
    key: str
    label: str
    open: Callable[[ServerProcess, pathlib.Path, int], Awaitable[list[Any]]]  # the callers
    call: Callable[[Any], Awaitable[str | None]]  # one SendMessage: None or what was wrong
    close: Callable[[Any], None]


async def _http_callers(server: ServerProcess, _: pathlib.Path, n: int) -> list[Any]:
    template = RequestTemplate(server.http_port, "/", _jsonrpc_body())
    return [(await Connection.open(server.http_port), template) for _ in range(n)]


async def _http_call(caller: tuple[Connection, RequestTemplate]) -> str | None:
    conn, template = caller
    status, body = await conn.send(template.build())
    if status != 200 or b"TASK_STATE_COMPLETED" not in body:
        return f"HTTP {status}: {body[:200]!r}"
    return None


async def _unix_callers(_: ServerProcess, tmp: pathlib.Path, n: int) -> list[Any]:
    return [await LineCaller.open(str(tmp / SOCKET_NAME)) for _ in range(n)]


async def _shared_callers(_: ServerProcess, tmp: pathlib.Path, n: int) -> list[Any]:
    shared = await SharedLine.open(str(tmp / SOCKET_NAME))
    return [shared] * n  # n callers, one connection


def _ws_url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.http_port}{WS_PATH}"


async def _ws_callers(server: ServerProcess, _: pathlib.Path, n: int) -> list[Any]:
    return [await WsCaller.open(_ws_url(server)) for _ in range(n)]


async def _ws_shared_callers(server: ServerProcess, _: pathlib.Path, n: int) -> list[Any]:
    shared = await SharedSocket.open(_ws_url(server))
    return [shared] * n  # n callers, one socket


def _close_once(caller: Any) -> None:
    caller.close()


ROWS = [
    Row(
        "transports_http_jsonrpc",
        "JSON-RPC over HTTP, N keep-alive connections",
        _http_callers,
        _http_call,
        lambda caller: caller[0].close(),
    ),
    Row(
        "transports_unix",
        "unix socket, N connections, 1 in flight each",
        _unix_callers,
        lambda caller: caller.send_message(),
        _close_once,
    ),
    Row(
        "transports_unix_shared",
        "unix socket, 1 connection, N in flight",
        _shared_callers,
        lambda caller: caller.send_message(),
        _close_once,
    ),
    Row(
        "transports_websocket",
        "WebSocket, N sockets, 1 in flight each",
        _ws_callers,
        lambda caller: caller.send_message(),
        _close_once,
    ),
    Row(
        "transports_websocket_shared",
        "WebSocket, 1 socket, N in flight",
        _ws_shared_callers,
        lambda caller: caller.send_message(),
        _close_once,
    ),
]
BASELINE = "transports_http_jsonrpc"


def server_env(tmp: pathlib.Path) -> dict[str, str]:
    return {"A2A_UNIX_SOCKET": str(tmp / SOCKET_NAME), "A2A_WEBSOCKET_PATH": WS_PATH}


async def measure(row: Row, server: ServerProcess, tmp: pathlib.Path, args) -> dict:
    callers = await row.open(server, tmp, args.concurrency)
    try:
        problem = await row.call(callers[0])
        if problem is not None:
            raise AssertionError(f"{row.key}: {problem}")
        await run_load(callers, row.call, args.warmup, 0)
        return await measured_round(
            server, lambda: run_load(callers, row.call, args.duration, args.requests)
        )
    finally:
        for caller in {id(c): c for c in callers}.values():
            row.close(caller)


async def bench_transports(args, tmp: pathlib.Path) -> list[dict]:
    here = tmp / "transports"
    here.mkdir(exist_ok=True)
    argv = serve_argv(
        "--http-port", "0", "--store", "memory:", "--agent", "echo", "--log-level", "WARNING",
        "--data-dir", str(here / "data"),
    )  # fmt: skip
    server = ServerProcess("transports", argv, here, env=server_env(here)).start()
    runs: dict[str, list[dict]] = {row.key: [] for row in ROWS}
    try:
        for rnd in range(args.rounds):
            for row in ROWS:
                result = await measure(row, server, here, args)
                runs[row.key].append(result)
                print(
                    f"  round {rnd + 1}/{args.rounds} {row.label}: "
                    f"{result['requests'] / result['elapsed_s']:.0f} req/s",
                    file=sys.stderr,
                )
                await asyncio.sleep(0)
    finally:
        server.stop()
    rows = [summarize_rounds(row.key, row.label, runs[row.key]) for row in ROWS]
    base = next(r for r in rows if r["key"] == BASELINE)
    for row in rows:  # ratio per round (interleaved), then the median
        per_round = [
            a / b if b else float("nan")
            for a, b in zip(row["rps_rounds"], base["rps_rounds"], strict=True)
        ]
        row["vs_http_rounds"] = per_round
        row["vs_http"] = statistics.median(per_round)
    return rows


def report_transports(rows: list[dict], args, table: Callable[..., str]) -> str:
    head = (
        f"\nSendMessage per transport, one server (echo agent, memory store), N = "
        f"{args.concurrency} requests in flight, "
        + (f"{args.requests} requests" if args.requests else f"{args.duration:g} s")
        + f" x {args.rounds} interleaved round(s)\n(req/s and 'vs HTTP' = median over rounds, "
        "the ratio taken within each round)"
    )
    body = table(
        ["transport", "req/s", "p50 ms", "p99 ms", "vs HTTP", "srv CPU ms/req", "errors"],
        [
            [
                r["server"],
                f"{r['rps']:.0f}",
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{r['vs_http']:.2f}x",
                f"{r['server_cpu_ms_per_req']:.2f}",
                str(r["errors"]),
            ]
            for r in rows
        ],
    )
    verdict = ""
    for key, name in (("transports_unix", "unix socket"), ("transports_websocket", "WebSocket")):
        row = next((r for r in rows if r["key"] == key), None)
        if row is not None:
            met = "met" if row["vs_http"] >= 1 else "NOT met"
            verdict += f"\ntarget: {name} >= JSON-RPC over HTTP -> {row['vs_http']:.2f}x ({met})"
    return head + "\n" + body + verdict


def transport_rows_bad(rows: list[dict]) -> list[str]:
    import math

    return [
        f"transports/{r['key']}: {r.get('first_error') or 'missing numbers'}"
        for r in rows
        if r["errors"]
        or not all(math.isfinite(r[k]) and r[k] > 0 for k in ("rps", "p50_ms", "p99_ms"))
    ]
