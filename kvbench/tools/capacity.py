"""``kvbench-capacity``: the highest request rate (or concurrency) at which an SLO holds.

    kvbench-capacity allocator=orca-max,paged workload=sharegpt workload.num_requests=300 \\
        --slo p99_ttft_ms=2000,p99_tpot_ms=100 --tolerance 0.1

Per allocator: a probe at ``--low``; then bracketing (the value times ``--growth`` until the SLO
fails, at most ``--high``); then bisection between the last value that held and the first that
failed, until they are ``--tolerance`` apart. Each probe is a normal run (the Hydra config, the
index row, the run dir under ``<results_dir>/runs/<experiment>/<capacity id>/``, which
``kvbench-plot`` and ``kvbench-report`` read as a sweep dir); ``capacity.json`` there holds the
answer and the probes. The answer is the highest value that held: the true limit lies between it
and the value that failed. It assumes the SLO, once broken, stays broken at higher load.

``--seeds 0,1,2`` repeats the search once per seed (``seed=<s>``: each draws its own stream) and
answers per seed and overall: the highest value that held on every seed (the lowest of the
per-seed answers) and their spread (n, mean, sd, 95% Student t interval). One seed of a short
stream is one sample of a noisy P99; a publishable capacity repeats it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from kvbench.cli import OneLineParser, command, number
from kvbench.config.conflicts import first_refusal
from kvbench.config.errors import CONF_DIR
from kvbench.metrics import parse_percentiles
from kvbench.results.naming import allocator_label
from kvbench.results.outputs import OutputError, write_text
from kvbench.results.repeats import spread_of
from kvbench.run.ids import new_run_id
from kvbench.run.lifecycle import run
from kvbench.run.precheck import check_job, precheck
from kvbench.run.rundir import KEEP_ENV
from kvbench.run.prepare import _errors
from kvbench.run.rundir import discard
from kvbench.tools.slo import SLO, SLOError, meets, parse_slo

KNOBS = {"request_rate": "workload.request_rate", "max_concurrency": "workload.max_concurrency"}
UNITS = {"request_rate": "req/s", "max_concurrency": "requests in flight"}
MAX_PROBES = 50  # per search: bracketing and bisection together (64 bits of a float end any bisection sooner)


class CapacityError(ValueError):
    """Bad input to kvbench-capacity: one line."""


@dataclass
class Probe:
    value: float
    ok: bool
    detail: str  # what the run measured
    run_id: str | None = None
    wall_s: float = 0.0
    bound: str | None = None  # what decided a failure: the SLO, the served fraction (kvbench.tools.slo.meets)


@dataclass
class Answer:
    """The search's outcome for one allocator: ``sustained`` held, ``failed_at`` did not."""
    label: str
    sustained: float | None  # None: the SLO fails already at the lowest value
    failed_at: float | None  # None: it held up to the ceiling
    probes: list[Probe] = field(default_factory=list)
    wall_s: float = 0.0
    seed: int | None = None  # the run seed of this search (--seeds); None: the config's

    def line(self, unit: str) -> str:
        took = f"{len(self.probes)} probes, {self.wall_s:.1f} s"
        if self.seed is not None:
            took = f"seed {self.seed}, {took}"
        if self.sustained is None:
            return f"{self.label}: below {self.failed_at:g} {unit} (fails at the lowest probe{self._decided()}); {took}"
        if self.failed_at is None:
            return f"{self.label}: at least {self.sustained:g} {unit} (held up to --high); {took}"
        return f"{self.label}: sustains {self.sustained:g} {unit} (fails at {self.failed_at:g}{self._decided()}); {took}"

    def _decided(self) -> str:
        """`` on the BOUND`` that failed at ``failed_at`` (the SLO, the served fraction or both)."""
        bound = next((p.bound for p in self.probes if p.value == self.failed_at and not p.ok), None)
        return f" on the {bound}" if bound else ""


