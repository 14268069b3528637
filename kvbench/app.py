"""The `kvbench` Hydra app: a thin ``@hydra.main`` over a plain ``run(cfg) -> summary``.

Bad config (a wrong key or value) prints one line and exits 2 before anything is written: the
command line is composed and checked with Hydra's compose API before the Hydra app starts, every
job of a sweep included (knobs, paths, the results dir, the workload itself).

Every run gets its own directory named by its run_id (``<results_dir>/runs/<experiment>/<run_id>``;
a sweep's jobs under ``<experiment>/<sweep id>/<run_id>``), ids being ``YYYYmmdd-HHMMSS-<8 hex>``.
A run is finished when its ``summary.json`` exists: it is written last, after the data files, and
the index row right after it, with SIGINT/SIGTERM held back for that step. A run that fails or is
interrupted before that removes what it wrote (exit 2 for bad input, 130 for SIGINT, 143 for
SIGTERM; ``kvbench/rundir.py`` says what it may remove, ``kvbench/signals.py`` where signals
land); one killed outright leaves a directory without ``summary.json``, which readers ignore
and ``kvbench-results --clean`` removes.
"""
from __future__ import annotations

import sys

if __name__ == "__main__" or sys.argv[0].endswith("/kvbench"):  # the kvbench process: before the imports
    from kvbench.signals import install_startup_handlers

    install_startup_handlers()

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from allocators import AllocatorError, build as build_allocator
from kvbench.config import CONF_DIR, ConfigError, validate
from kvbench.engine import Engine, SchedulerConfig
from kvbench.engine.policies import scheduler_class
from kvbench.engine.policy_checks import check_priorities, policy_knobs
from kvbench.geometry import KVGeometry
from kvbench import signals
from kvbench.rundir import discard, discard_sweep, hold_run_lock
from kvbench.signals import Terminated
from kvbench.provenance import provenance

KVBENCH_ERRORS: tuple[type[Exception], ...] = (ConfigError, AllocatorError)


def _errors() -> tuple[type[Exception], ...]:
    from kvbench.workloads import WorkloadError

    return KVBENCH_ERRORS + (WorkloadError,)


@dataclass
class Prepared:
    geometry: KVGeometry
    kv_bytes: int
    num_slots: int
    allocator: object
    workload: object
    executor: object
    device: str
    gpu_profile: str | None


def _kv_bytes(cfg: DictConfig) -> tuple[int, str, str | None]:
    """KV memory in bytes, the device, and the GPU profile name (sim) for this run."""
    eng = cfg.engine
    if cfg.backend.name == "sim":
        from kvbench.sim.cost_model import kv_cache_bytes

        if eng.kv_cache_bytes is not None:
            kv = int(eng.kv_cache_bytes)
        else:
            try:
                kv = int(kv_cache_bytes(cfg.model, cfg.gpu, eng.gpu_memory_utilization))
            except ValueError as exc:
                raise ConfigError(f"model {cfg.model.name} on gpu {cfg.gpu.name}: {exc}") from None
        return kv, "sim", str(cfg.gpu.name)
    from kvbench.executors.hf import resolve_device, default_kv_cache_bytes

    device = resolve_device(eng.device)
    kv = int(eng.kv_cache_bytes) if eng.kv_cache_bytes is not None else int(default_kv_cache_bytes(cfg, device))
    return kv, device, None


def _allocator(cfg: DictConfig, geometry: KVGeometry, kv_bytes: int):
    """The run's pool size in slots (a whole number of blocks) and its allocator."""
    block_size = cfg.allocator.get("block_size") or 1
    num_slots = geometry.slots_for(kv_bytes)
    if isinstance(block_size, int) and block_size > 0:
        if num_slots < block_size:
            raise ConfigError(f"engine.kv_cache_bytes: {kv_bytes} bytes hold {num_slots} slots of {cfg.model.name} "
                              f"({geometry.bytes_per_slot} bytes each), less than one block of {block_size}")
        num_slots = num_slots // block_size * block_size
    knobs = {k: v for k, v in OmegaConf.to_container(cfg.allocator).items() if k != "name" and v is not None}
    if cfg.allocator.name in ("contiguous", "buddy"):
        knobs.setdefault("max_model_len", int(cfg.model.max_model_len))
    if cfg.allocator.name == "vattention":  # one token of one layer's K (or V) tensor
        knobs.setdefault("token_bytes", geometry.num_kv_heads * geometry.head_size * geometry.dtype_bytes)
    if cfg.allocator.name == "paged_window":
        _window_knob(cfg, geometry, knobs)
    from kvbench.group_knobs import group_knobs

    group_knobs(cfg, geometry, knobs)
    from kvbench.peers import PEERS, build_peer
    build = build_peer if cfg.allocator.name in PEERS else build_allocator
    try:
        allocator = build(cfg.allocator.name, num_slots, debug=bool(cfg.engine.debug), **knobs)
    except AllocatorError as exc:
        raise ConfigError(f"allocator ({cfg.allocator.name}): {exc}") from None
    return num_slots, allocator


