"""Census cases for "Hydra behaves as Hydra" (issue 31, part 2, and the launcher and config items of
part 3), written from classes, each with its right outcome:

- ``path``: the config search path: a user's own folder outside the checkout for every group,
  through ``--config-dir``/``-cd``, ``hydra.searchpath`` (command line or primary config),
  ``--config-name``/``-cn`` and ``--config-path``/``-cp``; and the ways each can be wrong;
- ``conflict``: two settings that decide the same thing (``kvbench.config.conflicts``);
- ``launcher``: launcher and sweeper settings, checked as the plugin reads them;
- ``extra``: an optional extra that is not installed here (Ray launcher, vLLM peers);
- ``struct``: a key its group lacks, named where it does exist;
- ``form``: the remaining config items of part 3 (a wrong family on the sim, the virtual clock).

``expect`` is ``ok`` (the pre-check passes), ``note`` (it passes and says which setting wins, the
line holding ``match``) or ``refuse`` (one line holding ``match``; exit 2 and nothing written).
``{dir}`` in an argument is the user's config folder that ``make_user_dir`` writes, ``{conf}``
the package's ``conf/``. ``classify`` counts an outcome as right, silent (a refusal due that did
not come), traceback, or lost (a right config refused: the run the user asked for is lost).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # path | conflict | launcher | extra | struct | form
    args: tuple[str, ...]
    expect: str  # ok | note | refuse
    match: str = ""


def make_user_dir(root: Path, conf: Path) -> Path:
    """A user's config folder outside the checkout: one option of every group, and primary configs."""
    def copy(src: str, dst: str, edit: dict[str, str]) -> None:
        text = (conf / src).read_text().splitlines()
        out = []
        for line in text:
            key = line.split(":", 1)[0]
            out.append(f"{key}: {edit.pop(key)}" if key in edit and not line.startswith(" ") else line)
        out += [f"{k}: {v}" for k, v in edit.items()]
        path = root / dst
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(out) + "\n")

    copy("gpu/a100-40gb.yaml", "gpu/mygpu.yaml", {"name": "mygpu", "memory_bytes": "34359738368"})
    copy("gpu/a100-40gb.yaml", "gpu/badgpu.yaml", {"name": "badgpu", "memory_bytes": "-1"})
    copy("model/opt-125m.yaml", "model/mymodel.yaml", {"name": "mymodel", "num_layers": "6"})
    copy("model/opt-125m.yaml", "model/badfamily.yaml", {"name": "badfamily", "family": "nope"})
    copy("workload/synthetic.yaml", "workload/mywl.yaml", {"num_requests": "7", "prompt_len": "64"})
    copy("workload/synthetic.yaml", "workload/badwl.yaml", {"num_requests": "0"})
    copy("allocator/paged.yaml", "allocator/myalloc.yaml", {"block_size": "32"})
    copy("engine/default.yaml", "engine/myengine.yaml", {"max_num_seqs": "64"})
    copy("engine/default.yaml", "engine/badengine.yaml", {"max_num_seqs": "0"})
    copy("system/modern.yaml", "system/mysystem.yaml", {})
    (root / "system/mysystem.yaml").write_text((root / "system/mysystem.yaml").read_text()
                                               .replace("name: modern", "name: mysystem"))
    (root / "experiment").mkdir(exist_ok=True)
    (root / "experiment/mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /gpu: mygpu\n  - override /model: mymodel\n"
        "experiment_name: mine\nworkload:\n  num_requests: 6\n")
    (root / "experiment/badexp.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /gpu: nosuchgpu\nexperiment_name: badexp\n")
    (root / "myconfig.yaml").write_text("defaults:\n  - config\n  - _self_\nseed: 3\n")
    (root / "withsp.yaml").write_text(f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n"
                                      f"    - file://{root}/extra\n")
    copy("gpu/h200.yaml", "extra/gpu/extragpu.yaml", {"name": "extragpu"})
    primary = root / "primary"
    primary.mkdir(exist_ok=True)
    (primary / "myprimary.yaml").write_text(f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n"
                                            f"    - file://{conf}\n    - file://{root}\n")
    shadow = root / "shadow" / "allocator"
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "paged.yaml").write_text("name: paged\nblock_size: 0\nreserve: null\n")
    (root / "notadir.yaml").write_text("x: 1\n")
    return root


