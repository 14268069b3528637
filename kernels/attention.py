"""Paged attention in Triton: decode, prefill, chunked prefill and mixed batches in one kernel.

KV pool layout (fixed; the engine, the allocators' slot numbers and the store/copy kernels
depend on it). One pool per layer:

    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_size]

a view of [num_slots, num_kv_heads, head_size] with slot = block * block_size + offset; V's head
size may differ from K's (MLA: K qk_nope + qk_rope, V v_head_dim), and the output has V's. A
contiguous allocation is a run of consecutive block ids. The head dimension must be contiguous;
the block and slot strides are free (a K/V-interleaved pool works).

Batch layout (varlen): sequence b owns query tokens query_start_loc[b] : query_start_loc[b+1]
of ``query`` [T, Hq, D]; context_lens[b] counts all its tokens including this step's new ones,
so its query token j sits at position context_lens[b] - q_len_b + j and attends causally to
positions <= its own, read through block_tables[b, position // block_size]. A decode sequence
has q_len 1, a (chunked) prefill sequence several; both mix freely in one launch.

Work split: a program owns one KV head and a tile of BLOCK_Q query tokens of one sequence, and
processes all QUERIES_PER_KV query heads of that KV head together (BLOCK_M = BLOCK_Q x heads
rows), so GQA/MQA read each K/V tile once. It walks the context in tiles of BLOCK_N tokens,
gathering each token through the block table, so tiny pages still load full tiles; pages of
BLOCK_N tokens or more are read with one block-table load per tile. Softmax is online in
float32 (exp2 domain). Split-K (flash-decoding): the context of each tile is cut into
``num_splits`` ranges, each written as a normalised partial output plus its log-sum-exp, then
merged by ``_reduce_splits_kernel``. All pool offsets are int64.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernels.checks import AttentionShape, check_attention_args, require

LOG2_E = 1.4426950408889634
MIN_TOKENS_PER_SPLIT = 256  # a split below this spends more on its partial write than it saves
MAX_AUTO_SPLITS = 64


@triton.jit
def _find_seq(query_start_loc_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence that owns q tile ``tile``: the largest b with query_start_loc[b] // BLOCK_Q + b <= tile."""
    lo = tile * 0
    hi = tile * 0 + (num_seqs - 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        first_tile = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if first_tile <= tile:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def _attend_kv_tile(
    q,  # [BLOCK_M, HEAD_PAD] query tile
    m_i, l_i,  # [BLOCK_M] running max and sum (log2 domain)
    acc,  # [BLOCK_M, V_HEAD_PAD] float32 unnormalised output
    kv_tile,  # index of the BLOCK_N-token tile of the context
    kv_end,  # keys at positions >= kv_end are not read
    q_pos,  # [BLOCK_M] position of each row's query token
    block_table_row,  # this sequence's block-table row
    k_head_ptr, v_head_ptr,  # cache base pointers advanced to this KV head
    stride_kb, stride_ks, stride_vb, stride_vs,
    scale_log2,
    window,  # SLIDING: keys at positions <= q_pos - window are masked
    softcap_in,  # SOFTCAP: scale / softcap
    softcap_out,  # SOFTCAP: softcap * log2(e)
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,
    V_HEAD_SIZE: tl.constexpr,
    V_HEAD_PAD: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    INTERPRET: tl.constexpr,
    SLIDING: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """One online-softmax step over BLOCK_N keys; returns the updated (m_i, l_i, acc)."""
    dims = tl.arange(0, HEAD_PAD)
    dim_valid = dims < HEAD_SIZE
    tile_start = kv_tile * BLOCK_N
    pos = tile_start + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
    in_range = pos < kv_end
    if BLOCK_SIZE % BLOCK_N == 0:
        # the whole tile lies in one page: one block-table load, consecutive slots
        block = tl.load(block_table_row + tile_start // BLOCK_SIZE).to(tl.int64)
        offset = tile_start % BLOCK_SIZE + tl.arange(0, BLOCK_N)
    else:
        # gather token by token; masked positions never read the (possibly garbage) table tail
        block = tl.load(block_table_row + pos // BLOCK_SIZE, mask=in_range, other=0).to(tl.int64)
        offset = pos % BLOCK_SIZE
    k_row = block * stride_kb + offset * stride_ks  # [BLOCK_N] int64
    v_row = block * stride_vb + offset * stride_vs
    k = tl.load(k_head_ptr + k_row[None, :] + dims[:, None],
                mask=in_range[None, :] & dim_valid[:, None], other=0.0)  # [HEAD_PAD, BLOCK_N]
    if INTERPRET:
        # the interpreter's dot multiplies bfloat16 bit patterns as integers: compute in float32
        s = tl.dot(q.to(tl.float32), k.to(tl.float32))
    elif IEEE_DOT:
        s = tl.dot(q, k, input_precision="ieee")
    else:
        s = tl.dot(q, k)
    if SOFTCAP:
        # softcap * tanh(scale * s / softcap), tanh(y) = 1 - 2 / (1 + e^(2y)) (saturates cleanly at +-1)
        capped = 1.0 - 2.0 / (1.0 + tl.exp2(s * (softcap_in * 2.8853900817779268)))  # 2 * log2(e)
        s = capped * softcap_out  # [BLOCK_M, BLOCK_N]
    else:
        s = s * scale_log2  # [BLOCK_M, BLOCK_N]
    keep = pos[None, :] <= q_pos[:, None]  # causal (and past the context end)
    if SLIDING:
        keep = keep & (pos[None, :] > q_pos[:, None] - window)
    s = tl.where(keep, s, float("-inf"))

    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])  # [BLOCK_M, BLOCK_N]
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v_dims = tl.arange(0, V_HEAD_PAD)
    v = tl.load(v_head_ptr + v_row[:, None] + v_dims[None, :],
                mask=in_range[:, None] & (v_dims < V_HEAD_SIZE)[None, :], other=0.0)  # [BLOCK_N, V_HEAD_PAD]
    if INTERPRET:
        acc += tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32))  # same rounding of p as compiled
    elif IEEE_DOT:
        acc += tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        acc += tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _paged_attention_kernel(
    out_ptr,  # [T, Hq, V_HEAD_SIZE], query dtype; written when not SPLIT
    part_out_ptr,  # [num_splits, T, Hq, V_HEAD_PAD] float32; written when SPLIT
    part_lse_ptr,  # [num_splits, T, Hq] float32, log2-sum-exp2 of each split's scaled scores
    query_ptr,  # [T, Hq, HEAD_SIZE]
    key_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, HEAD_SIZE]
    value_cache_ptr,  # [num_blocks, BLOCK_SIZE, Hkv, V_HEAD_SIZE]
    block_tables_ptr,  # [B, max_blocks] int32
    context_lens_ptr,  # [B] int32
    query_start_loc_ptr,  # [B + 1] int32
    scale_log2,  # float32: softmax scale * log2(e)
    window,  # SLIDING: each query attends to its last ``window`` positions (itself included)
    softcap_in,  # SOFTCAP: scale / softcap
    softcap_out,  # SOFTCAP: softcap * log2(e)
    num_seqs,
    num_tokens,  # T
    num_heads,  # Hq
    stride_qt, stride_qh,
    stride_ot, stride_oh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_bt,
    QUERIES_PER_KV: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,  # next power of two >= max(HEAD_SIZE, 16)
    V_HEAD_SIZE: tl.constexpr,  # V's head size (MLA: differs from K's)
    V_HEAD_PAD: tl.constexpr,  # next power of two >= max(V_HEAD_SIZE, 16)
    BLOCK_SIZE: tl.constexpr,  # tokens per page
    BLOCK_M: tl.constexpr,  # rows of the query tile, power of two >= BLOCK_Q * QUERIES_PER_KV
    BLOCK_Q: tl.constexpr,  # query tokens per program
    BLOCK_N: tl.constexpr,  # KV tokens per loop step
    SPLIT: tl.constexpr,  # True: grid axis 2 indexes KV splits, write partials
    IEEE_DOT: tl.constexpr,  # float32 inputs: exact dot instead of tf32
    INTERPRET: tl.constexpr,  # running under TRITON_INTERPRET=1
    SLIDING: tl.constexpr,  # sliding-window attention (``window``)
    SOFTCAP: tl.constexpr,  # logit soft-capping (``softcap_in``, ``softcap_out``)
):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)

    seq = _find_seq(query_start_loc_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    q_tile_start = (tile - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # first query token (within the sequence)
    if q_tile_start >= q_len:
        return  # the grid over-provisions tiles by one per sequence
    context_len = tl.load(context_lens_ptr + seq)
    first_q_pos = context_len - q_len  # position of the sequence's first new token

    rows = tl.arange(0, BLOCK_M)  # [BLOCK_M]: row r is query token r // G, head r % G of this KV head
    q_idx = q_tile_start + rows // QUERIES_PER_KV
    head = kv_head * QUERIES_PER_KV + rows % QUERIES_PER_KV
    row_valid = (rows < BLOCK_Q * QUERIES_PER_KV) & (q_idx < q_len)
    q_pos = first_q_pos + q_idx  # [BLOCK_M]
    token = (q_start + q_idx).to(tl.int64)  # [BLOCK_M] row of query / out
    dims = tl.arange(0, HEAD_PAD)  # [HEAD_PAD]
    dim_valid = dims < HEAD_SIZE

    q = tl.load(query_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
                mask=row_valid[:, None] & dim_valid[None, :], other=0.0)  # [BLOCK_M, HEAD_PAD]

    # Keys this tile needs: [kv_start, kv_end); this split takes a contiguous run of its BLOCK_N tiles.
    kv_end = tl.minimum(first_q_pos + q_tile_start + BLOCK_Q, context_len)
    num_kv_tiles = tl.cdiv(kv_end, BLOCK_N)
    first_kv_tile = 0
    if SLIDING:  # tiles wholly before the window of the tile's first query are skipped
        first_kv_tile = tl.maximum(first_q_pos + q_tile_start - window + 1, 0) // BLOCK_N
    tiles_per_split = tl.cdiv(num_kv_tiles - first_kv_tile, num_splits)
    tile_lo = first_kv_tile + split * tiles_per_split
    tile_hi = tl.minimum(tile_lo + tiles_per_split, num_kv_tiles)

    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)  # running max (finite: a fully masked tile gives no NaN)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2
    acc = tl.zeros([BLOCK_M, V_HEAD_PAD], tl.float32)

    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    k_head_ptr = key_cache_ptr + kv_head.to(tl.int64) * stride_kh
    v_head_ptr = value_cache_ptr + kv_head.to(tl.int64) * stride_vh
    # The interpreter cannot take tensor loop bounds in range() (numpy >= 2.4 refuses int() of the
    # 1-element arrays it uses for scalars), so it walks the same body in a while loop; the
    # compiled kernel keeps the for loop, which Triton software-pipelines.
    if INTERPRET:
        kv_tile = tile_lo
        while kv_tile < tile_hi:
            m_i, l_i, acc = _attend_kv_tile(
                q, m_i, l_i, acc, kv_tile, kv_end, q_pos, block_table_row, k_head_ptr, v_head_ptr,
                stride_kb, stride_ks, stride_vb, stride_vs, scale_log2, window, softcap_in, softcap_out,
                BLOCK_SIZE, BLOCK_N, HEAD_SIZE, HEAD_PAD, V_HEAD_SIZE, V_HEAD_PAD, IEEE_DOT, INTERPRET, SLIDING,
                SOFTCAP)
            kv_tile += 1
    else:
        for kv_tile in range(tile_lo, tile_hi):
            m_i, l_i, acc = _attend_kv_tile(
                q, m_i, l_i, acc, kv_tile, kv_end, q_pos, block_table_row, k_head_ptr, v_head_ptr,
                stride_kb, stride_ks, stride_vb, stride_vs, scale_log2, window, softcap_in, softcap_out,
                BLOCK_SIZE, BLOCK_N, HEAD_SIZE, HEAD_PAD, V_HEAD_SIZE, V_HEAD_PAD, IEEE_DOT, INTERPRET, SLIDING,
                SOFTCAP)

    has_keys = l_i > 0.0  # false only for padding rows and for splits with no key in range
    l_safe = tl.where(has_keys, l_i, 1.0)
    o = acc / l_safe[:, None]  # [BLOCK_M, V_HEAD_PAD]
    v_dims = tl.arange(0, V_HEAD_PAD)
    if SPLIT:
        part_row = (split.to(tl.int64) * num_tokens + token) * num_heads + head  # [BLOCK_M]
        lse = tl.where(has_keys, m_i + tl.log2(l_safe), float("-inf"))
        tl.store(part_lse_ptr + part_row, lse, mask=row_valid)
        tl.store(part_out_ptr + part_row[:, None] * V_HEAD_PAD + v_dims[None, :], o,
                 mask=row_valid[:, None] & (v_dims[None, :] < V_HEAD_PAD))
    else:
        tl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + v_dims[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=row_valid[:, None] & (v_dims < V_HEAD_SIZE)[None, :])


@triton.jit
def _reduce_splits_kernel(
    out_ptr,  # [T, Hq, HEAD_SIZE] (V's head size)
    part_out_ptr,  # [num_splits, T, Hq, HEAD_PAD] float32
    part_lse_ptr,  # [num_splits, T, Hq] float32
    num_tokens,
    num_heads,
    num_splits,
    stride_ot, stride_oh,
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,
    SPLITS_PAD: tl.constexpr,  # next power of two >= num_splits
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)  # [SPLITS_PAD]
    split_valid = splits < num_splits
    part_row = (splits.to(tl.int64) * num_tokens + token) * num_heads + head  # [SPLITS_PAD]
    lse = tl.load(part_lse_ptr + part_row, mask=split_valid, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    weight = tl.exp2(lse - lse_max)  # [SPLITS_PAD], 0 for empty splits
    dims = tl.arange(0, HEAD_PAD)
    parts = tl.load(part_out_ptr + part_row[:, None] * HEAD_PAD + dims[None, :],
                    mask=split_valid[:, None] & (dims[None, :] < HEAD_PAD), other=0.0)  # [SPLITS_PAD, HEAD_PAD]
    total = tl.sum(weight, 0)
    total = tl.where(total > 0.0, total, 1.0)
    o = tl.sum(parts * weight[:, None], 0) / total  # [HEAD_PAD]
    tl.store(out_ptr + token * stride_ot + head * stride_oh + dims, o.to(out_ptr.dtype.element_ty),
             mask=dims < HEAD_SIZE)


INTERPRETED = not isinstance(_paged_attention_kernel, JITFunction)


@dataclass(frozen=True, slots=True)
class AttentionConfig:
    block_m: int  # query-tile rows (query tokens x query heads of one KV head), power of two >= 16
    block_n: int  # KV tokens per inner-loop step, power of two >= 16
    num_warps: int
    num_stages: int


def head_pad(head_size: int) -> int:
    return max(16, triton.next_power_of_2(head_size))


def pick_config(queries_per_kv: int, head_size: int, dtype: torch.dtype, decode_only: bool) -> AttentionConfig:
    """Tile sizes: decode packs just the query heads of one KV head; prefill adds query tokens.

    Checked for sm_90 with ``python -m kernels.aot`` (no spills; shared memory well under the limit).
    """
    pad = head_pad(head_size)
    group_rows = max(16, triton.next_power_of_2(queries_per_kv))
    if dtype == torch.float32:
        # exact float32 dots run on CUDA cores, not tensor cores: small tiles keep registers in check
        block_m = group_rows if decode_only else max(32, group_rows)
        block_n = 32 if decode_only and pad <= 128 else 16
        num_warps = 4 if block_m * pad <= 32 * 128 else 8
    else:
        block_m = group_rows if decode_only else max(64, group_rows)
        block_n = 64 if pad <= 128 else 32
        num_warps = 4 if block_m * pad <= 64 * 128 else 8
    return AttentionConfig(block_m, block_n, num_warps, num_stages=3 if decode_only else 2)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8  # the interpreter: any small number keeps the heuristic exercised


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_context: int, num_sms: int, decode_only: bool) -> int:
    """Split-K only when a decode batch has too few (sequence, KV head) programs to fill the GPU
    and contexts long enough that each split keeps >= MIN_TOKENS_PER_SPLIT tokens."""
    programs = num_seqs * num_kv_heads
    if not decode_only or programs >= num_sms or max_context < 2 * MIN_TOKENS_PER_SPLIT:
        return 1
    wanted = -(-2 * num_sms // programs)  # about two waves of programs
    return max(1, min(wanted, max_context // MIN_TOKENS_PER_SPLIT, MAX_AUTO_SPLITS))


def _check_device(tensor: torch.Tensor) -> None:
    require(tensor.device.type == "cuda" or INTERPRETED,
            f"the Triton kernels need CUDA tensors (got {tensor.device}); on the CPU set TRITON_INTERPRET=1 "
            "before kernels.attention is first imported, or use the torch backend (kernels.get_ops('torch'))")


def device_guard(tensor: torch.Tensor):
    """Launch on the tensor's GPU (Triton launches on the current device)."""
    return torch.cuda.device(tensor.device) if tensor.device.type == "cuda" else contextlib.nullcontext()


def paged_attention(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale,
                    *, out=None, num_splits=None, window=None, softcap=None):
    """Causal attention of each sequence's new query tokens over its paged K/V.

    query [T, Hq, D]; key_cache [num_blocks, block_size, Hkv, D], value_cache [..., Dv] (Dv = D
    except for MLA; same dtype: float32, float16 or bfloat16); block_tables [B, max_blocks] int32;
    context_lens [B] int32 (all tokens, new ones included); query_start_loc [B + 1] int32; scale:
    softmax scale. Returns out [T, Hq, Dv]
    (written into ``out`` when given). num_splits: None lets the launcher choose split-K; an
    integer forces it (1 = no split). The K/V of the new tokens must already be in the pool.
    window: sliding-window attention, each query sees its last ``window`` positions (itself included;
    transformers' ``sliding_window``); softcap: scores become ``softcap * tanh(scale * q.k / softcap)``
    (Gemma-2's ``attn_logit_softcapping``). Both None: plain causal attention.
    """
    return _paged_attention(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale,
                            out=out, num_splits=num_splits, window=window, softcap=softcap)


def _paged_attention(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale,
                     *, out=None, num_splits=None, config: AttentionConfig | None = None, window=None, softcap=None):
    shape = check_attention_args(query, key_cache, value_cache, block_tables, context_lens, query_start_loc,
                                 scale, out, num_splits, window, softcap)
    _check_device(query)
    if out is None:
        out = query.new_empty((shape.num_tokens, shape.num_heads, shape.pool.v_head_size))
    if shape.num_tokens == 0:
        return out
    decode_only = shape.num_tokens == shape.num_seqs  # every sequence has exactly one new token
    if config is None:
        config = pick_config(shape.num_queries_per_kv, max(shape.pool.head_size, shape.pool.v_head_size), query.dtype,
                             decode_only)
    if num_splits is None:
        max_context = shape.max_blocks * shape.pool.block_size  # host-side bound: no device sync
        if window is not None:
            max_context = min(max_context, window)  # keys a decode token reads
        num_splits = choose_num_splits(shape.num_seqs, shape.pool.num_kv_heads, max_context,
                                       _num_sms(query.device), decode_only)
    with device_guard(query):
        _launch(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale, out,
                shape, config, num_splits, window, softcap)
    return out


def _launch(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale, out,
            shape: AttentionShape, config: AttentionConfig, num_splits: int, window, softcap) -> None:
    for kernel, grid, kwargs in launch_plan(query, key_cache, value_cache, block_tables, context_lens,
                                            query_start_loc, scale, out, shape, config, num_splits,
                                            window=window, softcap=softcap):
        kernel[grid](**kwargs)


def launch_plan(query, key_cache, value_cache, block_tables, context_lens, query_start_loc, scale, out,
                shape: AttentionShape, config: AttentionConfig, num_splits: int, *,
                window: int | None = None, softcap: float | None = None) -> list[tuple]:
    """The (kernel, grid, keyword arguments) launches of one call, in order (also used by kernels.aot)."""
    group = shape.num_queries_per_kv
    block_m = max(config.block_m, triton.next_power_of_2(group))
    block_q = block_m // group
    pad = head_pad(shape.pool.head_size)
    v_pad = head_pad(shape.pool.v_head_size)
    split = num_splits > 1
    if split:
        part_out = torch.empty((num_splits, shape.num_tokens, shape.num_heads, v_pad), dtype=torch.float32,
                               device=query.device)
        part_lse = torch.empty((num_splits, shape.num_tokens, shape.num_heads), dtype=torch.float32,
                               device=query.device)
    else:
        part_out = part_lse = out  # unused placeholders
    grid = (shape.num_tokens // block_q + shape.num_seqs, shape.pool.num_kv_heads, num_splits)
    launches = [(_paged_attention_kernel, grid, dict(
        out_ptr=out,
        part_out_ptr=part_out,
        part_lse_ptr=part_lse,
        query_ptr=query,
        key_cache_ptr=key_cache,
        value_cache_ptr=value_cache,
        block_tables_ptr=block_tables,
        context_lens_ptr=context_lens,
        query_start_loc_ptr=query_start_loc,
        scale_log2=float(scale) * LOG2_E,
        window=int(window or 0),
        softcap_in=float(scale) / softcap if softcap else 0.0,
        softcap_out=float(softcap) * LOG2_E if softcap else 0.0,
        num_seqs=shape.num_seqs,
        num_tokens=shape.num_tokens,
        num_heads=shape.num_heads,
        stride_qt=query.stride(0), stride_qh=query.stride(1),
        stride_ot=out.stride(0), stride_oh=out.stride(1),
        stride_kb=key_cache.stride(0), stride_ks=key_cache.stride(1), stride_kh=key_cache.stride(2),
        stride_vb=value_cache.stride(0), stride_vs=value_cache.stride(1), stride_vh=value_cache.stride(2),
        stride_bt=block_tables.stride(0),
        QUERIES_PER_KV=group,
        HEAD_SIZE=shape.pool.head_size,
        HEAD_PAD=pad,
        V_HEAD_SIZE=shape.pool.v_head_size,
        V_HEAD_PAD=v_pad,
        BLOCK_SIZE=shape.pool.block_size,
        BLOCK_M=block_m,
        BLOCK_Q=block_q,
        BLOCK_N=config.block_n,
        SPLIT=split,
        IEEE_DOT=query.dtype == torch.float32,
        INTERPRET=INTERPRETED,
        SLIDING=window is not None,
        SOFTCAP=softcap is not None,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    ))]
    if split:
        launches.append((_reduce_splits_kernel, (shape.num_tokens, shape.num_heads), dict(
            out_ptr=out,
            part_out_ptr=part_out,
            part_lse_ptr=part_lse,
            num_tokens=shape.num_tokens,
            num_heads=shape.num_heads,
            num_splits=num_splits,
            stride_ot=out.stride(0), stride_oh=out.stride(1),
            HEAD_SIZE=shape.pool.v_head_size,
            HEAD_PAD=v_pad,
            SPLITS_PAD=max(2, triton.next_power_of_2(num_splits)),
            num_warps=4,
        )))
    return launches
