"""Turning telemetry on: the SDK's providers, readers and exporters from the settings.

`install` is called once by the composition root (and by tests, with in-memory
exporters); it makes `hub.current` a `Telemetry` and returns the `Installed`
handle whose `shutdown` flushes and stops everything. Nothing here is imported
while telemetry is off.

- Traces: the service's spans go through a `SpanPipeline` (export.py) to the OTLP
  exporter (otlp.py) or the console. The global TracerProvider becomes an SDK one
  that exports to the same place, so an agent's own spans (made with the OpenTelemetry
  API inside its turn) nest under the turn's span and arrive with them.
- Metrics: an SDK MeterProvider with a periodic OTLP (or console) reader and, with
  `metrics_endpoint`, a Prometheus reader whose text `/metrics` serves.
- The resource: `service.name` from `OTEL_SERVICE_NAME`, else the agent's name, else
  `a2a-grpc-service`; `OTEL_RESOURCE_ATTRIBUTES` is honoured.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ConsoleMetricExporter,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from service.telemetry import hub, names, propagation, spans
from service.telemetry.export import SpanPipeline
from service.telemetry.otlp import otlp_metric_exporter, otlp_span_exporter
from service.telemetry.settings import TelemetrySettings
from service.telemetry.spans import LightTracer, RootSampler, always

log = logging.getLogger("service.telemetry")

ABORTED_CLOSE_SECONDS = 0.5  # for the closing to end once its exporters are stopped


class _Forward(SpanProcessor):
    """The global TracerProvider's processor: hands agents' SDK spans to whatever
    installation is current (the global provider can be set only once per process)."""

    target: SpanProcessor | None = None

    def on_end(self, span: ReadableSpan) -> None:
        target = self.target
        if target is not None:
            target.on_end(span)


_forward = _Forward()
_global_set = False


def _set_globals(resource: Resource, provider: MeterProvider) -> None:
    global _global_set
    if _global_set:
        return
    _global_set = True
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(_forward)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(provider)


def resource_for(service_name: str, version: str) -> Resource:
    attributes: dict[str, Any] = {SERVICE_VERSION: version} if version else {}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes[SERVICE_NAME] = service_name or names.DEFAULT_SERVICE_NAME
    return Resource.create(attributes)


@dataclass
class Installed:
    telemetry: hub.Telemetry
    meter_provider: MeterProvider
    pipeline: SpanPipeline | None = None
    agent_spans: SpanProcessor | None = None
    prometheus: Any = None  # the CollectorRegistry /metrics renders
    # The OTLP exporters, stopped when the shutdown's bound passes: that ends their retries.
    exporters: list[Any] = field(default_factory=list)
    system_metrics: Any = None  # the process/runtime instrumentor, uninstrumented at shutdown
    _closed: bool = field(default=False)

    def metrics_text(self) -> bytes:
        """Prometheus text exposition of every metric (GET /metrics)."""
        from prometheus_client import generate_latest

        return generate_latest(self.prometheus) if self.prometheus is not None else b""

    def flush(self, timeout: float = 10.0) -> None:
        if self.pipeline is not None:
            self.pipeline.flush(timeout)
        if self.agent_spans is not None:
            self.agent_spans.force_flush(int(timeout * 1000))
        self.meter_provider.force_flush(int(timeout * 1000))

    def shutdown(self, timeout: float = 10.0) -> None:
        """Flush and stop everything, within `timeout` seconds (telemetry_shutdown_seconds):
        with the collector down the SDK's exporters retry for longer, so what is left of
        the flush is abandoned to a daemon thread (a warning says so), and the exporters
        are told to stop, which ends their retries."""
        if self._closed:
            return
        self._closed = True
        if hub.current is self.telemetry:
            hub.current = None
        if _forward.target is self.agent_spans:
            _forward.target = None
        closing = threading.Thread(
            target=self._close, args=(timeout,), name="telemetry-shutdown", daemon=True
        )
        closing.start()
        closing.join(timeout)
        if closing.is_alive():
            log.warning(
                "telemetry: the collector did not take the last spans and metrics within"
                " %g s (telemetry_shutdown_seconds); they are dropped",
                timeout,
            )
            for exporter in self.exporters:
                try:
                    exporter.shutdown()  # its retries end; the closing goes on without them
                except Exception as exc:
                    log.warning("telemetry: stopping an exporter failed: %s", type(exc).__name__)
            closing.join(ABORTED_CLOSE_SECONDS)

    def _close(self, timeout: float) -> None:
        try:
            self.flush(timeout)
        except Exception as exc:  # a collector that went away must not block the exit
            log.warning("telemetry: final flush failed: %s", type(exc).__name__)
        if self.pipeline is not None:
            self.pipeline.shutdown(timeout)
        if self.agent_spans is not None:
            self.agent_spans.shutdown()
        if self.system_metrics is not None:
            self.system_metrics.uninstrument()
        self.meter_provider.shutdown(timeout_millis=timeout * 1000)


def histogram_metrics(tel: hub.Telemetry, start_ns: int) -> list[Metric]:
    """The hub's histograms as SDK metric data (cumulative since `start_ns`)."""
    now = time.time_ns()
    out = []
    for hist in tel.histograms:
        points = [
            HistogramDataPoint(
                attributes=attrs,
                start_time_unix_nano=start_ns,
                time_unix_nano=now,
                count=count,
                sum=total,
                bucket_counts=buckets,
                explicit_bounds=hist.bounds,
                min=low,
                max=high,
            )
            for attrs, buckets, total, count, low, high in hist.snapshot()
        ]
        if points:
            metric = hist.metric
            out.append(
                Metric(
                    metric.name,
                    metric.description,
                    metric.unit,
                    Histogram(points, AggregationTemporality.CUMULATIVE),
                )
            )
    return out


