"""The telemetry section of the configuration (README "Observability").

`telemetry`: `none` (default; nothing is recorded and no SDK object is made),
`console` (spans and metrics printed to stdout, for trying it out) or `otlp`.
OTLP settings left empty fall back to the standard variables
(`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS` and their per-signal forms), which the SDK reads.
`metrics_endpoint` serves Prometheus text at `GET /metrics` (on the gateway, or on
`metrics_port` when set), whatever `telemetry` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("none", "console", "otlp")
PROTOCOLS = ("grpc", "http/protobuf")


@dataclass
class TelemetrySettings:
    """OpenTelemetry traces and metrics (README "Observability")."""

    telemetry: str = field(
        default="none",
        metadata={
            "help": '`none`, `console` (spans and metrics printed to stdout) or `otlp`: OpenTelemetry traces and metrics. See "Observability"'
        },
    )
    otlp_protocol: str = field(
        default="",
        metadata={
            "help": "`grpc` or `http/protobuf`; empty = `OTEL_EXPORTER_OTLP_PROTOCOL` (and its per-signal forms), else `grpc`",
            "default": "`grpc`",
        },
    )
    otlp_endpoint: str = field(
        default="",
        metadata={
            "help": "the collector's base URL, e.g. `http://collector:4317` (gRPC) or `http://collector:4318` (HTTP; `/v1/traces` and `/v1/metrics` are added); empty = `OTEL_EXPORTER_OTLP_ENDPOINT` and its per-signal forms",
            "default": "the SDK's",
        },
    )
    otlp_headers: list[str] = field(
        default_factory=list,
        metadata={
            "help": "`NAME=VALUE` entries sent with every export (e.g. a collector's API key; comma list in `A2A_OTLP_HEADERS`); empty = `OTEL_EXPORTER_OTLP_HEADERS`"
        },
    )
    metrics_endpoint: bool = field(
        default=False,
        metadata={
            "help": "serve the metrics as Prometheus text at `GET /metrics` on the gateway, behind the same authentication as every A2A route"
        },
    )
    metrics_port: int = field(
        default=0,
        metadata={
            "help": "with `metrics_endpoint`: serve `/metrics` on this port of `host` instead (plaintext, unauthenticated: keep it private); `0` = on the gateway"
        },
    )


def validate_telemetry(s: TelemetrySettings) -> None:
    if s.telemetry not in MODES:
        raise ValueError(f"telemetry: expected one of {', '.join(MODES)}, got {s.telemetry!r}")
    if s.otlp_protocol and s.otlp_protocol not in PROTOCOLS:
        raise ValueError(f"otlp_protocol: expected grpc or http/protobuf, got {s.otlp_protocol!r}")
    if s.otlp_endpoint and "://" not in s.otlp_endpoint:
        raise ValueError(
            f"otlp_endpoint: expected a URL such as http://collector:4317, got {s.otlp_endpoint!r}"
        )
    for number, entry in enumerate(s.otlp_headers, 1):
        name, sep, _ = entry.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"otlp_headers: entry {number} is not NAME=VALUE")
    if not 0 <= s.metrics_port <= 65535:
        raise ValueError(f"metrics_port: {s.metrics_port} is not a port number (0 = the gateway's)")
    if s.metrics_port and not s.metrics_endpoint:
        raise ValueError("metrics_port: set metrics_endpoint = true to serve /metrics")


def headers(s: TelemetrySettings) -> dict[str, str] | None:
    """The configured export headers, or None to let the SDK read OTEL_EXPORTER_OTLP_HEADERS."""
    if not s.otlp_headers:
        return None
    pairs = (entry.partition("=") for entry in s.otlp_headers)
    return {name.strip().lower(): value.strip() for name, _, value in pairs}
