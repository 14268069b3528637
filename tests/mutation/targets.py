"""What the mutation run mutates, and which tests it may run against each mutant.

mutmut runs, for each mutant, only the selected tests that called the mutated function while the
clean suite ran (it records that once), and stops at the first failure. The selection is the
in-process tests of the core: a test that starts a subprocess would run the unmutated code.
"""

from __future__ import annotations

# short name -> source file, the core of the engine and the allocators the paper compares
MODULES = {
    "paged": "allocators/paged.py",
    "paged_prefix": "allocators/paged_prefix.py",
    "buddy": "allocators/buddy.py",
    "region": "allocators/region.py",
    "scheduler": "kvbench/engine/scheduler.py",
    "metrics": "kvbench/metrics.py",
    "recorder": "kvbench/engine/recorder.py",
}

TESTS = [
    "tests/test_allocators_cases.py",
    "tests/test_allocators_contract.py",
    "tests/test_allocators_grow_many.py",
    "tests/test_engine.py",
    "tests/test_engine_followups.py",
    "tests/test_engine_fuzz.py",
    "tests/test_metrics.py",
    "tests/test_policies.py",
    "tests/test_queue_policies.py",
    "tests/test_pressure.py",
    "tests/test_block_saving.py",
    "tests/test_prefix_stats.py",
    "tests/test_batch_counts.py",
    "tests/test_concurrency.py",
    "tests/test_paged_window.py",
    "tests/test_gpu_eviction.py",
    "tests/test_sim_executor.py",
    "tests/test_capacity_served.py",
    "tests/test_decode_runs.py",
    "tests/test_group_memory.py",
    "tests/test_sim.py",
]
# plus every tests/test_mutants_*.py: the tests written to kill what the list above let live
KILLER_TESTS_GLOB = "tests/test_mutants_*.py"

# fixed pytest options for every run: the slow tier out, Hypothesis derandomized (a mutant's
# verdict must not depend on which examples a run happened to draw)
PYTEST_ARGS = ["-p", "no:cacheprovider", "-m", "not slow", "--hypothesis-seed=0", "-q"]

# folders the tests read besides the mutated packages
ALSO_COPY = ["conf", "kernels", "paper_figs", "hydra_plugins", "scripts"]

MIN_SCORE = 0.95
