"""The OTLP exporter with its collector down, on a real server process: the exporter child
logs in the service's format (JSON records with its own pid), and SIGTERM ends the server
within `telemetry_shutdown_seconds` (plus the drain's own steps), with exit status 0."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

from tests.process import ServerProcess, free_port

BOUND_S = 1.0


def _json_records(lines: list[str]) -> list[dict]:
    bad = [line for line in lines if line.strip() and not line.startswith("{")]
    assert not bad, "".join(bad[:10])
    return [json.loads(line) for line in lines if line.strip()]


def test_collector_down_child_logs_json_and_shutdown_is_bounded():
    http_port = free_port()
    server = ServerProcess(
        "--store",
        "memory:",
        env={
            "A2A_LOG_FORMAT": "json",
            "A2A_HTTP_PORT": str(http_port),
            "A2A_TELEMETRY": "otlp",
            "A2A_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "A2A_TELEMETRY_SHUTDOWN_SECONDS": str(BOUND_S),
        },
    )
    server.args = [str(http_port) if a == "-1" else a for a in server.args]
    server.start()
    assert server.proc is not None
    body = json.dumps(
        {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/message:send",
        data=body,
        headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
    deadline = time.monotonic() + 20  # the child tries to export the spans, and fails
    while time.monotonic() < deadline:
        records = _json_records(list(server.output))
        if any(r["pid"] != server.proc.pid for r in records):
            break
        time.sleep(0.2)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(30)
    took = time.monotonic() - started
    time.sleep(0.3)  # the reader thread takes the last lines
    records = _json_records(list(server.output))
    assert code == 0, "".join(server.output[-20:])
    assert took < BOUND_S + 3, took  # the bound, the drain's steps and an interpreter exit
    child = [r for r in records if r["pid"] != server.proc.pid]
    assert child, "the exporter child logged nothing"
    assert all(r["logger"].startswith("opentelemetry") for r in child), child
    assert any("telemetry_shutdown_seconds" in r["message"] for r in records)
