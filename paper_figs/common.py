"""What every paper figure shares: loading runs, picking them by experiment, labels, colours, saving.

Figures read the results index (``kvbench.results.store.load_index``) and the run directories it
points to; ``run_dir`` paths in the index are relative to the index's folder (``results_root``)
unless absolute. Nothing here writes results.
"""
from __future__ import annotations

import colorsys
import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from kvbench.results.grouping import GroupingError, distinct_settings, settings_that_vary, split  # noqa: E402
from kvbench.results.store import (  # noqa: E402
    DEFAULT_INDEX,
    MEM_COLUMNS,
    REQUESTS_FILE,
    RUN_DIR_COLUMN,
    STEPS_FILE,
    load_index,
)

DEFAULT_OUT = Path("paper_figs/out")
DPI = 150

# Memory categories (design.md, "Memory breakdown"), in stacking order, with their columns
# and the codes memmap.npz uses for them.
CATEGORIES: tuple[str, ...] = ("token", "reserved", "internal", "external")
CATEGORY_COLUMNS: dict[str, str] = dict(zip(CATEGORIES, MEM_COLUMNS))
MEMMAP_CODES: dict[str, int] = {"external": 0, "token": 1, "reserved": 2, "internal": 3}
_CB = sns.color_palette("colorblind")
CATEGORY_COLORS: dict[str, tuple] = {
    "token": _CB[2],  # green: useful
    "reserved": _CB[8],  # yellow: will be used
    "internal": _CB[3],  # vermillion: never used
    "external": (0.80, 0.80, 0.80),  # light grey: free
}

# ----------------------------------------------------------------------------- labels

_ORCA_RESERVES = {"max": "Max", "pow2": "Pow2", "oracle": "Oracle"}
_FAMILY_ORDER = (
    "Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "buddy",
    "contiguous (max)", "contiguous (pow2)", "contiguous (oracle)", "contiguous (double)",
    "contiguous", "paged", "paged+prefix",
)  # fmt: skip
_FAMILY_COLORS = {
    "Orca (Max)": _CB[3], "Orca (Pow2)": _CB[1], "Orca (Oracle)": _CB[5], "buddy": _CB[6],
    "contiguous (max)": _CB[4], "contiguous (pow2)": _CB[9], "contiguous (oracle)": _CB[7],
    "contiguous (double)": _CB[8], "contiguous": _CB[4], "paged": _CB[0], "paged+prefix": _CB[2],
}  # fmt: skip


def _missing(value: object) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def allocator_label(
    allocator: object, reserve: object = None, block_size: object = None, *, with_block: bool = True
) -> str:
    """The readable name of a strategy, used by every figure.

    buddy + reserve max/pow2/oracle -> "Orca (Max)" / "Orca (Pow2)" / "Orca (Oracle)" (the
    PagedAttention paper's baselines), other buddy reserves -> "buddy (double)";
    contiguous -> "contiguous (max)"; paged -> "paged (16)"; paged_prefix -> "paged+prefix (16)".
    ``with_block=False`` drops the block size (for figures whose x axis is the block size).
    """
    name = "?" if _missing(allocator) else str(allocator)
    reserve = None if _missing(reserve) else str(reserve)
    block = None if _missing(block_size) else int(block_size)
    if name == "buddy":
        if reserve in _ORCA_RESERVES:
            return f"Orca ({_ORCA_RESERVES[reserve]})"
        return f"buddy ({reserve})" if reserve else "buddy"
    if name == "contiguous":
        return f"contiguous ({reserve})" if reserve else "contiguous"
    if name in ("paged", "paged_prefix"):
        base = "paged" if name == "paged" else "paged+prefix"
        return f"{base} ({block})" if with_block and block is not None else base
    parts = [p for p in (reserve, str(block) if with_block and block is not None else None) if p]
    return f"{name} ({', '.join(parts)})" if parts else name


