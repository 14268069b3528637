"""The cost model against measurements: operator times (kvbench/sim/data/vidur) and end-to-end
FasterTransformer latencies (kvbench/sim/measurements.csv), with the targets of issue 21."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from kvbench.config.spec import model_geometry
from kvbench.sim import allreduce, cost_model, opfit
from kvbench.sim.operators import OP_KEYS, gemm_s
from kvbench.sim.profiles import load_gpu
from kvbench.sim.validate import (LAYER_TARGET, OP_MEDIAN_TARGET, OP_P90_TARGET, SMALL_BATCH_TARGET, TP_TARGET,
                                  by_group, evaluate,
                                  fit, load_points, main, median_abs_error, training_split)

GPUS = list(opfit.MEASURED_GPUS)


def profile_errors(gpu: str) -> list[opfit.GroupError]:
    cfg = load_gpu(gpu)
    return opfit.group_errors(opfit.load_groups(gpu), cost_model.op_constants(cfg), *opfit.rates(cfg))


# -- data ---------------------------------------------------------------------------------
def test_every_end_to_end_point_has_a_source_and_its_tp_degree():
    points = load_points()
    assert len(points) == 242
    assert all(p["source"] and float(p["measured_ms"]) > 0 for p in points)
    tp_rows = {tp: sum(p["model"] == "gpt-20b" and p["count"] == tp for p in points) for tp in ("1", "2", "4", "8")}
    assert tp_rows == {"1": 40, "2": 44, "4": 45, "8": 45}  # the table's OOM cells are left out
    assert all(p["source"].endswith(f"{p['count']}-way TP column") for p in points
               if p["model"] == "gpt-20b" and p["count"] != "1")


def test_operator_data_cover_both_gpus_every_tp_degree():
    for gpu, models in (("a100-80gb", 5), ("h100-80gb", 3)):
        groups = opfit.load_groups(gpu)
        assert len({g.model for g in groups}) == models and {g.tp for g in groups} == {1, 2, 4, 8}
        assert all(len(g.tokens) >= 200 and all(len(v) == len(g.tokens) for v in g.measured_s.values()) for g in groups)


# -- the formulas -------------------------------------------------------------------------
def test_gemm_is_a_roofline_with_shape_efficiency():
    c = {key: 0.0 for key in OP_KEYS} | {"gemm_eff_max": 0.8, "gemm_m_half": 100.0, "gemm_n_half": 50.0,
                                         "gemm_k_half": 0.0, "gemm_eff_bw": 0.5, "gemm_fixed_s": 1e-6}
    peak, bw = 100e12, 1e12
    # one token: reading the 4096 x 4096 weight at half the bandwidth
    assert gemm_s(c, peak, bw, 1, 4096, 4096, 2) == pytest.approx(1e-6 + (4096 + 4096 * 4096 + 4096) * 2 / 0.5e12)
    # many tokens: compute bound at 0.8 * m / (m + 100) * n / (n + 50) of peak
    m, k, n = 8192, 4096, 1024
    eff = 0.8 * m / (m + 100) * n / (n + 50)
    assert gemm_s(c, peak, bw, m, k, n, 2) == pytest.approx(1e-6 + 2 * m * k * n / (peak * eff))
    assert gemm_s(c, peak, bw, 0, k, n, 2) == 0.0
    # tensor parallelism narrows the GEMM: 8 ranks take more than an eighth of the time
    assert gemm_s(c, peak, bw, m, k, n // 8, 2) > gemm_s(c, peak, bw, m, k, n, 2) / 8 * 1.1


def test_allreduce_table_interpolates_between_measured_sizes():
    sizes, times = allreduce.table_for("a100_dgx", 8)
    assert all(a <= b for a, b in zip(times, times[1:]))  # monotone
    i = len(sizes) // 2
    assert allreduce.interpolate(sizes, times, sizes[i]) == pytest.approx(times[i])
    mid = (sizes[i] + sizes[i + 1]) / 2
    assert allreduce.interpolate(sizes, times, mid) == pytest.approx((times[i] + times[i + 1]) / 2)
    assert allreduce.interpolate(sizes, times, 1.0) == times[0]
    assert allreduce.interpolate(sizes, times, 2 * sizes[-1]) == pytest.approx(2 * times[-1])
    # NCCL inside a DGX: tens of microseconds for a decode step's hidden states, not 127 us
    assert 10e-6 < allreduce.interpolate(sizes, times, 16 * 12288 * 2) < 50e-6
    assert allreduce.table_for("a100_dgx", 3) is None and allreduce.table_for(None, 8) is None
    with pytest.raises(ValueError, match="gpu.allreduce_table must be one of"):
        allreduce.table_for("no_such_table", 2)


# -- the targets --------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", GPUS)
def test_operator_errors_are_under_the_targets(gpu):
    errors = profile_errors(gpu)
    median, p90 = opfit.summary(errors)
    assert median <= OP_MEDIAN_TARGET and p90 <= OP_P90_TARGET, (median, p90)
    layer_median, _ = opfit.summary(errors, "layer")
    assert layer_median <= LAYER_TARGET
    gemm_median, gemm_p90 = opfit.summary(errors, "gemm")
    assert gemm_median <= 0.08 and gemm_p90 <= 0.20
    for e in errors:  # every (model, TP degree): the layer within 10%
        assert np.median(e.layer) <= LAYER_TARGET, (e.model, e.tp)


def test_gpt20b_tensor_parallel_latencies_within_15_percent():
    rows = evaluate([p for p in load_points() if p["model"] == "gpt-20b" and p["count"] != "1"])
    for (_, tp), group in by_group(rows).items():
        assert median_abs_error(group) <= TP_TARGET, tp
        assert abs(statistics.median(r["error"] for r in group)) <= 0.08, tp


def test_cli_prints_operator_and_end_to_end_tables(capsys, tmp_path):
    points = tmp_path / "few.csv"
    lines = open(cost_model.__file__.replace("cost_model.py", "measurements.csv")).read().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("source,"))
    points.write_text("\n".join(lines[: header + 4]) + "\n")
    assert main(["--file", str(points)]) == 0
    out = capsys.readouterr().out
    for text in ("a100-80gb, profile constants", "h100-80gb, profile constants", "Llama-2-70b-hf",
                 "attention kernels are not in these measurements", "3 points; median |error|", "all-reduce (a100_dgx)"):
        assert text in out, text
    assert main(["--file", str(tmp_path / "missing.csv")]) == 2


# -- the refits (slow) --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("gpu", GPUS)
def test_profile_constants_are_the_fit_and_hold_out_under_the_targets(gpu):
    cfg = load_gpu(gpu)
    peak, bw = opfit.rates(cfg)
    groups = opfit.load_groups(gpu)
    fitted = opfit.fit(groups, peak, bw)
    shipped = cost_model.op_constants(cfg)
    for g in groups:  # the same predictions (constants near a bound, like a half width of 0, may differ)
        a, b = opfit.predict(g, fitted, peak, bw), opfit.predict(g, shipped, peak, bw)
        for op in a:
            assert np.allclose(a[op], b[op], rtol=0.02), (g.model, g.tp, op)
    for key in (lambda g: g.model, lambda g: g.tp):
        held = opfit.held_out(groups, key, peak, bw)
        median, p90 = opfit.summary(held)
        assert median <= OP_MEDIAN_TARGET and p90 <= OP_P90_TARGET, (median, p90)
        assert opfit.summary(held, "layer")[0] <= LAYER_TARGET
    allreduce_fit = opfit.fit_allreduce(opfit.MEASURED_GPUS[gpu][1], float(cfg.interconnect_bandwidth))
    for key, value in allreduce_fit.items():
        assert cfg[key] == pytest.approx(value, rel=0.02), key


@pytest.mark.slow
def test_layer_overhead_is_the_single_gpu_fit_and_tp_rows_hold_out():
    train, held = training_split(load_points())
    fitted = fit(train)
    assert cost_model.DEFAULTS["layer_overhead_s"] == pytest.approx(fitted["layer_overhead_s"], rel=0.02)
    for (model, tp), rows in by_group(evaluate(held, constants=fitted)).items():
        assert median_abs_error(rows) <= TP_TARGET, (model, tp)


def test_a_negative_number_is_told_the_knobs_own_lower_bound():
    """The kind check's message for a negative value names the bound the knob's rule holds
    (0 refused too: ``> 0``; at least 1: ``>= 1``), not a bare ``>= 0`` that would invite a 0."""
    from kvbench.config.knob_types import _number_error

    assert _number_error("workload.time_scale", 1.0, -1) == "workload.time_scale must be > 0; got -1"
    assert _number_error("engine.max_num_seqs", 256, -1) == "engine.max_num_seqs must be >= 1; got -1"
    assert _number_error("workload.seed", 0, -1) == "workload.seed must be >= 0; got -1"


# -- small batches (issue 37): the fixed_floor operator model -----------------------------
def test_fixed_floor_charges_an_elementwise_kernel_at_least_min_tokens_rows():
    from kvbench.sim.operators import elementwise_s

    c = {"norm_fixed_s": 2e-6, "norm_eff_bw": 0.5}
    bw, row = 1e12, 16384.0
    assert elementwise_s(c, bw, "norm", 4 * row, row) == pytest.approx(2e-6 + 4 * row / 0.5e12)
    floor = c | {"norm_min_tokens": 60.0}
    # 1 or 60 rows: the same time (one wave of row blocks); past 60 the bandwidth decides as before
    for rows in (1, 4, 60):
        assert elementwise_s(floor, bw, "norm", rows * row, row) == pytest.approx(2e-6 + 60 * row / 0.5e12)
    assert elementwise_s(floor, bw, "norm", 61 * row, row) == elementwise_s(c, bw, "norm", 61 * row, row)
    assert elementwise_s(floor, bw, "norm", 0.0, row) == 0.0


def test_the_default_op_model_is_the_roofline_every_committed_result_used():
    a100 = load_gpu("a100-80gb")
    assert cost_model.op_model(a100) == "roofline"
    assert cost_model.op_constants(a100) == {key: float(a100[key]) for key in OP_KEYS}
    floor = cost_model.op_constants(load_gpu("a100-80gb", op_model="fixed_floor"))
    assert set(floor) == set(OP_KEYS) | {"norm_min_tokens", "act_min_tokens", "rope_min_tokens", "add_min_tokens"}
    assert floor == {k: float(v) for k, v in a100.fixed_floor.items()}
    assert cost_model.op_constants(load_gpu("a10g", op_model="fixed_floor")) == cost_model.FIXED_FLOOR_DEFAULTS
    with pytest.raises(ValueError, match=r"gpu.op_model must be one of \['roofline', 'fixed_floor'\]"):
        cost_model.op_constants(load_gpu("a100-80gb", op_model="fast"))


def test_the_source_of_the_operator_constants_is_named():
    assert "gpu profile a100-80gb, fitted on a100-80gb's own" in cost_model.op_constants_source(load_gpu("a100-80gb"))
    assert "fitted on the h100-80gb" in cost_model.op_constants_source(load_gpu("h200"))
    a10g = cost_model.op_constants_source(load_gpu("a10g"))
    assert "gpu profile a10g sets none; the rest are the a100-80gb fit" in a10g and "--fit-ops DIR" in a10g
    assert "op_model fixed_floor" in cost_model.op_constants_source(load_gpu("h100-80gb", op_model="fixed_floor"))


@pytest.mark.parametrize("gpu", GPUS)
def test_fixed_floor_profile_constants_fit_small_batches(gpu):
    """In sample (the profile's fixed_floor mapping): every elementwise kind within 15% median at
    64 tokens or fewer, where the roofline misses by 20-45%; the layer no worse than the roofline's."""
    cfg = load_gpu(gpu)
    groups = opfit.load_groups(gpu)
    floor = opfit.group_errors(groups, cost_model.op_constants(load_gpu(gpu, op_model="fixed_floor")),
                               *opfit.rates(cfg))
    roofline = profile_errors(gpu)
    for kind in ("norm", "act", "rope", "add"):
        small = opfit.summary(floor, kind, "<=64")[0]
        assert small < opfit.summary(roofline, kind, "<=64")[0], kind
        if (gpu, kind) != ("h100-80gb", "add"):  # 1-2 us times recorded in whole us: below
            assert small <= SMALL_BATCH_TARGET, kind
        assert opfit.summary(floor, kind, "<=64", beyond_rounding=True)[0] <= SMALL_BATCH_TARGET, kind
    assert opfit.summary(floor, "layer")[0] <= LAYER_TARGET
    assert opfit.summary(floor)[0] <= OP_MEDIAN_TARGET


@pytest.mark.slow
@pytest.mark.parametrize("gpu", GPUS)
def test_fixed_floor_holds_out_under_15_percent_at_small_batches(gpu):
    cfg = load_gpu(gpu)
    groups = opfit.load_groups(gpu)
    held = opfit.held_out(groups, lambda g: g.model, *opfit.rates(cfg), "fixed_floor")
    roofline = opfit.held_out(groups, lambda g: g.model, *opfit.rates(cfg))
    for kind in ("norm", "act", "rope", "add"):
        small = opfit.summary(held, kind, "<=64")[0]
        assert small < opfit.summary(roofline, kind, "<=64")[0], kind
        if kind != "add":  # A100 15.1%, H100 25.3%: 1-3 us times recorded in whole us, so
            assert small <= SMALL_BATCH_TARGET, kind  # the add is held to the error beyond rounding
        assert opfit.summary(held, kind, "<=64", beyond_rounding=True)[0] <= SMALL_BATCH_TARGET, kind
    assert opfit.summary(held, "layer")[0] <= LAYER_TARGET


def test_beyond_rounding_forgives_only_the_tables_half_microsecond():
    """Measured = model + 0.5 us: nothing beyond the rounding; model + 1 us: 0.5 us of it."""
    cfg = load_gpu("h100-80gb")
    constants, rates = cost_model.op_constants(cfg), opfit.rates(cfg)
    group = opfit.load_groups("h100-80gb")[0]
    tokens = np.array([1.0, 16.0, 64.0])
    predicted = opfit.predict(opfit.OpGroup(group.gpu, group.model, group.tp, group.shape, tokens, {}),
                              constants, *rates)
    for offset in (0.5e-6, 1.0e-6):
        measured = {op: predicted[op] + offset for op in predicted}
        fake = opfit.OpGroup(group.gpu, group.model, group.tp, group.shape, tokens, measured)
        errors = opfit.group_errors([fake], constants, *rates)[0]
        expected = (offset - opfit.TIMER_HALF_STEP_S) / measured["add"]
        assert np.allclose(errors.beyond_rounding["add"], expected)
        assert np.allclose(errors.by_kind["add"], offset / measured["add"])


# -- --fit-ops DIR: a profile fitted on a user's own tables -------------------------------
def _vidur_subset(directory, models=("Llama-2-7b-hf", "CodeLlama-34b-Instruct-hf"), tps=("1", "2"), every=4):
    """A few of the shipped H100 rows written as Vidur's <org>/<model>/mlp.csv (no model column)."""
    import csv
    import gzip

    with gzip.open(opfit.DATA_DIR / "compute_h100.csv.gz", "rt", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] in models and r["num_tensor_parallel_workers"] in tps]
    for model in models:
        mine = [r for r in rows if r["model"] == model][::every]
        path = directory / "org" / model / "mlp.csv"
        path.parent.mkdir(parents=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, [k for k in mine[0] if k != "model"], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(mine)


SPEC = ["--name", "my-h100", "--peak-flops", "989e12", "--mem-bandwidth", "3.35e12", "--memory-bytes", "8.5899e10",
        "--host-bandwidth", "64e9"]


def test_fit_ops_dir_writes_a_usable_profile_with_its_held_out_error(tmp_path, capsys):
    from omegaconf import OmegaConf

    tables, out = tmp_path / "tables", tmp_path / "my-h100.yaml"
    _vidur_subset(tables)
    assert main(["--fit-ops", str(tables), "--out", str(out), *SPEC]) == 0
    text = out.read_text()
    assert "leave one model out, <= 64 tokens: gemm" in text and "# GPU profile fitted by kvbench-validate" in text
    cfg = OmegaConf.load(out)
    assert cfg.name == "my-h100" and cfg.op_model == "fixed_floor" and cfg.peak_flops == 989e12
    assert "my-h100" in cost_model.op_constants_source(cfg) and "sets" not in cost_model.op_constants_source(cfg)
    # the fit predicts the shipped rows it did not see (every 4th row was used) within the layer target
    groups = [g for g in opfit.load_groups("h100-80gb") if g.model in ("Llama-2-7b-hf", "CodeLlama-34b-Instruct-hf")
              and g.tp in (1, 2)]
    errors = opfit.group_errors(groups, cost_model.op_constants(cfg), cfg.peak_flops, cfg.mem_bandwidth)
    assert opfit.summary(errors, "layer")[0] <= LAYER_TARGET
    assert opfit.summary(errors, "norm", "<=64")[0] <= SMALL_BATCH_TARGET
    model = OmegaConf.create({"name": "m", "family": "llama", "num_layers": 2, "hidden_size": 4096, "num_heads": 32,
                              "num_kv_heads": 32, "head_size": 128, "intermediate_size": 11008, "vocab_size": 32000,
                              "max_model_len": 4096, "dtype": "float16"})
    params = cost_model.CostParams.from_configs(model, cfg, geometry=model_geometry(model))
    assert params.op_constants == cost_model.op_constants(cfg)
    # an existing file is refused without --force, and kept as it was
    capsys.readouterr()
    assert main(["--fit-ops", str(tables), "--out", str(out), *SPEC]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "exists; give another path or --force" in err and out.read_text() == text


def test_fit_ops_dir_refuses_a_bad_table_in_one_line_and_writes_nothing(tmp_path, capsys):
    tables, out = tmp_path / "tables", tmp_path / "my-h100.yaml"
    (tables / "m").mkdir(parents=True)
    (tables / "m" / "mlp.csv").write_text("num_tokens,n_head\n1,32\n")
    assert main(["--fit-ops", str(tables), "--out", str(out), *SPEC]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no column 'n_kv_head'" in err and "mlp.csv" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [tables]
    assert main(["--fit-ops", str(tmp_path / "none"), "--out", str(out), *SPEC]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["--fit-ops", str(tables), "--out", str(out), "--name", "x"]) == 2
    assert "--peak-flops" in capsys.readouterr().err
