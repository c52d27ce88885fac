"""Telemetry: OpenTelemetry traces and metrics of the service, off by default.

    names.py     every span name, attribute and metric, spelled once (docs/operations.md lists them)
    settings.py  the `telemetry`, `otlp_*` and `metrics_*` configuration keys
    hub.py       the hot path every layer calls: `hub.current` (None = off), server calls,
                 agent turns, counts; `count_refusal` and `count_auth_failure`
    spans.py     the service's own light API spans (cheap to make; agents nest SDK spans)
    export.py    ended spans -> an SDK exporter, in batches, on a thread
    otlp.py      OTLP over gRPC and HTTP/protobuf: the SDK's exporters, on spans rebuilt from flat tuples
    setup.py     `install(settings)`: providers, readers, exporters (the SDK is imported here)

It sits just above service/protocol and imports nothing of the service above it, so the
engine, store, push, the gRPC binding and the gateway can all use it.
"""
