"""The telemetry section of the configuration (docs/operations.md, "Observability").

`telemetry`: `none` (default; nothing is recorded and no SDK object is made),
`console` (spans and metrics printed to stdout, for trying it out) or `otlp`.
OTLP settings left empty fall back to the standard variables
(`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS` and their per-signal forms), which the SDK reads.
`metrics_endpoint` serves Prometheus text at `GET /metrics` (on the gateway, or on
`metrics_port` when set), whatever `telemetry` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.setting import between, check_section, one_of, port, rule, setting

MODES = ("none", "console", "otlp")
PROTOCOLS = ("grpc", "http/protobuf")


@dataclass
class TelemetrySettings:
    """OpenTelemetry traces and metrics ([Operations: observability](operations.md#observability))."""

    telemetry: str = setting(
        "none",
        "`none`, `console` (spans and metrics printed to stdout) or `otlp`: OpenTelemetry traces and metrics. See [Operations: observability](operations.md#observability)",
        check=one_of(MODES),
    )
    otlp_protocol: str = setting(
        "",
        "`grpc` or `http/protobuf`; empty = `OTEL_EXPORTER_OTLP_PROTOCOL` (and its per-signal forms), else `grpc`",
        shown="`grpc`",
        check=one_of(("", *PROTOCOLS), "grpc or http/protobuf"),
    )
    otlp_endpoint: str = setting(
        "",
        "the collector's base URL, e.g. `http://collector:4317` (gRPC) or `http://collector:4318` (HTTP; `/v1/traces` and `/v1/metrics` are added); empty = `OTEL_EXPORTER_OTLP_ENDPOINT` and its per-signal forms",
        shown="the SDK's",
        check=rule(
            lambda v: not v or "://" in v,
            "expected a URL such as http://collector:4317, got {value!r}",
        ),
    )
    otlp_headers: list[str] = setting(
        [],
        "`NAME=VALUE` entries sent with every export (e.g. a collector's API key; comma list in `A2A_OTLP_HEADERS`); empty = `OTEL_EXPORTER_OTLP_HEADERS`",
    )
    metrics_endpoint: bool = setting(
        False,
        "serve the metrics as Prometheus text at `GET /metrics` on the gateway, behind the same authentication as every A2A route",
    )
    metrics_port: int = setting(
        0,
        "with `metrics_endpoint`: serve `/metrics` on this port of `host` instead (plaintext, unauthenticated: keep it private); `0` = on the gateway",
        check=port("0 = the gateway's"),
    )
    telemetry_shutdown_seconds: float = setting(
        2.0,
        "at shutdown, how long the last spans and metrics may take to reach the collector; past it they are dropped (a warning says so) and the process exits 0 all the same",
        check=between(0, 60, "expected 0 to 60 seconds, got {value!r}"),
    )


def validate_telemetry(s: TelemetrySettings) -> None:
    check_section(s, TelemetrySettings)
    for number, entry in enumerate(s.otlp_headers, 1):
        name, sep, _ = entry.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"otlp_headers: entry {number} is not NAME=VALUE")
    if s.metrics_port and not s.metrics_endpoint:
        raise ValueError("metrics_port: set metrics_endpoint = true to serve /metrics")


def headers(s: TelemetrySettings) -> dict[str, str] | None:
    """The configured export headers, or None to let the SDK read OTEL_EXPORTER_OTLP_HEADERS."""
    if not s.otlp_headers:
        return None
    pairs = (entry.partition("=") for entry in s.otlp_headers)
    return {name.strip().lower(): value.strip() for name, _, value in pairs}
