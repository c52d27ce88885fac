"""One v0.3 JSON-RPC `message/send` against one 1.0 `SendMessage`, in process: the gateway's
ASGI app called directly (no socket, no uvicorn) over the echo agent and the memory store,
the two requests alternating so machine noise hits both alike. What it reports is the v0.3
layer's own cost (negotiation, translation both ways), without the HTTP server's share that
`make bench`'s rows carry.

    .venv/bin/python tests/bench/v03_inprocess.py [--calls N] [--profile v03|v10] [--parts]

`--parts` times the translation alone, per call: the request message built from `params`
(1.0: `build_request`; v0.3: what its dispatcher runs) and the result document rendered
from the echo agent's answer (1.0: `to_json_dict`; v0.3: its method's `result`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pathlib
import pstats
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.app import build_app  # noqa: E402
from gateway.transcode import build_request, to_json_dict  # noqa: E402
from gateway.v03_jsonrpc import METHODS  # noqa: E402
from gen import a2a_pb2 as pb  # noqa: E402
from service.api import CallContext  # noqa: E402
from service.app.config import Settings  # noqa: E402
from service.app.server import Service  # noqa: E402
from service.grpc_binding import SERVICE  # noqa: E402
from service.protocol.params import VERSION_KEY  # noqa: E402
from tests.bench.http_bench import _ID, _jsonrpc_body, _v03_body  # noqa: E402

BODIES = {"v10": (_jsonrpc_body(), b"1.0"), "v03": (_v03_body(), b"0.3")}


async def post(app: Any, body: bytes, version: bytes) -> bytes:
    """One `POST /` through the ASGI app; the response body."""
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:  # the app waits for a disconnect only after it answered
            await asyncio.Event().wait()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"a2a-version", version),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def requests(key: str, count: int) -> list[bytes]:
    body = BODIES[key][0]
    return [body.replace(_ID.encode(), uuid.uuid4().hex.encode()) for _ in range(count)]


def time_parts(answer: pb.SendMessageResponse) -> None:
    """The translation's own cost: request and result, each path, µs per call."""
    params10 = {"message": {"messageId": "m" * 32, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    params03 = {
        "message": {
            "kind": "message",
            "messageId": "m" * 32,
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }
    entry = METHODS["message/send"]
    fast = getattr(entry, "fast", None)  # absent before the direct path

    def request03() -> Any:
        built = fast(params03) if fast is not None else None
        if built is None:
            built = build_request(
                pb.SendMessageRequest, body=entry.request(params03), body_field="*"
            )
        return built

    def per_call(run: Any) -> float:
        return min(timeit.repeat(run, number=5000, repeat=5)) / 5000 * 1e6

    request10 = per_call(
        lambda: build_request(pb.SendMessageRequest, body=params10, body_field="*")
    )
    print(f"request: 1.0 {request10:.1f} us, v0.3 {per_call(request03):.1f} us")
    result10 = per_call(lambda: to_json_dict(answer))
    print(f"result:  1.0 {result10:.1f} us, v0.3 {per_call(lambda: entry.result(answer)):.1f} us")


async def main(args: argparse.Namespace) -> None:
    data = pathlib.Path(tempfile.mkdtemp(prefix="v03-bench-"))
    service = Service(
        Settings(
            host="127.0.0.1",
            grpc_port=0,
            http_port=-1,
            data_dir=str(data),
            store="memory:",
            agent="echo",
            log_level="WARNING",
        )
    )
    await service.start()
    try:
        assert service.invoker is not None and service.cards is not None
        app = build_app(
            invoker=service.invoker,
            service=SERVICE,
            card=service.cards.public_card(),
            is_serving=lambda: True,
            pipeline=service.pipeline,
            compat_v03=True,
        )
        for key, (_, version) in BODIES.items():  # warm up, and check both answer a task
            answer = b""
            for body in requests(key, 200):
                answer = await post(app, body, version)
            assert b'"completed"' in answer or b"TASK_STATE_COMPLETED" in answer, answer[:300]
        if args.parts:
            task = await service.invoker.unary(
                "SendMessage",
                build_request(
                    pb.SendMessageRequest,
                    body={
                        "message": {
                            "messageId": "p",
                            "role": "ROLE_USER",
                            "parts": [{"text": "hi"}],
                        }
                    },
                    body_field="*",
                ),
                CallContext(metadata={VERSION_KEY: "1.0"}),
            )
            assert isinstance(task, pb.SendMessageResponse)
            time_parts(task)
            return
        if args.profile:
            profile = cProfile.Profile()
            version = BODIES[args.profile][1]
            bodies = requests(args.profile, args.calls)
            profile.enable()
            for body in bodies:
                await post(app, body, version)
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
            return
        times: dict[str, list[float]] = {key: [] for key in BODIES}
        pending = {key: requests(key, args.calls) for key in BODIES}
        for i in range(args.calls):
            for key, (_, version) in BODIES.items():
                start = time.perf_counter()
                await post(app, pending[key][i], version)
                times[key].append(time.perf_counter() - start)
        for key, spent in times.items():
            spent.sort()
            print(
                f"{key}: median {statistics.median(spent) * 1e6:.1f} us, "
                f"p10 {spent[len(spent) // 10] * 1e6:.1f} us per call"
            )
        ratio = statistics.median(times["v10"]) / statistics.median(times["v03"])
        print(f"v0.3 message/send: {ratio * 100:.1f}% of 1.0 SendMessage's rate (medians)")
    finally:
        await service.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000, help="calls of each (default 5000)")
    parser.add_argument("--profile", choices=("v03", "v10"), help="cProfile one of the two")
    parser.add_argument("--parts", action="store_true", help="time the translation alone")
    asyncio.run(main(parser.parse_args()))