@dataclass
class Overall:
    """One allocator over several seeds: ``sustained`` held on every seed (the lowest per-seed
    answer), ``failed_at`` the lowest value that failed on some seed; the per-seed answers' spread."""
    label: str
    seeds: list[int]
    sustained: float | None  # None: some seed fails already at the lowest value
    failed_at: float | None  # None: every seed held up to the ceiling
    per_seed: list[float | None]
    n: int = 0
    mean: float = math.nan
    sd: float = math.nan
    ci95: float = math.nan  # half-width of the 95% t interval of the mean per-seed answer

    @classmethod
    def of(cls, label: str, answers: Sequence[Answer]) -> "Overall":
        per_seed = [a.sustained for a in answers]
        failed = [a.failed_at for a in answers if a.failed_at is not None]
        held = None if any(v is None for v in per_seed) else min(per_seed)
        spread = spread_of(v for v in per_seed if v is not None)
        return cls(label, [int(a.seed) for a in answers], held, min(failed) if failed else None, per_seed,
                   spread.n, spread.mean, spread.sd, spread.half)

    def line(self, unit: str) -> str:
        values = ", ".join("below" if v is None else f"{v:g}" for v in self.per_seed)
        spread = (f"mean {self.mean:.4g}, sd {self.sd:.3g}, 95% interval ±{self.ci95:.3g}" if self.n > 1
                  else "no spread: one seed held")
        where = f"{len(self.seeds)} seeds ({', '.join(map(str, self.seeds))}): {values}; {spread}"
        if self.sustained is None:
            return f"{self.label} overall: fails at the lowest probe on some seed; {where}"
        bound = f" (fails at {self.failed_at:g} on some seed)" if self.failed_at is not None else ""
        return f"{self.label} overall: {self.sustained:g} {unit} holds on every seed{bound}; {where}"


def parse_seeds(text: str | None) -> list[int] | None:
    """``--seeds 0,1,2`` as run seeds; None when not given (one search on the config's seed)."""
    if text is None:
        return None
    try:
        seeds = [int(number(part, "run seeds", at_least=0, integer=True)) for part in text.split(",")]
    except ValueError as exc:
        raise CapacityError(f"--seeds: a comma-separated list such as 0,1,2; each seed {exc}") from None
    if len(set(seeds)) != len(seeds):
        raise CapacityError(f"--seeds: distinct whole numbers >= 0; got {text!r}")
    return seeds


@dataclass(frozen=True)
class Bounds:
    """The search's range and steps, checked: ``low`` <= ``high``, finite, in the knob's unit."""
    low: float
    high: float
    tolerance: float
    growth: float

    def most_probes(self, integer: bool) -> int:
        """The most probes one search can make: bracketing, then halving the last bracket."""
        bracket = math.ceil(math.log(self.high / self.low) / math.log(self.growth)) + 1
        width = max(self.high - self.high / self.growth, self.tolerance)
        halvings = math.ceil(math.log2(width / (max(self.tolerance, 1.0) if integer else self.tolerance)))
        return bracket + max(halvings, 0)


def _option(flag: str, text: float | str, unit: str, **bounds) -> float:
    """One numeric option, by ``kvbench.cli.number``; CapacityError naming the flag."""
    try:
        return number(text, unit, **bounds)
    except ValueError as exc:
        raise CapacityError(f"{flag}: {exc}") from None


def search_bounds(knob: str, low: float | str, high: float | str, tolerance: float | str | None,
                  growth: float | str) -> Bounds:
    """``--low``, ``--high``, ``--tolerance`` and ``--growth``, each parsed by ``kvbench.cli.number``
    in the searched knob's unit; CapacityError for a value out of range or a search of more than
    ``MAX_PROBES`` probes (``--high inf`` would never end)."""
    integer, unit = knob == "max_concurrency", UNITS[knob]
    tolerance = tolerance if tolerance is not None else (1 if integer else 0.1)
    value = {"above": 0} if not integer else {"at_least": 1, "integer": True}
    parsed = {"low": _option("--low", low, unit, **value), "high": _option("--high", high, unit, **value),
              "tolerance": _option("--tolerance", tolerance, unit, **value),
              "growth": _option("--growth", growth, "the factor from one bracketing probe to the next", above=1)}
    bounds = Bounds(**parsed)
    if bounds.high < bounds.low:
        raise CapacityError(f"--high {bounds.high:g} is below --low {bounds.low:g} ({unit}); give low <= high")
    most = bounds.most_probes(integer)
    if most > MAX_PROBES:
        raise CapacityError(f"--low {bounds.low:g}, --high {bounds.high:g}, --growth {bounds.growth:g}, --tolerance "
                            f"{bounds.tolerance:g} ({unit}): up to {most} probes per search, more than {MAX_PROBES}; "
                            "narrow the range, widen --tolerance or raise --growth")
    return bounds


