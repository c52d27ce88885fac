"""`serve --workers N`: N full replicas on one host, sharing the gRPC and HTTP ports.

Each worker is a child process (`python -m service serve` with the same flags) that
binds both ports with SO_REUSEPORT, so the kernel spreads new connections over them;
they behave as one service through the shared store and bus (service.engine.cluster).
The parent starts them, starts again one that ends on its own (a crash, a kill),
passes SIGTERM/SIGINT on (each drains as a single server does) and exits with the
worst status. Where SO_REUSEPORT is missing, run
the replicas on separate ports behind a load balancer instead (docs/scale-out.md).

What stays local to a worker: its data directory (DATA_DIR/worker-I: workspaces of
the command agent, the data-directory lock); everything shared lives in the store
and on the bus, and stored file artifacts in DATA_DIR/files, which all workers share.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import FrameType
from typing import Any

from service.app.config import ConfigError, Settings
from service.store import is_shared
from service.telemetry import gather

WORKER_ENV = "A2A_WORKER_INDEX"  # set in each child: it serves instead of spawning
RESTART_PAUSE_S = (1.0, 30.0)  # before a worker that ended is started again: first, longest
RESTART_STEADY_S = 30.0  # a worker that ran this long starts again after the first pause

log = logging.getLogger("service")


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
            " load balancer instead (docs/scale-out.md)"
        )
    if s.push_notifications and (s.push_queue != "redis-streams" or not s.push_secret_keys):
        raise ConfigError(
            "workers: with push notifications, workers need push_queue = redis-streams and"
            " push_secret_keys (a local queue and key file would be per worker)"
        )
    if s.upstream:
        raise ConfigError("workers: proxy mode runs one gateway process; drop --workers")


def run_workers(s: Settings, argv: list[str]) -> int:
    """Start the workers and keep them running until SIGTERM/SIGINT; returns the worst exit
    status of their last run. A worker that ends on its own is started again after a pause
    (RESTART_PAUSE_S, doubled while it keeps ending within RESTART_STEADY_S of its start),
    except one that could not start the first time (exit status 2: a setting or a port,
    which a restart does not mend): then the others are stopped and the parent exits 2, so
    a supervisor sees it rather than a service silently short of a worker. A worker
    started again that cannot start (a store or bus away at that moment) is started again
    after the next pause, like one that crashed.

    With `metrics_endpoint`, every worker serves its metrics on a private unix socket in a
    directory made here (service/telemetry/gather.py), so `/metrics` reports all of them;
    with `metrics_port`, the parent alone listens there (exit 2 if it cannot)."""
    metrics_dir = tempfile.mkdtemp(prefix="a2a-metrics-") if s.metrics_endpoint else ""
    listener: Any = None
    if metrics_dir and s.metrics_port:
        try:
            listener = gather.start_listener(
                gather.Workers(metrics_dir, s.workers), s.host, s.metrics_port
            )
        except OSError as exc:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            log.error(
                "metrics_port: cannot listen on %s:%d (%s)",
                s.host,
                s.metrics_port,
                exc.strerror or exc,
            )
            return 2
    try:
        return _supervise(s, argv, metrics_dir)
    finally:
        if listener is not None:
            listener.shutdown()
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _supervise(s: Settings, argv: list[str], metrics_dir: str) -> int:
    children: dict[int, subprocess.Popen[bytes]] = {}  # worker index -> its live process
    started: dict[int, float] = {}
    pause: dict[int, float] = {}
    due: dict[int, float] = {}  # worker index -> when it is started again
    restarts: set[int] = set()  # workers started again after they ended
    stopping = False

    def spawn(index: int) -> None:
        env = {**os.environ, WORKER_ENV: str(index)}
        if metrics_dir:
            env[gather.DIR_ENV] = metrics_dir
        child = subprocess.Popen([sys.executable, "-m", "service", *argv], env=env)
        children[index] = child
        started[index] = time.monotonic()
        if stopping:  # the signal came while it was being started: it stops as well
            child.send_signal(signal.SIGTERM)

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        due.clear()
        for child in children.values():
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(s.workers):
        spawn(index)
    worst = 0
    while children or due:
        now = time.monotonic()
        for index, when in list(due.items()):
            if now >= when and not stopping:
                due.pop(index, None)
                spawn(index)
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
        if pid == 0:
            time.sleep(0.1)
            continue
        ended = next((i for i, c in children.items() if c.pid == pid), None)
        if ended is None:
            continue
        child = children.pop(ended)
        code = child.returncode = os.waitstatus_to_exitcode(status)
        if stopping:
            worst = max(worst, code if code >= 0 else 128 - code)
            continue
        how = f"exit status {code}" if code >= 0 else f"signal {-code}"
        if code == 2 and ended not in restarts:
            log.error(
                "worker %d could not start (%s); stopping the other workers and exiting",
                ended,
                how,
            )
            worst = max(worst, 2)
            forward(signal.SIGTERM, None)
            continue
        steady = time.monotonic() - started[ended] >= RESTART_STEADY_S
        wait = RESTART_PAUSE_S[0] if steady else pause.get(ended, RESTART_PAUSE_S[0])
        pause[ended] = min(wait * 2, RESTART_PAUSE_S[1])
        due[ended] = time.monotonic() + wait
        restarts.add(ended)
        # A restart that could not start (exit 2) met a part that was away at that moment
        # (a dependency outage); the first start already showed the settings and ports work.
        log.error("worker %d ended (%s); starting it again in %g s", ended, how, wait)
    return worst


def is_worker() -> bool:
    return WORKER_ENV in os.environ


def worker_index() -> str | None:
    """This worker's index under --workers (None in a single process or the parent)."""
    return os.environ.get(WORKER_ENV)


def as_worker(s: Settings) -> None:
    """In a worker: its own data directory (DATA_DIR/worker-I) for what stays local; stored
    file artifacts stay in the shared DATA_DIR/files (unless file_artifact_dir says where),
    so any worker serves a download whichever one stored the file."""
    if not s.file_artifact_dir:
        s.file_artifact_dir = os.path.join(s.data_dir, "files")
    s.data_dir = os.path.join(s.data_dir, f"worker-{os.environ[WORKER_ENV]}")