def _window_knob(cfg: DictConfig, geometry: KVGeometry, knobs: dict) -> None:
    """paged_window: the window defaults to the model's (every layer must slide); sim only,
    recompute preemption only (swap and the hf attention read every block-table entry)."""
    if cfg.backend.name != "sim":
        raise ConfigError("allocator paged_window runs on backend=sim only (the hf attention reads dropped blocks)")
    if str(cfg.engine.preemption) != "recompute":
        raise ConfigError("allocator paged_window needs engine.preemption=recompute (swap copies dropped blocks)")
    if "window" not in knobs:
        if geometry.max_window is None:
            raise ConfigError(f"allocator paged_window: model {cfg.model.name} does not slide on every layer; "
                              "set allocator.window explicitly")
        knobs["window"] = geometry.max_window


def prepare(cfg: DictConfig) -> Prepared:
    """Everything a run needs, built and checked; raises a kvbench error on bad input."""
    validate(cfg)
    geometry = KVGeometry.from_model_cfg(cfg.model)
    kv_bytes, device, gpu_profile = _kv_bytes(cfg)
    num_slots, allocator = _allocator(cfg, geometry, kv_bytes)
    workload = _workload(cfg)
    check_priorities(cfg, workload.requests)
    if cfg.backend.name == "sim":
        from kvbench.executors.sim import SimExecutor

        executor = SimExecutor(cfg.model, cfg.gpu, seed=int(cfg.seed), system_cfg=cfg.get("system"))
    else:
        from kvbench.executors.hf import HFExecutor

        executor = HFExecutor(cfg.model, cfg.engine, num_slots=num_slots, block_size=allocator.block_size,
                              device=device, seed=int(cfg.seed), backend_cfg=cfg.backend, gpu_cfg=cfg.gpu,
                              system_cfg=cfg.get("system"))
        if executor.cost is not None:
            gpu_profile = str(cfg.gpu.name)  # the profile that times the steps
    return Prepared(geometry, num_slots * geometry.bytes_per_slot, num_slots, allocator, workload,
                    executor, device, gpu_profile)


_WORKLOADS: dict[str, object] = {}  # built by the pre-check, reused by the run in the same process


def _workload(cfg: DictConfig):
    """The run's request stream; built once per process for the same workload and model limits."""
    from kvbench.workloads import build_workload

    key = repr((OmegaConf.to_container(cfg.workload, resolve=True), int(cfg.model.vocab_size),
                int(cfg.model.max_model_len), cfg.model.get("tokenizer")))
    if key not in _WORKLOADS:
        _WORKLOADS.clear()
        _WORKLOADS[key] = build_workload(cfg.workload, vocab_size=int(cfg.model.vocab_size),
                                         max_model_len=int(cfg.model.max_model_len),
                                         tokenizer_name=cfg.model.get("tokenizer"))
    return _WORKLOADS[key]


def _identity(cfg: DictConfig, prep: Prepared, run_id: str) -> dict:
    from kvbench.naming import allocator_label, hydra_choice

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
        "seed": int(cfg.seed),
    }


