"""One run, start to end: ``run(cfg)`` prepares it, runs the engine, builds the summary row,
writes the run's files and index row (signals held back), and hands them to the logger."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from kvbench.config.errors import ConfigError
from kvbench.config.seeds import seeds_used
from kvbench.config.spec import RunSpec
from kvbench.engine import Engine, SchedulerConfig
from kvbench.engine.policies import scheduler_class
from kvbench.engine.policy_checks import policy_knobs
from kvbench.engine.swap_space import HostTierSwap
from kvbench.metrics import DEFAULT_PERCENTILES, parse_goodput, parse_percentiles, serving_metrics
from kvbench.sim.offload import LoadCost
from kvbench.results.naming import allocator_label, granularity, hydra_choice
from kvbench.results.settings import excluded, record
from kvbench.results.store import write_run
from kvbench.run import signals
from kvbench.run.console import _job_label, _progress_bar
from kvbench.run.ids import new_run_id
from kvbench.run.prepare import Prepared, prepare
from kvbench.run.provenance import provenance
from kvbench.workloads.traces import interarrival_cv


def _identity(cfg: DictConfig, prep: Prepared, run_id: str) -> dict:
    alloc = cfg.allocator
    return {
        "run_id": run_id,
        "experiment": str(cfg.experiment_name),
        "allocator": str(alloc.name),
        "allocator_label": allocator_label(str(alloc.name), alloc.get("reserve"), hydra_choice(), alloc),
        "reserve": alloc.get("reserve"),
        "block_size": int(alloc.block_size) if alloc.get("block_size") is not None else (
            prep.allocator.block_size if alloc.name == "vattention" else None),  # vattention: auto
        "backend": str(cfg.backend.name),
        "device": prep.device,
        "gpu_profile": prep.gpu_profile,
        "model": str(cfg.model.name),
        "workload": prep.workload.name,
        "request_rate": float(prep.workload.request_rate),
        "num_requests": prep.workload.meta.get("num_turns", len(prep.workload.requests)),  # multiturn: turns
        "kv_slots": prep.num_slots,
        "kv_bytes": prep.kv_bytes,
        **seeds_used(cfg),  # seed, workload_seed: the seeds the run used (kvbench.config.seeds)
    }


def run(cfg: DictConfig, run_dir: str | Path | None = None, logger=None, run_id: str | None = None,
        spec: RunSpec | None = None) -> dict:
    """One run: build, simulate or execute, write results; returns the summary row. ``spec``: the
    job's run spec when its checks built it already (``kvbench.run.precheck.check_job``)."""
    prep = prepare(cfg, spec)
    requests = prep.workload.requests
    run_id = run_id or new_run_id()
    progress = _progress_bar(cfg, len(requests), _job_label(cfg))
    wall0 = time.perf_counter()
    try:
        engine = make_engine(cfg, prep, progress.update_to if progress else None)
        out = engine.run(requests)
    finally:
        if progress:
            progress.close()
    summary = _identity(cfg, prep, run_id) | out.summary | _serving(cfg, out) | _extras(cfg, prep, out)
    summary |= _offload_columns(cfg, prep, engine, out)  # not in the sim identity hashes (tests/sim_identity.py)
    if cfg.engine.get("debug"):
        check_reuse_ceiling(summary, len(requests))
    summary["granularity"] = granularity(summary)
    summary["wall_s"] = time.perf_counter() - wall0
    summary |= provenance()
    summary |= record(_resolved(cfg))  # every setting: cfg.<key> columns
    run_dir = Path(run_dir) if run_dir is not None else Path(cfg.results_dir) / "runs" / str(cfg.experiment_name) / run_id
    index = Path(cfg.results_dir) / "index.jsonl"
    if out.memmap is not None:
        _save_npz(run_dir / "memmap.npz", out.memmap)
    with signals.held():
        write_run(run_dir, summary, out.steps, out.requests, index)
    if logger is not None:
        _log(logger, summary, out, run_dir)
    return summary


