"""A stand-in OpenTelemetry collector for the bench: OTLP/gRPC TraceService and MetricsService
on loopback that count what they receive (and log the counts each second).

python tests/bench/otlp_collector.py [--port 0]
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
from opentelemetry.proto.collector.metrics.v1 import (  # noqa: E402
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import (  # noqa: E402
    trace_service_pb2,
    trace_service_pb2_grpc,
)

from tests.bench.common import HOST, announce_and_wait, port_from_argv  # noqa: E402

COUNTS = {"spans": 0, "metric_exports": 0}


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    async def Export(self, request, context):  # noqa: N802
        COUNTS["spans"] += sum(
            len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
        )
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    async def Export(self, request, context):  # noqa: N802
        COUNTS["metric_exports"] += 1
        return metrics_service_pb2.ExportMetricsServiceResponse()


async def report() -> None:
    while True:
        await asyncio.sleep(1)
        print(
            f"received spans={COUNTS['spans']} metric_exports={COUNTS['metric_exports']}",
            flush=True,
        )


async def main(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    bound = server.add_insecure_port(f"{HOST}:{port}")
    await server.start()
    reporter = asyncio.ensure_future(report())
    await announce_and_wait(f"A2A service ready: grpc={bound}")
    reporter.cancel()
    print(f"received spans={COUNTS['spans']} metric_exports={COUNTS['metric_exports']}", flush=True)
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main(port_from_argv()))
