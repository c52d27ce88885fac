"""`serve --workers N`: N full replicas on one host, sharing the gRPC and HTTP ports.

Each worker is a child process (`python -m service serve` with the same flags) that
binds both ports with SO_REUSEPORT, so the kernel spreads new connections over them;
they behave as one service through the shared store and bus (service.engine.cluster).
The parent only starts them, passes SIGTERM/SIGINT on (each drains as a single
server does) and exits with the worst status. Where SO_REUSEPORT is missing, run
the replicas on separate ports behind a load balancer instead (README "Scale-out").

What stays local to a worker: its data directory (DATA_DIR/worker-I: workspaces of
the command agent, the data-directory lock); everything shared lives in the store
and on the bus.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from types import FrameType

from service.app.config import ConfigError, Settings
from service.store import is_shared

WORKER_ENV = "A2A_WORKER_INDEX"  # set in each child: it serves instead of spawning


def check_workers(s: Settings) -> None:
    """Refuse --workers > 1 where the replicas could not behave as one, saying what to set."""
    if s.workers <= 1:
        return
    if not is_shared(s.store_url) or not s.bus:
        raise ConfigError(
            f"workers: {s.workers} processes need a shared store and bus: set"
            ' store = "postgresql://USER@HOST/DB" and bus = "redis://HOST:6379/0"'
            " (SQLite and the in-process bus serve a single process)"
        )
    if s.grpc_port == 0 or s.http_port == 0:
        raise ConfigError("workers: give fixed grpc_port and http_port (workers share them)")
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError(
            "workers: this system has no SO_REUSEPORT; run one process per port behind a"
            " load balancer instead (README: Scale-out)"
        )
    if s.push_notifications and (s.push_queue != "redis-streams" or not s.push_secret_keys):
        raise ConfigError(
            "workers: with push notifications, workers need push_queue = redis-streams and"
            " push_secret_keys (a local queue and key file would be per worker)"
        )
    if s.upstream:
        raise ConfigError("workers: proxy mode runs one gateway process; drop --workers")


def run_workers(s: Settings, argv: list[str]) -> int:
    """Start the workers and wait for them; returns the worst exit status."""
    children: list[subprocess.Popen[bytes]] = []
    for index in range(s.workers):
        env = {**os.environ, WORKER_ENV: str(index)}
        children.append(subprocess.Popen([sys.executable, "-m", "service", *argv], env=env))

    def forward(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    for child in children:
        code = child.wait()
        worst = max(worst, code if code >= 0 else 128 - code)
    return worst


def is_worker() -> bool:
    return WORKER_ENV in os.environ


def as_worker(s: Settings) -> None:
    """In a worker: its own data directory (DATA_DIR/worker-I) for what stays local."""
    s.data_dir = os.path.join(s.data_dir, f"worker-{os.environ[WORKER_ENV]}")