def check_reuse_ceiling(summary: dict, num_requests: int) -> None:
    """No first-admission hit rate may pass the stream's reuse ceiling (an infinite cache hitting
    each request once) when every request was admitted; re-admissions after a preemption are
    counted apart (``preempted_*``) and may hit more."""
    ceiling, total = summary.get("trace_reuse_ceiling"), summary.get("tier_hit_rate_total")
    if ceiling is None or total is None or summary.get("prefix_requests") != num_requests:
        return
    assert total <= ceiling + 1e-12, f"first-admission token hit rate {total:.6f} passes the trace's reuse " \
                                     f"ceiling {ceiling:.6f}"


def _resolved(cfg: DictConfig) -> dict:
    """The config as plain values, interpolations resolved, without what the record leaves out (``hydra``,
    whose sweep paths resolve only inside a job)."""
    return {str(key): OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
            for key in cfg if not excluded(str(key)) for node in (cfg[key],)}


def _length_stats(requests) -> dict:
    """Mean and median prompt and output lengths of the stream, printed next to each study."""
    if not requests:
        return {}
    prompt = np.array([r.prompt_len for r in requests])
    output = np.array([r.output_len for r in requests])
    return {"mean_prompt_len": float(prompt.mean()), "median_prompt_len": float(np.median(prompt)),
            "mean_output_len": float(output.mean()), "median_output_len": float(np.median(output))}


def _trace_stats(workload) -> dict:
    """Arrival burstiness of the stream, and what a replayed trace did with its data."""
    meta = workload.meta
    return {"arrival_cv": interarrival_cv([r.arrival_s for r in workload.requests]),
            "trace_reuse_ceiling": meta.get("trace_reuse_ceiling"),  # hashed traces: an infinite cache's hit rate
            "overlong": meta.get("overlong"),  # replayed traces: refuse | clip requests longer than the model
            "num_refused_overlong": meta.get("num_refused_overlong"),
            "time_scale": meta.get("time_scale")}


def make_engine(cfg: DictConfig, prep: Prepared, progress=None) -> Engine:
    """The run's engine: its scheduler, policies, tiers and limits as the config says."""
    eng = cfg.engine
    sched_cfg = SchedulerConfig(**vars(prep.spec.scheduler), stop_token_ids=_stop_token_ids(cfg, prep),
                                **policy_knobs(cfg))
    return Engine(prep.allocator, prep.executor, sched_cfg, max_steps=eng.get("max_steps"), progress=progress,
                  memmap_every=int(eng.get("memmap_every") or 0),
                  scheduler_cls=scheduler_class(_scheduling(cfg), str(eng.get("batching", "continuous"))),
                  max_concurrency=prep.spec.workload.max_concurrency,
                  load_cost=LoadCost.from_configs(cfg) if _sim_tiers(cfg, prep) else None, tiers=prep.tiers,
                  swap_space=HostTierSwap(prep.tiers, prep.spec.geometry.bytes_per_slot)
                  if prep.tiers is not None else None)


def _scheduling(cfg: DictConfig) -> str:
    system = cfg.get("system")
    return str(system.get("scheduling", "mixed")) if system is not None else "mixed"


def _stop_token_ids(cfg: DictConfig, prep: Prepared) -> tuple[int, ...]:
    """EOS ids that end a sample: none unless workload.ignore_eos=false on hf. On sim no token is
    ever EOS: a workload's output length (ShareGPT's and Alpaca's are real replies, already ended
    by EOS) is where each sample stops, so ignore_eos changes nothing there."""
    ignore = cfg.workload.get("ignore_eos", True)
    if not isinstance(ignore, bool):
        raise ConfigError(f"workload.ignore_eos must be true or false; got {ignore!r}")
    if ignore or cfg.backend.name != "hf":
        return ()
    if int(cfg.workload.get("beam_width", 1)) > 1:
        raise ConfigError("workload.ignore_eos=false is not supported with beam search (beam_width > 1): "
                          "beams run to the output length")
    ids = prep.executor.stop_token_ids(cfg.model)
    if not ids:
        raise ConfigError(f"workload.ignore_eos=false but model {cfg.model.name} names no EOS token "
                          "(set model.eos_token_id; dummy weights have none)")
    return ids


def _serving(cfg: DictConfig, out) -> dict:
    """vLLM's serving metrics at the configured percentiles and goodput SLOs."""
    metrics = cfg.get("metrics") or {}
    percentiles, goodput = parse_percentiles(metrics.get("percentiles")), parse_goodput(metrics.get("goodput"))
    if percentiles == DEFAULT_PERCENTILES and not goodput and out.serving is not None:
        return out.serving  # the engine's summary computed these very metrics
    return serving_metrics(out.requests, out.summary["duration_s"], percentiles=percentiles, goodput=goodput)


