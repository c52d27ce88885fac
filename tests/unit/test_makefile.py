"""`make help` lists every target the Makefile declares, one line each; `make` alone is unchanged."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, missing_part


@pytest.fixture(autouse=True)
def _make_is_there() -> None:
    # make is a stated requirement: outside CI a missing one skips loudly, under CI=true it fails.
    if shutil.which("make") is None:
        missing_part("GNU make is not installed")


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def phony_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    return [t for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for t in line.split()]


def test_make_help_lists_every_phony_target_once():
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    targets = phony_targets()
    assert "help" in targets
    assert sorted(listed) == sorted(targets), result.stdout
    assert all(len(line.split()) > 1 for line in result.stdout.splitlines() if line.strip())


def test_make_alone_is_still_make_setup():
    assert make("-n").stdout == make("-n", "setup").stdout
