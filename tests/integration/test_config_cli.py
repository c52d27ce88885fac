"""The service CLI as a process: --help explains every flag, a bad setting or an unknown agent
exits 2 with one line and no traceback. (Configuration sources in-process:
tests/unit/test_config.py.)"""

from __future__ import annotations

import os
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


def test_an_unknown_config_key_names_the_nearest_and_where_keys_are(tmp_path):
    cfg = tmp_path / "a2a.toml"
    cfg.write_text("grpc_prot = 1\n")
    out = run_cli("serve", "--config", str(cfg))
    assert out.returncode == 2
    line = out.stderr.strip()
    assert "\n" not in line and "unknown key 'grpc_prot'; did you mean grpc_port?" in line
    assert 'README "Configuration"' in line and "config-reference" in line
    assert "known:" not in line


def test_unknown_a2a_variables_are_warned_about_at_startup_without_their_value():
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A2A_")}
    env = {
        **clean,
        "A2A_GRPC_PROT": "v4lue-one",
        "A2A_ZEBRA": "v4lue-two",
        "A2A_LOG_FORMAT": "text",
    }
    out = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--agent", "no.such.module:Agent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 2  # the unknown agent ends it after the warnings
    warned = [line for line in out.stderr.splitlines() if "is not a setting" in line]
    assert len(warned) == 2, out.stderr
    assert "A2A_GRPC_PROT" in warned[0] and "did you mean A2A_GRPC_PORT?" in warned[0]
    assert "A2A_ZEBRA" in warned[1] and "did you mean" not in warned[1]
    assert "v4lue" not in out.stderr


def test_serve_help_says_where_the_other_keys_are():
    out = run_cli("serve", "--help")
    assert 'README "Configuration"' in out.stdout
    assert "python -m service config-reference" in out.stdout and "A2A_<KEY>" in out.stdout
