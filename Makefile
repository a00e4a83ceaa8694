# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv (Python 3.11+) and installs what it needs on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Arize Phoenix (the local tracing UI) is big and pins its own dependencies: it
# lives in a venv of its own, which the tracing-UI tests use.
TRACE_STAMP := .venv-trace/.installed

.PHONY: demo test lint bench up trace-ui clean

demo: $(STAMP)
	$(BIN)/actorbus demo

test: $(STAMP) $(TRACE_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/ask.py

up: $(STAMP)
	$(BIN)/actorbus up

$(TRACE_STAMP): $(STAMP)
	@echo "installing Arize Phoenix into .venv-trace (the tracing UI; once, 1-3 min)"
	$(BIN)/python -c 'from actorbus.services.trace_ui import ensure_phoenix_venv; ensure_phoenix_venv()'
	@touch $@

trace-ui: $(TRACE_STAMP)
	$(BIN)/python -m actorbus.services.trace_ui

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "actorbus needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

clean:
	rm -rf $(VENV) .venv-trace .pytest_cache .mypy_cache .ruff_cache bench/results
