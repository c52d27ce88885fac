"""The import contracts in pyproject.toml ([tool.importlinter]): layers whose imports only
point down, and no import circles inside any package. They hold for the tree, and they
catch an upward import (function-local ones too) and a circle when one is added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.process import ROOT


def _lint(tree) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path):
    """A copy of the packages and the contracts, to break on purpose."""
    for package in ("service", "gateway", "gen"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_its_import_contracts(tree):
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_breaks_the_layers_even_inside_a_function(tree):
    ids = tree / "service" / "protocol" / "ids.py"
    ids.write_text(
        ids.read_text()
        + "\n\ndef _sneaky():\n    from service.app import config\n\n    return config\n"
    )
    result = _lint(tree)
    assert result.returncode != 0
    assert "service.protocol.ids -> service.app.config" in result.stdout, result.stdout


def test_a_circle_inside_a_package_breaks_the_contracts(tree):
    store = tree / "service" / "store"
    (store / "left.py").write_text("from service.store import right  # noqa: F401\n")
    (store / "right.py").write_text("from service.store import left  # noqa: F401\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "No import circles among the modules of any package BROKEN" in result.stdout, (
        result.stdout
    )