SMALL = ("workload.num_requests=5",)


def _path_cases() -> list[Case]:
    ways = {"config-dir": ("--config-dir", "{dir}"), "cd": ("-cd", "{dir}"), "cd-eq": ("--config-dir={dir}",),
            "searchpath": ("hydra.searchpath=[file://{dir}]",)}
    choices = {"gpu": ("gpu=mygpu",), "model": ("model=mymodel",), "workload": ("workload=mywl",),
               "allocator": ("allocator=myalloc",), "engine": ("engine=myengine",),
               "experiment": ("experiment=mine",), "system": ("system=mysystem",)}
    cases = []
    for way, flag in ways.items():
        for group, choice in choices.items():
            small = () if group in ("workload", "experiment") else SMALL
            if way == "cd-eq" and group not in ("gpu", "experiment"):
                continue
            cases.append(Case(f"user-{group}-{way}", "path", (*flag, *choice, *small), "ok"))
    cases += [
        Case("user-two-groups-cd", "path", ("-cd", "{dir}", "gpu=mygpu", "model=mymodel", *SMALL), "ok"),
        Case("user-sweep-cd", "path", ("-m", "-cd", "{dir}", "gpu=mygpu,a100-40gb", *SMALL), "ok"),
        Case("user-sweep-searchpath", "path", ("-m", "hydra.searchpath=[file://{dir}]", "model=mymodel,opt-125m",
                                               *SMALL), "ok"),
        Case("user-primary-cd-cn", "path", ("-cd", "{dir}", "-cn", "myconfig", *SMALL), "ok"),
        Case("user-primary-searchpath-in-primary", "path", ("-cd", "{dir}", "-cn", "withsp", "gpu=extragpu",
                                                            *SMALL), "ok"),
        Case("user-primary-cp-searchpath", "path", ("-cp", "{dir}/primary", "-cn", "myprimary", "gpu=mygpu",
                                                    *SMALL), "ok"),
        Case("user-primary-config-path-long", "path", ("--config-path={dir}/primary", "--config-name=myprimary",
                                                       *SMALL), "ok"),
        Case("package-config-name-explicit", "path", ("-cn", "config", *SMALL), "ok"),
        Case("user-group-without-dir", "path", ("gpu=mygpu", *SMALL), "refuse", "Could not find 'gpu/mygpu'"),
        Case("config-dir-missing", "path", ("-cd", "{dir}/nope", "gpu=mygpu"), "refuse", "--config-dir"),
        Case("config-dir-is-a-file", "path", ("-cd", "{dir}/notadir.yaml"), "refuse", "--config-dir"),
        Case("config-name-missing", "path", ("-cn", "nope"), "refuse", "Cannot find primary config 'nope'"),
        Case("config-path-missing", "path", ("-cp", "{dir}/nope"), "refuse", "not found"),
        Case("config-path-without-package", "path", ("-cp", "{dir}", "gpu=mygpu"), "refuse",
             "Cannot find primary config 'config'"),
        Case("searchpath-missing-dir", "path", ("hydra.searchpath=[file://{dir}/nope]", "gpu=mygpu"), "refuse",
             "Could not find 'gpu/mygpu'"),
        Case("searchpath-not-a-list", "path", ("hydra.searchpath=abc",), "refuse", "hydra.searchpath must be a list"),
        Case("user-gpu-bad-value", "path", ("-cd", "{dir}", "gpu=badgpu"), "refuse", "gpu.memory_bytes"),
        Case("user-model-bad-family", "path", ("-cd", "{dir}", "model=badfamily"), "refuse", "model.family"),
        Case("user-workload-bad-value", "path", ("-cd", "{dir}", "workload=badwl"), "refuse", "workload.num_requests"),
        Case("user-engine-bad-value", "path", ("-cd", "{dir}", "engine=badengine"), "refuse", "engine.max_num_seqs"),
        Case("user-experiment-bad-choice", "path", ("-cd", "{dir}", "experiment=badexp"), "refuse",
             "Could not find 'gpu/nosuchgpu'"),
        # Hydra searches the primary folder (conf/) before --config-dir: the package's option wins
        Case("user-dir-same-name-as-package-option", "path", ("-cd", "{dir}/shadow", *SMALL), "ok"),
        Case("user-option-bad-override", "path", ("-cd", "{dir}", "gpu=mygpu", "gpu.count=0"), "refuse", "gpu.count"),
        Case("user-option-unknown-key", "path", ("-cd", "{dir}", "model=mymodel", "+model.nope=1"), "refuse",
             "model.nope"),
    ]
    return cases


