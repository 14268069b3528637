"""``kvbench-validate --fit-ops DIR`` on tables from strangers (issue 54, part 4).

Every bad table or row is one stderr line naming the file, the row and the field: exit 2 and
nothing written when no good table is left or with ``--strict``, else the bad table is left out
and the others are fitted. The profile is valid YAML whatever the name and the folder hold, and
``kvbench -cd DIR gpu=NAME`` runs on it as written.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kvbench.config.errors import CONF_DIR, ConfigError
from kvbench.config.validate import check_rules
from kvbench.results import outputs
from kvbench.sim import opfit
from kvbench.sim.operators import OP_NAMES
from kvbench.sim.validate import main

ROOT = Path(__file__).resolve().parents[1]
NAME = "g1"
SPEC = ["--peak-flops", "989e12", "--mem-bandwidth", "3.35e12", "--memory-bytes", "8.5899e10",
        "--host-bandwidth", "64e9"]
COLUMNS = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
           "num_tensor_parallel_workers", *(f"time_stats.{op}.median" for op in OP_NAMES)]


def shipped_rows(model: str = "Llama-2-7b-hf", tp: str = "1", every: int = 6) -> list[dict]:
    """A few of the shipped H100 rows of one model and TP degree, in the table's columns only."""
    with gzip.open(opfit.DATA_DIR / "compute_h100.csv.gz", "rt", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == model and r["num_tensor_parallel_workers"] == tp]
    return [{c: r[c] for c in COLUMNS} for r in rows[::every]]