def _offload_columns(cfg: DictConfig, prep: Prepared, engine: Engine, out) -> dict:
    """The tiers' settings, token hit rates per tier (gpu, host, disk) and in total, bytes moved each
    way, the host tier's bytes per category, load seconds on the critical path: in every summary.
    Without tiers the sizes are 0, the GPU and total rates the prefix cache's own (null where the
    allocator hashes no prefixes) and every host or disk figure null."""
    stats = prep.allocator.stats()
    tiers = prep.tiers
    if tiers is None:
        gpu_rate = stats.get("prefix_token_hit_rate")
        return {"offload": str(cfg.offload.name) if cfg.get("offload") is not None else "none",
                "offload_host_bytes": 0, "offload_disk_bytes": 0, "offload_block_tokens": None,
                "offload_policy": None, "offload_write": None, "offload_load": None, "offload_link": None,
                "offload_store_order": None,
                "tier_hit_rate_gpu": gpu_rate, "tier_hit_rate_host": None, "tier_hit_rate_disk": None,
                "tier_hit_rate_total": gpu_rate, "tier_recompute_tokens_saved": None,
                **_preempted_tier_rates(stats.get("preempted_prefix_token_hit_rate")),
                **{key: None for key in TIER_BYTE_COLUMNS}, "tier_load_s": None}
    slot_bytes = prep.spec.geometry.bytes_per_slot
    host_now = tiers.host_bytes_by_category()
    cols = {key: value for key, value in stats.items() if key.startswith(("tier_", "preempted_tier_"))}
    return cols | {
        "offload": str(cfg.offload.name),
        "offload_host_bytes": tiers.host.capacity_bytes,
        "offload_disk_bytes": tiers.disk.capacity_bytes if tiers.disk is not None else 0,
        "offload_block_tokens": tiers.chunk_tokens,
        "offload_policy": str(cfg.offload.policy),
        "offload_write": str(cfg.offload.write),
        "offload_load": str(cfg.offload.load),
        "offload_store_order": str(cfg.offload.get("store_order", "head_first")),
        "offload_link": str(cfg.gpu.offload_link) if cfg.gpu.get("offload_link") is not None else None,
        # swap preemption books its K/V in the host tier (kvbench/engine/swap_space.py)
        "tier_bytes_swap_out": out.swap_out_slots * slot_bytes,
        "tier_bytes_swap_in": out.swap_in_slots * slot_bytes,
        "tier_host_swap_bytes": host_now["swap"],  # at the end of the run, beside tier_host_used_bytes (cached)
        "tier_host_peak_cached_bytes": tiers.peak_host_bytes["cached"],
        "tier_host_peak_swap_bytes": tiers.peak_host_bytes["swap"],
        "tier_host_peak_bytes": tiers.peak_host_bytes["total"],
        "tier_load_s": engine.load_s if _sim_tiers(cfg, prep) else None,  # hf: measured in swap_s
    }


# a prefix cache's lookups, counted as vLLM v1 counts them (allocators.prefix_stats): first
# admissions (prefix_hit_rate, prefix_token_hit_rate) and, apart, re-admissions after a preemption
PREEMPTED_LOOKUP_COLUMNS = ("prefix_requests", "preempted_requests", "preempted_queries", "preempted_hits",
                            "preempted_prefix_hit_rate", "preempted_prefix_token_hit_rate")


def _preempted_tier_rates(gpu_rate: float | None) -> dict:
    """Without tiers: the re-admissions' GPU and total rates are the prefix cache's own."""
    return {"preempted_tier_hit_rate_gpu": gpu_rate, "preempted_tier_hit_rate_host": None,
            "preempted_tier_hit_rate_disk": None, "preempted_tier_hit_rate_total": gpu_rate}


def _sim_tiers(cfg: DictConfig, prep: Prepared) -> bool:
    """Tiers whose loads the cost model times (on hf the copies run and their wall time is measured)."""
    return prep.tiers is not None and cfg.backend.name == "sim"