def _merge_histograms(
    reader: MetricReader, tel: hub.Telemetry, scope: InstrumentationScope, start_ns: int
) -> None:
    """Make `reader` receive the hub's histograms with what the SDK collected: every reader
    (periodic OTLP or console, Prometheus, in-memory) hands collections to its
    `_receive_metrics`, the SDK's hook for readers."""
    receive = reader._receive_metrics

    def receive_with_histograms(metrics_data: MetricsData, *args: Any, **kwargs: Any) -> None:
        extra = histogram_metrics(tel, start_ns)
        if extra:
            resource_metrics = list(metrics_data.resource_metrics)
            if resource_metrics:
                # Into the service's own scope (exporters keep one entry per scope).
                first = resource_metrics[0]
                scopes = list(first.scope_metrics)
                ours = next((i for i, sm in enumerate(scopes) if sm.scope.name == scope.name), None)
                if ours is None:
                    scopes.append(ScopeMetrics(scope, extra, ""))
                else:
                    mine = scopes[ours]
                    scopes[ours] = ScopeMetrics(
                        mine.scope, [*mine.metrics, *extra], mine.schema_url
                    )
                resource_metrics[0] = ResourceMetrics(first.resource, scopes, first.schema_url)
                metrics_data = MetricsData(resource_metrics)
        receive(metrics_data, *args, **kwargs)

    reader._receive_metrics = receive_with_histograms  # type: ignore[method-assign]