def search(probe: Callable[[float], Probe], low: float, high: float, tolerance: float, growth: float = 2.0,
           integer: bool = False) -> tuple[float | None, float | None, list[Probe]]:
    """Bracketing from ``low`` by ``growth`` up to ``high``, then bisection to ``tolerance``:
    (highest value that held, lowest that failed above it, the probes in order)."""
    probes = [probe(low)]
    if not probes[0].ok:
        return None, low, probes
    held, failed = low, None
    value = low
    while failed is None:
        if held >= high:
            return held, None, probes
        value = min(high, max(value + 1, math.ceil(value * growth)) if integer else value * growth)
        probes.append(probe(value))
        if probes[-1].ok:
            held = value
        else:
            failed = value
    while failed - held > tolerance and not (integer and failed - held <= 1):
        middle = (held + failed) // 2 if integer else (held + failed) / 2
        if middle in (held, failed):  # the bracket is as narrow as a float can say
            break
        probes.append(probe(middle))
        if probes[-1].ok:
            held = middle
        else:
            failed = middle
    return held, failed, probes


def split_allocators(overrides: Sequence[str], knob: str, seeds: bool = False) -> tuple[list[str], list[str]]:
    """The allocators to search (``allocator=a,b``) and the other overrides; refuses sweeps of
    other keys, a value for the searched knob, and with ``seeds`` (--seeds) a fixed seed."""
    allocators: list[str] = []
    rest: list[str] = []
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise CapacityError(f"overrides: {str(exc).splitlines()[0]}") from None
    for text, override in zip(overrides, parsed):
        key = override.key_or_group.lstrip("+~")
        if key == KNOBS[knob]:
            raise CapacityError(f"{key}: kvbench-capacity searches it; leave it out (set --low, --high)")
        if seeds and (key == "seed" or key.endswith(".seed")):
            raise CapacityError(f"{key}: --seeds sets the run seed of each search; leave {key} out "
                                "(a fixed workload.seed would give every seed the same stream)")
        if key.startswith("hydra"):
            raise CapacityError(f"{key}: kvbench-capacity runs its probes itself; no hydra settings")
        if key == "allocator":
            allocators += [str(v) for v in override.sweep_string_iterator()] if override.is_sweep_override() \
                else [str(override.value())]
            continue
        if override.is_sweep_override():
            raise CapacityError(f"{key}: only allocator may list several values (one search per allocator)")
        rest.append(text)
    return allocators or [""], rest


class HydraProber:
    """Probes as normal runs: the composed config (Hydra's choices and overrides recorded), one
    run dir per probe under the capacity dir, one index row each."""

    def __init__(self, overrides: list[str], knob: str, slo: SLO, out: Callable[[str], None]) -> None:
        self.overrides = overrides
        self.knob = knob
        self.slo = slo
        self.out = out
        self.folder: Path | None = None

    def overrides_for(self, allocator: str, value: float, seed: int | None = None) -> list[str]:
        shown = int(value) if self.knob == "max_concurrency" else value
        extra = [f"allocator={allocator}"] if allocator else []
        extra += [f"seed={seed}"] if seed is not None else []
        quiet = [] if any(o.split("=", 1)[0] == "progress" for o in self.overrides) else ["progress=false"]
        return [*self.overrides, *extra, f"{KNOBS[self.knob]}={shown}", *quiet]

    def compose(self, allocator: str, value: float, seed: int | None = None):
        return compose(config_name="config", overrides=self.overrides_for(allocator, value, seed),
                       return_hydra_config=True)

    def check(self, allocator: str, value: float, seed: int | None = None):
        """The composed config of one probe, every pre-run check passed (kvbench errors raise)."""
        cfg = self.compose(allocator, value, seed)
        check_job(cfg)
        first_refusal(cfg, self.overrides)  # a setting this probe would not read (kvbench.config.reads)
        return cfg

    def probe(self, allocator: str, value: float, seed: int | None = None) -> Probe:
        cfg = self.check(allocator, value, seed)
        if self.folder is None:
            self.folder = Path(str(cfg.results_dir)) / "runs" / str(cfg.experiment_name) / new_run_id()
        run_id = new_run_id()
        HydraConfig.instance().set_config(cfg)  # the run records the probe's overrides and choices
        t0 = time.perf_counter()
        try:
            summary = run(cfg, run_dir=self.folder / run_id, run_id=run_id)
        except BaseException:
            discard(self.folder / run_id)  # an unfinished probe leaves nothing
            _remove_if_empty(self.folder)
            raise
        finally:
            HydraConfig.instance().cfg = None
        ok, detail, bound = meets(summary, self.slo)
        probe = Probe(float(value), ok, detail, run_id, time.perf_counter() - t0, bound)
        label = summary.get("allocator_label") or allocator
        label += f" seed={seed}" if seed is not None else ""
        self.out(f"  probe {label} {KNOBS[self.knob]}={value:g}: {'holds' if ok else f'fails on the {bound}'} ({detail})")
        return probe