def _conflict_cases() -> list[Case]:
    hf = ("backend=hf", "model=tiny-llama", "workload.num_requests=4", "workload.prompt_len=8",
          "workload.output_len=4")
    return [
        Case("count-and-duration", "conflict", ("workload.num_requests=50", "workload.duration_s=10",
                                                "workload.request_rate=2"), "refuse", "workload.num_requests=50 would be ignored"),
        Case("duration-then-count", "conflict", ("workload.duration_s=10", "workload.request_rate=2",
                                                 "workload.num_requests=5"), "refuse", "workload.duration_s=10 wins"),
        Case("duration-alone", "conflict", ("workload.duration_s=10", "workload.request_rate=2"), "ok"),
        Case("duration-count-null", "conflict", ("workload.duration_s=10", "workload.request_rate=2",
                                                 "workload.num_requests=null"), "ok"),
        Case("duration-sharegpt-count", "conflict", ("workload=sharegpt", "workload.duration_s=5",
                                                     "workload.request_rate=1", "workload.num_requests=9"),
             "refuse", "workload.num_requests=9 would be ignored"),
        Case("trace-window-and-cap", "conflict", ("workload=azure_conv", "workload.duration_s=60",
                                                  "workload.num_requests=5"), "ok"),
        Case("trace-rate-and-scale", "conflict", ("workload=azure_conv", "workload.duration_s=60",
                                                  "workload.target_rate=2", "workload.time_scale=0.5"),
             "refuse", "time_scale"),
        Case("trace-rate-alone", "conflict", ("workload=azure_conv", "workload.duration_s=60",
                                              "workload.target_rate=2"), "ok"),
        Case("trace-request-rate", "conflict", ("workload=azure_conv", "workload.request_rate=2"), "refuse",
             "request_rate"),
        Case("trace-burstiness", "conflict", ("workload=mooncake_conversation", "workload.burstiness=0.5"),
             "refuse", "burstiness"),
        Case("kv-bytes-and-utilization", "conflict", ("engine.kv_cache_bytes=2e9", "engine.gpu_memory_utilization=0.5",
                                                      *SMALL), "refuse", "engine.kv_cache_bytes=2e+09 wins"),
        Case("kv-bytes-alone", "conflict", ("engine.kv_cache_bytes=2e9", *SMALL), "ok"),
        Case("utilization-alone", "conflict", ("engine.gpu_memory_utilization=0.95", *SMALL), "ok"),
        Case("kv-fraction-on-sim", "conflict", ("engine.kv_cache_fraction=0.5", *SMALL), "refuse",
             "engine.kv_cache_fraction=0.5 would be ignored"),
        Case("utilization-on-hf", "conflict", (*hf, "engine.gpu_memory_utilization=0.5"), "refuse",
             "engine.gpu_memory_utilization=0.5 would be ignored"),
        Case("kv-fraction-and-bytes-on-hf", "conflict", (*hf, "engine.kv_cache_bytes=1e7",
                                                         "engine.kv_cache_fraction=0.5"), "refuse", "kv_cache_bytes"),
        Case("kv-fraction-on-hf", "conflict", (*hf, "engine.kv_cache_fraction=0.5"), "ok"),
        Case("swap-space-with-recompute", "conflict", ("engine.swap_space_bytes=1e9", *SMALL), "refuse",
             "engine.preemption=recompute swaps nothing"),
        Case("swap-space-with-swap", "conflict", ("engine.swap_space_bytes=1e9", "engine.preemption=swap", *SMALL), "ok"),
        Case("swap-space-null-recompute", "conflict", ("engine.swap_space_bytes=null", *SMALL), "ok"),
        Case("wall-clock-on-sim", "conflict", ("engine.clock=wall", *SMALL), "refuse", "engine.clock=wall"),
        Case("virtual-clock-on-sim", "conflict", ("engine.clock=virtual", *SMALL), "ok"),
        Case("attention-on-sim", "conflict", ("engine.attention=torch", *SMALL), "refuse", "engine.attention"),
        Case("device-on-sim", "conflict", ("engine.device=cpu", *SMALL), "refuse", "engine.device"),
        Case("threads-on-sim", "conflict", ("engine.threads=2", *SMALL), "refuse", "engine.threads"),
        Case("threads-on-hf", "conflict", (*hf, "engine.threads=1"), "ok"),
        Case("gpu-on-hf-wall", "conflict", (*hf, "gpu=h200"), "refuse", "gpu=h200 would be ignored"),
        Case("gpu-field-on-hf-wall", "conflict", (*hf, "gpu.count=2"), "refuse", "gpu.count=2 would be ignored"),
        Case("gpu-on-hf-virtual", "conflict", (*hf, "gpu=h200", "engine.clock=virtual"), "ok"),
        Case("no-eos-on-sim", "conflict", ("workload.ignore_eos=false", *SMALL), "refuse", "no EOS token"),
        Case("no-eos-on-hf", "conflict", (*hf, "workload.ignore_eos=false", "+model.eos_token_id=2"), "ok"),
        Case("concurrency-over-seqs", "conflict", ("workload.max_concurrency=30", "engine.max_num_seqs=8", *SMALL),
             "note", "engine.max_num_seqs=8 wins over workload.max_concurrency=30"),
        Case("concurrency-over-seqs-beams", "conflict", ("workload.max_concurrency=4", "workload.beam_width=4",
                                                         "engine.max_num_seqs=8", *SMALL), "note", "of 4 sequences each"),
        Case("concurrency-under-seqs", "conflict", ("workload.max_concurrency=4", *SMALL), "ok"),
        Case("samples-and-beams", "conflict", ("workload.n=2", "workload.beam_width=2", *SMALL), "refuse",
             "cannot both be > 1"),
        Case("baseline-and-its-knob", "conflict", ("+baseline=orca-max", "allocator.reserve=pow2", *SMALL), "refuse",
             "baseline=orca-max fixes"),
        Case("duration-with-inf-rate", "conflict", ("workload.duration_s=10",), "refuse", "finite request_rate"),
        Case("sweep-swept-winner", "conflict", ("-m", "engine.preemption=swap,recompute",
                                                "engine.swap_space_bytes=1e9", *SMALL), "ok"),
        Case("sweep-every-job-conflicts", "conflict", ("-m", "allocator=paged,buddy",
                                                       "engine.swap_space_bytes=1e9", *SMALL), "refuse",
             "swaps nothing"),
        Case("sweep-hf-gpus-on-wall", "conflict", ("-m", "backend=hf", "model=tiny-llama", "gpu=h200,a10g",
                                                   "workload.num_requests=4"), "refuse", "would be ignored"),
        Case("sweep-duration-and-count", "conflict", ("-m", "workload.duration_s=5,10", "workload.request_rate=2",
                                                      "workload.num_requests=5"), "refuse", "would be ignored"),
        Case("pressure-sweep", "conflict", ("-m", "engine.kv_cache_bytes=2e9,4e9", "engine.preemption=recompute,swap",
                                            *SMALL), "ok"),
        Case("pressure-experiment", "conflict", ("experiment=paper-pressure", "engine.kv_cache_bytes=1e9",
                                                 "engine.preemption=swap", "workload.duration_s=5"), "ok"),
    ]