def new_run_id() -> str:
    """A run id that no other run gets: the time to the second and 32 random bits."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]


PINNED_IDS: dict[str, str] = {}  # the ids of the kvbench process's run and sweep dirs (main sets them)


def _id_resolver(key: str = "") -> str:
    return PINNED_IDS.get(key) or new_run_id()


# ``${kvbench_id:run}`` in conf/config.yaml: cached per config, so every read of hydra.run.dir
# gives the same id; Hydra copies the cache into each sweep job's config, hence one sweep dir.
# ``main`` pins the run and sweep ids so that the pre-check checks the very dirs Hydra creates.
OmegaConf.register_new_resolver("kvbench_id", _id_resolver, use_cache=True, replace=True)


def run(cfg: DictConfig, run_dir: str | Path | None = None, logger=None, run_id: str | None = None) -> dict:
    """One run: build, simulate or execute, write results; returns the summary row."""
    from kvbench.naming import granularity
    from kvbench.results import write_run

    prep = prepare(cfg)
    requests = prep.workload.requests
    run_id = run_id or new_run_id()
    eng = cfg.engine
    sched_cfg = SchedulerConfig(
        max_num_batched_tokens=int(eng.max_num_batched_tokens),
        max_num_seqs=int(eng.max_num_seqs),
        chunked_prefill=bool(eng.chunked_prefill),
        preemption=str(eng.preemption),
        swap_slots=int(float(eng.swap_space_bytes or 0) // prep.geometry.bytes_per_slot),
        max_model_len=int(cfg.model.max_model_len),
        stop_token_ids=_stop_token_ids(cfg, prep),
        **policy_knobs(cfg),
    )
    progress = _progress_bar(cfg, len(requests), _job_label(cfg))
    wall0 = time.perf_counter()
    try:
        engine = Engine(prep.allocator, prep.executor, sched_cfg, max_steps=eng.get("max_steps"),
                        progress=progress.update_to if progress else None,
                        memmap_every=int(eng.get("memmap_every") or 0),
                        scheduler_cls=scheduler_class(_scheduling(cfg), str(eng.get("batching", "continuous"))),
                        max_concurrency=cfg.workload.get("max_concurrency"))
        out = engine.run(requests)
    finally:
        if progress:
            progress.close()
    summary = _identity(cfg, prep, run_id) | out.summary | _serving(cfg, out) | _extras(cfg, prep, out)
    summary["granularity"] = granularity(summary)
    summary["wall_s"] = time.perf_counter() - wall0
    summary |= provenance()
    run_dir = Path(run_dir) if run_dir is not None else Path(cfg.results_dir) / "runs" / str(cfg.experiment_name) / run_id
    index = Path(cfg.results_dir) / "index.jsonl"
    if out.memmap is not None:
        _save_npz(run_dir / "memmap.npz", out.memmap)
    with signals.held():
        write_run(run_dir, summary, out.steps, out.requests, index)
    if logger is not None:
        _log(logger, summary, out, run_dir)
    return summary


def _length_stats(requests) -> dict:
    """Mean and median prompt and output lengths of the stream, printed next to each study."""
    import numpy as np

    if not requests:
        return {}
    prompt = np.array([r.prompt_len for r in requests])
    output = np.array([r.output_len for r in requests])
    return {"mean_prompt_len": float(prompt.mean()), "median_prompt_len": float(np.median(prompt)),
            "mean_output_len": float(output.mean()), "median_output_len": float(np.median(output))}


def _trace_stats(workload) -> dict:
    """Arrival burstiness of the stream, and what a replayed trace did with its data."""
    from kvbench.workloads.traces import interarrival_cv

    meta = workload.meta
    return {"arrival_cv": interarrival_cv([r.arrival_s for r in workload.requests]),
            "trace_reuse_ceiling": meta.get("trace_reuse_ceiling"),  # hashed traces: an infinite cache's hit rate
            "overlong": meta.get("overlong"),  # replayed traces: refuse | clip requests longer than the model
            "num_refused_overlong": meta.get("num_refused_overlong"),
            "time_scale": meta.get("time_scale")}


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
    from kvbench.metrics import parse_goodput, parse_percentiles, serving_metrics

    metrics = cfg.get("metrics") or {}
    return serving_metrics(out.requests, out.summary["duration_s"],
                           percentiles=parse_percentiles(metrics.get("percentiles")),
                           goodput=parse_goodput(metrics.get("goodput")))


def _extras(cfg: DictConfig, prep: Prepared, out) -> dict:
    """Knobs and timing splits beyond the design's columns, for the studies and figures."""
    wl, eng = cfg.workload, cfg.engine
    steps, reqs = out.steps, out.requests
    done = reqs[reqs["status"] == "finished"] if len(reqs) else reqs
    # tokens the engine generated: every sample and every beam runs to the output length
    generated = float((done["output_len"] * done[["n", "beam_width"]].max(axis=1)).sum()) if len(done) else 0.0
    extras = {
        **_length_stats(prep.workload.requests),
        "max_concurrency": wl.get("max_concurrency"),
        "burstiness": float(wl.get("burstiness", 1.0)),
        "n": int(wl.get("n", 1)),
        "beam_width": int(wl.get("beam_width", 1)),
        "ignore_eos": bool(wl.get("ignore_eos", True)),
        "prefix_len": int(wl.prefix_len) if wl.get("prefix_len") is not None else None,
        "preemption": str(eng.preemption),
        "chunked_prefill": bool(eng.chunked_prefill),
        "system": str(cfg.system.name) if cfg.get("system") is not None else None,
        "scheduling": _scheduling(cfg),
        "batching": str(eng.get("batching", "continuous")),
        "baseline": cfg.get("baseline"),
        "max_num_batched_tokens": int(eng.max_num_batched_tokens),
        "attention": getattr(getattr(prep.executor, "ops", None), "name", None),  # resolved (hf only)
        "gpu_count": int(cfg.gpu.get("count", 1)) if cfg.backend.name == "sim" else None,
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
                "window_freed_slots"):
        extras[key] = stats.get(key)
    for key in ("attention_s", "forward_s", "sampling_s", "copy_s", "swap_s", "schedule_s"):
        total = float(steps[key].sum()) if key in steps and len(steps) else float("nan")
        extras[f"{key}_per_token"] = total / generated if generated and total == total else None
    return extras


