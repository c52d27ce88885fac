"""`make bench`, stored file artifacts: how fast a stored artifact downloads, and that reading
its task does not grow with the artifact's size.

Our server runs as a subprocess (SQLite store, FileAgent, HTTP gateway). One task stores a
file of `--file-mib` MiB (default 10) with `ctx.file_artifact`; the reference is a bare
starlette app under the same uvicorn settings (`bare_file_server.py`) serving the very same
file (the stored blob) with `FileResponse`. Each download is a keep-alive HTTP/1.1 GET read
to its end by a minimal asyncio client (no httpx: the client must cost less than either
server); the first one of each server is checked against the file's SHA-256. Rounds are
interleaved; "vs FileResponse" is our MiB/s over the reference's within a round, median
over rounds.

Task reads: GetTask over gRPC on three tasks whose one file artifact is 1 KiB, 1 MiB and
`--file-mib` MiB (and 10x that outside --quick), alternating between them; "vs 1 KiB" is
the p50 over the 1 KiB task's p50.

Standalone: python tests/bench/file_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402

from gen import a2a_pb2 as pb  # noqa: E402
from gen import a2a_pb2_grpc  # noqa: E402
from tests.bench.common import (
    HOST,
    METADATA,
    ROOT,
    ServerProcess,
    percentile,
    serve_argv,  # noqa: E402
    user_message,
)

PY = sys.executable
MiB = 1024 * 1024
READ_CHUNK = 1 << 20


class Download:
    """One keep-alive connection that GETs a path and reads the body to its end."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Download:
        return cls(*await asyncio.open_connection(HOST, port, limit=READ_CHUNK))

    async def get(self, request: bytes, digest: hashlib._Hash | None = None) -> tuple[int, int]:
        """(status, body bytes read)."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        remaining = int(lower[at + 17 : lower.index(b"\r\n", at + 2)])
        size = remaining
        while remaining:
            chunk = await self.reader.read(min(remaining, READ_CHUNK))
            if not chunk:
                raise RuntimeError("connection closed mid-body")
            if digest is not None:
                digest.update(chunk)
            remaining -= len(chunk)
        return status, size

    def close(self) -> None:
        self.writer.close()


def get_request(port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()


async def measure_download(
    server: ServerProcess, path: str, size: int, sha256: str, duration: float
) -> dict:
    """Sequential downloads on one connection for `duration` seconds: MiB/s and per-file ms."""
    conn = await Download.open(server.http_port)
    request = get_request(server.http_port, path)
    try:
        digest = hashlib.sha256()
        status, got = await conn.get(request, digest)
        if status != 200 or got != size or digest.hexdigest() != sha256:
            raise AssertionError(f"{server.name}: HTTP {status}, {got} bytes, not the file")
        times = []
        cpu0 = server.cpu_seconds()
        start = time.perf_counter()
        while time.perf_counter() - start < duration or not times:
            t0 = time.perf_counter()
            status, got = await conn.get(request)
            if status != 200 or got != size:
                raise AssertionError(f"{server.name}: HTTP {status} with {got} bytes")
            times.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        cpu = server.cpu_seconds() - cpu0
    finally:
        conn.close()
    return {
        "downloads": len(times),
        "mib_per_s": len(times) * size / MiB / elapsed,
        "p50_ms": percentile(times, 50),
        "server_cpu_ms_per_download": 1000 * cpu / len(times),
    }


async def store_file(stub, mib_or_bytes: str) -> pb.Task:
    request = pb.SendMessageRequest(message=user_message(f"file {mib_or_bytes}"))
    task = (await stub.SendMessage(request, metadata=METADATA, timeout=120)).task
    if task.status.state != pb.TASK_STATE_COMPLETED:
        raise AssertionError(f"FileAgent did not complete: {task.status}")
    return task


def part_of(task: pb.Task) -> pb.Part:
    return task.artifacts[0].parts[0]


def sha_of(part: pb.Part) -> str:
    return part.metadata.fields["a2a_service"].struct_value.fields["sha256"].string_value


async def measure_reads(stub, tasks: dict[str, pb.Task], calls: int) -> dict[str, list[float]]:
    """GetTask latencies per task, the tasks taken in turn so noise hits each alike."""
    times: dict[str, list[float]] = {label: [] for label in tasks}
    for _ in range(calls):
        for label, task in tasks.items():
            t0 = time.perf_counter()
            got = await stub.GetTask(pb.GetTaskRequest(id=task.id), metadata=METADATA, timeout=30)
            times[label].append(time.perf_counter() - t0)
            if got.artifacts[0].parts[0].url != part_of(task).url:
                raise AssertionError("GetTask returned another artifact")
    return times


def ours_argv(tmp: pathlib.Path) -> list[str]:
    return serve_argv(
        "--http-port",
        "0",
        "--data-dir",
        str(tmp / "files-data"),
        "--store",
        f"sqlite:{tmp / 'files-data' / 'tasks.db'}",
        "--agent",
        "tests.bench.agents:FileAgent",
        "--log-level",
        "WARNING",
    )


async def bench_files(args, tmp: pathlib.Path) -> dict:
    mib = args.file_mib
    duration = args.file_duration
    ours = ServerProcess("files_ours", ours_argv(tmp), tmp).start()
    servers = [ours]
    try:
        async with grpc.aio.insecure_channel(ours.target) as channel:
            await asyncio.wait_for(channel.channel_ready(), 20)
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            big = await store_file(stub, f"{mib}MiB")
            sizes = {"1 KiB": "1024", "1 MiB": "1MiB", f"{mib} MiB": None}
            if not args.quick:
                sizes[f"{mib * 10} MiB"] = f"{mib * 10}MiB"
            tasks = {
                label: (big if spec is None else await store_file(stub, spec))
                for label, spec in sizes.items()
            }
            part = part_of(big)
            sha = sha_of(part)
            size = mib * MiB
            blob = tmp / "files-data" / "files" / "objects" / sha[:2] / sha
            bare = ServerProcess(
                "files_bare",
                [PY, str(ROOT / "tests/bench/bare_file_server.py"), "--file", str(blob)],
                tmp,
            ).start()
            servers.append(bare)
            ours_path = part.url.split(f":{ours.http_port}", 1)[1]
            rounds = []
            for rnd in range(args.rounds):
                bare_run = await measure_download(bare, "/file", size, sha, duration)
                ours_run = await measure_download(ours, ours_path, size, sha, duration)
                rounds.append({"bare": bare_run, "ours": ours_run})
                print(
                    f"  round {rnd + 1}/{args.rounds}: FileResponse {bare_run['mib_per_s']:.0f} MiB/s, "
                    f"ours {ours_run['mib_per_s']:.0f} MiB/s",
                    file=sys.stderr,
                )
            reads = await measure_reads(stub, tasks, args.file_reads)
    finally:
        for server in servers:
            server.stop()
    ratios = [r["ours"]["mib_per_s"] / r["bare"]["mib_per_s"] for r in rounds]
    small = percentile(reads["1 KiB"], 50)
    return {
        "file_mib": mib,
        "download": [
            {
                "key": key,
                "server": label,
                "mib_per_s": statistics.median(r[key]["mib_per_s"] for r in rounds),
                "mib_per_s_rounds": [r[key]["mib_per_s"] for r in rounds],
                "p50_ms": statistics.median(r[key]["p50_ms"] for r in rounds),
                "downloads": sum(r[key]["downloads"] for r in rounds),
                "server_cpu_ms_per_download": statistics.median(
                    r[key]["server_cpu_ms_per_download"] for r in rounds
                ),
            }
            for key, label in (
                ("bare", "bare starlette FileResponse, same file"),
                ("ours", "ours: GET /tasks/{id}/files/{sha256}"),
            )
        ],
        "vs_file_response": statistics.median(ratios),
        "vs_file_response_rounds": ratios,
        "task_reads": [
            {
                "artifact": label,
                "calls": len(times),
                "p50_ms": percentile(times, 50),
                "p99_ms": percentile(times, 99),
                "vs_1kib": percentile(times, 50) / small,
            }
            for label, times in reads.items()
        ],
    }


def report_files(result: dict, args) -> str:
    out = [
        f"\nStored file artifact download: one {result['file_mib']} MiB file, one keep-alive "
        f"connection, sequential GETs for {args.file_duration:g} s x {args.rounds} interleaved "
        "round(s), same uvicorn settings"
    ]
    header = f"{'server':<42}{'MiB/s':>9}{'p50 ms':>9}{'srv CPU ms/file':>17}{'downloads':>11}"
    out += [header, "-" * len(header)]
    for r in result["download"]:
        out.append(
            f"{r['server']:<42}{r['mib_per_s']:>9.0f}{r['p50_ms']:>9.1f}"
            f"{r['server_cpu_ms_per_download']:>17.1f}{r['downloads']:>11}"
        )
    ratio = result["vs_file_response"]
    out.append(
        f"ours vs FileResponse: {ratio * 100:.0f}% (median of per-round ratios; target >= 50% -> "
        f"{'met' if ratio >= 0.5 else 'NOT met'})"
    )
    out.append(
        "\nGetTask (gRPC) on tasks whose one file artifact has the size shown, alternating, "
        f"{args.file_reads} calls each"
    )
    header = f"{'artifact':<12}{'p50 ms':>9}{'p99 ms':>9}{'vs 1 KiB':>10}"
    out += [header, "-" * len(header)]
    for r in result["task_reads"]:
        out.append(
            f"{r['artifact']:<12}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['vs_1kib']:>10.2f}"
        )
    return "\n".join(out)


def file_rows_bad(result: dict) -> list[str]:
    bad = []
    for r in result.get("download", []):
        if not r["mib_per_s"] > 0:
            bad.append(f"files/{r['key']}")
    for r in result.get("task_reads", []):
        if not r["p50_ms"] > 0:
            bad.append(f"files/GetTask {r['artifact']}")
    return bad


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file-mib", type=int, default=10, help="size of the downloaded artifact (default 10)"
    )
    parser.add_argument(
        "--file-duration", type=float, help="download window per server per round, s (default 3)"
    )
    parser.add_argument(
        "--file-reads", type=int, help="GetTask calls per artifact size (default 200)"
    )


def apply_defaults(args: argparse.Namespace) -> None:
    if args.file_duration is None:
        args.file_duration = 1.0 if args.quick else 3.0
    if args.file_reads is None:
        args.file_reads = 50 if args.quick else 200


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    add_arguments(parser)
    cli_args = parser.parse_args()
    apply_defaults(cli_args)
    with tempfile.TemporaryDirectory(prefix="a2a-file-bench-") as d:
        result = asyncio.run(bench_files(cli_args, pathlib.Path(d)))
    print(report_files(result, cli_args))
    sys.exit(1 if file_rows_bad(result) else 0)
