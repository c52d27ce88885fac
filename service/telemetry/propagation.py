"""Which propagator carries trace context (and baggage) in and out, and the span limits.

Both come from the standard environment, as the SDK reads it:

- `OTEL_PROPAGATORS` (default `tracecontext,baggage`; also `b3`, `b3multi`, `none` or
  any propagator registered under the `opentelemetry_propagator` entry point) names the
  global propagator that extracts a caller's context and injects ours into what we send
  (push callbacks, a proxied upstream). The API reads the variable once, at import; `install`
  reads it again, so a value set later (tests, an embedding application) counts too.
- `OTEL_SPAN_*` / `OTEL_ATTRIBUTE_*` limits (the SDK's `SpanLimits`) bound the service's own
  light spans as they bound SDK spans.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points

from opentelemetry import propagate
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import SpanLimits

DEFAULT_PROPAGATORS = "tracecontext,baggage"  # as the API's own default
DEFAULT_MAX_EVENTS = 32  # per light span, unless OTEL_SPAN_EVENT_COUNT_LIMIT says otherwise
_LIMIT_VARS = (
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
)


def configured_propagator() -> TextMapPropagator:
    """The propagator `OTEL_PROPAGATORS` names (a composite of them, in order)."""
    wanted = os.environ.get("OTEL_PROPAGATORS", DEFAULT_PROPAGATORS)
    chosen: list[TextMapPropagator] = []
    for name in (n.strip().lower() for n in wanted.split(",")):
        if not name or name == "none":
            continue
        found = entry_points(group="opentelemetry_propagator", name=name)
        if not found:
            raise ValueError(
                f"OTEL_PROPAGATORS names {name!r}, which no installed package provides "
                "(b3 and b3multi need opentelemetry-propagator-b3)"
            )
        chosen.append(next(iter(found)).load()())
    return CompositePropagator(chosen)


def install_propagator() -> TextMapPropagator:
    """Make the configured propagator the global one (what agents' own code uses too)."""
    propagator = configured_propagator()
    propagate.set_global_textmap(propagator)
    return propagator


@dataclass(frozen=True)
class Limits:
    """What a light span keeps: attributes, their string length, events and links."""

    max_attributes: int | None = 128
    max_value_length: int | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    max_links: int = 128
    set_by_env: bool = False  # any limit was configured: check spans as they end


def configured_limits() -> Limits:
    """The limits of `OTEL_SPAN_*` / `OTEL_ATTRIBUTE_*` (the SDK's parsing and defaults)."""
    sdk = SpanLimits()
    events_set = bool(os.environ.get("OTEL_SPAN_EVENT_COUNT_LIMIT"))
    return Limits(
        max_attributes=sdk.max_span_attributes,
        max_value_length=sdk.max_span_attribute_length,
        max_events=(sdk.max_events or 0) if events_set else DEFAULT_MAX_EVENTS,
        max_links=sdk.max_links if sdk.max_links is not None else 128,
        set_by_env=any(os.environ.get(v) for v in _LIMIT_VARS),
    )