def _remove_if_empty(folder: Path) -> None:
    """The capacity dir this process made, once its only run is gone."""
    try:
        folder.rmdir()
    except OSError:
        pass


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` into the search's own folder (which this process made) through the one
    writer (``kvbench.results.outputs``); a failure is one line (CapacityError)."""
    text = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    try:
        write_text(path, text, flag="capacity.json", owned=path.parent)
    except OutputError as exc:
        raise CapacityError(str(exc)) from None
    except OSError as exc:
        raise CapacityError(f"capacity.json: cannot write {path}: {exc.strerror or exc}") from None


def precheck_probes(prober: "HydraProber", allocators: Sequence[str], value: float,
                    seeds: Sequence[int | None]) -> None:
    """Each search's first probe through ``kvbench``'s own pre-check (``kvbench.run.precheck``):
    the same grammar, knob kinds and conflict rules as ``kvbench`` itself; CapacityError in one line."""
    keep = os.environ.get(KEEP_ENV)
    try:
        for allocator in allocators:
            for seed in seeds:
                error = precheck(prober.overrides_for(allocator, value, seed))
                if error:
                    raise CapacityError(error)
    finally:  # the pre-check notes kvbench's own run dir; the probes have theirs
        os.environ.pop(KEEP_ENV, None) if keep is None else os.environ.__setitem__(KEEP_ENV, keep)


def capacity(overrides: Sequence[str], slo_text: str, knob: str = "request_rate", low: float | str | None = None,
             high: float | str = 64.0, tolerance: float | str | None = None, growth: float | str = 2.0,
             out: Callable[[str], None] = print, seeds: Sequence[int] | None = None
             ) -> tuple[list[Answer], Path | None, list[Overall]]:
    """Search each allocator's highest knob value meeting the SLO, once per seed of ``seeds`` (None:
    once, on the config's seed); the answers (allocator-major, seed-minor), the probes' dir, and
    with ``seeds`` each allocator's overall answer. ``low`` (default 0.5 req/s, or 1 request in
    flight), ``high``, ``tolerance`` and ``growth`` as given on the command line (``search_bounds``)."""
    integer = knob == "max_concurrency"
    bounds = search_bounds(knob, low if low is not None else (1 if integer else 0.5), high, tolerance, growth)
    low, high, tolerance, growth = bounds.low, bounds.high, bounds.tolerance, bounds.growth
    runs_seeds: list[int | None] = list(seeds) if seeds else [None]
    allocators, rest = split_allocators(overrides, knob, seeds=bool(seeds))
    precheck_probes(HydraProber(rest, knob, SLO({}), out), allocators, low, runs_seeds)
    answers: list[Answer] = []
    overall: list[Overall] = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        prober = HydraProber(rest, knob, SLO({}), out)
        try:
            checked = [prober.check(a, low, seed) for a in allocators for seed in runs_seeds]  # before any run
            first = checked[::len(runs_seeds)]
            metrics = first[0].get("metrics") or {}
            slo = parse_slo(slo_text, parse_percentiles(metrics.get("percentiles")), bool(metrics.get("goodput")))
        except _errors() as exc:
            raise CapacityError(str(exc).splitlines()[0]) from None
        except SLOError as exc:
            raise CapacityError(str(exc)) from None
        except Exception as exc:  # Hydra's own composition errors: an unknown group or key
            raise CapacityError(str(exc).strip().splitlines()[0]) from None
        prober.slo = slo
        out(f"kvbench-capacity: highest {KNOBS[knob]} meeting {slo.describe()} (tolerance {tolerance:g}), "
            f"from {low:g} by x{growth:g} up to {high:g}")
        for allocator, cfg in zip(allocators, first):
            label = allocator or allocator_label(str(cfg.allocator.name), cfg.allocator.get("reserve"))
            mine = [_search(prober, allocator, label, seed, low, high, tolerance, growth, integer)
                    for seed in runs_seeds]
            answers += mine
            if seeds:
                overall.append(Overall.of(label, mine))
    if prober.folder is not None:
        write_json(prober.folder / "capacity.json", {
            "knob": KNOBS[knob], "slo": slo.bounds, "tolerance": tolerance, "low": low, "high": high,
            "growth": growth, "overrides": list(overrides), "seeds": list(seeds) if seeds else None,
            "answers": [asdict(a) for a in answers], "overall": [_strict(asdict(o)) for o in overall]})
    return answers, prober.folder, overall


def _search(prober: HydraProber, allocator: str, label: str, seed: int | None, low: float, high: float,
            tolerance: float, growth: float, integer: bool) -> Answer:
    """One allocator's search on one seed."""
    t0 = time.perf_counter()
    try:
        held, failed, probes = search(lambda v: prober.probe(allocator, v, seed), low, high, tolerance,
                                      growth, integer)
    except _errors() as exc:
        raise CapacityError(f"{label}: {str(exc).splitlines()[0]}") from None
    return Answer(label, held, failed, probes, time.perf_counter() - t0, seed)


def _strict(row: dict) -> dict:
    """NaN (no spread from one seed) as null: capacity.json is strict JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="kvbench-capacity", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", help="kvbench overrides (allocator=a,b searches each allocator), "
                   "anywhere among the options")
    p.add_argument("--slo", required=True, help="METRIC=BOUND,... e.g. p99_ttft_ms=2000,p99_tpot_ms=100 "
                   "or goodput=0.9 (with metrics.goodput)")
    p.add_argument("--knob", choices=tuple(KNOBS), default="request_rate", help="what to search (default %(default)s)")
    p.add_argument("--low", help="the first probe (default 0.5 req/s, or 1 request in flight)")
    p.add_argument("--high", default="64", help="bracketing stops here (default %(default)s)")
    p.add_argument("--growth", default="2", help="bracketing factor, > 1 (default %(default)s)")
    p.add_argument("--tolerance", type=float, help="bisection stops when the bracket is this narrow "
                   "(default 0.1 req/s, or 1 request in flight)")
    p.add_argument("--seeds", help="search once per run seed, e.g. 0,1,2; answers per seed and overall "
                   "(the highest value holding on every seed, and the spread); default: the config's seed")
    return p


@command("kvbench-capacity", on_signal="the finished probes are kept (each its run dir and index row)")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    t0 = time.perf_counter()
    try:
        answers, folder, overall = capacity(args.overrides, args.slo, args.knob, args.low, args.high,
                                            args.tolerance, args.growth, out=lambda line: print(line, flush=True),
                                            seeds=parse_seeds(args.seeds))
    except CapacityError as exc:
        print(f"kvbench-capacity: error: {exc}", file=sys.stderr)
        return 2
    unit = UNITS[args.knob]
    for answer in answers:
        print(answer.line(unit))
    for summary in overall:
        print(summary.line(unit))
    print(f"{sum(len(a.probes) for a in answers)} probes in {time.perf_counter() - t0:.1f} s; runs and "
          f"capacity.json in {folder}")
    below = [a for a in answers if a.sustained is None]
    if below:
        seed = f" (seed {below[0].seed})" if below[0].seed is not None else ""
        low = below[0].failed_at
        print(f"kvbench-capacity: error: {below[0].label}{seed}: the SLO fails already at {KNOBS[args.knob]}="
              f"{low:g}: below {low:g}; lower --low", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
