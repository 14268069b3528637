"""Compile the kernels for a GPU architecture on a machine without a GPU.

The interpreter (TRITON_INTERPRET=1) checks what the kernels compute but not that they compile:
it never builds Triton IR. This tool runs the real compiler (Triton IR -> PTX -> cubin with the
bundled ptxas) on the arguments the launchers would pass for a matrix of shapes, dtypes, block
sizes and modes, using meta tensors, and prints shared memory, registers and spills per variant.

    python -m kernels.aot [--arch 90] [--quick]

Exit status 1 when a variant fails to compile or needs more shared memory than the target has.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import torch

SHARED_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}


class _Ptr:
    """What Triton's argument binder reads from a tensor: its dtype and address alignment."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    mode: str  # decode | prefill | split | store | copy
    dtype: torch.dtype = torch.bfloat16
    head_size: int = 128
    num_heads: int = 32
    num_kv_heads: int = 8
    block_size: int = 16
    num_seqs: int = 8
    window: int | None = None  # sliding window (SLIDING)
    softcap: float | None = None  # logit soft-capping (SOFTCAP)
    v_head_size: int | None = None  # V's head size when it differs from K's (MLA)


def _variants(quick: bool) -> list[Variant]:
    v = [Variant("decode bf16 d128 bs16", "decode"), Variant("prefill bf16 d128 bs16", "prefill"),
         Variant("split bf16 d128 bs16", "split"), Variant("store bf16 d128", "store"),
         Variant("copy bf16 d128", "copy"),
         Variant("decode bf16 window+cap", "decode", head_size=256, window=4096, softcap=50.0),
         Variant("prefill bf16 window+cap", "prefill", head_size=256, window=4096, softcap=50.0),
         Variant("split bf16 window", "split", window=4096),
         *(Variant(f"{mode} bf16 MLA k192 v128", mode, head_size=192, v_head_size=128, num_heads=16, num_kv_heads=16)
           for mode in ("decode", "prefill", "split", "store", "copy"))]
    if quick:
        return v
    for mode in ("decode", "prefill"):
        v += [Variant(f"{mode} bf16 d{d}", mode, head_size=d) for d in (64, 80, 96, 256)]
        v += [Variant(f"{mode} bf16 bs{bs}", mode, block_size=bs) for bs in (1, 256, 2048)]
        v += [Variant(f"{mode} fp16 d128", mode, dtype=torch.float16)]
        v += [Variant(f"{mode} fp32 d{d}", mode, dtype=torch.float32, head_size=d) for d in (64, 128, 256)]
    v += [Variant("decode MHA", "decode", num_kv_heads=32), Variant("prefill MHA", "prefill", num_kv_heads=32),
          Variant("decode MQA", "decode", num_kv_heads=1), Variant("prefill MQA", "prefill", num_kv_heads=1),
          Variant("decode G=7", "decode", num_heads=28, num_kv_heads=4),
          Variant("decode one seq", "decode", num_seqs=1), Variant("split d256", "split", head_size=256),
          Variant("store fp32 d80", "store", dtype=torch.float32, head_size=80),
          Variant("copy fp16 d256", "copy", dtype=torch.float16, head_size=256)]
    return v


def _launches(v: Variant) -> list[tuple]:
    from kernels.attention import launch_plan, pick_config  # optional dependency: triton (these modules import it)
    from kernels.cache_ops import copy_slots_launch, store_kv_launch
    from kernels.checks import check_attention_args, check_pool

    meta = dict(device="meta")
    cache = torch.empty((4096, v.block_size, v.num_kv_heads, v.head_size), dtype=v.dtype, **meta)
    v_size = v.v_head_size or v.head_size
    v_cache = torch.empty((4096, v.block_size, v.num_kv_heads, v_size), dtype=v.dtype, **meta)
    if v.mode in ("store", "copy"):
        pool = check_pool(cache, v_cache)
        if v.mode == "store":
            new = torch.empty((64, v.num_kv_heads, v.head_size), dtype=v.dtype, **meta)
            new_v = torch.empty((64, v.num_kv_heads, v_size), dtype=v.dtype, **meta)
            return [store_kv_launch(new, new_v, cache, v_cache, torch.empty(64, dtype=torch.int64, **meta), pool)]
        slots = torch.empty(64, dtype=torch.int64, **meta)
        return [copy_slots_launch(cache, v_cache, slots, slots, pool)]
    q_len = 1 if v.mode in ("decode", "split") else 512
    query = torch.empty((v.num_seqs * q_len, v.num_heads, v.head_size), dtype=v.dtype, **meta)
    block_tables = torch.empty((v.num_seqs, 64), dtype=torch.int32, **meta)
    lens = torch.empty(v.num_seqs, dtype=torch.int32, **meta)
    qsl = torch.empty(v.num_seqs + 1, dtype=torch.int32, **meta)
    shape = check_attention_args(query, cache, v_cache, block_tables, lens, qsl, 0.1, None, None, v.window, v.softcap)
    config = pick_config(shape.num_queries_per_kv, max(v.head_size, v_size), v.dtype, decode_only=q_len == 1)
    out = torch.empty((query.shape[0], v.num_heads, v_size), dtype=v.dtype, **meta)
    return launch_plan(query, cache, v_cache, block_tables, lens, qsl, 0.1, out, shape, config,
                       8 if v.mode == "split" else 1, window=v.window, softcap=v.softcap)


def compile_launch(kernel, kwargs: dict, arch: int):
    """Compile one launch the way JITFunction.run would, for ``sm_<arch>``."""
    import triton  # optional dependency: triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    args = {k: _Ptr(x.dtype) if isinstance(x, torch.Tensor) else x for k, x in kwargs.items()}
    args.update(debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
    bound_args, specialization, options = binder(**args)
    options, signature, constexprs, attrs = kernel._pack_args(backend, args, bound_args, specialization, options)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def _resources(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, spill bytes) from cuobjdump's resource usage."""
    import triton  # optional dependency: triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", text)
    stack = re.search(r"STACK:(\d+)", text)
    return int(regs.group(1)) if regs else -1, int(stack.group(1)) if stack else -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80 or 90")
    parser.add_argument("--quick", action="store_true", help="only the 7B-shape bf16 variants")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET: the interpreter does not compile", file=sys.stderr)
        return 2
    limit = SHARED_LIMIT.get(args.arch, 99 * 1024)
    failures = 0
    print(f"{'variant':28} {'kernel':24} {'warps':>5} {'stages':>6} {'smem KiB':>8} {'regs':>5} {'spill':>5} {'s':>5}")
    for variant in _variants(args.quick):
        for kernel, _grid, kwargs in _launches(variant):
            started = time.perf_counter()
            try:
                compiled = compile_launch(kernel, kwargs, args.arch)
            except Exception as exc:  # report every failing variant, not just the first
                failures += 1
                print(f"{variant.name:28} {kernel.__name__:24} FAILED: {type(exc).__name__}: {str(exc)[:400]}")
                continue
            regs, stack = _resources(compiled.asm["cubin"])
            shared = compiled.metadata.shared
            flag = "  <-- over the shared-memory limit" if shared > limit else ""
            failures += shared > limit
            print(f"{variant.name:28} {kernel.__name__:24} {kwargs.get('num_warps', 4):5} "
                  f"{kwargs.get('num_stages', 3):6} {shared / 1024:8.1f} {regs:5} {stack:5} "
                  f"{time.perf_counter() - started:5.1f}{flag}")
    print("all variants compiled" if not failures else f"{failures} variant(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