def write_table(path: Path, rows: list[dict], columns: list[str] = COLUMNS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def fit(tmp_path: Path, tables: Path, *extra: str, name: str = NAME, out: Path | None = None) -> int:
    out = out or tmp_path / "conf" / "gpu" / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    return main(["--fit-ops", str(tables), "--out", str(out), f"--name={name}", *SPEC, *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def written(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "conf" / "gpu").iterdir()) if (tmp_path / "conf" / "gpu").exists() else []


# -- one bad table: one line naming file, row and field; exit 2; nothing written ---------------
def _set(row: int, field: str, value: str):
    def change(rows: list[dict]) -> list[dict]:
        rows[row - 2] = rows[row - 2] | {field: value}  # row N of the file is rows[N - 2]
        return rows
    return change


BAD_ROWS = {
    "time inf": (_set(3, "time_stats.add.median", "inf"), "row 3: time_stats.add.median"),
    "time nan": (_set(4, "time_stats.mlp_act.median", "nan"), "row 4: time_stats.mlp_act.median"),
    "time negative": (_set(2, "time_stats.attn_pre_proj.median", "-0.5"), "row 2: time_stats.attn_pre_proj.median"),
    "time huge": (_set(5, "time_stats.mlp_up_proj.median", "1e300"), "row 5: time_stats.mlp_up_proj.median"),
    "tp 0": (_set(3, "num_tensor_parallel_workers", "0"), "row 3: num_tensor_parallel_workers"),
    "tokens huge": (_set(3, "num_tokens", "1e30"), "row 3: num_tokens"),
    "tokens fractional": (_set(3, "num_tokens", "2.5"), "row 3: num_tokens"),
    "heads not a number": (_set(6, "n_head", "thirty-two"), "row 6: n_head"),
    "empty field": (_set(2, "n_embd", ""), "row 2: n_embd is empty"),
    "hidden not a multiple of heads": (_set(2, "n_embd", "4095"), "row 2: n_embd"),
    "gated neither true nor false": (_set(3, "use_gated_mlp", "maybe"), "row 3: use_gated_mlp"),
    "shape differs within a model": (_set(4, "n_expanded_embd", "1024"), "row 4: n_expanded_embd"),
    "duplicate row": (lambda rows: rows[:3] + [rows[1]] + rows[3:], "row 5: num_tokens"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_row_is_one_line_naming_file_row_and_field(tmp_path, capsys, case):
    change, expected = BAD_ROWS[case]
    table = write_table(tmp_path / "tables" / "m" / "mlp.csv", change(shipped_rows()))
    assert fit(tmp_path, tmp_path / "tables") == 2
    line = one_line(capsys)
    assert line.startswith("kvbench-validate: error: ") and f"{table} {expected}" in line, line
    assert written(tmp_path) == []


BAD_FILES = {
    "header only": (lambda p: write_table(p, []), "no rows under the header"),
    "empty file": (lambda p: p.write_text(""), "empty file (no header line)"),
    "wrong column names": (lambda p: p.write_text("tokens,heads\n1,32\n"), "no column 'n_head'"),
    "one column misspelt": (lambda p: write_table(p, shipped_rows(), [c.replace("num_tokens", "num_token")
                                                                       for c in COLUMNS]), "no column 'num_tokens'"),
    "not UTF-8": (lambda p: p.write_bytes(b"n_head,\xff\xfe\n"), "cannot read the table (UnicodeDecodeError"),
    "too few token counts": (lambda p: write_table(p, shipped_rows()[:2]), "num_tokens has 2 distinct value(s)"),
    "an operator never timed": (lambda p: write_table(p, [r | {"time_stats.add.median": "0"} for r in shipped_rows()]),
                                "time_stats.add.median is 0 in every row"),
    "a row longer than the header": (lambda p: p.write_text(",".join(COLUMNS) + "\n" + ",".join(
        [*shipped_rows()[0].values(), "9"]) + "\n"), "row 2: 1 more field(s) than the header"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_table_is_one_line_naming_it(tmp_path, capsys, case):
    make, expected = BAD_FILES[case]
    table = tmp_path / "tables" / "m" / "mlp.csv"
    table.parent.mkdir(parents=True)
    make(table)
    assert fit(tmp_path, tmp_path / "tables") == 2
    line = one_line(capsys)
    assert str(table) in line and expected in line, line
    assert written(tmp_path) == []


def test_a_broken_gzip_table_is_one_line(tmp_path, capsys):
    table = tmp_path / "tables" / "m.csv.gz"
    table.parent.mkdir()
    table.write_bytes(b"not gzip at all")
    assert fit(tmp_path, tmp_path / "tables") == 2
    line = one_line(capsys)
    assert f"{table}: cannot read the table" in line and written(tmp_path) == []


def test_an_unreadable_table_is_one_line(tmp_path, capsys):
    table = write_table(tmp_path / "tables" / "m" / "mlp.csv", shipped_rows())
    table.chmod(0)
    try:
        if os.access(table, os.R_OK):
            pytest.skip("running as a user that reads any file (root)")
        assert fit(tmp_path, tmp_path / "tables") == 2
        assert f"{table}: cannot read the table (PermissionError" in one_line(capsys)
    finally:
        table.chmod(0o644)
    assert written(tmp_path) == []


def test_a_link_to_nothing_named_as_a_table_is_one_line(tmp_path, capsys):
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "m.csv").symlink_to(tmp_path / "gone.csv")
    assert fit(tmp_path, tmp_path / "tables") == 2
    assert f"{tmp_path / 'tables' / 'm.csv'}: not a readable file" in one_line(capsys) and written(tmp_path) == []


# -- one bad table among good ones ------------------------------------------------------------
def test_a_bad_table_is_left_out_with_one_line_and_strict_refuses(tmp_path, capsys):
    write_table(tmp_path / "tables" / "a" / "mlp.csv", shipped_rows())
    bad = write_table(tmp_path / "tables" / "b" / "mlp.csv", _set(3, "time_stats.add.median", "nan")(shipped_rows()))
    out = tmp_path / "conf" / "gpu" / f"{NAME}.yaml"
    assert fit(tmp_path, tmp_path / "tables", "--strict") == 2
    assert f"error: {bad} row 3: time_stats.add.median" in one_line(capsys) and written(tmp_path) == []
    assert fit(tmp_path, tmp_path / "tables") == 0
    line = one_line(capsys)
    assert f"kvbench-validate: left out of the fit: {bad} row 3: time_stats.add.median" in line
    profile = OmegaConf.load(out)
    assert profile.name == NAME and "1 models" in out.read_text() and "1 tables or groups left out" in out.read_text()


def test_two_bad_tables_and_no_good_one_are_a_line_each_then_the_refusal(tmp_path, capsys):
    a = write_table(tmp_path / "tables" / "a" / "mlp.csv", [])
    b = write_table(tmp_path / "tables" / "b" / "mlp.csv", _set(2, "num_tensor_parallel_workers", "0")(shipped_rows()))
    assert fit(tmp_path, tmp_path / "tables") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and str(a) in err[0] and f"{b} row 2: num_tensor_parallel_workers" in err[1]
    assert "nothing under" in err[2] and "2 problems" in err[2] and written(tmp_path) == []


def test_a_model_and_tp_degree_in_two_tables_leaves_the_second_out(tmp_path, capsys):
    """Two tables of one model and TP degree (two GPUs' folders, say) would be fitted as one."""
    write_table(tmp_path / "tables" / "a100" / "m" / "mlp.csv", shipped_rows())
    second = write_table(tmp_path / "tables" / "h100" / "m" / "mlp.csv", shipped_rows(every=7))
    assert fit(tmp_path, tmp_path / "tables") == 0
    assert f"{second} row 2: num_tensor_parallel_workers 1 of model 'm' is measured in" in one_line(capsys)


# -- links to folders are followed, once ------------------------------------------------------
def test_links_to_folders_are_followed_and_loops_read_once(tmp_path, capsys):
    write_table(tmp_path / "elsewhere" / "m" / "mlp.csv", shipped_rows())
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "tables" / "again").symlink_to(tmp_path / "elsewhere")  # the same table twice: read once
    (tmp_path / "elsewhere" / "loop").symlink_to(tmp_path / "tables")
    assert fit(tmp_path, tmp_path / "tables") == 0
    assert capsys.readouterr().err == ""
    assert "of 1 tables" in (tmp_path / "conf" / "gpu" / f"{NAME}.yaml").read_text()


# -- the profile: valid YAML whatever the name and folder; --name a Hydra config name ----------
@pytest.mark.parametrize("name", ["a/b", "a=b", "a,b", "a${x}", "a\\b", "true", "1.5", "null", "", " g", "g\n",
                                  "ü", "x" * 201])
def test_a_name_that_gpu_name_cannot_select_is_refused_in_one_line(tmp_path, capsys, name):
    write_table(tmp_path / "tables" / "m" / "mlp.csv", shipped_rows())
    out = tmp_path / "conf" / "gpu" / "p.yaml"
    assert fit(tmp_path, tmp_path / "tables", name=name, out=out) == 2
    assert "--name" in one_line(capsys) and written(tmp_path) == []


@pytest.mark.parametrize("name", ["my gpu:v2@lab+x", "a%b*c?d|e", ".hidden-gpu", "-gpu"])
def test_the_profile_reads_back_whatever_the_name_and_folder(tmp_path, name):
    tables = tmp_path / 'odd: ${x} #"q"\\ \u00e9'
    write_table(tables / "m" / "mlp.csv", shipped_rows())
    assert fit(tmp_path, tables, name=name) == 0
    profile = OmegaConf.load(tmp_path / "conf" / "gpu" / f"{name}.yaml")
    assert profile.name == name and json.dumps(str(tables)) in profile.op_constants_from
    assert "\n" not in profile.op_constants_from


def test_a_held_out_regime_with_no_rows_says_so_not_nan(tmp_path):
    rows = [r for r in shipped_rows(every=1) if int(r["num_tokens"]) > 64][::8]  # no row at 64 tokens or fewer
    write_table(tmp_path / "tables" / "a" / "mlp.csv", rows)
    write_table(tmp_path / "tables" / "b" / "mlp.csv", [r for r in shipped_rows("Llama-2-70b-hf", every=1)
                                                         if int(r["num_tokens"]) > 64][::8])
    assert fit(tmp_path, tmp_path / "tables") == 0
    text = (tmp_path / "conf" / "gpu" / f"{NAME}.yaml").read_text()
    assert "nan" not in text.lower() and "<= 64 tokens: gemm no rows" in text


# -- --out: NAME.yaml, never a folder or a link, written atomically ---------------------------
def test_out_onto_a_folder_a_link_or_another_name_is_refused_in_one_line(tmp_path, capsys):
    write_table(tmp_path / "tables" / "m" / "mlp.csv", shipped_rows())
    gpu = tmp_path / "conf" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / f"{NAME}.yaml").mkdir()
    assert fit(tmp_path, tmp_path / "tables", "--force") == 2
    assert "is a directory" in one_line(capsys)
    (gpu / f"{NAME}.yaml").rmdir()
    target = tmp_path / "target.yaml"
    target.write_text("kept\n")
    (gpu / f"{NAME}.yaml").symlink_to(target)
    assert fit(tmp_path, tmp_path / "tables", "--force") == 2
    assert "is a symbolic link" in one_line(capsys) and target.read_text() == "kept\n"
    assert (gpu / f"{NAME}.yaml").is_symlink()
    assert fit(tmp_path, tmp_path / "tables", out=gpu / "other.yaml") == 2
    assert f"must be named {NAME}.yaml" in one_line(capsys) and not (gpu / "other.yaml").exists()


def test_a_failed_write_leaves_no_file_and_no_temporary(tmp_path, monkeypatch, capsys):
    write_table(tmp_path / "tables" / "m" / "mlp.csv", shipped_rows())

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "replace", broken_replace)
    assert fit(tmp_path, tmp_path / "tables") == 2
    line = one_line(capsys)
    assert "cannot write" in line and "No space left on device" in line
    assert written(tmp_path) == []


@pytest.mark.parametrize("argv, flag", [
    (["--out", "x.yaml"], "--out"),
    (["--fit-ops", "--out", "x.yaml"], "--out"),
    (["--fit", "--name", "g"], "--name"),
    (["--strict"], "--strict"),
    (["--op-model", "roofline"], "--op-model"),
    (["--peak-flops", "1e12"], "--peak-flops"),
    (["--fit-ops", "DIR", "--points"], "--points"),
    (["--fit-ops", "DIR", "--fit"], "--fit"),
    (["--fit", "--fit-ops"], "--fit-ops"),
])
def test_an_option_that_would_do_nothing_is_refused(tmp_path, capsys, argv, flag):
    argv = [str(tmp_path) if a == "DIR" else a for a in argv]
    assert main(argv) == 2
    line = one_line(capsys)
    assert f"error: {flag} does nothing with" in line or f"error: {flag} without DIR does nothing" in line
    assert list(tmp_path.iterdir()) == []


# -- the consumer: a profile without the optional figures runs ---------------------------------
def _composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["workload.seed=0", *overrides])


def test_the_fp32_peak_and_the_link_are_required_only_where_read():
    cfg = _composed("backend=sim", "gpu=a10g", "~gpu.peak_flops_fp32", "~gpu.interconnect_bandwidth")
    check_rules(cfg)  # a float16 model on one GPU reads neither
    cfg = _composed("backend=sim", "gpu=a10g", "model=opt-125m", "~gpu.peak_flops_fp32")
    assert cfg.model.dtype == "float32"
    with pytest.raises(ConfigError, match="gpu.peak_flops_fp32 is missing"):
        check_rules(cfg)
    with pytest.raises(ConfigError, match="gpu.interconnect_bandwidth must be"):
        check_rules(_composed("backend=sim", "gpu=a10g", "gpu.interconnect_bandwidth=0"))


def test_end_to_end_a_fitted_profile_with_an_odd_name_runs_as_written(tmp_path):
    name = "my gpu:v2@lab+x"
    write_table(tmp_path / "tables" / "m" / "mlp.csv", shipped_rows())
    assert fit(tmp_path, tmp_path / "tables", name=name) == 0
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_SILENT="true", HYDRA_FULL_ERROR="0")
    env.pop("KVBENCH_TRACEBACK", None)
    proc = subprocess.run([sys.executable, "-m", "kvbench.app", "-cd", str(tmp_path / "conf"), f"gpu={name}",
                           "backend=sim", "workload.num_requests=5", f"results_dir={tmp_path / 'results'}",
                           "progress=false"], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = list((tmp_path / "results").rglob("summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["gpu_profile"] == name and summary["num_finished"] == 5
