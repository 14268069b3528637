"""The bad-input table of the reliability tier: command lines that must fail with one clear line.

Each case is ``(case_id, overrides, setup)``. ``overrides`` are kvbench command-line arguments;
``{tmp}`` stands for the case's scratch folder (outside the results dir). ``setup`` names a
function of ``SETUPS`` that prepares that folder (a torn dataset, a garbage model file, a
read-only index...) or is None. Every case must exit 2 with exactly one stderr line starting
``kvbench: error:`` and must leave no new file under the results dir, ``outputs/`` or the W&B
dir. ``PRECHECK`` marks the cases whose error the pre-check finds in-process (no subprocess);
the others need a real process (a model load, a mount, a results dir that cannot be written).

Shared by ``tests/test_reliability*.py`` and ``scripts/reliability_census.py``.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SHAREGPT = ["workload=sharegpt", "model=smollm2-135m", "workload.source=dataset"]


def _pairs(n: int) -> list[dict]:
    return [{"id": str(i), "conversations": [
        {"from": "human", "value": f"Tell me about the number {i} and why it matters to people who count things."},
        {"from": "gpt", "value": f"The number {i} is one of many; it matters because counting it is useful. " * 2},
    ]} for i in range(n)]


def sharegpt_torn_one(tmp: Path) -> None:
    text = json.dumps(_pairs(2))
    (tmp / "torn.json").write_text(text[: text.index('{"id": "1"') + 20])


def sharegpt_no_usable(tmp: Path) -> None:
    (tmp / "nousable.json").write_text(json.dumps([{"id": "x", "conversations": [{"from": "gpt", "value": "hi"}]}] * 5))


def sharegpt_garbage(tmp: Path) -> None:
    (tmp / "garbage.json").write_text("this is not json at all")


def sharegpt_empty(tmp: Path) -> None:
    (tmp / "empty.json").write_text("")


def garbage_gguf(tmp: Path) -> None:
    (tmp / "model.gguf").write_bytes(b"GGUF" + os.urandom(256))


def plain_file(tmp: Path) -> None:
    (tmp / "afile").write_text("not a directory\n")


def readonly_index(tmp: Path) -> None:
    """A results dir whose index cannot be written (immutable even for root)."""
    results = tmp / "ro"
    results.mkdir()
    index = results / "index.jsonl"
    index.write_text("")
    _run(["chattr", "+i", str(index)])


def readonly_mount(tmp: Path) -> None:
    (tmp / "rom").mkdir()
    _run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(tmp / "rom")])


def full_mount(tmp: Path) -> None:
    (tmp / "full").mkdir()
    _run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tmp / "full")])
    (tmp / "full" / "filler").write_bytes(b"\0" * 60_000)


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def teardown(tmp: Path) -> None:
    """Undo what the setups did that a plain rmtree cannot (mounts, immutable flags)."""
    for name in ("rom", "full"):
        if (tmp / name).is_dir():
            subprocess.run(["umount", str(tmp / name)], capture_output=True)
    index = tmp / "ro" / "index.jsonl"
    if index.exists():
        subprocess.run(["chattr", "-i", str(index)], capture_output=True)


def finished_run(tmp: Path) -> None:
    """A finished run (and its Hydra files) that a run or sweep dir must never be pointed at."""
    run = tmp / "finished"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (run / "summary.json").write_text('{"run_id": "20250101-000000-0000beef"}\n')


def user_folder(tmp: Path) -> None:
    (tmp / "userdir").mkdir()
    (tmp / "userdir" / "notes.txt").write_text("mine\n")


SETUPS = {f.__name__: f for f in (sharegpt_torn_one, sharegpt_no_usable, sharegpt_garbage, sharegpt_empty,
                                   garbage_gguf, plain_file, readonly_index, readonly_mount, full_mount,
                                   finished_run, user_folder)}

_NUMERIC_BAD = ("-1", "0", "nan", "abc")


def _knob(key: str, values: tuple[str, ...], *extra: str) -> list[tuple[str, list[str], None]]:
    return [(f"{key}={v}", [f"{key}={v}", *extra], None) for v in values]


CASES: list[tuple[str, list[str], str | None]] = [
    # GPU profile (sim backend)
    *_knob("gpu.mem_bandwidth", (*_NUMERIC_BAD, "inf", "true")),
    *_knob("gpu.host_bandwidth", ("-1", "0", "inf")),
    *_knob("gpu.interconnect_bandwidth", ("-1", "0"), "gpu.count=2"),
    *_knob("gpu.peak_flops", ("-1", "0", "inf", "abc")),
    *_knob("gpu.peak_flops_fp32", ("0", "-1")),
    *_knob("gpu.count", ("0", "2.5", "-1", "abc", "1e9")),
    *_knob("gpu.memory_bytes", ("0", "-5", "1e30", "abc")),
    # engine
    *_knob("engine.kv_cache_bytes", ("1e30", "inf", "1e18", "-1", "nan", "abc", "0", "1")),
    *_knob("engine.swap_space_bytes", ("inf", "-1", "nan", "abc", "1e30")),
    *_knob("engine.max_num_batched_tokens", ("0", "-5", "1.5", "abc", "1e12")),
    *_knob("engine.max_num_seqs", ("0", "2.5", "abc", "-1", "1e12")),
    *_knob("engine.memmap_every", ("often", "-1", "1.5")),
    *_knob("engine.max_steps", ("0", "-1", "abc", "1.5")),
    *_knob("engine.gpu_memory_utilization", ("0", "1.5", "-0.1", "abc", "nan")),
    *_knob("engine.kv_cache_fraction", ("0", "2")),
    *_knob("engine.threads", ("0", "-1", "abc")),
    *_knob("engine.debug", ("maybe",)),
    *_knob("engine.chunked_prefill", ("maybe",)),
    *_knob("engine.attention", ("flash",)),
    *_knob("engine.device", ("tpu",)),
    *_knob("engine.preemption", ("never",)),
    # seed and top-level keys
    *_knob("seed", ("abc", "1.5", "-1", "1e30", "true", "null")),
    *_knob("progress", ("maybe",)),
    ("unknown-top-key", ["foo=1"], None),
    # workload knobs
    *_knob("workload.num_requests", ("0", "-1", "1.5", "abc", "1e8", "1e12")),
    *_knob("workload.request_rate", ("0", "-1", "nan", "abc")),
    *_knob("workload.burstiness", ("0", "-1", "nan")),
    *_knob("workload.n", ("0", "1.5", "abc", "1e6")),
    *_knob("workload.beam_width", ("0", "2.5", "-1")),
    ("n-and-beams", ["workload.n=2", "workload.beam_width=2"], None),
    ("beams-wider-than-max-num-seqs", ["workload.beam_width=4", "engine.max_num_seqs=2"], None),
    ("beams-wider-than-token-budget", ["workload.beam_width=8", "engine.max_num_batched_tokens=4"], None),
    *_knob("workload.seed", ("-1", "abc", "1.5")),
    *_knob("workload.duration_s", ("0", "-5", "inf"), "workload.request_rate=10"),
    ("duration-with-inf-rate", ["workload.duration_s=10"], None),
    ("duration-too-long", ["workload.duration_s=1e9", "workload.request_rate=100"], None),
    *_knob("workload.prompt_len", ("0", "-1", "abc", "5000")),
    *_knob("workload.output_len", ("0",)),
    ("synthetic-distribution", ["workload.distribution=gaussian"], None),
    ("uniform-min-above-max", ["workload.distribution=uniform", "workload.prompt_min=100", "workload.prompt_max=10"], None),
    ("lognormal-negative-mean", ["workload.distribution=lognormal", "workload.prompt_mean=-1"], None),
    ("lognormal-negative-sigma", ["workload.distribution=lognormal", "workload.prompt_sigma=-1"], None),
    ("workload-unknown-knob", ["+workload.foo=1"], None),
    ("workload-unknown", ["workload=nope"], None),
    ("sharegpt-bad-source", [*SHAREGPT[:1], "workload.source=nope"], None),
    ("sharegpt-missing-path", [*SHAREGPT, "workload.path=/no/such/file.json"], None),
    ("sharegpt-path-is-dir", [*SHAREGPT, "workload.path={tmp}"], None),
    ("sharegpt-garbage", [*SHAREGPT, "workload.path={tmp}/garbage.json"], "sharegpt_garbage"),
    ("sharegpt-empty", [*SHAREGPT, "workload.path={tmp}/empty.json"], "sharegpt_empty"),
    ("sharegpt-no-usable", [*SHAREGPT, "workload.path={tmp}/nousable.json"], "sharegpt_no_usable"),
    ("sharegpt-torn-one-record", [*SHAREGPT, "workload.path={tmp}/torn.json", "workload.num_requests=50"],
     "sharegpt_torn_one"),
    ("sharegpt-table-with-path", ["workload=sharegpt", "workload.source=table", "workload.path={tmp}/x.json"], None),
    ("sharegpt-file-without-tokenizer", ["workload=sharegpt", "workload.source=dataset",
                                         "workload.path={tmp}/torn.json"], "sharegpt_torn_one"),
    ("shared-prefix-negative", ["workload=shared_prefix", "workload.prefix_len=-1"], None),
    ("shared-prefix-too-long", ["workload=shared_prefix", "workload.prefix_len=1e9"], None),
    ("shared-prefix-bad-base", ["workload=shared_prefix", "workload.base=nope"], None),
    # model
    *_knob("model.num_layers", ("0", "-1", "abc")),
    *_knob("model.hidden_size", ("-1",)),
    *_knob("model.num_kv_heads", ("0", "3")),
    *_knob("model.head_size", ("abc",)),
    *_knob("model.vocab_size", ("0",)),
    *_knob("model.max_model_len", ("1", "1e12")),
    *_knob("model.dtype", ("int8",)),
    ("model-unknown", ["model=nope"], None),
    ("model-does-not-fit", ["model=opt-175b"], None),
    # allocator
    *_knob("allocator.block_size", ("0", "3", "-16", "abc", "1e9")),
    *_knob("allocator.reserve", ("sometimes",)),
    ("allocator-unknown", ["allocator=nope"], None),
    ("allocator-unknown-knob", ["allocator.foo=1"], None),
    # backend
    ("backend-unknown", ["backend=nope"], None),
    ("hf-triton-on-cpu", ["backend=hf", "model=tiny-llama", "engine.attention=triton", "engine.device=cpu"], None),
    ("hf-cuda-without-gpu", ["backend=hf", "model=tiny-llama", "engine.device=cuda"], None),
    ("hf-garbage-gguf", ["backend=hf", "model=tiny-llama", "+model.load=pretrained", "+model.path={tmp}/model.gguf"],
     "garbage_gguf"),
    ("hf-missing-model", ["backend=hf", "model=tiny-llama", "+model.load=pretrained", "+model.path={tmp}/none"], None),
    ("hf-kv-bytes-above-ram", ["backend=hf", "model=tiny-llama", "engine.kv_cache_bytes=1e15"], None),
    # paths
    ("results-dir-empty", ["results_dir="], None),
    ("results-dir-is-file", ["results_dir={tmp}/afile"], "plain_file"),
    ("results-dir-under-file", ["results_dir={tmp}/afile/sub"], "plain_file"),
    ("results-dir-proc", ["results_dir=/proc/kvbench-results"], None),
    ("results-dir-readonly-mount", ["results_dir={tmp}/rom/results"], "readonly_mount"),
    ("results-dir-full", ["results_dir={tmp}/full/results"], "full_mount"),
    ("index-readonly", ["results_dir={tmp}/ro"], "readonly_index"),
    ("experiment-escapes", ["experiment_name=../../x"], None),
    ("experiment-empty", ["experiment_name="], None),
    ("experiment-slash", ["experiment_name=a/b"], None),
    ("experiment-dotdot", ["experiment_name=.."], None),
    ("experiment-absolute", ["experiment_name=/tmp/x"], None),
    # logger
    ("logger-unknown", ["logger=nope"], None),
    ("wandb-bad-mode", ["logger=wandb", "logger.mode=bogus"], None),
    ("wandb-negative-step-logs", ["logger=wandb", "logger.max_step_logs=-1"], None),
    # Hydra's output dirs: never the cwd or above, /, a file, a finished run or a user's folder
    # (the census and the fast tier run each case with {tmp}/cwd as the working directory)
    ("run-dir-dot", ["hydra.run.dir=."], None),
    ("run-dir-root", ["hydra.run.dir=/"], None),
    ("run-dir-parent", ["hydra.run.dir=.."], None),
    ("run-dir-grandparent", ["hydra.run.dir=../.."], None),
    ("run-dir-cwd-absolute", ["hydra.run.dir={tmp}/cwd"], None),
    ("run-dir-cwd-trailing", ["hydra.run.dir=./"], None),
    ("run-dir-empty", ["hydra.run.dir="], None),
    ("run-dir-finished", ["hydra.run.dir={tmp}/finished"], "finished_run"),
    ("run-dir-user-folder", ["hydra.run.dir={tmp}/userdir"], "user_folder"),
    ("run-dir-is-file", ["hydra.run.dir={tmp}/afile"], "plain_file"),
    ("run-dir-hf-eos-cwd", ["hydra.run.dir=.", "backend=hf", "model=tiny-llama", "workload.ignore_eos=false"], None),
    ("sweep-dir-dot", ["-m", "hydra.sweep.dir=.", "seed=0,1"], None),
    ("sweep-dir-parent", ["-m", "hydra.sweep.dir=..", "seed=0,1"], None),
    ("sweep-dir-root", ["-m", "hydra.sweep.dir=/", "seed=0,1"], None),
    ("sweep-dir-finished", ["-m", "hydra.sweep.dir={tmp}/finished", "seed=0,1"], "finished_run"),
    ("sweep-dir-user-folder", ["-m", "hydra.sweep.dir={tmp}/userdir", "seed=0,1"], "user_folder"),
    ("sweep-subdir-dotdot", ["-m", "hydra.sweep.subdir=..", "seed=0,1"], None),
    ("sweep-subdir-escapes", ["-m", "hydra.sweep.subdir=../x", "seed=0,1"], None),
    ("sweep-subdir-dot", ["-m", "hydra.sweep.subdir=.", "seed=0,1"], None),
    ("sweep-subdir-absolute", ["-m", "hydra.sweep.subdir=/tmp", "seed=0,1"], None),
    ("sweep-subdir-empty", ["-m", "hydra.sweep.subdir=", "seed=0,1"], None),
    ("sweep-joblib-subdir-dotdot", ["-m", "hydra/launcher=joblib", "hydra.sweep.subdir=..", "seed=0,1"], None),
    # multirun: one bad job refuses the whole sweep up front
    ("multirun-bad-allocator", ["-m", "allocator=paged,nope"], None),
    ("multirun-bad-kv-bytes", ["-m", "engine.kv_cache_bytes=1e9,1e30"], None),
    ("multirun-bad-seed", ["-m", "seed=0,abc"], None),
]

# Cases whose error needs a real process: a model load, a mount, a device, the results dir.
SUBPROCESS_ONLY = {"hf-garbage-gguf", "results-dir-readonly-mount", "results-dir-full", "index-readonly",
                   "results-dir-proc", "hf-triton-on-cpu", "hf-cuda-without-gpu", "hf-missing-model"}
# Cases that point a run at the file-system root: the census asks the checkout's pre-check in a
# probe process and never runs one that accepts them (it would write into, or remove from, /).
UNSAFE_TO_RUN = {"run-dir-root", "sweep-dir-root"}
NEEDS_ROOT = {"results-dir-readonly-mount", "results-dir-full", "index-readonly"}
PRECHECK = [case for case in CASES if case[0] not in SUBPROCESS_ONLY]


def expand(args: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in args]


def results_dir_of(args: list[str], default: Path) -> Path:
    """The results dir a command line writes to (its last ``results_dir=`` override wins)."""
    given = [a.split("=", 1)[1] for a in args if a.startswith("results_dir=")]
    return Path(given[-1]) if given and given[-1] else default