def _save_npz(path: Path, arrays: dict) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _log(logger, summary: dict, out, run_dir: Path) -> None:
    from kvbench.run_figures import memory_over_time

    for row in out.steps.to_dict("records"):
        logger.log_step(int(row["step"]), row)
    logger.log_summary(summary)
    logger.log_requests(out.requests)
    logger.log_figures([memory_over_time(out.steps, run_dir / "figures" / "memory_over_time.png",
                                         title=f"{summary['allocator_label']} / {summary['workload']}")])


def _job_label(cfg: DictConfig) -> str:
    """The progress bar's label: a sweep job's overrides, else the allocator's label."""
    from kvbench.naming import allocator_label, hydra_choice

    try:
        from hydra.core.hydra_config import HydraConfig

        job = HydraConfig.get().job.override_dirname
    except ValueError:
        job = ""
    return job or allocator_label(str(cfg.allocator.name), cfg.allocator.get("reserve"), hydra_choice())


def _progress_bar(cfg: DictConfig, total: int, desc: str):
    """The run's progress bar (``kvbench.progress``), or None: progress=false, no terminal, CI."""
    from kvbench.progress import RunProgress, wanted

    return RunProgress(total, desc) if wanted(cfg.get("progress", True)) else None


SHOW_COLUMNS = ("allocator_label", "reserve", "granularity", "workload", "num_finished", "num_rejected",
                "mean_batch_size", "request_throughput", "normalized_latency_s", "mem_token_frac",
                "mem_reserved_frac", "mem_internal_frac", "mem_external_frac", "mem_cached_frac", "num_preemptions")


def format_table(rows: list[dict], columns=SHOW_COLUMNS) -> str:
    """One row per run; ``-`` where a column does not apply."""
    import pandas as pd

    from kvbench.naming import cell

    frame = pd.DataFrame(rows)
    cols = [c for c in columns if c in frame.columns]
    return frame[cols].astype(object).map(cell).to_string(index=False)


# -- command line ------------------------------------------------------------------------------
def _split_argv(argv: list[str]) -> tuple[list[str], bool, bool]:
    """Overrides, whether it is a multirun, and whether to skip the pre-check (help, --cfg, --info:
    nothing runs). Hydra's own parser reads the flags, abbreviations (``--multir``) included; a
    flag it refuses raises ConfigError."""
    from hydra._internal.utils import get_args_parser

    if any(a.startswith("--v") and "--version".startswith(a.split("=", 1)[0]) for a in argv):
        return [], False, True
    parser = get_args_parser()

    def refuse(message: str) -> None:
        raise ConfigError(f"command line: {message}")

    parser.error = refuse  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    skip = bool(args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                or args.experimental_rerun)
    return list(args.overrides), bool(args.multirun), skip


def _job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra.core.override_parser.types import ValueType

    # the basic sweeper's own expansion for what it can expand; an interval (Optuna, Ax,
    # Nevergrad) is left to the sweeper and each of its jobs validates itself before it runs
    expandable = (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP, ValueType.GLOB_CHOICE_SWEEP,
                  ValueType.RANGE_SWEEP)
    parsed = [o for o in OverridesParser.create().parse_overrides(overrides)
              if not o.is_sweep_override() or o.value_type in expandable]
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    return jobs or [[]]


