#!/usr/bin/env bash
# GPU checks in one run (see ../shared/gpu.md), from the repository root, in under 8 minutes:
#   1. nvidia-smi, torch / triton versions;  2. pytest -m gpu, then the whole kernel suite compiled
#   on CUDA (on the CPU it runs in the Triton interpreter, which checks no compilation);
#   3. the kernel benchmark;  4. the engine run (hook below);  then a short table last.
# Everything lands in $OUT (default ./gpu_out): gpu_check.log, pytest_*.xml/.txt, kernel_bench.csv/.txt,
# kernel_latency.csv (Figure 18: copy it next to results/paper/index.jsonl and run make figs).
# Typical time ~5 minutes (Triton compiles included); the timeouts below cap each step.
# Needs nothing installed: PYTHONPATH=. (plus the wheels in .whl/ when hydra is missing).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"

if [ -d .whl ] && ! "$PY" -c "import hydra" 2>/dev/null; then
  S=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --target "$S" .whl/*.whl && export PYTHONPATH="$S:$PYTHONPATH"
fi

step() { echo; echo "=== $* ($(date +%T))"; }

checks() {
  local status=0
  step "device and versions"
  nvidia-smi || status=1
  "$PY" -c "import torch, triton; print('torch', torch.__version__, '| cuda', torch.version.cuda, '| triton', triton.__version__); print(torch.cuda.get_device_name())" || status=1

  step "GPU tests (pytest -m gpu)"
  timeout 150 "$PY" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" tests \
    2>&1 | tee "$OUT/pytest_gpu.txt" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  step "kernel suite on CUDA"
  timeout 180 "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/pytest_kernels.xml" \
    tests/test_kernels.py tests/test_kernels_bench.py 2>&1 | tee "$OUT/pytest_kernels.txt" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1

  step "kernel benchmark"
  timeout 300 "$PY" -m kernels.bench --budget-s 200 --out "$OUT/kernel_bench.csv" \
    --latency-out "$OUT/kernel_latency.csv" > "$OUT/kernel_bench.txt" 2>&1 \
    || status=1
  tail -n 8 "$OUT/kernel_bench.txt"

  step "engine on CUDA: Llama-3-8B shape, dummy weights, every allocator (hf backend, triton)"
  timeout 240 "$PY" -m kvbench.app -m backend=hf model=llama-3-8b model.dtype=bfloat16 \
    model.max_model_len=2048 engine.attention=triton engine.device=cuda logger=none progress=false \
    workload=sharegpt workload.source=table workload.num_requests=64 workload.request_rate=inf \
    allocator=orca-max,orca-oracle,contiguous-oracle,paged,paged_prefix \
    experiment_name=gpu-engine "results_dir=$OUT/results" > "$OUT/engine.txt" 2>&1 || status=1
  tail -n 4 "$OUT/engine.txt"
  "$PY" -m kvbench.results --index "$OUT/results/index.jsonl" --columns \
    allocator,reserve,mean_batch_size,output_token_throughput,mean_tpot_s,attention_s_per_token,forward_s_per_token \
    > "$OUT/engine_table.txt" 2>&1

  step "summary"
  for f in pytest_gpu pytest_kernels; do
    echo "$f: $(grep -E "passed|failed|error|skipped" "$OUT/$f.txt" | tail -n 1)"
  done
  if [ -f "$OUT/kernel_bench.csv" ]; then
    "$PY" -m kernels.bench --report "$OUT/kernel_bench.csv"
  else
    echo "no kernel benchmark CSV (see $OUT/kernel_bench.txt)"
  fi
  cat "$OUT/engine_table.txt" 2>/dev/null
  return $status
}

checks 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
