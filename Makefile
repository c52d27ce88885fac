# One entry point for every routine task. `make run` and `make test` set up
# everything they need (virtualenv, Python packages, the buf CLI) on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
BUF_VERSION := 1.75.0
BUF    := .tools/node_modules/.bin/buf

.PHONY: setup run test lint gen check-gen bench clean tools

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

tools: $(BUF)

run: setup
	$(PY) -m service serve

test: setup tools
	$(PY) -m pytest -q

lint: setup tools
	$(BUF) lint
	$(PY) -m ruff check service gateway tests

gen: setup
	$(PY) -m service.codegen gen

bench: setup
	$(PY) tests/bench/run.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
