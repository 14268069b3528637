"""Paged-attention benchmark: block size x batch x context, decode and prefill, against its ceilings.

    python -m kernels.bench --out kernel_bench.csv          # CUDA: the full sweep (~3-4 min)
    python -m kernels.bench --smoke --out smoke.csv          # CPU (Triton interpreter), tiny sizes

Each row times the paged kernel (triton.testing.do_bench median after warm-up, random data) and
reports achieved bandwidth = bytes of K/V, Q read and O written / time, next to the device copy
bandwidth measured in the same run (a large device-to-device copy: read + write bytes / time),
and next to two contiguous baselines on the same data: torch scaled_dot_product_attention on a
contiguous [B, Hkv, ctx, D] copy of the K/V, and this kernel with one block per sequence.
Targets on H100/H200: decode at block 16, batch 64, context 2048 >= 80% of copy bandwidth;
paged at block >= 16 within 10% of the one-block (contiguous) kernel.
The --smoke mode produces the same columns with tiny shapes, timed with time.perf_counter.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields

import torch

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TARGET = dict(mode="decode", num_kv_heads=8, block_size=16, batch=64, context=2048)


@dataclass(slots=True)
class Row:
    mode: str  # decode (one new token per sequence) | prefill (the whole context is new, causal)
    dtype: str
    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    batch: int
    context: int
    q_len: int
    num_splits: int  # split-K ranges the launcher chose
    time_us: float  # median
    bytes: int  # K/V + Q read, O written
    gbps: float  # bytes / time
    copy_gbps: float  # device copy bandwidth, same run
    bw_frac: float  # gbps / copy_gbps
    tflops: float  # 4 * heads * head_size * (query, key) pairs attended / time
    sdpa_us: float  # torch SDPA on contiguous K/V
    one_block_us: float  # this kernel, one block per sequence
    vs_sdpa: float  # time_us / sdpa_us (< 1: paged is faster)
    vs_one_block: float  # time_us / one_block_us
    timer: str  # do_bench | perf_counter


CSV_COLUMNS = [f.name for f in fields(Row)]


@dataclass(frozen=True, slots=True)
class Sweep:
    device: str
    dtype: torch.dtype
    num_heads: int
    head_size: int
    decode: list  # (num_kv_heads, batch, context, block sizes)
    prefill: list
    timer: str


def full_sweep(dtype: torch.dtype) -> Sweep:
    first = [(8, 64, 2048, BLOCK_SIZES)]  # the headline point first, in case the budget runs out
    decode = first + [(8, b, c, BLOCK_SIZES) for b in (1, 8, 64, 256) for c in (512, 2048, 8192)
                      if (b, c) != (64, 2048)]
    decode += [(32, b, 2048, (1, 16, 256)) for b in (8, 64)]
    prefill = [(8, b, c, BLOCK_SIZES) for b, c in ((1, 2048), (8, 2048), (1, 8192), (1, 512), (8, 512))]
    return Sweep("cuda", dtype, 32, 128, decode, prefill, "do_bench")


def smoke_sweep(device: str) -> Sweep:
    decode = [(2, b, c, (1, 4, 16)) for b in (1, 2) for c in (16, 48)]
    prefill = [(2, 1, c, (1, 4, 16)) for c in (16, 48)]
    return Sweep(device, torch.float32, 4, 32, decode, prefill, "perf_counter")


class Timer:
    def __init__(self, kind: str, device: str):
        self.kind, self.device = kind, device

    def __call__(self, fn) -> float:
        """Median seconds of fn()."""
        if self.kind == "do_bench":
            import triton.testing  # optional dependency: triton; after main() set TRITON_INTERPRET

            return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3
        fn()  # warm-up (and compile)
        samples = []
        for _ in range(3):
            self._sync()
            start = time.perf_counter()
            fn()
            self._sync()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


def copy_bandwidth(timer: Timer, device: str) -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    numel = (1 << 30) // 4 if device == "cuda" else (1 << 23)
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    seconds = timer(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / seconds


def _sdpa(q, k, v, causal: bool):
    try:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except (TypeError, RuntimeError):  # torch < 2.5 (no enable_gqa) or no GQA-capable SDPA backend
        group = q.shape[1] // k.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal)


def _sig(x: float) -> float:
    return float(f"{x:.5g}")


def bench_point(sweep: Sweep, timer: Timer, copy_gbps: float, mode: str, num_kv_heads: int, batch: int,
                context: int, block_sizes, gen: torch.Generator) -> list[Row]:
    # optional dependency: triton, imported after main() set TRITON_INTERPRET on the CPU
    from kernels.attention import choose_num_splits, _num_sms
    from kernels.attention import paged_attention

    device, dtype, heads, d = sweep.device, sweep.dtype, sweep.num_heads, sweep.head_size
    q_len = 1 if mode == "decode" else context
    num_slots = batch * context
    # one random pool, viewed at every block size (all of them divide batch * context)
    key_slots = torch.randn(num_slots, num_kv_heads, d, device=device, dtype=dtype, generator=gen)
    value_slots = torch.randn(num_slots, num_kv_heads, d, device=device, dtype=dtype, generator=gen)
    query = torch.randn(batch * q_len, heads, d, device=device, dtype=dtype, generator=gen)
    out = torch.empty_like(query)
    context_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    query_start_loc = torch.arange(0, batch + 1, dtype=torch.int32, device=device) * q_len
    scale = d ** -0.5

    def paged(block_size: int, block_tables):
        kc = key_slots.view(num_slots // block_size, block_size, num_kv_heads, d)
        vc = value_slots.view(num_slots // block_size, block_size, num_kv_heads, d)
        return lambda: paged_attention(query, kc, vc, block_tables, context_lens, query_start_loc, scale, out=out)

    one_block_table = torch.arange(batch, dtype=torch.int32, device=device)[:, None]
    one_block_us = timer(paged(context, one_block_table)) * 1e6

    k_contig = key_slots.view(batch, context, num_kv_heads, d).transpose(1, 2).contiguous()
    v_contig = value_slots.view(batch, context, num_kv_heads, d).transpose(1, 2).contiguous()
    q_sdpa = query.view(batch, q_len, heads, d).transpose(1, 2).contiguous()
    sdpa_us = timer(lambda: _sdpa(q_sdpa, k_contig, v_contig, causal=mode == "prefill")) * 1e6
    del k_contig, v_contig

    elt = torch.finfo(dtype).bits // 8
    total_bytes = 2 * num_slots * num_kv_heads * d * elt + 2 * query.numel() * elt
    pairs = batch * (context if mode == "decode" else context * (context + 1) // 2)
    perm_gen = torch.Generator().manual_seed(batch * 100003 + context)
    rows = []
    for block_size in block_sizes:
        blocks_per_seq = context // block_size
        order = torch.randperm(num_slots // block_size, generator=perm_gen).to(device=device, dtype=torch.int32)
        block_tables = order.view(batch, blocks_per_seq)  # shuffled, non-contiguous pages
        seconds = timer(paged(block_size, block_tables))
        splits = choose_num_splits(batch, num_kv_heads, blocks_per_seq * block_size, _num_sms(query.device),
                                   decode_only=q_len == 1)
        gbps = total_bytes / seconds / 1e9
        us = seconds * 1e6
        rows.append(Row(mode, str(dtype).removeprefix("torch."), heads, num_kv_heads, d, block_size, batch, context,
                        q_len, splits, _sig(us), total_bytes, _sig(gbps), _sig(copy_gbps / 1e9),
                        _sig(gbps * 1e9 / copy_gbps), _sig(4 * heads * d * pairs / seconds / 1e12), _sig(sdpa_us),
                        _sig(one_block_us), _sig(us / sdpa_us), _sig(us / one_block_us), sweep.timer))
    return rows


def run(sweep: Sweep, budget_s: float, log=print) -> tuple[list[Row], list[str]]:
    timer = Timer(sweep.timer, sweep.device)
    copy_gbps = copy_bandwidth(timer, sweep.device)
    log(f"copy bandwidth: {copy_gbps / 1e9:.1f} GB/s (read + write)")
    gen = torch.Generator(device=sweep.device).manual_seed(0)
    rows, skipped = [], []
    started = time.perf_counter()
    points = [("decode", *p) for p in sweep.decode] + [("prefill", *p) for p in sweep.prefill]
    for mode, num_kv_heads, batch, context, block_sizes in points:
        label = f"{mode} Hkv={num_kv_heads} B={batch} ctx={context}"
        if time.perf_counter() - started > budget_s:
            skipped.append(label)
            continue
        rows += bench_point(sweep, timer, copy_gbps, mode, num_kv_heads, batch, context, block_sizes, gen)
        if sweep.device == "cuda":
            torch.cuda.empty_cache()
        log(f"{label}: done at {time.perf_counter() - started:.0f}s")
    if skipped:
        log(f"time budget of {budget_s:.0f}s spent; skipped: {'; '.join(skipped)}")
    return rows, skipped


def write_csv(rows: list[Row], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = f"{path}.partial"
    with open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    os.replace(partial, path)


LATENCY_COLUMNS = ["block_size", "context_len", "batch", "latency_us"]


def write_latency_csv(rows: list[Row], path: str) -> None:
    """The decode points as Figure 18's table (``paper_figs/kernel_latency.py`` reads it)."""
    partial = f"{path}.tmp"
    with open(partial, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(LATENCY_COLUMNS)
        writer.writerows((r.block_size, r.context, r.batch, r.time_us) for r in rows if r.mode == "decode")
    os.replace(partial, path)


def read_csv(path: str) -> list[Row]:
    types = {f.name: f.type for f in fields(Row)}
    cast = {"int": int, "float": float, "str": str}
    with open(path, newline="") as f:
        return [Row(**{k: cast[types[k]](v) for k, v in r.items()}) for r in csv.DictReader(f)]


def report(rows: list[Row]) -> str:
    """Short table: the headline decode shape across block sizes, then the target verdicts."""
    key = {k: v for k, v in TARGET.items() if k != "block_size"}
    picked = [r for r in rows if all(getattr(r, k) == v for k, v in key.items())]
    return "\n".join([table(picked or rows[:12]), *summary(rows)])


def table(rows: list[Row]) -> str:
    head = f"{'mode':8}{'Hkv':>4}{'block':>6}{'B':>5}{'ctx':>6}{'splits':>7}{'us':>10}{'GB/s':>9}{'%copy':>7}" \
           f"{'TFLOP/s':>9}{'/sdpa':>7}{'/1blk':>7}"
    lines = [head]
    for r in rows:
        lines.append(f"{r.mode:8}{r.num_kv_heads:4}{r.block_size:6}{r.batch:5}{r.context:6}{r.num_splits:7}"
                     f"{r.time_us:10.1f}{r.gbps:9.1f}{100 * r.bw_frac:6.1f}%{r.tflops:9.2f}{r.vs_sdpa:7.2f}"
                     f"{r.vs_one_block:7.2f}")
    return "\n".join(lines)


def summary(rows: list[Row]) -> list[str]:
    """The two target figures, each next to its ceiling."""
    lines = []
    target = [r for r in rows if all(getattr(r, k) == v for k, v in TARGET.items())]
    for r in target:
        verdict = "meets" if r.bw_frac >= 0.8 else "misses"
        lines.append(f"decode block 16, batch 64, ctx 2048: {r.gbps:.0f} GB/s = {100 * r.bw_frac:.1f}% of copy "
                     f"bandwidth {r.copy_gbps:.0f} GB/s ({verdict} the 80% target)")
    paged = [r for r in rows if r.block_size >= 16 and r.block_size != r.context]
    if paged:
        worst = max(paged, key=lambda r: r.vs_one_block)
        within = sum(r.vs_one_block <= 1.10 for r in paged)
        lines.append(f"paged (block >= 16) vs one block per sequence: {within}/{len(paged)} within 10%; worst "
                     f"{worst.vs_one_block:.2f}x at {worst.mode} block {worst.block_size} B={worst.batch} "
                     f"ctx={worst.context}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Paged-attention kernel benchmark")
    parser.add_argument("--out", help="CSV path")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; runs on the CPU (Triton interpreter)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--budget-s", type=float, default=210.0, help="stop starting new points after this")
    parser.add_argument("--latency-out", help="CSV path for the decode latencies of Figure 18")
    parser.add_argument("--report", metavar="CSV", help="print the short table of a finished run and exit")
    args = parser.parse_args(argv)
    if args.report:
        print(report(read_csv(args.report)))
        return 0

    cuda = torch.cuda.is_available()
    if args.smoke:
        if not cuda:
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before kernels.attention imports triton
        sweep = smoke_sweep("cuda" if cuda else "cpu")
    elif not cuda:
        print("the full benchmark needs CUDA; use --smoke on the CPU", file=sys.stderr)
        return 2
    else:
        sweep = full_sweep(getattr(torch, args.dtype))
    if cuda:
        print(f"device: {torch.cuda.get_device_name()}")
    rows, _ = run(sweep, args.budget_s)
    print(table(rows))
    for line in summary(rows):
        print(line)
    if args.out:
        write_csv(rows, args.out)
        print(f"wrote {len(rows)} rows to {args.out}")
    if args.latency_out:
        write_latency_csv(rows, args.latency_out)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