# byte counts of the tiers: null in a summary without tiers
TIER_BYTE_COLUMNS = ("tier_bytes_gpu_to_host", "tier_bytes_host_to_gpu", "tier_bytes_host_to_disk",
                     "tier_bytes_disk_to_gpu", "tier_bytes_swap_out", "tier_bytes_swap_in",
                     "tier_host_evictions", "tier_host_used_bytes", "tier_disk_used_bytes", "tier_disk_evictions",
                     "tier_host_swap_bytes", "tier_host_peak_cached_bytes",
                     "tier_host_peak_swap_bytes", "tier_host_peak_bytes")


def _cost_fit_source(cfg: DictConfig) -> str | None:
    """The GPU profile whose operator fit timed a sim run (None on hf)."""
    if cfg.backend.name != "sim":
        return None
    from kvbench.sim.cost_model import cost_fit_source  # start-up time: the cost model's tables, sim only
    return cost_fit_source(cfg.gpu)


def _extras(cfg: DictConfig, prep: Prepared, out) -> dict:
    """Knobs and timing splits beyond the design's columns, for the studies and figures."""
    wl, eng = prep.spec.workload, cfg.engine
    steps, reqs = out.steps, out.requests
    done = reqs[reqs["status"] == "finished"] if len(reqs) else reqs
    # tokens the engine generated: every sample and every beam runs to the output length
    generated = float((done["output_len"] * done[["n", "beam_width"]].max(axis=1)).sum()) if len(done) else 0.0
    extras = {
        **_length_stats(prep.workload.requests),
        "max_concurrency": wl.max_concurrency,
        "burstiness": wl.burstiness,
        "n": wl.n,
        "beam_width": wl.beam_width,
        "ignore_eos": bool(cfg.workload.get("ignore_eos", True)),
        "prefix_len": wl.prefix_len,
        "preemption": str(eng.preemption),
        "chunked_prefill": bool(eng.chunked_prefill),
        "system": str(cfg.system.name) if cfg.get("system") is not None else None,
        "scheduling": _scheduling(cfg),
        "batching": str(eng.get("batching", "continuous")),
        "baseline": cfg.get("baseline"),
        "max_num_batched_tokens": int(eng.max_num_batched_tokens),
        "attention": getattr(getattr(prep.executor, "ops", None), "name", None),  # resolved (hf only)
        "gpu_count": int(cfg.gpu.get("count", 1)) if cfg.backend.name == "sim" else None,
        # the GPU profile whose operator fit timed the run (sim): its own, or the one it borrows
        "cost_fit_source": _cost_fit_source(cfg),
        # step times: measured (wall) or the cost model's (virtual; always so on sim)
        "clock": str(eng.get("clock", "wall")) if cfg.backend.name == "hf" else "virtual",
        "num_clipped": prep.workload.meta.get("clipped_to_context"),  # requests cut to fit the model
        "workload_pool": prep.workload.meta.get("pairs_after_filter"),  # distinct pairs drawn from (data)
        **_trace_stats(prep.workload),
        "num_steps": len(steps),
        "swap_out_slots": out.swap_out_slots,  # K/V slots copied to / from the host pool
        "swap_in_slots": out.swap_in_slots,
        "mean_step_s": float(steps["step_s"].mean()) if len(steps) else None,
        "page_bytes": cfg.allocator.get("page_bytes"),
    }
    stats = prep.allocator.stats()  # strategy counters over the run (None where they do not apply)
    for key in ("tokens_per_page", "page_maps", "page_unmaps", "evictions", "prefix_token_hit_rate",
                "window_freed_slots", *PREEMPTED_LOOKUP_COLUMNS):
        extras[key] = stats.get(key)
    for key in ("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s", "schedule_s"):
        total = float(steps[key].sum()) if key in steps and len(steps) else float("nan")
        extras[f"{key}_per_token"] = total / generated if generated and total == total else None
    return extras


def _save_npz(path: Path, arrays: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _log(logger, summary: dict, out, run_dir: Path) -> None:
    from kvbench.run.run_figures import memory_over_time  # start-up time: matplotlib, only with a logger

    for row in out.steps.to_dict("records"):
        logger.log_step(int(row["step"]), row)
    logger.log_summary(summary)
    logger.log_requests(out.requests)
    logger.log_figures([memory_over_time(out.steps, run_dir / "figures" / "memory_over_time.png",
                                         title=f"{summary['allocator_label']} / {summary['workload']}")])