def _observe(
    tel: hub.Telemetry, metric: names.MetricName
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        for observed, points in tel.observations():
            if observed is metric:
                return [Observation(value, attrs) for attrs, value in points]
        return []

    return callback


def _root_sampler() -> RootSampler:
    """Whether a new trace is sampled: always, unless OTEL_TRACES_SAMPLER says otherwise
    (a parent's decision is always followed, see spans.py)."""
    if not os.environ.get("OTEL_TRACES_SAMPLER"):
        return always
    # The SDK reads OTEL_TRACES_SAMPLER(_ARG) when a TracerProvider is given no sampler;
    # its public `sampler` is what it chose (no atexit hook: nothing is exported here).
    sampler = TracerProvider(shutdown_on_exit=False).sampler

    def sampled(trace_id: int, name: str) -> bool:
        decided: bool = sampler.should_sample(None, trace_id, name).decision.is_sampled()
        return decided  # is_sampled is unannotated in the SDK

    return sampled


def install(
    s: TelemetrySettings,
    *,
    service_name: str = "",
    service_version: str = "",
    span_exporter: SpanExporter | None = None,
    metric_readers: Sequence[MetricReader] = (),
    span_interval: float = 1.0,
) -> Installed | None:
    """Turn telemetry on as `s` says (None when it stays off). `span_exporter` and
    `metric_readers` replace the configured exporters (tests: the SDK's in-memory ones)."""
    tracing = s.telemetry != "none" or span_exporter is not None
    if not tracing and not s.metrics_endpoint and not metric_readers:
        return None
    resource = resource_for(service_name, service_version)
    scope = InstrumentationScope(names.SCOPE, service_version or None)
    readers: list[MetricReader] = list(metric_readers)
    prometheus = None
    exporters: list[Any] = []
    if not metric_readers:
        if s.telemetry == "otlp":
            exporters.append(otlp_metric_exporter(s))
            readers.append(PeriodicExportingMetricReader(exporters[-1]))
        elif s.telemetry == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    if s.metrics_endpoint:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        prometheus = CollectorRegistry()
        readers.append(PrometheusMetricReader(registry=prometheus))
    provider = MeterProvider(resource=resource, metric_readers=readers)
    _set_globals(resource, provider)
    propagator = propagation.install_propagator()
    spans.LIMITS = propagation.configured_limits()
    system_metrics = _process_metrics(provider)
    meter = provider.get_meter(names.SCOPE, service_version or None)

    pipeline = None
    agent_spans = None
    tracer = None
    if tracing:
        exporter: Any = span_exporter
        agent_exporter: Any = span_exporter
        if exporter is None and s.telemetry == "otlp":
            from service.telemetry.remote import ExporterProcess

            section = {f.name: getattr(s, f.name) for f in dataclasses.fields(TelemetrySettings)}
            exporter = ExporterProcess(
                section, dict(resource.attributes), (scope.name, scope.version)
            )
            agent_exporter = otlp_span_exporter(s)  # agents' SDK spans
            exporters.append(agent_exporter)
        elif exporter is None:
            exporter = agent_exporter = ConsoleSpanExporter()
        pipeline = SpanPipeline(exporter, resource, scope, interval=span_interval)
        tracer = LightTracer(pipeline, _root_sampler())
        agent_spans = BatchSpanProcessor(agent_exporter, schedule_delay_millis=span_interval * 1000)
        _forward.target = agent_spans
    tel = hub.Telemetry(tracer, propagator)
    for reader in readers:
        _merge_histograms(reader, tel, scope, time.time_ns())
    for metric in names.METRICS:
        kind = metric.kind
        if kind == "histogram":
            continue
        make = {
            "counter": meter.create_observable_counter,
            "updowncounter": meter.create_observable_up_down_counter,
            "gauge": meter.create_observable_gauge,
        }[kind]
        make(
            metric.name,
            callbacks=[_observe(tel, metric)],
            unit=metric.unit,
            description=metric.description,
        )
    hub.current = tel
    return Installed(
        tel,
        provider,
        pipeline,
        agent_spans,
        prometheus,
        exporters=exporters,
        system_metrics=system_metrics,
    )


def _process_metrics(provider: MeterProvider) -> Any:
    """CPU, memory, open fds, threads and GC of this process (names.PROCESS_METRICS), from
    opentelemetry-instrumentation-system-metrics into `provider` (the instrumentor is one
    per process: an earlier installation's is undone first)."""
    from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

    instrumentor = SystemMetricsInstrumentor(config=dict(names.PROCESS_METRICS))
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    return instrumentor


def start_metrics_listener(installed: Installed | None, host: str, port: int) -> Any:
    """Prometheus text on its own plaintext listener (`metrics_port`); `.shutdown()` stops it."""
    from prometheus_client import start_http_server

    if installed is None or installed.prometheus is None:
        raise ValueError("metrics_endpoint is off")
    server, _thread = start_http_server(port, addr=host, registry=installed.prometheus)
    return server
