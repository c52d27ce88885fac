# One entry point for every routine task. `make run` and `make test` set up
# everything they need (virtualenv, Python packages, the buf CLI) on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
BUF_VERSION := 1.75.0
BUF    := .tools/node_modules/.bin/buf

.PHONY: setup run check test test-unit test-integration test-interop test-faults lint gen config-reference bench bench-tools clean tools help

# `make` alone is `make setup` (the first target); `make help` lists the targets.
setup: $(STAMP)  ## create .venv and install the package with its dev and client (a2a-call) dependencies

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,client]'
	touch $@

$(BUF):
	npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@$(BUF_VERSION)

tools: $(BUF)  ## install the buf CLI under .tools/

run: setup  ## run the service (python -m service serve)
	$(PY) -m service serve

# What every commit must pass before the tests: formatting, lint, types, import layers.
check: setup  ## ruff format --check, ruff check, mypy (service/, gateway/, a2a_call/, a2a_cards/, a2a_wire/), the import contracts
	$(PY) -m ruff format --check service gateway a2a_call a2a_cards a2a_wire tests proto/codegen.py deploy
	$(PY) -m ruff check service gateway a2a_call a2a_cards a2a_wire tests proto/codegen.py deploy
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

# The suite has three layers (tests/unit, tests/integration, tests/interop); `make test`
# runs them all, as CI does (.ci/run).
# Two workers (pytest-xdist), each taking whole test files (--dist loadfile: a file's module
# fixtures and servers stay in one process); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

test: setup tools check  ## make check, then the whole test suite (unit, integration and interop)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-unit: setup  ## run tests/unit only: in-process, no servers, no npm, no Redis (seconds)
	$(PY) -m pytest -q tests/unit

test-integration: setup  ## run tests/integration: real servers on loopback (Redis, strace if present)
	$(PY) -m pytest -q tests/integration

test-interop: setup tools  ## run tests/interop: a2a-sdk client, grpcurl, buf, the README's commands
	$(PY) -m pytest -q tests/interop

test-faults: setup  ## the long fault-injection run: kill -9, PostgreSQL and Redis outages under load (a few minutes)
	A2A_FAULTS_LONG=1 $(PY) -m pytest -q tests/integration/test_faults.py

# buf cannot resolve the google/api imports (installed googleapis-common-protos,
# no registry deps), so lint an image compiled by grpcio-tools; see buf.yaml.
lint: setup tools  ## buf lint the proto, ruff check the Python
	$(PY) proto/codegen.py image build/a2a.binpb
	$(BUF) lint build/a2a.binpb --path a2a.proto --path jsonrpc_envelope.proto
	$(PY) -m ruff check service gateway a2a_call a2a_cards a2a_wire tests

gen: setup  ## regenerate the gRPC code under gen/ from proto/
	$(PY) proto/codegen.py

config-reference: setup  ## regenerate the configuration tables of docs/configuration.md from the settings sections
	$(PY) -m service config-reference --write docs/configuration.md

bench: setup bench-tools  ## run the benchmarks (tests/bench/run.py)
	$(PY) tests/bench/run.py

# Native load generators (the load generator must not be the bottleneck), from Debian's
# packages: h2load (nghttp2-client) drives the scale-out bench, wrk floods in the burst bench.
bench-tools:  ## install h2load (nghttp2-client) and wrk for the benchmarks (Debian: apt-get, as root)
	@command -v h2load >/dev/null && command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client wrk; }
	@wrk --version 2>&1 | head -n 1

clean:  ## remove .venv, .tools, build/ and egg-info
	rm -rf $(VENV) .tools build *.egg-info

help:  ## list the targets, one line each
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-17s %s\n", $$1, $$2}'
