"""The import contracts in pyproject.toml ([tool.importlinter]): layers whose imports only
point down, no import circles inside any package, and the client (`a2a_call`), the code
it shares with the server (`a2a_cards`, `a2a_wire`) and the server kept apart. They hold for the
tree, and they catch an upward import (function-local ones too), a circle, and an import
across the client/server line when one is added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib

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
    for package in ("service", "gateway", "gen", "a2a_call", "a2a_cards", "a2a_wire"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_its_import_contracts(tree):
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 8 kept, 0 broken." in result.stdout


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


CLIENT = "The client imports nothing of the server"
SHARED = "The shared code imports neither the server nor the client"
SERVER = "The server imports nothing of the client"
BINDINGS = "Bindings import the pipeline, never each other"
PIPELINE = "The call pipeline imports no binding"
PEERS = "Peers knows the engine only through its protocols"


def test_the_client_server_contracts_are_declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert {"service", "gateway", "gen", "a2a_call", "a2a_cards", "a2a_wire"} <= set(
        config["root_packages"]
    )
    forbidden = {
        c["name"]: (set(c["source_modules"]), set(c["forbidden_modules"]), c.get("ignore_imports"))
        for c in config["contracts"]
        if c["type"] == "forbidden"
    }
    assert forbidden == {
        CLIENT: ({"a2a_call"}, {"service", "gateway"}, None),
        SHARED: ({"a2a_cards", "a2a_wire"}, {"service", "gateway", "a2a_call"}, None),
        # `python -m service call ...` hands over to the client: the one allowed import
        SERVER: ({"service", "gateway"}, {"a2a_call"}, ["service.app.cli -> a2a_call.cli"]),
        BINDINGS: ({"gateway"}, {"service.grpc_binding"}, None),
        PIPELINE: ({"service.calls"}, {"service.grpc_binding", "gateway"}, None),
        PEERS: (
            {"service.engine.peers", "service.engine.cluster", "service.engine.elsewhere"},
            {
                "service.engine.registry",
                "service.engine.commands",
                "service.engine.driver",
                "service.engine.subscriptions",
                "service.engine.reads",
                "service.engine.recovery",
                "service.engine.runs",
            },
            None,
        ),
    }
    [acyclic] = [c for c in config["contracts"] if c["type"] == "acyclic_siblings"]
    assert {"a2a_call", "a2a_cards", "a2a_wire"} <= set(acyclic["ancestors"])


@pytest.mark.parametrize(
    ("module", "imported", "contract"),
    [
        ("a2a_call/errors.py", "service.app.config", CLIENT),
        ("a2a_call/safe.py", "gateway.server", CLIENT),
        ("a2a_cards/keys.py", "service.cards.card", SHARED),
        ("a2a_cards/fetch.py", "a2a_call.safe", SHARED),
        ("a2a_wire/event_ids.py", "service.protocol.errors", SHARED),
        ("service/cards/signing.py", "a2a_call.client", SERVER),
        ("gateway/health.py", "a2a_call.errors", SERVER),
        ("gateway/invoker.py", "service.grpc_binding", BINDINGS),
        ("service/calls/pipeline.py", "gateway.jsonrpc", PIPELINE),
        ("service/engine/peers.py", "service.engine.registry", PEERS),
    ],
)
def test_an_import_across_a_guarded_line_breaks_the_contracts(tree, module, imported, contract):
    path = tree / module
    package, _, name = imported.rpartition(".")
    path.write_text(
        path.read_text()
        + f"\n\ndef _sneaky():\n    from {package} import {name}\n\n    return {name}\n"
    )
    result = _lint(tree)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout, result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported}" in result.stdout, result.stdout
