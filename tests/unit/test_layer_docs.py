"""The layer tables of docs/architecture.md and the README name the layers of the import
contract (`[tool.importlinter]` in pyproject.toml), row for row, top to bottom: the
contract is what `make check` enforces, the tables are what readers go by."""

from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [layers] = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    return [{name.strip() for name in row.split("|")} for row in layers]


def module_of(path: str) -> str:
    """`service/app/`, `net/` (a sibling named after the row's first path), `service/api.py`
    → the dotted module name."""
    path = path.removesuffix("/").removesuffix(".py")
    if not path.startswith(("service/", "gateway")):
        path = f"service/{path}"
    return path.replace("/", ".")


def table_layers(text: str, heading: str, column: int) -> list[set[str]]:
    """The modules in `column` of each row of the first table at or after `heading`."""
    lines = text[text.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    layers = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cell = line.replace("\\|", "/").split("|")[column + 1]  # \| joins one row's packages
        layers.append({module_of(path) for path in re.findall(r"`([^`]+)`", cell)})
    return layers


def test_the_architecture_docs_layer_table_is_the_contract():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert table_layers(text, "## Layers", 1) == contract_layers()


def test_the_readmes_layer_table_is_the_contract():
    text = (ROOT / "README.md").read_text()
    assert table_layers(text, "| layer, top to bottom |", 0) == contract_layers()
