"""`make bench`, HTTP part: SendMessage through the gateway (JSON-RPC and REST) against a bare
starlette handler returning a fixed JSON body (the ceiling) and the a2a-sdk 1.3.0 JSON-RPC
server, all under the same uvicorn settings, in interleaved rounds.

The load client is a minimal HTTP/1.1 keep-alive client on asyncio streams (one connection
per request in flight, pre-built request bytes, Content-Length framing) so that the client
costs far less than any server; httpx would cap the measurement well below the ceiling.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import statistics
import sys
import uuid

from tests.bench.common import (
    HOST,
    ROOT,
    ServerProcess,
    measured_round,
    run_load,
    serve_argv,
    summarize_rounds,
)

PY = sys.executable
ECHO_TEXT = "hello bench"
_ID = "0" * 32  # placeholder of the per-request messageId (same length as uuid4().hex)


def _jsonrpc_body() -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": _ID, "role": "ROLE_USER", "parts": [{"text": ECHO_TEXT}]}
            },
        },
        separators=(",", ":"),
    ).encode()


def _v03_body() -> bytes:
    """The same SendMessage as a v0.3 client sends it (JSON-RPC `message/send`)."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": _ID,
                    "role": "user",
                    "parts": [{"kind": "text", "text": ECHO_TEXT}],
                }
            },
        },
        separators=(",", ":"),
    ).encode()


def _rest_body() -> bytes:
    return json.dumps(
        {"message": {"messageId": _ID, "role": "ROLE_USER", "parts": [{"text": ECHO_TEXT}]}},
        separators=(",", ":"),
    ).encode()


