"""`make bench` still runs end to end: every row gets numbers (no timing thresholds here)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)  # every part's servers start, on a machine that may be busy
def test_bench_quick_produces_every_row(tmp_path):
    out = tmp_path / "bench.json"
    argv = [
        sys.executable,
        str(ROOT / "tests" / "bench" / "run.py"),
        "--quick",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--rounds",
        "1",
        "--concurrency",
        "8",
        "--stream-chunks",
        "50,200",
        "--stream-duration",
        "0.05",
        "--large-tasks",
        "2000",
        "--small-tasks",
        "200",
        "--list-calls",
        "5",
        "--list-warmup",
        "1",
        "--file-mib",
        "1",
        "--file-duration",
        "0.2",
        "--file-reads",
        "5",
        "--burst-connections",
        "20",
        "--burst-seconds",
        "1",
        "--burst-idle-seconds",
        "0.3",
        "--json",
        str(out),
    ]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=165)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())

    def number(value) -> bool:
        return isinstance(value, (int, float)) and math.isfinite(value) and value > 0

    send = {r["key"]: r for r in doc["send_message"]}
    assert set(send) == {"bare", "sdk", "ours_sqlite", "ours_memory", "ours_sqlite_otel"}
    for key, row in send.items():
        assert row["errors"] == 0, (key, row["first_error"])
        for field in ("rps", "p50_ms", "p99_ms", "vs_bare"):
            assert number(row[field]), (key, field, row[field])

    streams = doc["streaming"]
    assert {(r["store"], r["chunks_per_turn"]) for r in streams} == {
        ("sqlite", 50),
        ("sqlite", 200),
        ("memory", 50),
        ("memory", 200),
    }
    for row in streams:
        assert number(row["events_per_s"]) and number(row["turn_ms"]), row

    listing = doc["list_tasks"]
    assert {r["query"] for r in listing["rows"]} == {"first_page", "deep_page", "context_filter"}
    for row in listing["rows"]:
        for field in (
            "small_p50_ms",
            "small_p99_ms",
            "large_p50_ms",
            "large_p99_ms",
            "ratio_p50",
            "ratio_p99",
        ):
            assert number(row[field]), (row["query"], field, row[field])

    files = doc["files"]
    assert {r["key"] for r in files["download"]} == {"bare", "ours"}
    for row in files["download"]:
        assert number(row["mib_per_s"]) and number(row["p50_ms"]), row
    assert number(files["vs_file_response"])
    assert {r["artifact"] for r in files["task_reads"]} == {"1 KiB", "1 MiB"}
    for row in files["task_reads"]:
        assert number(row["p50_ms"]) and number(row["vs_1kib"]), row

    burst = {r["key"]: r for r in doc["burst"]}
    assert set(burst) == {"burst_limits_off", "burst_limits_on", "burst_limits_on_polite"}
    for key, row in burst.items():
        assert number(row["flood_requests"]) and number(row["ratio_p99"]), key
        assert "ratio_p99_settled" in row and "tasks" in row["settled"], key
        for phase in ("idle", "flood"):
            for probe in ("tasks", "health", "card"):
                assert number(row[phase][probe]["p99_ms"]), (key, phase, probe)
    assert burst["burst_limits_off"]["flood_refused_pct"] == 0

    transports = {r["key"]: r for r in doc["transports"]}
    assert set(transports) == {
        "transports_http_jsonrpc",
        "transports_unix",
        "transports_unix_shared",
    }
    for key, row in transports.items():
        assert row["errors"] == 0, (key, row["first_error"])
        for field in ("rps", "p50_ms", "p99_ms", "vs_http"):
            assert number(row[field]), (key, field, row[field])

    for heading in (
        "SendMessage",
        "Streaming",
        "ListTasks",
        "Stored file artifact download",
        "Burst",
        "SendMessage per transport",
    ):
        assert heading in proc.stdout
