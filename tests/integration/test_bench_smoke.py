"""`make bench` still runs end to end: every row gets numbers (no timing thresholds here)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(200)  # every part's servers start, on a machine that may be busy
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
        "--paused-counts",
        "100",
        "--paused-resume",
        "20",
        "--paused-idle",
        "0.3",
        "--only",
        "send,stream,list,http,push,files,burst,scale,sdkagent,paused,transports",  # concurrency: below
        "--json",
        str(out),
    ]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=170)
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

    paused = {r["mode"]: r for r in doc["paused"]}
    assert set(paused) == {"live", "parked"}
    for mode, row in paused.items():
        assert row["tasks"] == 100 and row["resumed"] == 20, mode
        for field in ("rss_mib", "paused_per_s", "resume_s", "resume_p50_ms"):
            assert number(row[field]), (mode, field, row[field])
    transports = {r["key"]: r for r in doc["transports"]}
    assert set(transports) == {
        "transports_http_jsonrpc",
        "transports_unix",
        "transports_unix_shared",
        "transports_websocket",
        "transports_websocket_shared",
    }
    for key, row in transports.items():
        assert row["errors"] == 0, (key, row["first_error"])
        for field in ("rps", "p50_ms", "p99_ms", "vs_http"):
            assert number(row[field]), (key, field, row[field])

    for heading in (
        "SendMessage",
        "Paused tasks",
        "Streaming",
        "ListTasks",
        "Stored file artifact download",
        "Burst",
        "SendMessage per transport",
    ):
        assert heading in proc.stdout


def number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def measured(value) -> bool:
    """A CPU reading of a smoke-sized run: /proc counts in 10 ms ticks, so 0 is a true reading."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


@pytest.mark.timeout(300)  # some 25 servers start one after another
def test_bench_concurrency_part_produces_every_row(tmp_path):
    out = tmp_path / "bench.json"
    argv = [
        sys.executable,
        str(ROOT / "tests" / "bench" / "run.py"),
        "--quick",
        "--only",
        "concurrency",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--rounds",
        "1",
        "--concurrency",
        "8",
        "--conc-streams",
        "6",
        "--conc-events",
        "3",
        "--conc-seconds",
        "0.5",
        "--conc-lag-streams",
        "0",
        "--conc-settle",
        "0.6",
        "--conc-first-samples",
        "2",
        "--json",
        str(out),
    ]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    conc = doc["concurrency"]
    assert {(r["key"], r["binding"]) for r in conc["streams_rows"]} == {
        (key, binding) for key in ("ours", "sdk") for binding in ("grpc", "sse")
    }
    for row in conc["streams_rows"]:
        assert row["errors"] == 0 and row["complete"] == row["streams"], row
        assert measured(row["cpu_ms_per_event"]) and number(row["rss_full_mib"]), row
        assert number(row["rss_later_mib"]), row  # the reading --conc-settle asked for
    assert {(r["key"], r["binding"], r["silent_s"]) for r in conc["first_event_rows"]} == {
        (key, binding, silent)
        for key in ("ours", "sdk")
        for binding in ("grpc", "sse")
        for silent in (0.0, 1.0)
    }
    for row in conc["first_event_rows"]:
        assert number(row["first_event_p50_ms"]) and number(row["first_chunk_p50_ms"]), row

    # its send rows, against the bare handlers
    assert {r["key"] for r in doc["send_message"]} >= {"bare", "ours_sqlite"}
    assert {r["key"] for r in doc["http"]} >= {"http_bare", "http_jsonrpc_sqlite"}
    for row in doc["send_message"] + doc["http"]:
        assert row["errors"] == 0 and number(row["vs_bare"]), row
    for heading in ("Concurrency", "Time to first event", "SendMessage"):
        assert heading in proc.stdout
