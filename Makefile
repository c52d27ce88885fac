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

# buf cannot resolve the google/api imports (installed googleapis-common-protos,
# no registry deps), so lint an image compiled by grpcio-tools; see buf.yaml.
lint: setup tools
	$(PY) -m service.codegen image build/a2a.binpb
	$(BUF) lint build/a2a.binpb --path a2a.proto
	$(PY) -m ruff check service gateway tests

gen: setup
	$(PY) -m service.codegen gen

bench: setup
	$(PY) tests/bench/run.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
