"""Bad inputs written from classes, not from a list: every knob of every config variant gets the
bad values of its kind, and every launcher, sweeper and console-script setting its own.

``knob_cases()`` walks the composed config of each variant in ``VARIANTS`` and yields, for each
knob once, ``(case_id, overrides)`` with a value of the knob's class that must be refused:

- boolean: ``maybe`` and ``2``;
- string: ``''``, and ``nope`` where the knob is a choice (every string knob but ``FREE_STRINGS``);
- number: ``inf`` (where the default is finite), ``nan``, ``abc``, ``1e300``, and ``-1`` where
  the knob is a count, size or rate (every numeric knob but those of ``SIGNED``);
- list: ``abc`` (a string would become a list of its characters).

``EXTRA_CASES`` holds the classes no default names: unknown keys, contradicting baselines,
paths, launcher and sweeper settings. Shared by ``tests/test_reliability_inputs.py`` and
``scripts/input_census.py``.
"""
from __future__ import annotations

import math

VARIANTS: list[list[str]] = [
    [],
    ["workload=synthetic", "workload.distribution=uniform"],
    ["workload=alpaca"],
    ["workload=sharegpt"],
    ["workload=sharegpt_chat"],
    ["workload=multiturn"],
    ["workload=shared_prefix", "workload.base=synthetic"],
    ["workload=system_prompts", "workload.base=synthetic"],
    ["allocator=contiguous"],
    ["allocator=buddy"],
    ["allocator=vattention"],
    ["allocator=radix"],
    ["logger=wandb"],
    ["backend=hf", "model=tiny-llama"],
    ["model=gemma-2-2b"],
]

SIGNED: set[str] = set()  # numeric knobs for which a negative value means something
NOT_VALUES = {"name", "experiment_name", "results_dir"}  # identity keys with cases of their own
# free-form strings (names, paths, groups): only '' is wrong; every other string knob is a choice
FREE_STRINGS = {"logger.project", "logger.entity", "logger.group", "logger.dir", "model.tokenizer", "model.path",
                "workload.path",
                "gpu.op_constants_from"}  # where the operator constants come from: a description


def _bad_values(key: str, default) -> list[str]:
    if isinstance(default, bool):
        return ["maybe", "2"]
    if isinstance(default, (int, float)):
        values = ["nan", "abc", "1e300"]
        if not (isinstance(default, float) and math.isinf(default)):
            values.insert(0, "inf")
        if key not in SIGNED:
            values.append("-1")
        return values
    if isinstance(default, str):
        return ["''"] if key in FREE_STRINGS else ["''", "nope"]
    if isinstance(default, list):
        return ["abc"]
    return []


def knob_cases(conf_dir: str | None = None) -> list[tuple[str, list[str]]]:
    """(case_id, overrides) for every knob of every variant, once per knob and bad value."""
    from hydra import compose, initialize_config_dir

    from kvbench.config.errors import CONF_DIR

    seen: set[str] = set()
    cases = []
    with initialize_config_dir(config_dir=str(conf_dir or CONF_DIR), version_base="1.3"):
        for variant in VARIANTS:
            cfg = compose(config_name="config", overrides=variant)
            for key, node in _leaves(cfg):
                default = _value(node)
                if key in seen or key.split(".")[-1] in NOT_VALUES or default is None:
                    continue
                seen.add(key)
                for value in _bad_values(key, default):
                    cases.append((f"{key}={value}|{' '.join(variant)}", [*variant, f"{key}={value}"]))
    return cases


def _leaves(node, prefix: str = ""):
    """(dotted key, node) of every leaf outside ``hydra``, interpolations unresolved."""
    from omegaconf import DictConfig

    for key in node:
        path = f"{prefix}{key}"
        if path == "hydra":
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_interpolation():
            yield from _leaves(child, path + ".")
        else:
            yield path, child


def _value(node):
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if node._is_interpolation() or node._is_missing():
        return None
    value = node._value()
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


LONG_NAME = "x" * 300

