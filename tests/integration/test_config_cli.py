"""The service CLI as a process: --help explains every flag, a bad setting or an unknown agent
exits 2 with one line and no traceback. (Configuration sources in-process:
tests/unit/test_config.py.)"""

from __future__ import annotations

import subprocess
import sys

from tests.process import ROOT


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_explains_every_flag():
    out = run_cli("serve", "--help")
    assert out.returncode == 0
    for flag in (
        "--host",
        "--grpc-port",
        "--http-port",
        "--store",
        "--agent",
        "--data-dir",
        "--config",
    ):
        assert flag in out.stdout
    assert "A2A_GRPC_PORT" in out.stdout


def test_cli_rejects_bad_config_with_exit_2():
    out = run_cli("serve", "--grpc-port", "99999")
    assert out.returncode == 2
    assert "configuration error: grpc_port" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_reports_unknown_agent_without_traceback():
    out = run_cli(
        "serve",
        "--agent",
        "no.such.module:Agent",
        "--store",
        "memory:",
        "--grpc-port",
        "0",
        "--http-port",
        "-1",
    )
    assert out.returncode == 2  # a startup failure: one line naming the setting
    assert "cannot start: agent: " in out.stderr
    assert "cannot import module 'no.such.module'" in out.stderr
    assert "Traceback" not in out.stderr
