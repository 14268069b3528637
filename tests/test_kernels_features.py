"""Attention features of the paged kernel against its torch reference: sliding windows (per call,
as each layer passes its own), logit soft-capping and a non-default scale, alone and together, on
decode, prefill, chunked-prefill and split-K batches over shuffled block tables.

Without CUDA the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, set before the kernels
are imported). Tolerances as tests/test_kernels.py: float32 1e-4 abs / 1e-4 rel, float16 2e-3 /
2e-3, bfloat16 1.5e-2 / 1.6e-2 (the kernel computes tanh as 1 - 2 / (1 + 2^(2y log2 e)); in float32
that differs from torch.tanh by under 1e-6 times the cap).
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import kernels  # noqa: E402
from kernels.attention import AttentionConfig, _paged_attention  # noqa: E402
from tests.test_kernels import TOLERANCE, make_batch  # noqa: E402


def check(batch, *, window=None, softcap=None, scale=0.3, num_splits=None, config=None):
    expected = kernels.paged_attention_ref(*batch, scale, window=window, softcap=softcap)
    out = torch.full_like(batch[0], float("nan"))
    _paged_attention(*batch, scale, out=out, num_splits=num_splits, config=config, window=window, softcap=softcap)
    torch.testing.assert_close(out, expected, **TOLERANCE[batch[0].dtype])
    return expected


BATCHES = {
    "decode": ([1, 1, 1], [37, 5, 70], dict(block_size=8)),
    "prefill": ([13, 6], [13, 6], dict(block_size=4)),
    "chunked_mixed": ([6, 1, 9, 1], [29, 40, 9, 3], dict(block_size=4, num_heads=6, num_kv_heads=2)),
}


@pytest.mark.parametrize("batch_name", sorted(BATCHES))
@pytest.mark.parametrize("window,softcap", [(4, None), (1, None), (17, None), (None, 5.0), (6, 2.0)],
                         ids=["window4", "window1", "window17", "softcap5", "window6-softcap2"])
def test_features_match_reference(batch_name, window, softcap):
    q_lens, contexts, kwargs = BATCHES[batch_name]
    check(make_batch(q_lens, contexts, **kwargs), window=window, softcap=softcap)


def test_features_change_the_output():
    """The reference really narrows and caps: not a test that cannot fail."""
    batch = make_batch([1, 4], [30, 12], block_size=4)
    plain = kernels.paged_attention_ref(*batch, 0.3)
    assert not torch.allclose(plain, kernels.paged_attention_ref(*batch, 0.3, window=5))
    assert not torch.allclose(kernels.paged_attention_ref(*batch, 3.0),
                              kernels.paged_attention_ref(*batch, 3.0, softcap=1.0))
    # a window as long as the context is plain causal attention
    torch.testing.assert_close(kernels.paged_attention_ref(*batch, 0.3, window=30), plain)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_features_low_precision(dtype):
    batch = make_batch([5, 1, 1], [21, 33, 2], block_size=8, dtype=dtype)
    check(batch, window=7, softcap=3.0, scale=0.25)


@pytest.mark.parametrize("num_splits", [2, 5])
def test_window_with_split_k(num_splits):
    """Splits share out only the tiles inside the window; splits with no key must not count."""
    batch = make_batch([1, 1], [150, 40], block_size=16, dtype=torch.float16)
    check(batch, window=37, num_splits=num_splits, config=AttentionConfig(16, 16, 4, 2))


def test_window_smaller_than_a_tile_in_a_long_prefill():
    batch = make_batch([40], [90], block_size=3)
    check(batch, window=5, config=AttentionConfig(16, 16, 4, 2))


@pytest.mark.parametrize("bad", [{"window": 0}, {"window": 2.5}, {"softcap": 0.0}, {"softcap": float("inf")}])
def test_bad_feature_arguments_are_refused(bad):
    batch = make_batch([1], [4])
    for op in (kernels.paged_attention_ref, kernels.paged_attention):
        with pytest.raises(ValueError, match=next(iter(bad))):
            op(*batch, 0.3, **bad)