# classes without a default to derive them from: (case_id, overrides)
EXTRA_CASES: list[tuple[str, list[str]]] = [
    ("unknown-key", ["+foo=1"]),
    ("unknown-key-nested", ["+engine.swap_slots=0"]),
    ("unknown-workload-key", ["+workload.think_time_s=1"]),
    ("unknown-model-bool", ["+model.tie_word_embeddings=maybe"]),
    ("unknown-gpu-constant", ["+gpu.eff_flops=abc"]),
    ("baseline-contradicts-reserve", ["+baseline=orca-max", "allocator.reserve=pow2"]),
    ("baseline-contradicts-batching", ["+baseline=static-max", "engine.batching=continuous"]),
    ("baseline-contradicts-allocator", ["+baseline=paged", "allocator=buddy"]),
    ("baseline-contradicts-block", ["+baseline=tgi-max", "allocator.block_size=32"]),
    ("experiment-name-long", [f"experiment_name={LONG_NAME}"]),
    ("experiment-name-space", ["experiment_name=' '"]),
    ("results-dir-long", [f"results_dir={LONG_NAME}/{LONG_NAME}"]),
    ("percentiles-scalar", ["metrics.percentiles=99"]),
    ("percentiles-string", ["metrics.percentiles=abc"]),
    ("percentiles-zero", ["metrics.percentiles=[0]"]),
    ("goodput-garbage", ["metrics.goodput=abc"]),
    ("optimized-metric-unknown", ["optimized_metric=nope"]),
    ("optimized-metric-goodput-no-slo", ["optimized_metric=request_goodput"]),
    ("optimized-metric-empty", ["optimized_metric=''"]),
    ("optimized-metric-text-column", ["optimized_metric=allocator"]),
    ("request-rate-tiny", ["workload.request_rate=1e-300"]),
    ("host-cost-inf", ["system.sample_host_s=inf"]),
    ("host-cost-step-inf", ["system.step_overhead_s=inf"]),
    ("host-cost-seq-nan", ["system.seq_overhead_s=nan"]),
    ("host-cost-absurd", ["system=vllm-2023", "system.step_overhead_s=1e6"]),
    ("wandb-online-no-key", ["logger=wandb", "logger.mode=online"]),
    ("wandb-tags-string", ["logger=wandb", "logger.tags=abc"]),
    ("wandb-project-empty", ["logger=wandb", "logger.project=''"]),
    ("window-zero", ["allocator=paged_window", "allocator.window=0", "model=gemma-2-2b"]),
    # mixed models (layer groups, kvbench.layer_groups / kvbench.run.group_knobs)
    ("layer-types-wrong-length", ["model=gemma-3-27b", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=hybrid",
                                  "model.layer_types=[full_attention,sliding_attention]"]),
    ("layer-types-unknown-kind", ["model=jamba-1.5-mini", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=hybrid",
                                  "model.layer_types=[" + ",".join(["mamba"] * 31 + ["nope"]) + "]"]),
    ("window-past-context", ["model=gemma-3-27b", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=lcm", "model.sliding_window=200000"]),
    ("state-size-zero", ["model=jamba-1.5-mini", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=hybrid", "model.state_bytes_per_layer=0"]),
    ("paged-window-on-mixed-model", ["model=gemma-3-27b", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=paged_window", "allocator.window=1024"]),
    ("paged-on-state-model", ["model=jamba-1.5-mini", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=paged"]),
    ("hf-mixed-fork", ["backend=hf", "model=tiny-llama", "model.family=gemma3_text", "+model.sliding_window=5",
                       "+model.layer_types=[sliding_attention,full_attention]", "allocator=hybrid", "workload.n=2",
                       "engine.kv_cache_bytes=40960"]),
    ("hybrid-static-bad-ratios", ["model=gemma-3-27b", "gpu=h100-80gb", "engine.kv_cache_bytes=4e9", "allocator=hybrid_static", "allocator.ratios=[1]"]),
    ("every-request-too-long", ["engine.max_num_batched_tokens=64", "engine.chunked_prefill=false"]),
    ("multirun-one-bad-family", ["-m", "model.family=opt,nope,llama"]),
    ("argparse-prefix", ["--multir", "model.family=nope"]),
    ("argparse-unknown-flag", ["--frobnicate"]),
    ("argparse-ambiguous-prefix", ["--c", "x"]),
    # launcher and sweeper settings
    ("joblib-n-jobs-zero", ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"]),
    ("joblib-n-jobs-text", ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=abc"]),
    ("joblib-unknown-key", ["-m", "hydra/launcher=joblib", "+hydra.launcher.nope=1"]),
    ("basic-sweeper-interval", ["-m", "workload.request_rate=interval(1,5)"]),
    ("optuna-negative-interval", ["-m", "hydra/sweeper=optuna", "workload.request_rate=interval(-5,-1)"]),
    ("optuna-reversed-interval", ["-m", "hydra/sweeper=optuna", "workload.request_rate=interval(5,1)"]),
    ("optuna-empty-int-interval", ["-m", "hydra/sweeper=optuna", "workload.num_requests=int(interval(3,3))"]),
    ("optuna-interval-over-range", ["-m", "hydra/sweeper=optuna", "engine.gpu_memory_utilization=interval(0.5,2)"]),
    ("optuna-interval-unknown-knob", ["-m", "hydra/sweeper=optuna", "+workload.nope=interval(1,2)"]),
    ("optuna-zero-trials", ["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=0",
                            "workload.request_rate=interval(1,5)"]),
    ("optuna-negative-jobs", ["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_jobs=-3",
                              "workload.request_rate=interval(1,5)"]),
    ("optuna-sideways", ["-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=sideways",
                         "workload.request_rate=interval(1,5)"]),
    ("optuna-goodput-no-slo", ["-m", "hydra/sweeper=optuna", "optimized_metric=request_goodput",
                               "workload.request_rate=interval(1,5)"]),
    ("optuna-unknown-metric", ["-m", "hydra/sweeper=optuna", "optimized_metric=nope",
                               "workload.request_rate=interval(1,5)"]),
]


RUN_TIME_CASES: set[str] = set()  # cases only a run can find (none: every class is refused up front)


def all_cases() -> list[tuple[str, list[str]]]:
    return knob_cases() + EXTRA_CASES


def with_results(args: list[str], results) -> list[str]:
    """The case's arguments with a scratch results dir last (Hydra takes flags before overrides),
    unless the case sets its own."""
    if any(a.startswith("results_dir=") for a in args):
        return list(args)
    return [*args, f"results_dir={results}"]


def run_process(overrides: list[str], tmp, timeout: float = 300.0) -> dict:
    """Run ``kvbench`` on a case in a fresh folder; what it printed and what it left behind."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tmp = Path(tmp)
    work = tmp / "cwd"
    work.mkdir(parents=True, exist_ok=True)
    (work / "user-file.txt").write_text("mine\n")
    before = {p for p in tmp.rglob("*")}
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(root), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
           "WANDB_DIR": str(tmp / "wandb-dir")}
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", *with_results(overrides, tmp / "results")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    after = {p for p in tmp.rglob("*")}
    results = tmp / "results"
    written = sorted(str(p) for p in after - before if results not in p.parents and p != results)
    removed = sorted(str(p) for p in before - after)
    return {"rc": proc.returncode, "stderr": proc.stderr, "written": written, "removed": removed}


def classify_process(out: dict) -> str:
    """clean: exit 2, one stderr line starting ``kvbench: error:``, nothing written outside the results
    dir and nothing removed; else what went wrong first."""
    lines = [ln for ln in out["stderr"].splitlines() if ln.strip()]
    if "Traceback" in out["stderr"]:
        return "traceback"
    if out["removed"]:
        return "removed"
    if out["written"]:
        return "wrote"
    if out["rc"] == 0:
        return "silent"
    if len(lines) != 1 or not lines[0].startswith("kvbench: error:") or out["rc"] != 2:
        return "multi-line"
    return "clean"
