"""The headline's sensitivity to the paper-era host costs that no published measurement fixes.

    PYTHONPATH=. .venv/bin/python scripts/host_cost_sensitivity.py [--duration 600] [--seed 0]
        [--workload sharegpt|sharegpt_matched] [--base-only] [--out FILE.md]

Each constant of ``conf/system/vllm-2023.yaml`` that is an assumption or derived from one
(``step_overhead_s``, ``seq_overhead_s``, ``sample_host_s``) is run at half and at double its
value, the others as configured, on the Figure 13 setting (``experiment=paper-batch-sharegpt``:
OPT-13B, A100-40GB, ShareGPT at 2 req/s; a ``--duration``-second trace, one seed, to keep it
affordable). Printed per variant, as a markdown table: paged / Orca (Oracle) and paged /
Orca (Max) in time-weighted running requests (the Figure 13 measure), the same in request
throughput, and paged's share of KV memory holding tokens (Figure 2). With ``--announce``, also
the announcement's throughput ratios (``experiment=paper-announce-llama-13b``: LLaMA-13B,
A100-40GB, 1,000 ShareGPT requests at once): paged over the HF-style static batch and over the
TGI-style contiguous baseline, for n = 1 and n = 3, under the same host-cost variant.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvbench.config.errors import CONF_DIR  # noqa: E402

ASSUMPTIONS = ("step_overhead_s", "seq_overhead_s", "sample_host_s")
ALLOCATORS = ("paged", "orca-oracle", "orca-max")
ANNOUNCE_BASELINES = ("paged", "static-max", "tgi-max")
FACTORS = (0.5, 2.0)


def _run(overrides: list[str], results: str) -> dict:
    from hydra import compose, initialize_config_dir

    from kvbench.run.lifecycle import run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "progress=false", "logger=none",
                                                          f"results_dir={results}"])
    return run(cfg, run_dir=Path(results) / "runs" / "x" / str(abs(hash(tuple(overrides)))))


def variant_rows(base: list[str], results: str) -> dict[str, dict]:
    return {alloc: _run([*base, f"allocator={alloc}"], results) for alloc in ALLOCATORS}


def announce_ratios(extra: list[str], results: str, static_extra: tuple[str, ...] = ()) -> list[float]:
    """paged / static-max and paged / tgi-max request throughput at n = 1, then at n = 3
    (``static_extra``: overrides for the static baseline's runs only)."""
    out = []
    for n in (1, 3):
        runs = {b: _run(["experiment=paper-announce-llama-13b", f"+baseline={b}", f"workload.n={n}", *extra,
                         *(static_extra if b == "static-max" else ())], results)
                for b in ANNOUNCE_BASELINES}
        out += [_ratio(runs, "request_throughput", "static-max"), _ratio(runs, "request_throughput", "tgi-max")]
    return out


def _ratio(runs: dict[str, dict], column: str, base: str) -> float:
    return float(runs["paged"][column]) / float(runs[base][column])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", default="sharegpt", help="sharegpt or sharegpt_matched")
    parser.add_argument("--base-only", action="store_true", help="only the configured values (no variants)")
    parser.add_argument("--announce", action="store_true",
                        help="also the announcement's paged / static and paged / TGI-style ratios (LLaMA-13B)")
    parser.add_argument("--eager-issue", type=float, default=None, metavar="S",
                        help="also an eager-mode issue floor of S seconds per layer (system.eager_layer_issue_s), "
                             "on every system and, with --announce, on the static baseline alone")
    parser.add_argument("--eager-only", action="store_true", help="with --eager-issue: only its rows")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    system = OmegaConf.load(CONF_DIR / "system" / "vllm-2023.yaml").system
    common = ["experiment=paper-batch-sharegpt", f"seed={args.seed}", f"workload.duration_s={args.duration:g}",
              f"workload={args.workload}"]
    variants = [("as configured", [], ())]  # (label, overrides for every run, for the static runs only)
    for key in () if args.base_only else ASSUMPTIONS:
        for factor in FACTORS:
            value = float(system[key]) * factor
            variants.append((f"{key} x{factor:g} ({value:.3g} s)", [f"system.{key}={value!r}"], ()))
    if args.eager_issue is not None:
        floor = (f"system.eager_layer_issue_s={args.eager_issue!r}",)
        variants = variants[:0] if args.eager_only else variants
        variants.append((f"eager issue floor {args.eager_issue:.3g} s/layer, every system", list(floor), ()))
        if args.announce:
            variants.append((f"eager issue floor {args.eager_issue:.3g} s/layer, static (HF) only", None, floor))
    head = ("| host costs | paged / Orca (Oracle), running requests | paged / Orca (Max), running requests "
            "| paged / Orca (Oracle), req/s | paged / Orca (Max), req/s | paged KV holding tokens |")
    if args.announce:
        head += " paged / static, n=1 | paged / TGI-style, n=1 | paged / static, n=3 | paged / TGI-style, n=3 |"
    lines = [head, "|---" * head.count(" | ") + "|---|"]
    with tempfile.TemporaryDirectory(prefix="kvbench-sensitivity-") as tmp:
        for label, extra, static_extra in variants:
            if extra is None:  # the Figure 13 systems as configured: only the announcement's cells
                lines.append(f"| {label} | - | - | - | - | - |")
            else:
                runs = variant_rows(common + extra, tmp)
                lines.append(f"| {label} | {_ratio(runs, 'mean_running_requests', 'orca-oracle'):.2f}x "
                             f"| {_ratio(runs, 'mean_running_requests', 'orca-max'):.2f}x "
                             f"| {_ratio(runs, 'request_throughput', 'orca-oracle'):.2f}x "
                             f"| {_ratio(runs, 'request_throughput', 'orca-max'):.2f}x "
                             f"| {100 * float(runs['paged']['mem_token_frac']):.1f}% |")
            if args.announce:
                lines[-1] += "".join(f" {r:.2f}x |" for r in announce_ratios(extra or [], tmp, static_extra))
            print(lines[-1], flush=True)
    header = (f"Sensitivity of the Figure 13 setting ({args.workload}, {args.duration:g} s trace at 2 req/s, "
              f"seed {args.seed}, OPT-13B on a simulated A100-40GB) to each host-cost assumption:\n")
    text = header + "\n" + "\n".join(lines) + "\n"
    print("\n" + text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