def _family(label: str) -> str:
    """The colour family of a label: the label without a trailing block size."""
    for family in sorted(_FAMILY_ORDER, key=len, reverse=True):
        if label == family or label.startswith(family + " ("):
            return family
    return label.split(" (")[0]


def _block_of(label: str) -> int:
    tail = label.rsplit("(", 1)[-1].rstrip(")")
    return int(tail) if tail.isdigit() else -1


def label_order(labels: Iterable[str]) -> list[str]:
    """Labels in the paper's order: Orca variants, buddy, contiguous, paged, paged+prefix."""
    def key(label: str) -> tuple:
        family = _family(label)
        rank = _FAMILY_ORDER.index(family) if family in _FAMILY_ORDER else len(_FAMILY_ORDER)
        return rank, family, _block_of(label), label

    return sorted(dict.fromkeys(labels), key=key)


def palette(labels: Iterable[str]) -> dict[str, tuple]:
    """Colour per label: a fixed colour per strategy family, so figures agree; several labels of
    one family (block sizes) get shades of that colour, light to dark by block size."""
    ordered = label_order(labels)
    by_family: dict[str, list[str]] = {}
    for label in ordered:
        by_family.setdefault(_family(label), []).append(label)
    spare = iter(sns.color_palette("tab10"))
    colors: dict[str, tuple] = {}
    for family, members in by_family.items():
        base = _FAMILY_COLORS.get(family) or next(spare)
        if len(members) == 1:
            colors[members[0]] = tuple(base)
            continue
        h, light, s = colorsys.rgb_to_hls(*base[:3])
        for i, label in enumerate(members):
            shade = 0.78 - 0.5 * i / (len(members) - 1)  # lightness from 0.78 down to 0.28
            colors[label] = colorsys.hls_to_rgb(h, shade, s)
    return colors


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of df with ``label`` (with block size) and ``family`` (without) columns."""
    out = df.copy()
    rows = list(zip(out["allocator"], out["reserve"], out["block_size"]))
    out["label"] = [allocator_label(a, r, b) for a, r, b in rows]
    out["family"] = [allocator_label(a, r, b, with_block=False) for a, r, b in rows]
    return out


def workload_name(workload: object) -> str:
    """"ShareGPT" / "Alpaca" for workloads whose name starts so, else the name itself."""
    text = "?" if _missing(workload) else str(workload)
    for prefix, name in (("sharegpt", "ShareGPT"), ("alpaca", "Alpaca")):
        if text.lower().startswith(prefix):
            return name
    return text


# ----------------------------------------------------------------------------- loading


def load(index_path: str | Path = DEFAULT_INDEX) -> tuple[pd.DataFrame, Path]:
    """The index as a DataFrame and the folder its run_dir paths are relative to."""
    index_path = Path(index_path)
    return load_index(index_path), index_path.parent


def run_dir(row: pd.Series | dict, results_root: str | Path) -> Path:
    path = Path(str(row[RUN_DIR_COLUMN]))
    return path if path.is_absolute() else Path(results_root) / path


def read_steps(row: pd.Series | dict, results_root: str | Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir(row, results_root) / STEPS_FILE)


def read_requests(row: pd.Series | dict, results_root: str | Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir(row, results_root) / REQUESTS_FILE)


def note(figure: str, message: str) -> None:
    """One line about a figure on stdout (skips, fallbacks)."""
    print(f"{figure}: {message}", flush=True)


def skip(figure: str, reason: str) -> list[Path]:
    """Say why a figure is not drawn; return the empty list of files draw() returns then."""
    note(figure, f"skipped ({reason})")
    return []


def pick(
    index_df: pd.DataFrame,
    figure: str,
    experiment: str,
    *,
    prefix: bool = False,
    need: Sequence[str] = (),
    fallback_any: bool = False,
) -> pd.DataFrame | None:
    """Rows of ``experiment`` (every name starting with it if ``prefix``) with the ``need``
    columns present and non-null, labelled (see with_labels).

    With no such rows: ``fallback_any`` uses every run that has the ``need`` columns, and says
    so; otherwise prints why and returns None.
    """
    def usable(df: pd.DataFrame) -> pd.DataFrame:
        if any(col not in df.columns for col in need):
            return df.iloc[0:0]
        return df.dropna(subset=list(need)) if need else df

    if index_df.empty or "experiment" not in index_df.columns:
        skip(figure, "the index has no runs")
        return None
    names = index_df["experiment"].astype("string")
    mask = names.str.startswith(experiment) if prefix else names == experiment
    runs = usable(index_df[mask.fillna(False).astype(bool)])
    what = f"experiment {experiment + '*' if prefix else experiment!r}"
    if runs.empty and fallback_any:
        runs = usable(index_df)
        if not runs.empty:
            note(figure, f"no runs of {what}; falling back to all {len(runs)} runs with "
                         f"{', '.join(need) or 'any data'}")
    if runs.empty:
        needs = f" with {', '.join(need)}" if need else ""
        skip(figure, f"no runs of {what}{needs} in the index")
        return None
    return with_labels(runs.reset_index(drop=True))


def numeric(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """A copy of df with these columns as float (nullable ints and None become NaN)."""
    out = df.copy()
    for col in columns:
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    return out


def generated_tokens(requests: pd.DataFrame) -> float:
    """Tokens sampled over a run: sum of output_len * n (n = 1 when absent), as the app's
    ``<timing>_per_token`` extras count them."""
    if requests.empty or "output_len" not in requests:
        return 0.0
    n = requests["n"] if "n" in requests else 1
    return float((requests["output_len"] * n).sum())


def time_per_token(
    row: pd.Series, results_root: str | Path, key: str, steps: pd.DataFrame | None = None
) -> float:
    """Seconds of step timing ``key`` (e.g. ``attention_s``) per generated token.

    The summary's ``<key>_per_token`` extra if the run has it, else the steps' total of ``key``
    over the run's generated tokens. NaN when neither is there.
    """
    extra = row.get(f"{key}_per_token")
    if not _missing(extra):
        return float(extra)
    try:
        steps = read_steps(row, results_root) if steps is None else steps
        if key not in steps or steps[key].isna().all():
            return math.nan
        tokens = generated_tokens(read_requests(row, results_root))
    except (OSError, ValueError):
        return math.nan
    return float(steps[key].sum()) / tokens if tokens > 0 else math.nan


# ----------------------------------------------------------------------------- drawing


def setup_style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.15)


# No timestamps in the files, so a figure redrawn from the same results is the same bytes (PNG
# carries none by default; the PDF's dates are dropped).
DETERMINISTIC_METADATA: dict[str, dict] = {"png": {}, "pdf": {"CreationDate": None, "ModDate": None}}


def save(fig: plt.Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``<name>.png`` (dpi 150) and ``<name>.pdf`` with a tight layout; close the figure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tight_layout on exotic legends
        fig.tight_layout()
    paths = []
    for ext in ("png", "pdf"):
        path = out_dir / f"{name}.{ext}"
        fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata=DETERMINISTIC_METADATA[ext])
        paths.append(path)
    plt.close(fig)
    return paths


def log2_axis(ax: plt.Axes, values: Iterable[float]) -> None:
    """A log2 x axis with a tick at every value drawn, labelled as plain integers."""
    ticks = sorted({float(v) for v in values if v and not math.isnan(v)})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()


def legend_above(fig: plt.Figure, handles, labels, ncol: int | None = None) -> None:
    """One legend for the whole figure, centred above the panels."""
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0),
               ncol=ncol or min(len(labels), 6), frameon=False)


def category_handles() -> list:
    return [Patch(facecolor=CATEGORY_COLORS[c], edgecolor="0.4", linewidth=0.5, label=c)
            for c in CATEGORIES]


# columns a figure derives from settings (labels, names, plotted knobs): never settings of their own
DERIVED_COLUMNS = ("label", "family", "dataset", "budget", "wl", "value", "saving_pct", "tail_waste_pct",
                   "attention_ms_per_token")


def check_alike(figure: str, runs: pd.DataFrame, keys: Sequence[str]) -> None:
    """GroupingError (the figure is not drawn, the others are) when runs a figure averages into
    one point or bar (one value of each of ``keys``) differ in a setting other than the seed
    (``kvbench.results.grouping``): such runs are never averaged."""
    present = [k for k in keys if k in runs.columns]
    for part in split(runs, present):
        varying = settings_that_vary(part, ignore=[*present, *DERIVED_COLUMNS])
        if varying:
            first = part.iloc[0]
            where = ", ".join(f"{k}={first[k]}" for k in present)
            raise GroupingError(f"{figure}: the runs averaged at {where} differ in {', '.join(varying)}")


def name_unlike(figure: str, runs: pd.DataFrame, keys: Sequence[str], column: str) -> pd.DataFrame:
    """Runs a figure would average into one point (one value of each of ``keys``) that differ in a
    setting other than the seed (a fallback that pools several studies): ``column`` (the panel's
    name) gets those settings appended, so they are drawn apart, and the figure says so."""
    present = [k for k in keys if k in runs.columns]
    extra: dict[str, None] = {}
    for part in split(runs, present):
        extra.update((c, None) for c in settings_that_vary(part, ignore=[*present, *DERIVED_COLUMNS]))
    extra = dict.fromkeys(distinct_settings(runs, list(extra), given=present))
    if not extra:
        return runs
    out = runs.copy()
    out[column] = [f"{value}, " + ", ".join(f"{k}={row[k]}" for k in extra)
                   for value, (_, row) in zip(out[column], out.iterrows())]
    note(figure, f"runs that differ in {', '.join(extra)} are drawn apart (never averaged)")
    return out


def mean_by(df: pd.DataFrame, keys: Sequence[str], columns: Sequence[str], figure: str = "figure") -> pd.DataFrame:
    """Mean of ``columns`` per ``keys`` over repeated runs (seeds), keys kept as columns; only
    runs alike in every other setting are averaged (``check_alike``)."""
    check_alike(figure, df, keys)
    df = numeric(df, *columns)
    return df.groupby(list(keys), dropna=False, sort=False)[list(columns)].mean().reset_index()



# ----------------------------------------------------------------------------- series a reader could miss


def coinciding(series: dict[str, pd.Series]) -> list[list[str]]:
    """Groups of series names whose values (indexed by x) are equal at every x (4 significant
    digits): drawn on top of each other, one would hide the others."""
    groups: dict[tuple, list[str]] = {}
    for name, values in series.items():
        key = tuple((float(x), float(f"{v:.4g}")) for x, v in values.sort_index().items() if not math.isnan(v))
        if key:
            groups.setdefault(key, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def visible_right(series: dict[str, pd.Series], clip: float) -> float | None:
    """The x beyond which no series is below ``clip`` (the first x where every drawn series with a
    value there is above it, so the rise out of the axes stays in view); None when none leaves."""
    xs = sorted({float(x) for values in series.values() for x in values.index})
    for x in xs:
        at = [float(values.loc[x]) for values in series.values() if x in values.index]
        if at and all(v > clip for v in at) and any(float(v) <= clip for s in series.values() for v in s):
            return x
    return None


def series_notes(series: dict[str, pd.Series], clip: float | None, unit: str = "", x_name: str = "x") -> list[str]:
    """One line per series a reader could miss: entirely above the clip, or under another."""
    notes = []
    if clip is not None:
        for name, values in series.items():
            if len(values) and (values > clip).all():
                lowest = values.sort_index()
                notes.append(f"{name}: above {clip:g}{unit} at every {x_name} ({number(lowest.iloc[0])} at "
                             f"{number(float(lowest.index[0]))})")
    for names in coinciding(series):
        notes.append(f"{' = '.join(names)} (identical)")
    return notes


def number(value: float) -> str:
    return f"{value:.3g}"
