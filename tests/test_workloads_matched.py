"""sharegpt_matched: the real pairs, rescaled by monotone maps to the stated means."""
from __future__ import annotations

import numpy as np
import pytest

from kvbench.workloads import WorkloadError, build_workload
from kvbench.workloads.sharegpt import load_lengths_table
from kvbench.workloads.sharegpt_matched import fit_factors, rescale


def _build(**knobs):
    cfg = {"name": "sharegpt_matched", "num_requests": 500, "request_rate": float("inf"), **knobs}
    return build_workload(cfg, vocab_size=50272, max_model_len=2048, tokenizer_name=None)


def test_pool_has_the_target_means_and_no_pair_is_dropped():
    meta = _build().meta
    assert meta["pool_mean_prompt_len"] == pytest.approx(161.31, rel=2e-3)
    assert meta["pool_mean_output_len"] == pytest.approx(337.99, rel=2e-3)
    assert meta["pairs_after_filter"] == meta["pairs_total"] == 4000
    assert 1.5 < meta["prompt_scale"] < 3 and 0.8 < meta["output_scale"] < 1.2


def test_rescaling_keeps_rank_order_and_the_caps():
    prompt, output, _ = load_lengths_table()
    cp, co = fit_factors(prompt, output, 161.31, 337.99)
    p2, o2 = rescale(prompt, output, cp, co)
    assert (np.diff(o2[np.argsort(output, kind="stable")]) >= 0).all()
    assert p2.max() <= 1024 and (p2 + o2).max() <= 2048
    same_output = output == np.median(output)  # at one output length the prompt map is monotone
    assert (np.diff(p2[same_output][np.argsort(prompt[same_output], kind="stable")]) >= 0).all()


def test_other_targets_and_a_bad_one():
    assert _build(target_mean_prompt=120.0).meta["pool_mean_prompt_len"] == pytest.approx(120.0, rel=2e-3)
    with pytest.raises(WorkloadError, match="target_mean_prompt"):
        _build(target_mean_prompt=-1.0)
