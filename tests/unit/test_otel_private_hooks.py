"""Contract tests for the private OpenTelemetry names the service relies on (listed in
docs/architecture.md, "Private OpenTelemetry hooks"). Each fails if an SDK release removes
the hook or changes its shape, before the service breaks at runtime; pyproject.toml pins
the packages to the minor range these pass on."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import tomllib
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader

ROOT = Path(__file__).resolve().parents[2]


def test_runtime_context_is_a_contextvar_the_api_reads():
    # hub.py: `_RUNTIME_CONTEXT._current_context`, set directly on the hot path.
    runtime = otel_context._RUNTIME_CONTEXT
    assert type(runtime) is ContextVarsRuntimeContext
    var = runtime._current_context
    token = var.set(otel_context.set_value("k", "v"))
    try:
        assert otel_context.get_value("k") == "v"  # the API sees what was set there
    finally:
        var.reset(token)
    assert otel_context.get_value("k") is None


def test_readers_hand_collections_to_an_instance_receive_metrics():
    # setup.py `_merge_histograms` wraps `reader._receive_metrics` on the instance.
    params = list(inspect.signature(PeriodicExportingMetricReader._receive_metrics).parameters)
    assert params[:2] == ["self", "metrics_data"], params
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    for cls in (PeriodicExportingMetricReader, InMemoryMetricReader, PrometheusMetricReader):
        assert callable(getattr(cls, "_receive_metrics", None)), cls
    reader = InMemoryMetricReader()
    seen = []
    receive = reader._receive_metrics

    def wrapped(metrics_data, *args, **kwargs):
        seen.append(metrics_data)
        receive(metrics_data, *args, **kwargs)

    reader._receive_metrics = wrapped
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider.get_meter("t").create_counter("c").add(1)
    assert reader.get_metrics_data() is not None
    assert seen, "collect() no longer goes through the instance's _receive_metrics"
    provider.shutdown()


def test_the_installed_packages_are_in_the_pinned_range():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = {}
    for spec in pyproject["project"]["dependencies"]:
        found = re.fullmatch(r"(opentelemetry-[a-z-]+)>=([\d.b]+),<([\d.]+)", spec)
        if found:
            pinned[found[1]] = found[3]
    assert {
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-grpc",
        "opentelemetry-exporter-otlp-proto-http",
        "opentelemetry-exporter-prometheus",
    } <= set(pinned), pinned
    for package, below in pinned.items():
        have = tuple(int(n) for n in re.findall(r"\d+", importlib.metadata.version(package))[:2])
        limit = tuple(int(n) for n in below.split(".")[:2])
        assert have < limit, (package, have, limit)
