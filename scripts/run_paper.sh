#!/usr/bin/env bash
# Run the paper studies (simulated) into RESULTS (default results/), JOBS parallel jobs each.
# Extra arguments are Hydra overrides for every job, e.g. workload.duration_s=120 (quick).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-results}
JOBS=${JOBS:-2}
KVBENCH=${KVBENCH:-.venv/bin/kvbench}
ONLY_GIVEN=${EXPERIMENTS:+1}  # a caller's EXPERIMENTS runs only those (no beyond block)
EXPERIMENTS=${EXPERIMENTS:-"paper-batch-sharegpt paper-batch-alpaca paper-breakdown paper-sat-alpaca
  paper-batch-sharegpt-matched paper-rate-opt13b-sharegpt paper-rate-opt13b-sharegpt-matched
  paper-rate-opt66b-sharegpt paper-rate-opt175b-sharegpt
  paper-rate-opt13b-alpaca paper-rate-opt66b-alpaca paper-rate-opt175b-alpaca
  paper-rate-parallel paper-rate-beam paper-sharing-parallel paper-sharing-beam paper-sharing-prefix
  paper-rate-prefix paper-rate-chat paper-block-size paper-block-rate-sharegpt paper-block-rate-alpaca
  paper-preempt-block paper-memmap paper-pressure"}
failed=0
for e in $EXPERIMENTS; do
  start=$(date +%s)
  $KVBENCH -m "experiment=$e" "results_dir=$RESULTS" hydra/launcher=joblib "hydra.launcher.n_jobs=$JOBS" "$@" \
    > "$RESULTS/log-$e.txt" 2>&1 || { echo "FAILED $e (see $RESULTS/log-$e.txt)"; failed=1; }
  echo "$e: $(( $(date +%s) - start )) s"
done

# Beyond the paper: the allocators after PagedAttention (radix, vattention), into $RESULTS/beyond.
if [ -z "$ONLY_GIVEN" ]; then
  BEYOND="$RESULTS/beyond"
  mkdir -p "$BEYOND"
  for e in ${BEYOND_EXPERIMENTS:-allocators-2025-sharegpt allocators-2025-multiturn allocators-2025-sysprompt \
      radix-multiturn vattention-pages-opt-13b vattention-pages-llama-3-8b vattention-pages-llama-3-70b}; do
    start=$(date +%s)
    $KVBENCH -m "experiment=$e" "results_dir=$BEYOND" hydra/launcher=joblib "hydra.launcher.n_jobs=$JOBS" "$@" \
      > "$BEYOND/log-$e.txt" 2>&1 || { echo "FAILED $e (see $BEYOND/log-$e.txt)"; failed=1; }
    echo "$e: $(( $(date +%s) - start )) s"
  done
fi
exit $failed
