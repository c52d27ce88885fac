"""OTLP span export in a child process, so encoding and sending never take the server's GIL.

The service runs its requests on one event-loop thread; an exporter thread in the same
process takes the GIL from it for as long as it encodes (and the switching costs the loop
more again). With `telemetry = "otlp"` the span pipeline (export.py) flattens ended spans
to plain tuples and `marshal`s them a batch at a time, and its thread writes the batches
to a pipe; a child process started with the service rebuilds the SDK's spans from those
tuples and exports them with the SDK's OTLP exporter (otlp.py), on another core. If the
child is gone, spans are dropped (counted in a warning), never queued without bound.
"""

from __future__ import annotations

import logging
import marshal
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from service.telemetry.otlp import otlp_span_exporter, rebuild_all
from service.telemetry.settings import TelemetrySettings

log = logging.getLogger("service.telemetry")

# How the child sets up its logging: the composition root hands the service's own
# (service/ops/logs.py: the format in force, each record with the child's pid), so what the
# SDK's exporters log there (a collector that is down) is in the service's log stream's
# format. Picklable (a module-level function or a partial of one): the child is spawned.
_child_logging: Callable[[], object] | None = None


def log_children_with(configure: Callable[[], object] | None) -> None:
    """Set how exporter processes started from now on configure their logging."""
    global _child_logging
    _child_logging = configure


def _child(
    conn: Connection,
    settings: dict[str, Any],
    resource: dict[str, Any],
    scope: Any,
    configure_logging: Callable[[], object] | None = None,
) -> None:
    """The exporter process: spans from the pipe to the collector, until the pipe closes.
    It runs at the lowest CPU priority: on a busy host the requests come first, and spans
    wait in the pipe (bounded) rather than slow them down. SIGINT is the parent's (a
    terminal's ^C reaches the whole group): the child ends when its pipe closes, or when
    the parent's bounded shutdown terminates it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if configure_logging is not None:
        configure_logging()
    os.nice(19)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    exporter = otlp_span_exporter(TelemetrySettings(**settings))
    span_resource = Resource(resource)
    span_scope = InstrumentationScope(*scope)
    try:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                return
            if not data:
                return
            try:
                exporter.export(rebuild_all(marshal.loads(data), span_resource, span_scope))
            except Exception as exc:  # one bad batch must not end the exporter process
                log.warning("span export failed: %s", type(exc).__name__)
    finally:
        exporter.shutdown()


class ExporterProcess:
    """A `RawSpanExporter` (export.py) whose work happens in a child process."""

    def __init__(self, settings: dict[str, Any], resource: dict[str, Any], scope: Any) -> None:
        context = multiprocessing.get_context("spawn")  # no fork: grpc has threads
        self._conn, child_end = context.Pipe(duplex=False)[::-1]
        receive_end = child_end
        self._process = context.Process(
            target=_child,
            args=(receive_end, settings, resource, scope, _child_logging),
            name="a2a-telemetry-exporter",
            daemon=True,
        )
        self._process.start()
        receive_end.close()
        self._lock = threading.Lock()
        self._shutdown_seconds = float(settings.get("telemetry_shutdown_seconds", 10.0))
        self.dropped = 0

    def send_flat(self, data: bytes, count: int) -> bool:
        """Hand a marshalled batch of `count` flat spans to the exporter process (from the
        pipeline's thread: the write may wait for the child, without the GIL)."""
        if not self._process.is_alive():
            self.dropped += count
            if self.dropped == count:
                log.warning("telemetry: the span exporter process is gone; spans are dropped")
            return False
        try:
            with self._lock:
                self._conn.send_bytes(data)
        except (OSError, ValueError) as exc:
            log.warning("telemetry: cannot hand spans to the exporter process: %s", exc)
            return False
        return True

    def shutdown(self) -> None:
        """Close the pipe and give the child telemetry_shutdown_seconds to send what it has
        (with the collector down it would retry for longer): then it is terminated."""
        try:
            with self._lock:
                self._conn.send_bytes(b"")
        except (OSError, ValueError):
            pass
        self._process.join(self._shutdown_seconds)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(2)
        self._conn.close()
