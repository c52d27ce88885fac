"""The HTTP ceiling: starlette under uvicorn, answering every POST with one pre-built JSON body
(a JSON-RPC SendMessage result of the same size as the echo agent's), same uvicorn settings
as the gateway.

    python tests/bench/bare_http_server.py [--port 0]
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from google.protobuf import json_format  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from gateway.server import HttpServer  # noqa: E402
from service.protocol.json_text import dumps  # noqa: E402
from tests.bench.common import HOST, announce_and_wait, canned_response, port_from_argv  # noqa: E402

BODY = dumps({"jsonrpc": "2.0", "id": 1, "result": json_format.MessageToDict(canned_response())})


async def fixed(request: Request) -> Response:
    await request.body()
    return Response(BODY, media_type="application/json")


async def main(port: int) -> None:
    app = Starlette(
        routes=[
            Route("/", fixed, methods=["POST"]),
            Route("/message:send", fixed, methods=["POST"]),
        ]
    )
    server = HttpServer(HOST, port)
    await server.start(app, log_level="warning")
    await announce_and_wait(f"A2A service ready: grpc=0 http={server.port}")
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
