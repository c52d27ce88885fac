"""`make bench`, concurrency part (`--only concurrency`): what one process holds, ours against
a2a-sdk 1.3.0's server running the same agent behaviour, in the same run.

The agent (ours: `TickAgent`; the SDK's: `TickExecutor`) reads `E INTERVAL SILENT UNTIL` from
the message: it says nothing for SILENT seconds, then emits one artifact in E chunks, chunk k
at SILENT + k*INTERVAL after its start (absolute times, so a slow loop shows as lag instead of
stretching the turn), then holds the turn open until the wall-clock time UNTIL and completes.

Rows, each on a fresh server process (SQLite store for ours, the SDK's in-memory store):

- **Open streams** (`--conc-streams`, default 1000; `--conc-events`, default 60,600), over gRPC
  (SendStreamingMessage, 100 streams per channel) and SSE (JSON-RPC SendStreamingMessage, one
  HTTP/1.1 connection per stream): the server's RSS per open stream once every stream has its
  first event and once every stream has all E events (the turns still open), RSS after the
  streams ended, the server's CPU per delivered event while all streams are open, the
  client's CPU (this process: it must not be the bottleneck), and the delivery lag: when an
  event arrived against when the agent was due to emit it.
- **Lag** (`--conc-lag-streams`, default 2000, ours only): the same with more streams, 30
  events at 1 s: delivery lag p50/p99 and CPU per event.
- **First event**: time to the first stream event (and to the agent's first chunk) with an
  agent silent for 1 s and one that answers at once (ours sends the task after
  `first_event_grace_ms`).
- **Send**: the SendMessage rows against the bare handlers (run.py's send part and
  http_bench.py), when the run does not include them already.

The agent's chunk interval is `--conc-seconds` / E (default 60 s: 1 event/s per stream at 60
events, 10/s at 600). `--quick`: 200 streams, 20 s, 60 events only.

    python tests/bench/concurrency_bench.py sdk-server --binding grpc|jsonrpc [--port 0]

runs the a2a-sdk server with `TickExecutor` (the bench starts it so).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import re
import sys
import time
import uuid
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PY = sys.executable
AGENT = "tests.bench.concurrency_bench:TickAgent"
STREAMS_PER_CHANNEL = 100


def parse_tick(text: str) -> tuple[int, float, float, float]:
    """(events, interval s, silent s, hold until: wall-clock s) from the message text."""
    words = text.split()
    events = int(words[0]) if words else 1
    interval = float(words[1]) if len(words) > 1 else 1.0
    silent = float(words[2]) if len(words) > 2 else 0.0
    until = float(words[3]) if len(words) > 3 else 0.0
    return events, interval, silent, until


async def tick(events: int, interval: float, silent: float, until: float, emit) -> None:
    """The agent's schedule, shared by both servers: `await emit(k)` for each chunk."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for k in range(events):
        delay = start + silent + k * interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await emit(k)
    rest = until - time.time()
    if rest > 0:
        await asyncio.sleep(rest)


class TickAgent:
    """Ours: `--agent tests.bench.concurrency_bench:TickAgent`."""

    name = "Tick bench agent"
    description = "Emits one artifact in E chunks on a schedule, then holds the turn open."

    async def run(self, ctx) -> None:
        events, interval, silent, until = parse_tick(ctx.text)
        art: str | None = None

        async def emit(k: int) -> None:
            nonlocal art
            art = await ctx.artifact(
                f"{k} ", artifact_id=art, name="ticks", append=k > 0, last_chunk=k == events - 1
            )

        await tick(events, interval, silent, until, emit)


# ------------------------------------------------------------------------ a2a-sdk server


