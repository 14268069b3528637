"""A setting the run would not read is refused (``kvbench.config.reads``).

Every leaf of ``conf/`` is declared (read always, or under a stated condition whose reader names
it); each case below is a command line that used to run silently without reading one of its
settings, or that dropped a tier too small to hold anything: now exit 2, one line saying what
would make the setting act, nothing written (no run dir, no index row). The same table refuses
them for a sweep (when every job ignores the setting) and for ``kvbench-capacity``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from kvbench.config.errors import CONF_DIR
from kvbench.config.reads import READS, rows_for, unread_settings
from kvbench.run.precheck import precheck

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _leaves(node: DictConfig, prefix: str):
    for key in node.keys():
        if key in ("defaults", "hydra"):
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_interpolation():
            yield from _leaves(child, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def conf_leaves() -> dict[str, str]:
    """Every leaf key of every yaml of ``conf/`` -> one file that holds it."""
    found = {key: "config.yaml" for key in _leaves(OmegaConf.load(CONF_DIR / "config.yaml"), "")}
    for path in sorted(CONF_DIR.glob("*/*.yaml")):
        glob = "@package _global_" in path.read_text()
        for key in _leaves(OmegaConf.load(path), "" if glob else f"{path.parent.name}."):
            found.setdefault(key, str(path.relative_to(CONF_DIR)))
    return found


def test_every_leaf_of_conf_is_declared():
    leaves = conf_leaves()
    assert len(leaves) > 150
    missing = sorted(f"{key} ({where})" for key, where in leaves.items() if not rows_for(key))
    assert not missing, f"declare when these are read in kvbench/config/reads.py: {missing}"


def test_a_key_no_file_holds_is_not_declared_by_accident():
    assert not rows_for("engine.no_such_knob") and not rows_for("workload.sjf_error")


@pytest.mark.parametrize("row", [r for r in READS if r.when is not None], ids=lambda r: r.key)
def test_each_condition_names_a_reader_that_reads_the_key(row):
    reader = ROOT / row.reader
    text = reader.read_text() if reader.is_file() else ""
    assert row.key.rsplit(".", 1)[-1] in text, f"{row.reader} does not read {row.key}"
    assert row.why is not None


def _sweep_variants(node: DictConfig) -> list[list[str]]:
    """The experiment alone, then with each value of each swept key in turn."""
    params = OmegaConf.select(node, "hydra.sweeper.params") or {}
    return [[], *([f"{key}={value}"] for key, values in params.items() for value in str(values).split(","))]


def test_every_experiment_reads_what_it_sets():
    """An experiment's own keys count as set: each is read by at least one of its jobs (its sweep's
    values taken one at a time)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
            node = OmegaConf.load(path)
            unread = {k for k in _leaves(node, "") if not k.startswith("hydra")}
            for variant in _sweep_variants(node):
                cfg = compose(config_name="config", overrides=[f"experiment={path.stem}", *variant])
                unread &= set(unread_settings(cfg, sorted(unread)))
                if not unread:
                    break
            assert not unread, f"{path.name}: {sorted(unread)}"


