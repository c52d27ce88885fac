"""The readiness seam: named checks run together, bounded by a timeout, the outcome kept
(probes read it without I/O), changes logged and passed on; probe settings checked."""

from __future__ import annotations

import asyncio
import logging

import pytest

from service.app import config
from service.ops.readiness import Readiness


async def test_checks_decide_readiness_and_changes_are_passed_on(caplog):
    caplog.set_level(logging.INFO, logger="service.readiness")
    state = {"up": True}
    changes: list[bool] = []

    async def store() -> None:
        if not state["up"]:
            raise ConnectionError("refused, password=hunter2")

    async def slow() -> None:
        await asyncio.sleep(10)

    async def record(ready: bool) -> None:
        changes.append(ready)

    readiness = Readiness(interval=3600, timeout=0.05)
    readiness.add("store", store)
    await readiness.start(record)
    try:
        assert readiness.ready and changes == []
        state["up"] = False
        assert await readiness.refresh() is False
        assert list(readiness.failing) == ["store"] and changes == [False]
        readiness.add("bus", slow)
        state["up"] = True
        assert await readiness.refresh() is False
        assert list(readiness.failing) == ["bus"] and "no answer within" in readiness.failing["bus"]
        del readiness.checks["bus"]
        assert await readiness.refresh() is True and changes == [False, True]
    finally:
        await readiness.stop()
    text = caplog.text
    assert "not ready: store is unreachable (ConnectionError" in text
    assert "ready again: store is reachable" in text and "hunter2" not in text


async def test_no_checks_means_ready():
    readiness = Readiness()
    await readiness.start()
    assert readiness.ready
    await readiness.stop()


def test_probe_settings_are_checked():
    with pytest.raises(config.ConfigError, match="probe_port: 70000 is not a port number"):
        config.load(env={"A2A_PROBE_PORT": "70000"})
    assert config.load(env={"A2A_PROBE_PORT": "0"}).probe_port == 0
    assert config.load().probe_port == -1  # off by default
