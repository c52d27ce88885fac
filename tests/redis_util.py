"""A Redis server of the test's own, on its own port (never the machine's shared one), so a
test may stop and restart it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import redis

from tests.conftest import missing_part
from tests.process import free_port


class OwnRedis:
    """`persistent`: every write is in its append-only file before Redis answers (as a
    production Redis that holds a push queue is set up), so a restart keeps the data."""

    def __init__(self, workdir: str, *, persistent: bool = False) -> None:
        self.persistent = persistent
        binary = shutil.which("redis-server")
        if binary is None:
            missing_part("REDIS-SERVER NOT INSTALLED: tests with a Redis of their own NOT RUN")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        os.makedirs(self.workdir, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.persistent else "no",
                "--appendfsync",
                "always",
                "--dir",
                self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        while True:
            try:
                client.ping()
                client.close()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("own redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