# -- command lines refused: (case, arguments, the start of the line) -------------------------
PREFIX = ["allocator=paged_prefix"]
REFUSED = [
    # the examples
    ("sjf-error-under-fcfs", ["engine.sjf_error=0.3"], "engine.sjf_error=0.3 would be ignored: engine.policy=fcfs"),
    ("arrival-order-under-swap", ["engine.preemption=swap", "engine.keep_arrival_order=false"],
     "engine.keep_arrival_order=false would be ignored"),
    ("checkpoint-without-state-layers", ["allocator=hybrid_prefix", "allocator.state_checkpoint_every=16"],
     "allocator.state_checkpoint_every=16 would be ignored: model opt-13b has no state layers"),
    ("offload-policy-without-tier", ["offload.policy=arc"], "offload.policy=arc would be ignored: offload=none"),
    ("host-bytes-under-multiple", [*PREFIX, "offload=host", "offload.host_bytes=0"],
     "offload.host_bytes=0 would be ignored: offload.host_gpu_multiple=2"),
    ("host-multiple-rounds-to-nothing", [*PREFIX, "offload=host_disk", "offload.host_gpu_multiple=1e-9"],
     "offload.host_gpu_multiple=1e-09 makes a host tier of 12 bytes"),
    ("eviction-null", [*PREFIX, "allocator.eviction=null"], "allocator.eviction must be one of lru"),
    # the same class, other knobs
    ("burstiness-at-rate-inf", ["workload.burstiness=0.5"], "workload.burstiness=0.5 would be ignored"),
    ("fixed-length-under-uniform", ["workload.distribution=uniform", "workload.prompt_len=64"],
     "workload.prompt_len=64 would be ignored: workload.distribution=uniform"),
    ("lognormal-mean-under-fixed", ["workload.prompt_mean=200"], "workload.prompt_mean=200 would be ignored"),
    ("synthetic-length-on-sharegpt-base", ["workload=shared_prefix", "workload.output_len=64"],
     "workload.output_len=64 would be ignored: workload.base=sharegpt"),
    ("double-chunk-under-max", ["allocator=contiguous", "allocator.double_chunk=32"],
     "allocator.double_chunk=32 would be ignored: allocator.reserve=max"),
    ("split-len-with-ratios", ["allocator=hybrid_static", "model=gemma-2-2b", "allocator.ratios=[1,1]",
                               "allocator.split_len=512"], "allocator.split_len=512 would be ignored"),
    ("aging-under-fcfs", ["engine.max_wait_s=5"], "engine.max_wait_s=5 would be ignored: engine.policy=fcfs"),
    ("floor-constant-under-roofline", ["gpu.fixed_floor.gemm_eff_max=0.5"],
     "gpu.fixed_floor.gemm_eff_max=0.5 would be ignored: gpu.op_model=roofline"),
    ("roofline-constant-under-floor", ["gpu.op_model=fixed_floor", "gpu.gemm_eff_max=0.5"],
     "gpu.gemm_eff_max=0.5 would be ignored: gpu.op_model=fixed_floor"),
    ("allreduce-table-on-one-gpu", ["gpu.allreduce_table=a100_dgx"],
     "gpu.allreduce_table=a100_dgx would be ignored: gpu.count=1"),
    ("allreduce-formula-under-table", ["gpu.count=4", "gpu.allreduce_latency_s=1e-5"],
     "gpu.allreduce_latency_s=1e-05 would be ignored: gpu.allreduce_table=a100_dgx"),
    ("tpot-of-dependent-turns", ["workload=multiturn", "workload.expected_tpot_s=0.1"],
     "workload.expected_tpot_s=0.1 would be ignored: workload.dependent=true"),
    ("disk-latency-without-disk", ["system.disk_latency_s=0.001"], "system.disk_latency_s=0.001 would be ignored"),
    ("offload-link-without-tier", ["gpu.offload_link=pcie-gen5-x16"], "gpu.offload_link=pcie-gen5-x16 would be ignored"),
    ("weights-on-sim", ["model.load=pretrained"], "model.load=pretrained would be ignored: backend=sim"),
    ("disk-policy-without-disk", [*PREFIX, "offload=host", "offload.disk_policy=arc"],
     "offload.disk_policy=arc would be ignored: offload=host keeps no disk tier"),
    ("store-order-without-tier", ["offload.store_order=tail_first"], "offload.store_order=tail_first would be ignored"),
    ("disk-rounds-to-nothing", [*PREFIX, "offload=host_disk", "offload.disk_bytes=100"],
     "offload.disk_bytes=100 is less than one chunk"),
    ("host-bytes-round-to-nothing", [*PREFIX, "offload=host", "offload.host_gpu_multiple=null", "offload.host_bytes=100"],
     "offload.host_bytes=100 is less than one chunk"),
    ("top-p-when-greedy", ["backend=hf", "model=tiny-llama", "backend.top_p=0.9"],
     "backend.top_p=0.9 would be ignored: backend.temperature=0"),
    ("host-cost-on-wall-clock", ["backend=hf", "model=tiny-llama", "system.step_overhead_s=0.001"],
     "system.step_overhead_s=0.001 would be ignored"),
    ("sweep-every-job-ignores", ["-m", "engine.policy=fcfs,lpm", "engine.sjf_error=0.3"],
     "engine.sjf_error=0.3 would be ignored"),
]


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}


@pytest.mark.parametrize("case,args,line", REFUSED, ids=[c for c, _, _ in REFUSED])
def test_kvbench_refuses_in_one_line_and_writes_nothing(case, args, line, tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run([str(BIN / "kvbench"), *args, f"results_dir={results}"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and line in lines[0], proc.stderr
    assert not proc.stdout.strip()
    assert not results.exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args", [["offload.policy=arc"], ["engine.preemption=swap", "engine.keep_arrival_order=false"],
                                  [*PREFIX, "offload=host_disk", "offload.host_gpu_multiple=1e-9"]],
                         ids=["offload-policy", "arrival-order", "tier-rounds-to-nothing"])
def test_capacity_refuses_the_same(args, tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run([str(BIN / "kvbench-capacity"), *args, f"results_dir={results}",
                           "--slo", "p99_ttft_ms=5000"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "kvbench-capacity: error: " in lines[0], proc.stderr
    assert not results.exists()


ACCEPTED = [
    ["engine.policy=sjf", "engine.sjf_error=0.3"],
    ["engine.policy=sjf", "engine.preemption=swap", "engine.keep_arrival_order=false"],
    ["engine.keep_arrival_order=false"],
    ["-m", "engine.policy=fcfs,sjf", "engine.sjf_error=0.3"],  # the sjf job reads it
    [*PREFIX, "offload=host", "offload.policy=arc"],
    [*PREFIX, "offload=host_disk", "offload.disk_policy=arc"],
    [*PREFIX, "offload=host", "offload.host_gpu_multiple=null", "offload.host_bytes=2e9"],
    ["workload.request_rate=2", "workload.burstiness=0.5"],
    ["workload.distribution=lognormal", "workload.prompt_mean=200"],
    ["allocator=contiguous", "allocator.reserve=double", "allocator.double_chunk=32"],
    ["gpu.count=4", "gpu.allreduce_table=null", "gpu.allreduce_latency_s=1e-5"],
    ["allocator=hybrid_static", "model=gemma-2-2b", "allocator.split_len=512"],
    ["offload.host_gpu_multiple=null"],  # null: nothing to act
]


@pytest.mark.parametrize("args", ACCEPTED, ids=[" ".join(a) or "defaults" for a in ACCEPTED])
def test_settings_that_act_still_pass(args, tmp_path):
    assert precheck([*args, f"results_dir={tmp_path / 'results'}"]) is None
    assert not (tmp_path / "results").exists()