def check_job(cfg: DictConfig) -> None:
    """Every check of one composed job that needs no model weights: raises a kvbench error."""
    from kvbench.resultsdir import check_results_dir

    validate(cfg)
    check_results_dir(Path(cfg.results_dir))
    if cfg.backend.name == "sim":
        _allocator(cfg, KVGeometry.from_model_cfg(cfg.model), _kv_bytes(cfg)[0])
    else:
        _check_hf(cfg)
    from kvbench.validate import check_activation, check_dataset, check_servable

    check_activation(cfg)
    workload = _workload(cfg)
    check_dataset(cfg, workload)
    check_servable(cfg, workload.requests)
    check_priorities(cfg, workload.requests)


def check_composed(cfg: DictConfig, base: DictConfig) -> None:
    """One job's checks: every knob keeps the kind of its default in ``base`` (the job's group
    choices alone, ``kvbench.knob_types``), then ``check_job``."""
    from kvbench.knob_types import check_knob_types
    from kvbench.sweeper_checks import check_objective

    check_knob_types(cfg, base)
    check_objective(cfg, required=False)
    check_job(cfg)


def _check_hf(cfg: DictConfig) -> None:
    """The hf backend's device, attention path and explicit KV size, before any model is built."""
    from kvbench.executors.hf import resolve_device

    from kvbench.hf.model import FAMILIES

    if cfg.model.family not in FAMILIES:
        raise ConfigError(f"model.family must be one of {', '.join(FAMILIES)} on backend=hf; got {cfg.model.family!r}")
    device = resolve_device(cfg.engine.device)
    if cfg.engine.attention == "triton" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError("engine.attention=triton needs a CUDA device (or TRITON_INTERPRET=1 on the CPU); "
                          "use auto or torch")
    kv = cfg.engine.kv_cache_bytes
    if kv is not None and device == "cpu":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if kv > ram:
            raise ConfigError(f"engine.kv_cache_bytes: {kv:.4g} bytes is more than this machine's memory "
                              f"({ram / 2**30:.1f} GiB)")
    if kv is not None:
        _allocator(cfg, KVGeometry.from_model_cfg(cfg.model), int(kv))


