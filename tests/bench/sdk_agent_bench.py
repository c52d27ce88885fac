"""The same a2a-sdk AgentExecutor streaming behind our server (`--agent a2a_sdk:...`, the
adapter of service/agents/a2a_sdk.py) and behind a2a-sdk 1.3.0's own gRPC server: events
per second to one subscriber (SendStreamingMessage over gRPC), measured as the streaming
section measures ChunkAgent.

    python tests/bench/sdk_agent_bench.py [--port 0]   # a2a-sdk's gRPC server, ChunkExecutor

ChunkExecutor is written as the SDK samples write one: the message text is `N` or `N K`;
it enqueues the Task, starts work, adds one artifact in N chunks with TaskUpdater
(append / last_chunk), handing the loop back every K chunks, then completes.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from collections.abc import Awaitable, Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from a2a.helpers import new_task_from_user_message, new_text_part  # noqa: E402
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import a2a_pb2_grpc as sdk_grpc  # noqa: E402

from tests.bench.common import (  # noqa: E402
    HOST,
    ServerProcess,
    announce_and_wait,
    port_from_argv,
    serve_argv,
)
from tests.bench.sdk_server import agent_card  # noqa: E402

EXECUTOR = "a2a_sdk:tests.bench.sdk_agent_bench:ChunkExecutor"
CHUNK_TEXT = "token "


class ChunkExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        words = context.get_user_input().split()
        n = int(words[0]) if words else 100
        every = int(words[1]) if len(words) > 1 else 1
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        for i in range(n):
            await updater.add_artifact(
                [new_text_part(CHUNK_TEXT)],
                artifact_id="stream",
                name="stream",
                append=i > 0,
                last_chunk=i == n - 1,
            )
            if every and (i + 1) % every == 0:
                await asyncio.sleep(0)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def ours_argv(store: str) -> list[str]:
    return serve_argv(
        "--http-port", "-1", "--store", store, "--agent", EXECUTOR, "--log-level", "WARNING"
    )


Measure = Callable[[ServerProcess, int, int, float], Awaitable[dict]]


async def bench_sdk_agent(args, tmp: pathlib.Path, measure: Measure) -> list[dict]:
    """One row per server and chunk count; `measure` is the streaming section's."""
    servers = (
        ("ours, sqlite", ours_argv(f"sqlite:{tmp / 'sdk_agent.db'}")),
        ("ours, memory", ours_argv("memory:")),
        ("a2a-sdk 1.3.0", [sys.executable, str(pathlib.Path(__file__))]),
    )
    rows = []
    for label, argv in servers:
        server = ServerProcess(f"sdk_agent_{label}", argv, tmp)
        try:
            server.start()
            for chunks in args.stream_chunks:
                result = await measure(
                    server, chunks, args.stream_yield_every, args.stream_duration
                )
                result.update(server=label, chunks_per_turn=chunks)
                rows.append(result)
                print(
                    f"  a2a-sdk executor behind {label} N={chunks}: "
                    f"{result['events_per_s']:.0f} events/s",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    sdk = {r["chunks_per_turn"]: r["events_per_s"] for r in rows if r["server"] == "a2a-sdk 1.3.0"}
    for r in rows:
        base = sdk.get(r["chunks_per_turn"])
        r["vs_sdk"] = r["events_per_s"] / base if base else float("nan")
    return rows


async def main(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    bound = server.add_insecure_port(f"{HOST}:{port}")
    handler = DefaultRequestHandler(
        agent_executor=ChunkExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card(bound),
    )
    sdk_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    await announce_and_wait(f"A2A service ready: grpc={bound}")
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
