"""The a2a-sdk 1.3.0 HTTP server as a whole: its agent card route, JSON-RPC at / and REST
under /rest, the echo executor of tests/bench/sdk_server.py. For a2a-call's interop tests.

    python tests/interop/sdk_http_server.py [--port 0]
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import (  # noqa: E402
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore  # noqa: E402
from starlette.applications import Starlette  # noqa: E402

from gateway.server import HttpServer  # noqa: E402
from tests.bench.common import HOST, announce_and_wait, port_from_argv  # noqa: E402
from tests.bench.sdk_server import EchoExecutor, agent_card  # noqa: E402


async def main(port: int) -> None:
    server = HttpServer(HOST, port)
    base = f"http://{HOST}:{server.port}"
    card = agent_card(server.port)
    del card.supported_interfaces[:]
    card.supported_interfaces.add(url=base, protocol_binding="JSONRPC", protocol_version="1.0")
    card.supported_interfaces.add(
        url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    await server.start(Starlette(routes=routes), log_level="warning")
    await announce_and_wait(f"A2A service ready: grpc=0 http={server.port}")
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
