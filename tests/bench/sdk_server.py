"""The a2a-sdk 1.3.0 gRPC server with an echo executor and its default in-memory task store.

    python tests/bench/sdk_server.py [--port 0]

DefaultRequestHandler (= DefaultRequestHandlerV2 in 1.3.0) + GrpcHandler, InMemoryTaskStore;
the executor creates the task, emits one artifact with the received text and completes,
like our echo agent.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import a2a_pb2 as sdk_pb  # noqa: E402
from a2a.types import a2a_pb2_grpc as sdk_grpc  # noqa: E402

from tests.bench.common import HOST, announce_and_wait, port_from_argv  # noqa: E402


class EchoExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if context.current_task is None:
            task = sdk_pb.Task(id=task_id, context_id=context_id)
            task.status.state = sdk_pb.TASK_STATE_SUBMITTED
            if context.message is not None:
                task.history.append(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.add_artifact([sdk_pb.Part(text=context.get_user_input())], name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(port: int) -> sdk_pb.AgentCard:
    card = sdk_pb.AgentCard(
        name="Echo (a2a-sdk)",
        description="Replies with the text it receives.",
        version="1.0.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    card.supported_interfaces.add(
        url=f"{HOST}:{port}", protocol_binding="GRPC", protocol_version="1.0"
    )
    card.capabilities.streaming = True
    card.skills.add(id="echo", name="Echo", description="Echoes the text.", tags=["echo"])
    return card


async def main(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    bound = server.add_insecure_port(f"{HOST}:{port}")
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=agent_card(bound)
    )
    sdk_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    await announce_and_wait(f"A2A service ready: grpc={bound}")
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
