"""The Triton paged-KV kernels against their torch references.

Without CUDA the kernels run in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1 must be
set before the kernels are first imported, hence the top of this file); sizes stay tiny. With
CUDA the same tests run compiled on the GPU, and the ``gpu`` tests add realistic shapes.

Tolerances (output vs the float32 reference on the same low-precision inputs):
float32 1e-4 abs / 1e-4 rel, float16 2e-3 / 2e-3, bfloat16 1.5e-2 / 1.6e-2 (the kernel rounds the
softmax probabilities to the input dtype before the P@V product, like FlashAttention).
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import kernels  # noqa: E402
from kernels import checks  # noqa: E402
from kernels.attention import AttentionConfig, _paged_attention, choose_num_splits  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.5e-2, rtol=1.6e-2),
}


def gpu(test):
    """CUDA-only test: marked ``gpu`` (``pytest -m gpu``) and skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(test))


@pytest.fixture(autouse=True)
def debug_checks():
    previous = checks.set_debug_checks(True)
    yield
    checks.set_debug_checks(previous)


def make_batch(q_lens, context_lens, *, num_heads=4, num_kv_heads=2, head_size=32, block_size=4,
               dtype=torch.float32, spare_blocks=3, extra_table_cols=2, seed=0, device=DEVICE):
    """Random query and pool; each sequence gets its own blocks in shuffled order; table rows are
    padded past the used blocks with garbage that the kernel must never dereference."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-c // block_size) for c in context_lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    key_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_size, generator=gen).to(dtype)
    value_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_size, generator=gen).to(dtype)
    order = torch.randperm(num_blocks, generator=gen)
    width = max(blocks_per_seq) + extra_table_cols
    garbage = torch.randint(-(2**30), 2**30, (len(q_lens), width), generator=gen, dtype=torch.int64)
    block_tables = garbage.to(torch.int32)
    taken = 0
    for b, n in enumerate(blocks_per_seq):
        block_tables[b, :n] = order[taken: taken + n]
        taken += n
    query_start_loc = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    query = torch.randn(int(query_start_loc[-1]), num_heads, head_size, generator=gen).to(dtype)
    tensors = (query, key_cache, value_cache, block_tables, torch.tensor(context_lens, dtype=torch.int32),
               query_start_loc)
    return tuple(t.to(device) for t in tensors)


def poisoned_like(query):
    return torch.full_like(query, float("nan"))


def check_attention(batch, *, num_splits=None, config=None, scale=None):
    query = batch[0]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    expected = kernels.paged_attention_ref(*batch, scale)
    out = poisoned_like(query)
    result = _paged_attention(*batch, scale, out=out, num_splits=num_splits, config=config)
    assert result is out
    torch.testing.assert_close(out, expected, **TOLERANCE[query.dtype])
    return out


# ---- paged attention: correctness -------------------------------------------------------------

CASES = {
    # name: (q_lens, context_lens, batch kwargs)
    "decode_gqa_bs16": ([1, 1, 1], [37, 16, 70], dict(block_size=16)),
    "mixed_bf16_bs4": ([5, 1, 0, 3, 1], [5, 22, 9, 11, 1], dict(block_size=4, dtype=torch.bfloat16)),
    "chunked_prefill_fp16_bs8": ([6, 7], [29, 7], dict(block_size=8, dtype=torch.float16)),
    "mqa_bs1": ([2, 1, 4], [9, 13, 6], dict(block_size=1, num_kv_heads=1)),
    "mha_bs256": ([3, 1], [200, 131], dict(block_size=256, num_kv_heads=4, dtype=torch.bfloat16)),
    "gqa_group3_bs24": ([4, 1], [50, 25], dict(block_size=24, num_heads=6, num_kv_heads=2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_paged_attention_matches_reference(name):
    q_lens, context_lens, kwargs = CASES[name]
    check_attention(make_batch(q_lens, context_lens, **kwargs))


@pytest.mark.parametrize("seed", range(8))
def test_paged_attention_random_batches(seed):
    """Fresh random compositions: sequence count, prefill/decode mix, cached prefixes, page size,
    GQA group, dtype, forced split count."""
    gen = torch.Generator().manual_seed(100 + seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=gen))]  # noqa: E731
    num_seqs = int(torch.randint(1, 5, (1,), generator=gen))
    q_lens, context_lens = [], []
    for _ in range(num_seqs):
        q_len = pick([0, 1, 1, 2, 7, 19])
        q_lens.append(q_len)
        context_lens.append(q_len + pick([0, 1, 5, 16, 33, 70]) if q_len else pick([1, 9]))
    num_kv_heads, group = pick([(1, 4), (2, 2), (2, 3), (4, 1)])
    batch = make_batch(q_lens, context_lens, num_heads=num_kv_heads * group, num_kv_heads=num_kv_heads,
                       head_size=pick([16, 48, 64]), block_size=pick([1, 3, 8, 16, 64]),
                       dtype=pick([torch.float32, torch.float16, torch.bfloat16]), seed=seed)
    if batch[0].shape[0] == 0:
        return
    check_attention(batch, num_splits=pick([None, 1, 2, 4]), config=pick([None, AttentionConfig(16, 16, 4, 2)]))


@pytest.mark.parametrize("head_size", [64, 80, 96, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_attention_head_sizes(head_size, dtype):
    batch = make_batch([3, 1], [19, 10], head_size=head_size, block_size=8, num_heads=2, num_kv_heads=1,
                       dtype=dtype)
    check_attention(batch)


@pytest.mark.parametrize("num_splits", [2, 3, 8])
def test_split_k_decode(num_splits):
    batch = make_batch([1, 1, 1], [150, 3, 97], block_size=16, dtype=torch.float16)
    check_attention(batch, num_splits=num_splits, config=AttentionConfig(16, 16, 4, 2))


def test_split_k_mixed_batch_with_empty_splits():
    # more splits than KV tiles for some tiles: those splits write an empty partial that must not count
    batch = make_batch([4, 1, 2], [40, 9, 2], block_size=4, dtype=torch.bfloat16)
    check_attention(batch, num_splits=5, config=AttentionConfig(16, 16, 4, 2))


@pytest.mark.parametrize("block_size", [2, 16, 32])
def test_small_tiles_cover_both_page_paths(block_size):
    # BLOCK_N = 16: pages of 16 and 32 take the one-page-per-tile path, 2 the per-token gather
    batch = make_batch([9, 1, 17], [41, 30, 17], block_size=block_size, num_heads=8, num_kv_heads=2)
    check_attention(batch, config=AttentionConfig(16, 16, 4, 2))


def test_auto_split_decode_long_table():
    # a wide table makes the launcher pick split-K for a tiny decode batch (see choose_num_splits)
    batch = make_batch([1], [300], block_size=16, num_kv_heads=2, extra_table_cols=40)
    assert choose_num_splits(1, 2, batch[3].shape[1] * 16, 8, decode_only=True) > 1
    out = kernels.paged_attention(*batch, 0.2, out=poisoned_like(batch[0]))
    torch.testing.assert_close(out, kernels.paged_attention_ref(*batch, 0.2), **TOLERANCE[torch.float32])


def test_contiguous_run_and_one_block_per_sequence():
    # contiguous allocations: consecutive block ids, or a single block as long as the sequence
    q_lens, context_lens = [3, 1], [21, 30]
    batch = list(make_batch(q_lens, context_lens, block_size=4))
    batch[3] = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]], dtype=torch.int32,
                            device=DEVICE)
    batch[1], batch[2] = torch.randn(2, 16, 4, 2, 32, device=DEVICE).unbind(0)
    check_attention(tuple(batch))
    one_block = make_batch(q_lens, context_lens, block_size=32, spare_blocks=0, extra_table_cols=0)
    check_attention(one_block)


def test_strided_views_query_out_and_interleaved_pool():
    q_lens, context_lens = [2, 1], [11, 6]
    query, _, _, block_tables, lens, qsl = make_batch(q_lens, context_lens, block_size=4)
    qkv = torch.randn(query.shape[0], 8, 32, device=DEVICE)  # packed [T, Hq + 2 Hkv, D]
    query = qkv[:, :4]
    pool = torch.randn(8, 2, 4, 2, 32, device=DEVICE)
    key_cache, value_cache = pool[:, 0], pool[:, 1]  # K and V interleaved per block
    out_storage = torch.full((query.shape[0], 4, 48), float("nan"), device=DEVICE)
    out = out_storage[:, :, :32]
    block_tables = torch.tensor([[7, 2, 5, 0], [1, 6, 0, 0]], dtype=torch.int32, device=DEVICE)
    args = (query, key_cache, value_cache, block_tables, lens, qsl, 0.3)
    kernels.paged_attention(*args, out=out)
    torch.testing.assert_close(out, kernels.paged_attention_ref(*args), **TOLERANCE[torch.float32])
    assert torch.isnan(out_storage[:, :, 32:]).all()  # nothing written outside the view


def test_returns_new_output_and_handles_empty_batch():
    batch = make_batch([2, 1], [7, 5])
    out = kernels.paged_attention(*batch, 0.5)
    assert out.shape == batch[0].shape and out.dtype == batch[0].dtype
    torch.testing.assert_close(out, kernels.paged_attention_ref(*batch, 0.5))
    empty = (batch[0][:0], batch[1], batch[2], batch[3][:0], batch[4][:0], batch[5][:1])
    assert kernels.paged_attention(*empty, 0.5).shape == (0, 4, 32)


def test_choose_num_splits():
    assert choose_num_splits(64, 8, 2048, 132, decode_only=True) == 1  # enough programs already
    assert choose_num_splits(1, 8, 8192, 132, decode_only=True) == 32
    assert choose_num_splits(8, 8, 8192, 132, decode_only=True) == 5
    assert choose_num_splits(1, 8, 300, 132, decode_only=True) == 1  # context too short to split
    assert choose_num_splits(1, 8, 8192, 132, decode_only=False) == 1  # prefill never splits


# ---- paged attention: launcher errors ---------------------------------------------------------

def _replace(batch, index, value):
    return tuple(value if i == index else x for i, x in enumerate(batch))


@pytest.mark.parametrize("op", [kernels.paged_attention, kernels.paged_attention_ref], ids=["triton", "torch"])
def test_attention_launcher_errors(op):
    batch = make_batch([2, 1], [7, 5])
    query, key_cache, value_cache, block_tables, lens, qsl = batch
    bad = [
        (_replace(batch, 0, query[0]), "query must be \\[num_tokens, num_heads, head_size\\]"),
        (_replace(batch, 0, query.half()), "query dtype float16 differs from the cache dtype float32"),
        (_replace(batch, 0, torch.randn(3, 3, 32, device=DEVICE)), "must be a positive multiple of num_kv_heads"),
        (_replace(batch, 0, torch.randn(3, 4, 16, device=DEVICE)), "query head_size 16 differs"),
        (_replace(batch, 0, torch.randn(3, 32, 4, device=DEVICE).transpose(1, 2)),
         "query must be contiguous in its last dimension"),
        (_replace(batch, 1, key_cache.to(torch.int8)), "key_cache dtype must be float32, float16 or bfloat16"),
        (_replace(batch, 2, value_cache[:, :2]), "key_cache and value_cache shapes differ"),
        (_replace(batch, 3, block_tables.long()), "block_tables must be int32, got int64"),
        (_replace(batch, 4, lens[:1]), "block_tables has 2 rows, context_lens 1 sequences"),
        (_replace(batch, 5, qsl[:2]), "query_start_loc must have num_seqs \\+ 1 = 3 entries"),
        (_replace(batch, 5, torch.tensor([0, 2, 2], dtype=torch.int32, device=DEVICE)),
         "query_start_loc\\[-1\\] \\(2\\) must equal the number of query tokens \\(3\\)"),
        (_replace(batch, 4, torch.tensor([1, 5], dtype=torch.int32, device=DEVICE)),
         "context_lens\\[b\\] must be >= its query length"),
        (_replace(batch, 4, torch.tensor([7, 50], dtype=torch.int32, device=DEVICE)),
         "exceed the block table capacity"),
        (_replace(batch, 3, torch.full_like(block_tables, 99)), "uses a block outside"),
    ]
    for args, message in bad:
        with pytest.raises(ValueError, match=message):
            op(*args, 0.5)
    with pytest.raises(ValueError, match="out shape"):
        op(*batch, 0.5, out=torch.empty(3, 4, 16, device=DEVICE))
    with pytest.raises(ValueError, match="out dtype"):
        op(*batch, 0.5, out=torch.empty(3, 4, 32, device=DEVICE, dtype=torch.float16))
    with pytest.raises(ValueError, match="num_splits must be None or an integer in \\[1, 256\\]"):
        op(*batch, 0.5, num_splits=0)
    with pytest.raises(ValueError, match="scale must be a finite Python number"):
        op(*batch, float("nan"))
    big = torch.randn(3, 4, 300, device=DEVICE)
    pool = torch.randn(4, 4, 2, 300, device=DEVICE)
    with pytest.raises(ValueError, match="head_size must be in \\[1, 256\\], got 300"):
        op(big, pool, pool, block_tables, lens, qsl, 0.5)


def test_cpu_tensors_without_interpreter_are_refused(monkeypatch):
    import kernels.attention as attention

    monkeypatch.setattr(attention, "INTERPRETED", False)
    batch = make_batch([1], [4], device="cpu")
    with pytest.raises(ValueError, match="need CUDA tensors .* TRITON_INTERPRET=1"):
        kernels.paged_attention(*batch, 0.5)


# ---- store and copy ---------------------------------------------------------------------------

def _pool(num_blocks, block_size, num_kv_heads=2, head_size=32, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    return tuple(torch.randn(shape, generator=gen).to(dtype).to(DEVICE) for _ in range(2))


@pytest.mark.parametrize("block_size,dtype,head_size", [(1, torch.float32, 32), (16, torch.bfloat16, 80),
                                                        (7, torch.float16, 64)])
def test_store_kv_matches_reference(block_size, dtype, head_size):
    key_cache, value_cache = _pool(6, block_size, head_size=head_size, dtype=dtype)
    num_slots = 6 * block_size
    slots = torch.randperm(num_slots)[:5]
    slots[1] = -1  # skipped (padding token)
    qkv = torch.randn(5, 6, head_size).to(dtype)  # key and value as strided views of a packed tensor
    key, value = qkv[:, 2:4].to(DEVICE), qkv[:, 4:6].to(DEVICE)
    slot_mapping = slots.to(DEVICE)
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    kernels.store_kv_ref(key, value, expected_k, expected_v, slot_mapping)
    kernels.store_kv(key, value, key_cache, value_cache, slot_mapping)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)
    flat = key_cache.reshape(num_slots, 2, head_size)
    assert torch.equal(flat[slots[0]], key[0])


def test_store_and_copy_errors():
    key_cache, value_cache = _pool(4, 4)
    key = torch.randn(3, 2, 32, device=DEVICE)
    for op in (kernels.store_kv, kernels.store_kv_ref):
        with pytest.raises(ValueError, match="slot_mapping must be int64, got int32"):
            op(key, key, key_cache, value_cache, torch.zeros(3, dtype=torch.int32, device=DEVICE))
        with pytest.raises(ValueError, match="key must be \\[num_tokens, 2, 32\\]"):
            op(key[:, :1], key, key_cache, value_cache, torch.zeros(3, dtype=torch.int64, device=DEVICE))
        with pytest.raises(ValueError, match="slot_mapping has a slot >= num_slots \\(16\\)"):
            op(key, key, key_cache, value_cache, torch.tensor([0, 1, 16], device=DEVICE))
    for op in (kernels.copy_slots, kernels.copy_slots_ref):
        with pytest.raises(ValueError, match="src_slots and dst_slots lengths differ"):
            op(key_cache, value_cache, torch.arange(3, device=DEVICE), torch.arange(2, device=DEVICE))
        with pytest.raises(ValueError, match="overlap"):
            op(key_cache, value_cache, torch.arange(3, device=DEVICE), torch.arange(2, 5, device=DEVICE))


@pytest.mark.parametrize("block_size", [1, 5, 16])
def test_copy_slots_matches_reference(block_size):
    key_cache, value_cache = _pool(16, block_size, dtype=torch.float16)
    perm = torch.randperm(16 * block_size)
    src, dst = perm[:6].to(DEVICE), perm[6:12].to(DEVICE)
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    kernels.copy_slots_ref(expected_k, expected_v, src, dst)
    kernels.copy_slots(key_cache, value_cache, src, dst)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


class Op:  # shaped like allocators.base.CopyOp
    def __init__(self, src, dst, length):
        self.src, self.dst, self.length = src, dst, length


def _sequential_copy(cache, ops):
    flat = cache.reshape(-1, *cache.shape[2:])
    for op in ops:
        flat[op.dst: op.dst + op.length] = flat[op.src: op.src + op.length].clone()


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_apply_copy_ops_equals_sequential_copies(backend):
    ops = [Op(0, 20, 4),  # CoW of a block
           Op(20, 2, 4),  # reads what the previous op wrote: needs a new call
           Op(8, 5, 7),  # a region moving down onto itself (memmove)
           Op(24, 27, 5),  # moving up onto itself
           Op(30, 30, 2), Op(1, 3, 0)]  # no-ops
    key_cache, value_cache = _pool(8, 4)
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    _sequential_copy(expected_k, ops)
    _sequential_copy(expected_v, ops)
    kernels.apply_copy_ops(key_cache, value_cache, ops, kernels.get_ops(backend).copy_slots)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_plan_copies_batches_only_independent_pairs():
    calls = kernels.plan_copies([(0, 8, 2), (4, 12, 2), (8, 16, 2), (2, 3, 3)])
    as_lists = [(s.tolist(), d.tolist()) for s, d in calls]
    assert as_lists == [([0, 1, 4, 5], [8, 9, 12, 13]),  # independent: one call
                        ([8, 9, 4], [16, 17, 5]),  # 8, 9 were written by the first call
                        ([3], [4]), ([2], [3])]  # rest of the overlapping move 2..4 -> 3..5, back to front
    with pytest.raises(ValueError, match="negative field"):
        kernels.plan_copies([(0, 1, -1)])


def test_swap_round_trip():
    key_cache, value_cache = _pool(4, 4, dtype=torch.bfloat16)
    slots = [13, 2, 7]
    k_host, v_host = kernels.gather_slots(key_cache, value_cache, slots)
    assert k_host.device.type == "cpu" and k_host.shape == (3, 2, 32)
    assert torch.equal(k_host[0], key_cache[3, 1].cpu())
    other_k, other_v = _pool(4, 4, dtype=torch.bfloat16, seed=5)
    kernels.scatter_slots(other_k, other_v, [0, 1, 15], k_host, v_host)
    assert torch.equal(other_k[0, 0].cpu(), k_host[0]) and torch.equal(other_v[3, 3].cpu(), v_host[2])
    with pytest.raises(ValueError, match="key must be \\[2, 2, 32\\]"):
        kernels.scatter_slots(other_k, other_v, [0, 1], k_host, v_host)


# ---- backend switch ---------------------------------------------------------------------------

def test_get_ops_backends_agree():
    batch = make_batch([3, 1], [12, 9], block_size=4)
    triton_ops, torch_ops = kernels.get_ops("triton"), kernels.get_ops("torch")
    assert (triton_ops.name, torch_ops.name) == ("triton", "torch")
    torch.testing.assert_close(triton_ops.paged_attention(*batch, 0.4), torch_ops.paged_attention(*batch, 0.4))
    with pytest.raises(ValueError, match="kernel backend must be one of \\['triton', 'torch'\\], got 'cuda'"):
        kernels.get_ops("cuda")


def test_store_then_attend_end_to_end():
    """One engine-like step: store the new tokens' K/V, then attend (prefill + decode mixed)."""
    torch.manual_seed(3)
    block_size, heads, kv_heads, d = 4, 4, 2, 32
    key_cache, value_cache = (torch.zeros(10, block_size, kv_heads, d, device=DEVICE) for _ in range(2))
    block_tables = torch.tensor([[3, 7, 1], [9, 0, 0]], dtype=torch.int32, device=DEVICE)
    # seq 0: prefill of 9 tokens; seq 1: 4 cached tokens (stored earlier) + 1 decode token
    slot = lambda b, pos: int(block_tables[b, pos // block_size]) * block_size + pos % block_size  # noqa: E731
    ops = kernels.get_ops("triton")
    ops.store_kv(torch.randn(4, kv_heads, d, device=DEVICE), torch.randn(4, kv_heads, d, device=DEVICE), key_cache,
                 value_cache, torch.tensor([slot(1, p) for p in range(4)], device=DEVICE))
    new_slots = torch.tensor([slot(0, p) for p in range(9)] + [slot(1, 4)], device=DEVICE)
    k_new, v_new = torch.randn(10, kv_heads, d, device=DEVICE), torch.randn(10, kv_heads, d, device=DEVICE)
    ops.store_kv(k_new, v_new, key_cache, value_cache, new_slots)
    query = torch.randn(10, heads, d, device=DEVICE)
    lens = torch.tensor([9, 5], dtype=torch.int32, device=DEVICE)
    qsl = torch.tensor([0, 9, 10], dtype=torch.int32, device=DEVICE)
    out = ops.paged_attention(query, key_cache, value_cache, block_tables, lens, qsl, d ** -0.5)
    # seq 0 is plain causal self-attention over its new tokens
    k0 = k_new[:9].repeat_interleave(2, dim=1)
    v0 = v_new[:9].repeat_interleave(2, dim=1)
    expected0 = torch.nn.functional.scaled_dot_product_attention(
        query[:9].transpose(0, 1), k0.transpose(0, 1), v0.transpose(0, 1), is_causal=True).transpose(0, 1)
    torch.testing.assert_close(out[:9], expected0, **TOLERANCE[torch.float32])


# ---- GPU only: realistic shapes, big pools ----------------------------------------------------

@gpu
@pytest.mark.parametrize("block_size", [1, 16, 128])
@pytest.mark.parametrize("mode", ["decode", "mixed"])
def test_gpu_7b_shapes(block_size, mode):
    if mode == "decode":
        q_lens, lens = [1] * 16, [int(x) for x in torch.randint(1, 3000, (16,))]
    else:
        q_lens, lens = [512, 1, 1, 37, 1], [2048, 900, 4000, 600, 17]
    batch = make_batch(q_lens, lens, num_heads=32, num_kv_heads=8, head_size=128, block_size=block_size,
                       dtype=torch.bfloat16)
    check_attention(batch)
    check_attention(batch, num_splits=4)


@gpu
def test_gpu_pool_past_int32_offsets():
    # 2^31 + elements per cache: the sequence's blocks sit at the end of the pool
    block_size, kv_heads, d = 16, 8, 128
    num_blocks = (2**31 // (block_size * kv_heads * d)) + 64
    key_cache = torch.empty(num_blocks, block_size, kv_heads, d, dtype=torch.float16, device="cuda")
    value_cache = torch.empty_like(key_cache)
    tail = torch.arange(num_blocks - 40, num_blocks, device="cuda")
    key_cache[tail] = torch.randn(40, block_size, kv_heads, d, device="cuda", dtype=torch.float16)
    value_cache[tail] = torch.randn(40, block_size, kv_heads, d, device="cuda", dtype=torch.float16)
    block_tables = tail.flip(0).to(torch.int32).reshape(2, 20)
    lens = torch.tensor([300, 317], dtype=torch.int32, device="cuda")
    qsl = torch.tensor([0, 5, 6], dtype=torch.int32, device="cuda")
    query = torch.randn(6, 32, d, dtype=torch.float16, device="cuda")
    check_attention((query, key_cache, value_cache, block_tables, lens, qsl))
    slots = tail[-1] * block_size + torch.arange(block_size, device="cuda")
    new = torch.randn(block_size, kv_heads, d, dtype=torch.float16, device="cuda")
    kernels.store_kv(new, new, key_cache, value_cache, slots)
    assert torch.equal(key_cache[-1], new)
    kernels.copy_slots(key_cache, value_cache, slots, torch.arange(block_size, device="cuda"))
    assert torch.equal(value_cache[0], new)
