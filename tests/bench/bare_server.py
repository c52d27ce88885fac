"""The ceiling: a bare grpc.aio server whose SendMessage returns one pre-built response.

python tests/bench/bare_server.py [--port 0]
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402

from gen import a2a_pb2_grpc  # noqa: E402
from tests.bench.common import HOST, announce_and_wait, canned_response, port_from_argv  # noqa: E402

RESPONSE = canned_response()


class BareServicer(a2a_pb2_grpc.A2AServiceServicer):
    async def SendMessage(self, request, context):  # noqa: N802
        return RESPONSE


async def main(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(BareServicer(), server)
    bound = server.add_insecure_port(f"{HOST}:{port}")
    await server.start()
    await announce_and_wait(f"A2A service ready: grpc={bound}")
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
