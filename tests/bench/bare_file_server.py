"""The file-serving reference: starlette's FileResponse under the gateway's uvicorn settings,
serving one file at GET /file (no authentication, no lookup: the least work there is).

    python tests/bench/bare_file_server.py --file PATH [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import FileResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from gateway.server import HttpServer  # noqa: E402
from tests.bench.common import HOST, announce_and_wait  # noqa: E402


async def main(port: int, path: str) -> None:
    async def serve_file(request: Request) -> Response:
        return FileResponse(path, media_type="application/octet-stream", filename="bench.bin")

    app = Starlette(routes=[Route("/file", serve_file, methods=["GET"])])
    server = HttpServer(HOST, port)
    await server.start(app, log_level="warning")
    await announce_and_wait(f"A2A service ready: grpc=0 http={server.port}")
    await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--file", required=True)
    args = parser.parse_args()
    asyncio.run(main(args.port, args.file))