def _launcher_cases() -> list[Case]:
    sweep = ("-m", "allocator=paged,buddy", *SMALL)
    joblib = (*sweep, "hydra/launcher=joblib")
    local = (*sweep, "hydra/launcher=submitit_local")
    return [
        Case("joblib-backend-bad", "launcher", (*joblib, "hydra.launcher.backend=foo"), "refuse", "hydra.launcher.backend"),
        Case("joblib-backend-threading", "launcher", (*joblib, "hydra.launcher.backend=threading"), "ok"),
        Case("joblib-backend-loky", "launcher", (*joblib, "hydra.launcher.backend=loky"), "ok"),
        Case("joblib-prefer-bad", "launcher", (*joblib, "hydra.launcher.prefer=fast"), "refuse", "hydra.launcher.prefer"),
        Case("joblib-prefer-threads", "launcher", (*joblib, "hydra.launcher.prefer=threads"), "ok"),
        Case("joblib-require-bad", "launcher", (*joblib, "hydra.launcher.require=all"), "refuse", "hydra.launcher.require"),
        Case("joblib-batch-size-zero", "launcher", (*joblib, "hydra.launcher.batch_size=0"), "refuse", "batch_size"),
        Case("joblib-mmap-mode-bad", "launcher", (*joblib, "hydra.launcher.mmap_mode=x"), "refuse", "mmap_mode"),
        Case("joblib-n-jobs-zero", "launcher", (*joblib, "hydra.launcher.n_jobs=0"), "refuse", "n_jobs"),
        Case("joblib-unknown-key", "launcher", (*joblib, "+hydra.launcher.foo=1"), "refuse", "hydra.launcher.foo"),
        Case("submitit-cpus-zero", "launcher", (*local, "hydra.launcher.cpus_per_task=0"), "refuse", "cpus_per_task"),
        Case("submitit-cpus-two", "launcher", (*local, "hydra.launcher.cpus_per_task=2"), "ok"),
        Case("submitit-tasks-zero", "launcher", (*local, "hydra.launcher.tasks_per_node=0"), "refuse", "tasks_per_node"),
        Case("submitit-nodes-zero", "launcher", (*local, "hydra.launcher.nodes=0"), "refuse", "hydra.launcher.nodes"),
        Case("submitit-timeout-zero", "launcher", (*local, "hydra.launcher.timeout_min=0"), "refuse", "timeout_min"),
        Case("submitit-gpus-negative", "launcher", (*local, "hydra.launcher.gpus_per_node=-1"), "refuse", "gpus_per_node"),
        Case("slurm-without-srun", "launcher", (*sweep, "hydra/launcher=submitit_slurm"), "refuse", "needs SLURM"),
        Case("slurm-single-run", "launcher", ("hydra/launcher=submitit_slurm", *SMALL), "ok"),
        Case("launcher-unknown", "launcher", (*sweep, "hydra/launcher=nope"), "refuse", "Could not find 'hydra/launcher/nope'"),
        Case("sweeper-unknown", "launcher", (*sweep, "hydra/sweeper=nope"), "refuse", "Could not find 'hydra/sweeper/nope'"),
        Case("optuna-trials-zero", "launcher", ("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=0",
                                                "engine.max_num_seqs=range(8,64)", *SMALL), "refuse", "n_trials"),
        Case("optuna-direction-bad", "launcher", ("-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=sideways",
                                                  *SMALL), "refuse", "direction"),
        Case("optuna-ok", "launcher", ("-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                                       "engine.max_num_seqs=interval(8,64)", *SMALL), "ok"),
        Case("basic-launcher-sweep", "launcher", sweep, "ok"),
    ]


def _extra_cases() -> list[Case]:
    """Optional extras absent here (the census runs in the dev environment: no Ray, no vLLM)."""
    return [
        Case("ray-absent-num-cpus", "extra", ("-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
                                              "allocator=paged,buddy", *SMALL), "refuse", "make ray-env"),
        Case("ray-absent-address", "extra", ("-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.address=auto",
                                             "allocator=paged,buddy", *SMALL), "refuse", "make ray-env"),
        Case("ray-absent-single", "extra", ("hydra/launcher=ray", *SMALL), "refuse", "make ray-env"),
        Case("peers-absent", "extra", ("allocator=vllm-v1", *SMALL), "refuse", "vllm"),
    ]


def _struct_cases() -> list[Case]:
    return [
        Case("engine-max-concurrency", "struct", ("engine.max_concurrency=4",), "refuse", "it lives in workload.max_concurrency"),
        Case("engine-max-concurrency-plus", "struct", ("+engine.max_concurrency=4",), "refuse",
             "it lives in workload.max_concurrency"),
        Case("workload-max-num-seqs", "struct", ("workload.max_num_seqs=8",), "refuse", "it lives in engine.max_num_seqs"),
        Case("engine-block-size", "struct", ("engine.block_size=32",), "refuse", "it lives in allocator.block_size"),
        Case("engine-reserve", "struct", ("engine.reserve=pow2",), "refuse", "it lives in allocator.reserve"),
        Case("model-memory-bytes", "struct", ("model.memory_bytes=1",), "refuse", "it lives in gpu.memory_bytes"),
        Case("gpu-num-layers", "struct", ("gpu.num_layers=2",), "refuse", "model.num_layers"),
        Case("engine-seed", "struct", ("engine.seed=1",), "refuse", "it lives in seed"),
        Case("workload-target-rate-synthetic", "struct", ("workload.target_rate=3",), "refuse",
             "workload.target_rate (with workload=azure_code"),
        Case("sharegpt-prompt-len", "struct", ("workload=sharegpt", "workload.prompt_len=3"), "refuse",
             "workload=synthetic"),
        Case("allocator-max-num-seqs", "struct", ("allocator.max_num_seqs=8",), "refuse", "engine.max_num_seqs"),
        Case("metrics-max-concurrency", "struct", ("metrics.max_concurrency=2",), "refuse", "workload.max_concurrency"),
        Case("backend-temperature-on-sim", "struct", ("backend.temperature=0.5",), "refuse", "backend=hf"),
        Case("logger-mode-without-wandb", "struct", ("logger.mode=offline",), "refuse", "logger=wandb"),
        Case("engine-typo-nowhere", "struct", ("engine.max_num_seq=8",), "refuse", "Could not override 'engine.max_num_seq'"),
        Case("sweep-struct-key", "struct", ("-m", "engine.max_concurrency=1,2"), "refuse", "workload.max_concurrency"),
        Case("struct-key-in-user-dir", "struct", ("-cd", "{dir}", "gpu=mygpu", "engine.max_concurrency=4"), "refuse",
             "workload.max_concurrency"),
    ]


def _form_cases() -> list[Case]:
    hf = ("backend=hf", "model=tiny-llama", "workload.num_requests=4", "workload.prompt_len=8",
          "workload.output_len=4")
    return [
        Case("sim-family-with-kv-bytes", "form", ("engine.kv_cache_bytes=1e9", "model.family=nope", *SMALL), "refuse",
             "model.family must be one of"),
        Case("sim-family", "form", ("model.family=nope", *SMALL), "refuse", "model.family"),
        Case("hf-virtual-bad-gpu", "form", (*hf, "engine.clock=virtual", "gpu.peak_flops=0"), "refuse",
             "gpu.peak_flops"),
        Case("hf-virtual-ok", "form", (*hf, "engine.clock=virtual"), "ok"),
        Case("hf-virtual-family-unknown-to-sim", "form", (*hf, "engine.clock=virtual", "model.family=bloom"), "refuse",
             "model.family"),
    ]


def cases() -> list[Case]:
    found = [*_path_cases(), *_conflict_cases(), *_launcher_cases(), *_extra_cases(), *_struct_cases(), *_form_cases()]
    names = [c.name for c in found]
    assert len(names) == len(set(names)), "case names must be unique"
    return found


def args_for(case: Case, user_dir: Path, conf: Path, results: Path) -> list[str]:
    args = [a.replace("{dir}", str(user_dir)).replace("{conf}", str(conf)) for a in case.args]
    return [*args, f"results_dir={results}", "progress=false"]


def classify(case: Case, error: str | None, raised: bool, notes: list[str]) -> str:
    """right | silent | traceback | lost for one pre-check outcome."""
    if raised or (error is not None and ("Traceback" in error or "could not be checked" in error
                                         or "\n" in error)):
        return "traceback"
    if case.expect == "refuse":
        return "right" if error is not None and case.match in error else ("silent" if error is None else "wrong")
    if error is not None:
        return "lost"
    if case.expect == "note":
        return "right" if any(case.match in n for n in notes) else "silent"
    return "right"


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