class RequestTemplate:
    """The bytes of one POST, with a fresh messageId spliced in per request."""

    def __init__(self, port: int, path: str, body: bytes, version: str = "1.0") -> None:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: {version}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        whole = head + body
        at = whole.index(_ID.encode())
        self.prefix, self.suffix = whole[:at], whole[at + len(_ID) :]

    def build(self) -> bytes:
        return self.prefix + uuid.uuid4().hex.encode() + self.suffix


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection(HOST, port))

    async def send(self, data: bytes) -> tuple[int, bytes]:
        status, _, body = await self.exchange(data)
        return status, body

    async def exchange(self, data: bytes) -> tuple[int, bytes, bytes]:
        """One request: (status, response head, body)."""
        self.writer.write(data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        end = lower.index(b"\r\n", at + 2)
        body = await self.reader.readexactly(int(lower[at + 17 : end]))
        return status, head, body

    def close(self) -> None:
        self.writer.close()


def check_body(body: bytes, rest: bool, echo: bool) -> None:
    doc = json.loads(body)
    if doc.get("result", {}).get("kind") == "task":  # a v0.3 answer
        task = doc["result"]
        if task["status"]["state"] != "completed" or len(task.get("artifacts", [])) != 1:
            raise AssertionError(f"unexpected message/send response: {body[:300]!r}")
        if echo and task["artifacts"][0]["parts"][0].get("text") != ECHO_TEXT:
            raise AssertionError(f"artifact does not echo {ECHO_TEXT!r}: {body[:300]!r}")
        return
    result = doc if rest else doc.get("result")
    task = (result or {}).get("task") or {}
    if (
        task.get("status", {}).get("state") != "TASK_STATE_COMPLETED"
        or len(task.get("artifacts", [])) != 1
    ):
        raise AssertionError(f"unexpected SendMessage response: {body[:300]!r}")
    if echo and task["artifacts"][0]["parts"][0].get("text") != ECHO_TEXT:
        raise AssertionError(f"artifact does not echo {ECHO_TEXT!r}: {body[:300]!r}")


async def drive(
    conns: list[Connection], template: RequestTemplate, duration: float, count: int
) -> tuple[list[float], float, int, str]:
    """One SendMessage caller per connection; see run_load."""

    async def call_once(conn: Connection) -> str | None:
        status, body = await conn.send(template.build())
        if status != 200 or not (b"TASK_STATE_COMPLETED" in body or b'"completed"' in body):
            return f"HTTP {status}: {body[:200]!r}"
        return None

    return await run_load(conns, call_once, duration, count)


async def measure(server: ServerProcess, path: str, rest: bool, echo: bool, args) -> dict:
    if path == V03:
        template = RequestTemplate(server.http_port, "/", _v03_body(), version="0.3")
    else:
        body = _rest_body() if rest else _jsonrpc_body()
        template = RequestTemplate(server.http_port, path, body)
    conns = [await Connection.open(server.http_port) for _ in range(args.concurrency)]
    try:
        status, body = await conns[0].send(template.build())
        if status != 200:
            raise AssertionError(f"{server.name}: HTTP {status}: {body[:300]!r}")
        check_body(body, rest, echo)
        await drive(conns, template, args.warmup, 0)
        return await measured_round(
            server, lambda: drive(conns, template, args.duration, args.requests)
        )
    finally:
        for conn in conns:
            conn.close()


V03 = "v0.3"  # the row's "path": `message/send` on `POST /` with A2A-Version 0.3


def ours_http_argv(store: str) -> list[str]:
    return serve_argv(
        "--http-port",
        "0",
        "--store",
        store,
        "--agent",
        "echo",
        "--log-level",
        "WARNING",
    )


async def bench_http(args, tmp: pathlib.Path) -> list[dict]:
    servers_spec = {
        "bare": [PY, str(ROOT / "tests/bench/bare_http_server.py")],
        "sdk": [PY, str(ROOT / "tests/bench/sdk_jsonrpc_server.py")],
        "ours_memory": ours_http_argv("memory:"),
        "ours_sqlite": ours_http_argv(f"sqlite:{tmp / 'http.db'}"),
    }
    # key, label, server, path, REST body?, check the echoed text?
    rows_spec = [
        ("http_bare", "bare starlette handler, fixed JSON (ceiling)", "bare", "/", False, False),
        ("http_sdk", "a2a-sdk 1.3.0 JSON-RPC, in-memory store", "sdk", "/", False, True),
        (
            "http_jsonrpc",
            "ours JSON-RPC via gateway, memory store",
            "ours_memory",
            "/",
            False,
            True,
        ),
        (
            "http_jsonrpc_v03",
            "ours JSON-RPC v0.3 message/send, memory store",
            "ours_memory",
            V03,
            False,
            True,
        ),
        (
            "http_rest",
            "ours REST via gateway, memory store",
            "ours_memory",
            "/message:send",
            True,
            True,
        ),
        (
            "http_jsonrpc_sqlite",
            "ours JSON-RPC via gateway, SQLite store",
            "ours_sqlite",
            "/",
            False,
            True,
        ),
    ]
    servers: dict[str, ServerProcess] = {}
    runs: dict[str, list[dict]] = {key: [] for key, *_ in rows_spec}
    try:
        for name, argv in servers_spec.items():
            servers[name] = ServerProcess(f"http_{name}", argv, tmp).start()
            if not servers[name].http_port:
                raise RuntimeError(f"{name} did not report an HTTP port")
        for rnd in range(args.rounds):
            for key, label, server, path, rest, echo in rows_spec:
                result = await measure(servers[server], path, rest, echo, args)
                runs[key].append(result)
                print(
                    f"  round {rnd + 1}/{args.rounds} {label}: "
                    f"{result['requests'] / result['elapsed_s']:.0f} req/s",
                    file=sys.stderr,
                )
    finally:
        for server in servers.values():
            server.stop()
    rows = [summarize_rounds(key, label, runs[key]) for key, label, *_ in rows_spec]
    by_key = {r["key"]: r for r in rows}
    for row in rows:  # ratios per round, then the median (rounds are interleaved)
        for ref, field in (("http_bare", "vs_bare"), ("http_sdk", "vs_sdk")):
            per_round = [
                a / b if b else float("nan")
                for a, b in zip(row["rps_rounds"], by_key[ref]["rps_rounds"], strict=True)
            ]
            row[field + "_rounds"] = per_round
            row[field] = statistics.median(per_round)
    return rows