def precheck(argv: list[str]) -> str | None:
    """Compose and validate every job of the command line; the one-line error, or None."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from kvbench.knob_types import group_overrides
    from kvbench.sweeper_checks import check_launch

    try:
        overrides, multirun, skip = _split_argv(argv)
        if skip:
            return None
        jobs = _job_overrides(overrides, multirun)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            bases: dict[tuple[str, ...], DictConfig] = {}
            for num, job in enumerate(jobs):
                plain = [o for o in job if not o.lstrip("+~").startswith("hydra")]
                cfg = compose(config_name="config", overrides=plain)
                groups = tuple(group_overrides(plain))
                if groups not in bases:
                    bases[groups] = compose(config_name="config", overrides=list(groups))
                check_composed(cfg, bases[groups])
                if num == 0:
                    check_launch(compose, overrides, job, multirun)
            _plan_output_dirs(jobs, multirun)
    except _errors() as exc:
        return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    except (HydraException, ValueError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("To append")]
        cause = exc.__cause__
        msg = lines[0].rstrip(".") if lines else type(exc).__name__
        if len(lines) > 1 and lines[1].startswith("Available options"):
            options = [ln for ln in lines[2:] if not ln.startswith(("Config search path", "provider="))]
            msg += f"; {lines[1].rstrip(':').lower()}: {', '.join(options)}"
        if cause is not None and str(cause).splitlines():
            msg += ": " + str(cause).splitlines()[0]
        return msg
    except Exception as exc:  # a check that broke on a value no class foresaw: still one line
        text = str(exc).strip().splitlines()
        return f"the config could not be checked ({type(exc).__name__}: {text[0] if text else 'no detail'})"
    return None


_OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def _plan_output_dirs(jobs: list[list[str]], multirun: bool) -> None:
    """Check every job's run (or sweep) dir before Hydra writes anything; note the folder that
    cleanup must never remove (``KVBENCH_KEEP_DIR``, the deepest one that exists now)."""
    from hydra import compose

    from kvbench.rundir import KEEP_ENV, check_output_dirs, keep_dir_for

    seen: dict[tuple[str, ...], Path] = {}
    for job in jobs:
        path_keys = tuple(o for o in job if o.lstrip("+~").split("=", 1)[0] in
                          (*_OUTPUT_KEYS, "results_dir", "experiment_name", "experiment"))
        if path_keys not in seen:
            cfg = compose(config_name="config", overrides=[o for o in job if not o.startswith("hydra")
                                                           or o.split("=", 1)[0] in _OUTPUT_KEYS],
                          return_hydra_config=True)
            seen[path_keys] = check_output_dirs(cfg, multirun)
    PLANNED.update(dirs=list(seen.values()), multirun=multirun)
    os.environ[KEEP_ENV] = str(keep_dir_for(PLANNED["dirs"][0]))


PLANNED: dict = {}  # the run dirs (single run) or sweep dirs that the pre-check checked, and the mode


def _run_dir_and_id(hc) -> tuple[Path, str]:
    """The job's directory (Hydra made it) and its run_id, the directory's name when it is one."""
    run_dir = Path(hc.runtime.output_dir)
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"hydra.run.dir: {run_dir} already holds a finished run; give a new directory")
    return run_dir, run_dir.name if _looks_like_run_id(run_dir.name) else new_run_id()


def _looks_like_run_id(name: str) -> bool:
    parts = name.split("-")
    return len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() and len(parts[2]) == 8


def _hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    worker = signals.is_launcher_worker()
    run_dir = Path(hc.runtime.output_dir)
    try:
        with signals.job_running():
            if worker:  # a joblib process: clean up on SIGTERM, and stop once the kvbench process is gone
                signals.install_run_handlers()
                signals.watch_parent()
                if signals.orphaned():
                    raise Terminated()
            return _job(cfg, hc, run_dir, worker)
    finally:
        if worker and signals.orphaned():  # nobody waits for this worker any more
            discard(run_dir)
            os._exit(signals.EXIT_CODES[signal.SIGTERM])


def _job(cfg: DictConfig, hc, run_dir: Path, worker: bool) -> float | None:
    """One job of ``_hydra_main``, from the run lock to its table."""
    from hydra.types import RunMode

    multirun = hc.mode == RunMode.MULTIRUN
    logger = None
    lock = None
    try:
        run_dir, run_id = _run_dir_and_id(hc)
        lock = hold_run_lock(run_dir, run_id)
        if cfg.logger.name != "none":
            check_job(cfg)  # the workload and pool before the logger makes anything
            from kvbench.loggers import build_logger

            logger = build_logger(cfg.logger)
            group = cfg.logger.get("group") or (f"{cfg.experiment_name}-{Path(hc.sweep.dir).name}" if multirun else str(cfg.experiment_name))
            tags = [f"experiment={cfg.experiment_name}"]
            logger.start(OmegaConf.to_container(cfg, resolve=True), run_id=run_id,
                         name=None, group=group, tags=tags, run_dir=run_dir)
        summary = run(cfg, run_dir=run_dir, logger=logger, run_id=run_id)
    except (KeyboardInterrupt, Terminated) as exc:
        _finish_logger(logger, 1)
        logger = None
        kept = discard(run_dir)
        if multirun and not worker:
            raise  # the basic launcher: the multirun ends, main removes what its other jobs left
        if not worker:  # a worker's parent prints the one line for the whole multirun
            print(f"kvbench: {signals.what(exc)}; {kept}", file=sys.stderr)
        sys.exit(signals.exit_code(exc))
    except Exception as exc:  # one line, never a traceback (KVBENCH_TRACEBACK=1 shows it)
        _finish_logger(logger, 1)
        logger = None
        kept = discard(run_dir)
        if os.environ.get("KVBENCH_TRACEBACK") == "1":
            raise
        line = error_line(exc)
        if multirun:  # this job fails; the sweeper goes on with the others (kvbench.jobresult)
            return job_failed(hc, line)
        code = 2 if isinstance(exc, _errors() + (OSError,)) else 1
        print(f"kvbench: error: {line}; {kept}", file=sys.stderr)
        sys.exit(code)
    except BaseException:
        _finish_logger(logger, 1)
        logger = None
        discard(run_dir)
        raise
    finally:
        _finish_logger(logger, 0)
        if lock is not None:
            lock.close()
            if (run_dir / "summary.json").exists():
                (run_dir / ".running").unlink(missing_ok=True)
    log = logging.getLogger("kvbench")  # Hydra sends it to the console and the run's app.log
    log.info("\n%s", format_table([summary]))
    nothing_served = _nothing_served(summary, run_dir)
    if nothing_served:
        print(f"kvbench: error: {nothing_served}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
    metrics = cfg.get("metrics") or {}
    if metrics.get("report"):
        from kvbench.metrics import format_report, parse_percentiles

        log.info("\n%s", format_report(summary, parse_percentiles(metrics.get("percentiles"))))
    log.info("results: %s", run_dir)
    return _objective(summary, cfg, hc)


def _nothing_served(summary: dict, run_dir: Path) -> str | None:
    """The loud line of a run that finished no request (it exits 2; its files stay, for the reasons)."""
    if summary.get("num_finished") or not summary.get("num_rejected"):
        return None
    reason = ""
    try:
        import pandas as pd

        reasons = pd.read_parquet(run_dir / "requests.parquet", columns=["reason"])["reason"].dropna()
        reason = f" (first reason: {reasons.iloc[0]})" if len(reasons) else ""
    except (OSError, ValueError, KeyError, ImportError):
        pass
    return (f"all {summary['num_rejected']} requests were rejected{reason}; the run measured nothing "
            f"(kept in {run_dir})")


def _objective(summary: dict, cfg: DictConfig, hc):
    """The sweeper's value of this run: its optimized_metric; NaN where the run has none, or under
    Optuna a JobFailed (a NaN would make optuna 2.x raise and end the study)."""
    from kvbench.jobresult import JobFailed

    metric = str(cfg.get("optimized_metric") or "request_throughput")
    value = summary.get(metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    if "optuna" in str(hc.sweeper.get("_target_", "")).lower():
        return JobFailed(f"the run reports no {metric}", str(hc.job.override_dirname))
    return float("nan")


def error_line(exc: BaseException) -> str:
    """The first line of an error, its type where it has no text; names an unexpected type."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, _errors() + (OSError,)):
        return first or type(exc).__name__
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def job_failed(hc, line: str):
    """Report a failed sweep job in one line and return its JobFailed marker."""
    from kvbench.jobresult import JobFailed, record_failure

    overrides = str(hc.job.override_dirname)
    print(f"kvbench: error: job {hc.job.num} ({overrides or 'no overrides'}): {line}; nothing was kept",
          file=sys.stderr)
    record_failure(Path(hc.sweep.dir), int(hc.job.num), overrides, line)
    return JobFailed(line, overrides)


