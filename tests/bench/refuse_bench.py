"""What refusing one oversized part costs the server: `python tests/bench/refuse_bench.py`.

One in-process service (memory store, default input limits) is sent a SendMessage whose
data part is about 10 MiB of JSON, over REST, JSON-RPC and gRPC, and refuses it. Around each
refused request: the peak of Python allocations above what was held before
(`tracemalloc`, the request's bytes prepared before it starts) and the process's CPU
time (client and server share the process; the client only sends prepared bytes).
Two shapes of data: one long string, and many small objects (the costly one to decode).
Run it on a checkout before and after a change to compare (docs/benchmarks.md).
"""

from __future__ import annotations

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
from service.app.server import Service  # noqa: E402
from tests.conftest import make_settings  # noqa: E402

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


if __name__ == "__main__":
    asyncio.run(main())
