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
    telemetry: str = "none"  # none | console | otlp
    otlp_protocol: str = ""  # grpc | http/protobuf; '' = OTEL_EXPORTER_OTLP_PROTOCOL, else grpc
    otlp_endpoint: str = (
        ""  # collector base URL; '' = OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's default
    )
    otlp_headers: list[str] = field(
        default_factory=list
    )  # NAME=VALUE sent with every export; empty = OTEL_EXPORTER_OTLP_HEADERS
    metrics_endpoint: bool = False  # serve Prometheus text at GET /metrics
    metrics_port: int = 0  # 0 = /metrics on the HTTP gateway; else its own plaintext listener


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