def _finish_logger(logger, exit_code: int) -> None:
    if logger is not None:
        logger.finish(exit_code=exit_code)


def main() -> None:
    signals.install_run_handlers()
    signals.mark_main_process()
    PINNED_IDS.update(run=new_run_id(), sweep=new_run_id())
    try:
        error = precheck(sys.argv[1:])
    except (KeyboardInterrupt, Terminated) as exc:
        print("kvbench: interrupted before the run started; nothing was written", file=sys.stderr)
        sys.exit(signals.exit_code(exc))
    if error:
        print(f"kvbench: error: {error}", file=sys.stderr)
        sys.exit(2)
    import hydra

    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what fails outside a job; one line below
    try:
        hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_hydra_main)()
    except (KeyboardInterrupt, Terminated) as exc:  # outside a job: Hydra's start-up, a multirun parent
        print(f"kvbench: {signals.what(exc)}; {_stop_and_clean()}", file=sys.stderr)
        sys.exit(signals.exit_code(exc))
    except Exception as exc:  # e.g. a full disk as Hydra writes the next job's .hydra/ files
        if os.environ.get("KVBENCH_TRACEBACK") == "1":
            raise
        print(f"kvbench: error: {error_line(exc)}; Hydra stopped here, finished runs are kept", file=sys.stderr)
        sys.exit(2 if isinstance(exc, _errors() + (OSError,)) else 1)
    finally:
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    from kvbench.jobresult import FailedJobs

    if FailedJobs.failed:
        sys.exit(1)


def _stop_and_clean() -> str:
    """After a signal outside a job: stop the launcher's workers, remove what unfinished jobs left."""
    with signals.held():
        stopped = signals.stop_children()
        if not PLANNED:
            return "nothing was kept"
        planned = PLANNED["dirs"][0]
        kept = discard_sweep(planned) if PLANNED["multirun"] else discard(planned)
    return f"{stopped} worker(s) stopped; {kept}" if stopped else kept


if __name__ == "__main__":
    main()
