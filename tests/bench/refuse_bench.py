"""What refusing one oversized part costs the server: `python tests/bench/refuse_bench.py`.

One in-process service (memory store, default input limits) is sent a SendMessage whose
data part is about 10 MiB of JSON, over REST, JSON-RPC and gRPC, and refuses it. Around each
refused request: the peak of Python allocations above what was held before
(`tracemalloc`, the request's bytes prepared before it starts) and the process's CPU
time (client and server share the process; the client only sends prepared bytes).
Two shapes of data: one long string, and many small objects (the costly one to decode).
Run it on a checkout before and after a change to compare (docs/benchmarks.md).

`--server`: the real server instead, a `python -m service serve` process of its own for
each binding and shape (1.0 and v0.3 sends, JSON-RPC, REST and gRPC), sent `--rounds`
refused sends one after another after a small warm-up call; reported per refusal: the
server's CPU (`/proc/PID/schedstat`) and the growth of its peak RSS over the RSS before
the first (`VmHWM` reset through `/proc/PID/clear_refs`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
import tempfile
import time
import tracemalloc
import uuid

import grpc
import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from google.protobuf import json_format  # noqa: E402

from gen import a2a_pb2 as pb  # noqa: E402
from gen import a2a_v0_3_pb2 as v03  # noqa: E402
from tests.bench.common import ServerProcess, serve_argv  # noqa: E402

SIZE = 10 * 1024 * 1024
ROUNDS = 3


def shapes() -> dict[str, object]:
    row = {"name": "item", "value": 12345}
    return {
        "one string": {"blob": "x" * SIZE},
        "small objects": [row] * (SIZE // len(json.dumps(row))),
    }


def send_doc(data: object) -> dict:
    parts = [{"text": "look"}, {"data": data}]
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}}


async def measured(label: str, call) -> None:
    """The least CPU of ROUNDS refused calls, and the extra peak of Python allocations of
    one more (tracemalloc does not see protobuf's own C memory: gRPC's figure is partial)."""
    cpu, peak = [], []
    for _ in range(ROUNDS):  # CPU without tracemalloc, which slows allocation down
        began = time.process_time()
        await call()
        cpu.append(time.process_time() - began)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    await call()
    peak.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    print(f"  {label:28} {min(cpu) * 1000:8.1f} ms CPU {min(peak) / 2**20:8.1f} MiB peak")


async def main() -> None:
    from service.app.server import Service
    from tests.conftest import make_settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = make_settings(
            pathlib.Path(tmp), store="memory:", http_port=0, agent="tests.agents:HumanLoopAgent"
        )
        service = Service(settings)
        await service.start()
        try:
            base = f"http://127.0.0.1:{service.http_port}"
            headers = {"A2A-Version": "1.0", "content-type": "application/json"}
            async with (
                httpx.AsyncClient(base_url=base, timeout=60) as http,
                grpc.aio.insecure_channel(
                    f"127.0.0.1:{service.grpc_port}",
                    options=[("grpc.max_send_message_length", 64 * 2**20)],
                ) as channel,
            ):
                send = channel.unary_unary(
                    "/lf.a2a.v1.A2AService/SendMessage",
                    request_serializer=lambda b: b,
                    response_deserializer=lambda b: b,
                )
                for name, data in shapes().items():
                    doc = send_doc(data)
                    rest = json.dumps(doc).encode()
                    rpc = json.dumps(
                        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": doc}
                    ).encode()
                    wire = json_format.ParseDict(doc, pb.SendMessageRequest()).SerializeToString()
                    print(
                        f"{name}: {len(rest) / 2**20:.1f} MiB of JSON, {len(wire) / 2**20:.1f} MiB on the wire"
                    )

                    async def rest_call(body: bytes = rest) -> None:
                        r = await http.post("/message:send", content=body, headers=headers)
                        assert r.status_code == 400, r.text[:200]

                    async def rpc_call(body: bytes = rpc) -> None:
                        r = await http.post("/", content=body, headers=headers)
                        assert "error" in r.json(), r.text[:200]

                    async def grpc_call(body: bytes = wire) -> None:
                        try:
                            await send(body)
                        except grpc.aio.AioRpcError as err:
                            assert err.code() in (
                                grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.RESOURCE_EXHAUSTED,
                            ), err
                        else:
                            raise AssertionError("accepted")

                    await measured("REST message:send", rest_call)
                    await measured("JSON-RPC SendMessage", rpc_call)
                    await measured("gRPC SendMessage", grpc_call)
        finally:
            await service.stop()


# ------------------------------------------------------------------ the real server


def v03_rpc_doc(data: object) -> dict:
    parts = [{"kind": "text", "text": "look"}, {"kind": "data", "data": data}]
    message = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": parts}
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}


def v03_rest_doc(data: object) -> dict:
    content = [{"text": "look"}, {"data": {"data": data}}]
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "content": content}}


def requests(data: object) -> dict[str, tuple[str, str, bytes]]:
    """binding -> (transport, path or method, the request's bytes): `data` is an object."""
    doc = send_doc(data)
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": doc}
    v03_rest = v03_rest_doc(data)
    return {
        "JSON-RPC SendMessage": ("http", "/", json.dumps(rpc).encode()),
        "REST message:send": ("http", "/message:send", json.dumps(doc).encode()),
        "gRPC SendMessage": (
            "grpc",
            "/lf.a2a.v1.A2AService/SendMessage",
            json_format.ParseDict(doc, pb.SendMessageRequest()).SerializeToString(),
        ),
        "v0.3 JSON-RPC message/send": ("http-v03", "/", json.dumps(v03_rpc_doc(data)).encode()),
        "v0.3 REST /v1/message:send": (
            "http-v03",
            "/v1/message:send",
            json.dumps(v03_rest).encode(),
        ),
        "v0.3 gRPC SendMessage": (
            "grpc",
            "/a2a.v1.A2AService/SendMessage",
            json_format.ParseDict(v03_rest, v03.SendMessageRequest()).SerializeToString(),
        ),
    }


def reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux: 5 to clear_refs)."""
    pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_ns(pid: int) -> int:
    return int(pathlib.Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


async def refuse_on(server: ServerProcess, transport: str, path: str, body: bytes) -> None:
    """One refused send; AssertionError when it was not refused as a bad request."""
    if transport == "grpc":
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{server.port}", options=[("grpc.max_send_message_length", 64 * 2**20)]
        ) as channel:
            send = channel.unary_unary(
                path, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            try:
                await send(body)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
                return
            raise AssertionError("accepted")
    headers = {"content-type": "application/json"}
    if transport == "http":
        headers["A2A-Version"] = "1.0"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as h:
        r = await h.post(path, content=body, headers=headers)
    assert r.status_code == 400 or "error" in r.json(), r.text[:300]
    assert "parts[1].data" in r.text, r.text[:300]


async def against_server(rounds: int) -> None:
    sizes = {"one string": {"blob": "x" * SIZE}}
    row = {"name": "item", "value": 12345}
    sizes["small objects"] = {"rows": [row] * (SIZE // len(json.dumps(row)))}
    print(f"the real server, {rounds} refusals each: CPU and peak RSS growth per binding")
    with tempfile.TemporaryDirectory() as tmp:
        for shape, data in sizes.items():
            print(f"{shape}:")
            for label, (transport, path, body) in requests(data).items():
                argv = serve_argv(
                    "--http-port", "0", "--store", "memory:", "--data-dir", f"{tmp}/data",
                    "--agent", "tests.agents:HumanLoopAgent", "--log-level", "WARNING",
                )  # fmt: skip
                with ServerProcess(label, argv, pathlib.Path(tmp)) as server:
                    small = requests({"k": "v"})[label][2]
                    try:  # warm-up: the endpoint's first call imports and builds what it needs
                        await refuse_on(server, transport, path, small)
                    except AssertionError:
                        pass
                    reset_peak(server.pid)
                    before, cpu = memory_kib(server.pid), cpu_ns(server.pid)
                    peaks = []
                    for _ in range(rounds):
                        await refuse_on(server, transport, path, body)
                        peaks.append((memory_kib(server.pid)["VmHWM"] - before["VmRSS"]) / 1024)
                    spent = (cpu_ns(server.pid) - cpu) / rounds / 1e6
                    print(
                        f"  {label:28} {len(body) / 2**20:5.1f} MiB  {spent:7.1f} ms CPU"
                        f"  peak RSS +{peaks[0]:5.1f} MiB after one, +{peaks[-1]:5.1f} after all"
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="store_true", help="measure the real server")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(against_server(args.rounds) if args.server else main())
