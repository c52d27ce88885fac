"""`/metrics` for the whole service under `serve --workers N`.

Each worker hands its own Prometheus text to whoever connects to its private unix socket
(`WORKERS_DIR/worker-I.sock`, in a directory the parent makes and names in
`A2A_WORKER_METRICS_DIR`). A scrape, wherever it lands (the gateway route of any worker,
or the parent's one `metrics_port` listener), reads every worker's text and serves it
merged: one family per metric, each series labelled `worker="I"`, so a counter's total is
the sum over the `worker` label and never jumps with the worker the kernel picked.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

DIR_ENV = "A2A_WORKER_METRICS_DIR"  # set by the parent of --workers when metrics are on
WORKER_LABEL = "worker"
READ_TIMEOUT_S = 2.0  # a worker that does not answer within this is left out of the scrape

log = logging.getLogger("service.telemetry")


def socket_path(directory: str, index: int | str) -> str:
    return os.path.join(directory, f"worker-{index}.sock")


class _TextServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class OwnText:
    """A worker's side: its unix socket, answering each connection with `render()`."""

    def __init__(self, path: str, render: Callable[[], bytes]) -> None:
        def handle(request: socket.socket) -> None:
            try:
                request.sendall(render())
            except OSError:
                pass  # the reader went away: nothing to tell it

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                handle(self.request)

        if os.path.exists(path):  # left by this worker's previous run
            os.unlink(path)
        self.path = path
        self._server = _TextServer(path, Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="worker-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def read_text(path: str, timeout: float = READ_TIMEOUT_S) -> bytes | None:
    """One worker's text (None when it is not there: starting again, or stuck)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks)


def merged_families(texts: Iterable[tuple[str, bytes]]) -> list[Metric]:
    """The workers' texts as one list of families, every sample labelled with its worker."""
    families: dict[str, Metric] = {}
    for worker, text in texts:
        for family in text_string_to_metric_families(text.decode("utf-8", "replace")):
            into = families.get(family.name)
            if into is None:
                into = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            into.samples.extend(
                Sample(s.name, {**s.labels, WORKER_LABEL: worker}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    return list(families.values())


class Workers:
    """Every worker's metrics, read at each collect (a prometheus_client collector)."""

    def __init__(self, directory: str, count: int) -> None:
        self.directory = directory
        self.count = count

    def texts(self) -> list[tuple[str, bytes]]:
        out = []
        for index in range(self.count):
            text = read_text(socket_path(self.directory, index))
            if text is None:
                log.warning("metrics: worker %d did not answer; left out of this scrape", index)
            else:
                out.append((str(index), text))
        return out

    def collect(self) -> list[Metric]:
        return merged_families(self.texts())

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector is any object with .collect()
        return registry

    def render(self) -> bytes:
        """The whole service's Prometheus text (the gateway's GET /metrics in a worker)."""
        return generate_latest(self.registry())


def start_listener(workers: Workers, host: str, port: int) -> Any:
    """The parent's one `metrics_port` listener, serving every worker's metrics;
    `.shutdown()` stops it. OSError when the port cannot be bound."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=workers.registry())
    return server
