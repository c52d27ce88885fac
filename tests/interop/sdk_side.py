"""a2a-sdk 1.3.0's own server, in-process, for one executor: JSON-RPC at /, REST under
/rest and gRPC on its own port, all on 127.0.0.1 ephemeral ports, its agent card listing
the three. What our server is compared with when it runs the same executor.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as sdk
from a2a.types import a2a_pb2_grpc as sdk_grpc
from starlette.applications import Starlette

from gateway.server import HttpServer

HOST = "127.0.0.1"


@dataclass
class SdkServer:
    base: str  # the HTTP base URL (agent card, JSON-RPC, /rest)
    grpc_port: int


def card(http_port: int, grpc_port: int) -> sdk.AgentCard:
    base = f"http://{HOST}:{http_port}"
    out = sdk.AgentCard(
        name="a2a-sdk executor",
        description="An AgentExecutor behind a2a-sdk's own server.",
        version="1.0.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    out.supported_interfaces.add(url=base, protocol_binding="JSONRPC", protocol_version="1.0")
    out.supported_interfaces.add(
        url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
    )
    out.supported_interfaces.add(
        url=f"{HOST}:{grpc_port}", protocol_binding="GRPC", protocol_version="1.0"
    )
    out.capabilities.streaming = True
    out.skills.add(id="main", name="Main", description="The executor.", tags=["sdk"])
    return out


@contextlib.asynccontextmanager
async def sdk_server(executor: AgentExecutor) -> AsyncIterator[SdkServer]:
    http = HttpServer(HOST, 0)
    rpc = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    grpc_port = rpc.add_insecure_port(f"{HOST}:0")
    agent_card = card(http.port, grpc_port)
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    sdk_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), rpc)
    routes = [
        *create_agent_card_routes(agent_card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    await rpc.start()
    await http.start(Starlette(routes=routes), log_level="warning", graceful_seconds=1.0)
    try:
        yield SdkServer(f"http://{HOST}:{http.port}", grpc_port)
    finally:
        await http.stop()
        await rpc.stop(0)
        await handler.aclose()