def sdk_server_main(argv: list[str]) -> None:
    """The a2a-sdk 1.3.0 server (gRPC or JSON-RPC under uvicorn) with the tick executor."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--binding", choices=("grpc", "jsonrpc"), default="grpc")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import a2a_pb2 as sdk_pb

    from tests.bench.common import HOST, announce_and_wait
    from tests.bench.sdk_server import agent_card

    class TickExecutor(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id, context_id = context.task_id, context.context_id
            if context.current_task is None:
                task = sdk_pb.Task(id=task_id, context_id=context_id)
                task.status.state = sdk_pb.TASK_STATE_SUBMITTED
                if context.message is not None:
                    task.history.append(context.message)
                await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task_id, context_id)
            events, interval, silent, until = parse_tick(context.get_user_input())
            art = uuid.uuid4().hex

            async def emit(k: int) -> None:
                await updater.add_artifact(
                    [sdk_pb.Part(text=f"{k} ")],
                    artifact_id=art,
                    name="ticks",
                    append=k > 0,
                    last_chunk=k == events - 1,
                )

            await tick(events, interval, silent, until, emit)
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    async def serve() -> None:
        if args.binding == "grpc":
            import grpc
            from a2a.server.request_handlers import GrpcHandler
            from a2a.types import a2a_pb2_grpc as sdk_grpc

            server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            bound = server.add_insecure_port(f"{HOST}:{args.port}")
            handler = DefaultRequestHandler(
                agent_executor=TickExecutor(),
                task_store=InMemoryTaskStore(),
                agent_card=agent_card(bound),
            )
            sdk_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
            await server.start()
            await announce_and_wait(f"A2A service ready: grpc={bound}")
            await server.stop(1)
            return
        from a2a.server.routes import create_jsonrpc_routes
        from starlette.applications import Starlette

        from gateway.server import HttpServer

        http = HttpServer(HOST, args.port)
        card = agent_card(http.port)
        del card.supported_interfaces[:]
        card.supported_interfaces.add(
            url=f"http://{HOST}:{http.port}", protocol_binding="JSONRPC", protocol_version="1.0"
        )
        handler = DefaultRequestHandler(
            agent_executor=TickExecutor(), task_store=InMemoryTaskStore(), agent_card=card
        )
        await http.start(Starlette(routes=create_jsonrpc_routes(handler, rpc_url="/")))
        await announce_and_wait(f"A2A service ready: grpc=0 http={http.port}")
        await http.stop()

    asyncio.run(serve())


# ------------------------------------------------------------------------------- clients


@dataclass
class Tally:
    """What the client saw on all streams of one row."""

    streams: int
    events: int  # chunks per stream
    opened: int = 0  # streams with a first event
    complete: int = 0  # streams with all their chunks
    ended: int = 0  # streams closed (normally or not)
    errors: int = 0
    first_error: str = ""
    chunks: int = 0  # artifact chunks received
    all_events: int = 0  # stream events of any kind
    lags: list[float] = field(default_factory=list)  # s, chunk arrival - its due time
    first_event: list[float] = field(default_factory=list)  # s after the request
    first_chunk: list[float] = field(default_factory=list)
    all_open: asyncio.Event = field(default_factory=asyncio.Event)
    all_complete: asyncio.Event = field(default_factory=asyncio.Event)
    record_lag: bool = True

    def saw_event(self, sent: float, state: dict) -> None:
        self.all_events += 1
        if not state["first"]:
            state["first"] = True
            self.first_event.append(time.perf_counter() - sent)
            self.opened += 1
            if self.opened == self.streams:
                self.all_open.set()

    def saw_chunk(self, k: int, sent: float, silent: float, interval: float, state: dict) -> None:
        now = time.perf_counter()
        self.chunks += 1
        if k == 0:
            self.first_chunk.append(now - sent)
        if self.record_lag:
            self.lags.append(now - (sent + silent + k * interval))
        if k == self.events - 1:
            self.complete += 1
            if self.complete == self.streams:
                self.all_complete.set()

    def failed(self, error: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or error[:200]

    def done(self) -> None:
        self.ended += 1
        # a stream that ended early never completes: let the waits see that
        if self.ended == self.streams:
            self.all_open.set()
            self.all_complete.set()


async def grpc_stream(stub, text: str, tally: Tally, silent: float, interval: float) -> None:
    import grpc

    from tests.bench.common import METADATA, send_request

    state = {"first": False}
    sent = time.perf_counter()
    try:
        async for event in stub.SendStreamingMessage(send_request(text), metadata=METADATA):
            tally.saw_event(sent, state)
            if event.HasField("artifact_update"):
                k = int(event.artifact_update.artifact.parts[0].text)
                tally.saw_chunk(k, sent, silent, interval, state)
    except grpc.RpcError as exc:
        tally.failed(f"{exc.code().name}: {exc.details()}")
    finally:
        tally.done()


_CHUNK_TEXT = re.compile(rb'"artifactUpdate".*?"text":\s*"(\d+) ', re.S)


def sse_request(port: int, text: str) -> bytes:
    from tests.bench.common import HOST

    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {
                "message": {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                }
            },
        },
        separators=(",", ":"),
    ).encode()
    return (
        f"POST / HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nA2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def sse_stream(port: int, text: str, tally: Tally, silent: float, interval: float) -> None:
    """One JSON-RPC SendStreamingMessage over its own HTTP/1.1 connection, SSE read from
    the chunked body (each SSE event ends with a blank line)."""
    from tests.bench.common import HOST

    state = {"first": False}
    writer = None
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
        sent = time.perf_counter()
        writer.write(sse_request(port, text))
        head = await reader.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            raise RuntimeError(f"HTTP {head[9:12].decode(errors='replace')}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        buf = b""
        while True:
            if chunked:
                size = int((await reader.readuntil(b"\r\n")).strip() or b"0", 16)
                if size == 0:
                    break
                data = await reader.readexactly(size + 2)
                buf += data[:-2]
            else:
                data = await reader.read(65536)
                if not data:
                    break
                buf += data
            while b"\n\n" in buf or b"\r\n\r\n" in buf:
                at = buf.find(b"\n\n")
                cut = at + 2
                at_crlf = buf.find(b"\r\n\r\n")
                if at < 0 or (0 <= at_crlf < at):
                    at, cut = at_crlf, at_crlf + 4
                event, buf = buf[:at], buf[cut:]
                if b"data:" not in event:
                    continue
                tally.saw_event(sent, state)
                if b'"error"' in event[:40]:
                    raise RuntimeError(event[:200].decode(errors="replace"))
                match = _CHUNK_TEXT.search(event)
                if match is not None:
                    tally.saw_chunk(int(match.group(1)), sent, silent, interval, state)
    except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError) as exc:
        tally.failed(f"{type(exc).__name__}: {exc}")
    finally:
        if writer is not None:
            writer.close()
        tally.done()


# ---------------------------------------------------------------------------- measuring


def rss_bytes(pid: int) -> int:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def ms(values: list[float], q: float) -> float:
    from tests.bench.common import percentile

    return percentile(values, q)


class Target:
    """One server process and how to open a stream on it."""

    def __init__(self, server, binding: str) -> None:
        self.server = server
        self.binding = binding
        self.channels: list = []

    async def __aenter__(self) -> Target:
        return self

    async def __aexit__(self, *exc) -> None:
        for ch in self.channels:
            await ch.close()

    def opener(self, count: int):
        """A function (i, text, tally, silent, interval) -> coroutine for stream i."""
        if self.binding == "sse":
            port = self.server.http_port
            return lambda i, text, tally, silent, interval: sse_stream(
                port, text, tally, silent, interval
            )
        import grpc

        from gen import a2a_pb2_grpc

        need = max(1, math.ceil(count / STREAMS_PER_CHANNEL))
        while len(self.channels) < need:
            self.channels.append(grpc.aio.insecure_channel(self.server.target))
        stubs = [a2a_pb2_grpc.A2AServiceStub(ch) for ch in self.channels]
        return lambda i, text, tally, silent, interval: grpc_stream(
            stubs[i % len(stubs)], text, tally, silent, interval
        )


async def run_streams(
    target: Target,
    streams: int,
    events: int,
    interval: float,
    silent: float = 0.0,
    hold: float = 0.0,
    ramp: float = 2.0,
    settle: float = 5.0,
    settle_long: float = 0.0,
    record_lag: bool = True,
) -> dict:
    """Open `streams` streams (over `ramp` seconds), follow them to the end; the server's
    RSS and CPU at each stage."""
    server = target.server
    opener = target.opener(streams)
    # every turn stays open until all streams could have had all events, plus `hold`
    until = time.time() + ramp + silent + events * interval + hold
    text = f"{events} {interval} {silent} {until}"
    tally = Tally(streams, events, record_lag=record_lag)
    rss0, cpu0 = rss_bytes(server.pid), server.cpu_seconds()
    t0 = time.perf_counter()
    tasks = []
    batch = max(1, streams // max(1, int(ramp / 0.05)))
    for i in range(streams):
        tasks.append(asyncio.ensure_future(opener(i, text, tally, silent, interval)))
        if (i + 1) % batch == 0:
            await asyncio.sleep(0.05)
    budget = ramp + silent + events * interval + hold + 120
    await asyncio.wait_for(tally.all_open.wait(), budget)
    t_open = time.perf_counter()
    rss_open, cpu_open, cli_open = rss_bytes(server.pid), server.cpu_seconds(), time.process_time()
    chunks_open, events_open = tally.chunks, tally.all_events
    await asyncio.wait_for(tally.all_complete.wait(), budget)
    t_full = time.perf_counter()
    rss_full, cpu_full, cli_full = rss_bytes(server.pid), server.cpu_seconds(), time.process_time()
    delivered = tally.all_events - events_open
    await asyncio.wait_for(asyncio.gather(*tasks), budget)
    t_end = time.perf_counter()
    await asyncio.sleep(settle)
    rss_after = rss_bytes(server.pid)
    rss_later = math.nan
    if settle_long:  # what the target reads: RSS a minute after the end
        await asyncio.sleep(max(0.0, settle_long - settle))
        rss_later = rss_bytes(server.pid)
    window = max(1e-9, t_full - t_open)
    return {
        "streams": streams,
        "events": events,
        "interval_s": interval,
        "silent_s": silent,
        "opened": tally.opened,
        "complete": tally.complete,
        "errors": tally.errors,
        "first_error": tally.first_error,
        "chunks": tally.chunks,
        "rss_base_mib": rss0 / 2**20,
        "rss_open_mib": rss_open / 2**20,
        "rss_full_mib": rss_full / 2**20,
        "rss_after_mib": rss_after / 2**20,
        "rss_later_mib": rss_later / 2**20,
        "later_s": settle_long,
        "kib_per_stream_open": (rss_open - rss0) / 1024 / streams,
        "kib_per_stream_full": (rss_full - rss0) / 1024 / streams,
        "open_s": t_open - t0,
        "stream_s": t_full - t_open,
        "end_s": t_end - t0,
        "delivered": delivered,
        "delivered_chunks": tally.chunks - chunks_open,
        "events_per_s": delivered / window,
        "cpu_ms_per_event": 1000 * (cpu_full - cpu_open) / max(1, delivered),
        "server_cpu_pct": 100 * (cpu_full - cpu_open) / window,
        "client_cpu_pct": 100 * (cli_full - cli_open) / window,
        "open_cpu_ms_per_stream": 1000 * (cpu_open - cpu0) / streams,
        "lag_p50_ms": ms(tally.lags, 50),
        "lag_p99_ms": ms(tally.lags, 99),
        "lag_max_ms": ms(tally.lags, 100),
        "first_event_p50_ms": ms(tally.first_event, 50),
        "first_event_p99_ms": ms(tally.first_event, 99),
        "first_chunk_p50_ms": ms(tally.first_chunk, 50),
        "first_chunk_p99_ms": ms(tally.first_chunk, 99),
    }


SERVERS = {
    # key: (label, ours?)
    "ours": ("ours, SQLite", True),
    "sdk": ("a2a-sdk 1.3.0, in-memory", False),
}


def start_server(key: str, binding: str, tmp: pathlib.Path, streams: int):
    from tests.bench.common import ServerProcess, serve_argv

    name = f"conc_{key}_{binding}_{uuid.uuid4().hex[:6]}"
    if key == "ours":
        argv = serve_argv(
            "--http-port",
            "0" if binding == "sse" else "-1",
            "--store",
            f"sqlite:{tmp / (name + '.db')}",
            "--agent",
            AGENT,
            "--log-level",
            "WARNING",
        )
        # room for every stream: the defaults cap calls and connections at 1,000
        cap = str(max(1000, streams + 200))
        env = {"A2A_GRPC_MAX_CONCURRENT_CALLS": cap, "A2A_MAX_CONNECTIONS": cap}
    else:
        sdk_binding = "grpc" if binding == "grpc" else "jsonrpc"
        argv = [PY, str(pathlib.Path(__file__)), "sdk-server", "--binding", sdk_binding]
        env = {}
    return ServerProcess(name, argv, tmp, env).start()


async def one_row(
    key: str, binding: str, tmp: pathlib.Path, streams: int, events: int, interval: float, **kw
) -> dict:
    server = start_server(key, binding, tmp, streams)
    try:
        async with Target(server, binding) as target:
            await run_streams(target, 5, 3, 0.01, ramp=0.1, settle=0.5)  # warm-up
            row = await run_streams(target, streams, events, interval, **kw)
    finally:
        server.stop()
    row.update(key=key, server=SERVERS[key][0], binding=binding)
    print(
        f"  {row['server']} {binding} {streams} streams x {events} events: "
        f"{row['kib_per_stream_full']:.0f} KiB/stream, {row['cpu_ms_per_event']:.3f} ms CPU/event, "
        f"lag p50 {row['lag_p50_ms']:.0f} ms, errors {row['errors']}",
        file=sys.stderr,
    )
    return row


async def first_event_rows(tmp: pathlib.Path, samples: int) -> list[dict]:
    rows = []
    for key in SERVERS:
        for binding in ("grpc", "sse"):
            server = start_server(key, binding, tmp, samples)
            try:
                async with Target(server, binding) as target:
                    await run_streams(target, 5, 1, 0.01, ramp=0.1, settle=0.2)  # warm-up
                    for silent in (0.0, 1.0):
                        row = await run_streams(
                            target, samples, 1, 0.01, silent=silent, ramp=1.0, settle=0.2
                        )
                        row.update(key=key, server=SERVERS[key][0], binding=binding)
                        rows.append(row)
            finally:
                server.stop()
    return rows


async def bench_concurrency(args, tmp: pathlib.Path) -> dict:
    quick = args.quick
    streams = args.conc_streams or (200 if quick else 1000)
    seconds = args.conc_seconds or (20.0 if quick else 60.0)
    counts = [int(x) for x in (args.conc_events or ("60" if quick else "60,600")).split(",")]
    lag_streams = args.conc_lag_streams if args.conc_lag_streams is not None else 2000
    settle_long = args.conc_settle if args.conc_settle is not None else (0.0 if quick else 60.0)
    out: dict = {
        "streams": streams,
        "seconds": seconds,
        "load_before": os.getloadavg()[0],
        "streams_rows": [],
        "lag_rows": [],
    }
    print("  time to first event ...", file=sys.stderr)
    samples = args.conc_first_samples or (20 if quick else 50)
    out["first_event_rows"] = await first_event_rows(tmp, samples)
    for events in counts:
        interval = seconds / events
        for binding in ("grpc", "sse"):
            for key in SERVERS:
                out["streams_rows"].append(
                    await one_row(
                        key, binding, tmp, streams, events, interval, settle_long=settle_long
                    )
                )
    if lag_streams and not quick:
        for binding in ("grpc", "sse"):
            out["lag_rows"].append(await one_row("ours", binding, tmp, lag_streams, 30, 1.0))
    if "send" not in args.only:
        from tests.bench.run import bench_send

        out["send"] = await bench_send(args, tmp)
    if "http" not in args.only:
        from tests.bench.http_bench import bench_http

        out["http"] = await bench_http(args, tmp)
    out["load_after"] = os.getloadavg()[0]
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--conc-streams", type=int, help="open streams per concurrency row (default 1000)"
    )
    p.add_argument(
        "--conc-events", help="comma list of events per stream (default 60,600; --quick 60)"
    )
    p.add_argument(
        "--conc-seconds",
        type=float,
        help="a stream's E events are spread over this many seconds (default 60)",
    )
    p.add_argument(
        "--conc-lag-streams",
        type=int,
        help="streams of the lag rows (ours only; default 2000, none with --quick; 0 = none)",
    )
    p.add_argument(
        "--conc-settle",
        type=float,
        help="the stream rows read the server's RSS again this many seconds after the streams "
        "ended (default 60; --quick 0 = only the reading 5 s after)",
    )
    p.add_argument(
        "--conc-first-samples",
        type=int,
        help="streams per time-to-first-event row (default 50; --quick 20)",
    )


# ----------------------------------------------------------------------------- report


def _f(value: float, digits: int = 1) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.{digits}f}"


def report_concurrency(result: dict, table, send_report=None) -> str:
    lines = [
        f"\nConcurrency: {result['streams']} open streams per row, each event count spread over "
        f"{result['seconds']:.0f} s; ours on SQLite, a2a-sdk on its in-memory store; load average "
        f"{result['load_before']:.2f} before, {result.get('load_after', float('nan')):.2f} after",
        "(KiB/stream = server RSS growth over the baseline / streams, at open and with all events "
        "delivered (turns still open); RSS later = --conc-settle s after the streams ended; CPU ms/event = server CPU / stream events delivered while "
        "all streams were open; lag = arrival - the agent's due time)",
    ]
    headers = [
        "server",
        "binding",
        "events",
        "KiB/stream open",
        "KiB/stream full",
        "RSS MiB base / 5 s after / later",
        "CPU ms/event",
        "srv CPU%",
        "client CPU%",
        "lag p50/p99 ms",
        "errors",
    ]
    rows = []
    for r in result["streams_rows"] + result["lag_rows"]:
        rows.append(
            [
                r["server"] + (f" ({r['streams']} streams)" if r in result["lag_rows"] else ""),
                r["binding"],
                str(r["events"]),
                _f(r["kib_per_stream_open"], 0),
                _f(r["kib_per_stream_full"], 0),
                f"{_f(r['rss_base_mib'], 0)} / {_f(r['rss_after_mib'], 0)}"
                f" / {_f(r.get('rss_later_mib', math.nan), 0)}",
                _f(r["cpu_ms_per_event"], 3),
                _f(r["server_cpu_pct"], 0),
                _f(r["client_cpu_pct"], 0),
                f"{_f(r['lag_p50_ms'], 0)} / {_f(r['lag_p99_ms'], 0)}",
                str(r["errors"]) + (f" ({r['first_error'][:40]})" if r["errors"] else ""),
            ]
        )
    lines.append(table(headers, rows))
    lines.append("\nTime to first event (p50 / p99 ms; first chunk = the agent's first word)")
    headers = ["server", "binding", "agent", "first event", "first chunk", "errors"]
    rows = [
        [
            r["server"],
            r["binding"],
            "silent 1 s" if r["silent_s"] else "at once",
            f"{_f(r['first_event_p50_ms'])} / {_f(r['first_event_p99_ms'])}",
            f"{_f(r['first_chunk_p50_ms'])} / {_f(r['first_chunk_p99_ms'])}",
            str(r["errors"]),
        ]
        for r in result["first_event_rows"]
    ]
    lines.append(table(headers, rows))
    return "\n".join(lines)


def concurrency_rows_bad(result: dict) -> list[str]:
    bad = []
    for r in result["streams_rows"] + result["lag_rows"] + result["first_event_rows"]:
        name = f"concurrency {r['server']} {r['binding']} {r['streams']}x{r['events']}"
        if r["errors"] or r["complete"] < r["streams"]:
            bad.append(f"{name}: {r['errors']} errors, {r['complete']}/{r['streams']} complete")
    return bad


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "sdk-server":
        sdk_server_main(sys.argv[2:])
    else:
        sys.exit("usage: concurrency_bench.py sdk-server --binding grpc|jsonrpc [--port 0]")
