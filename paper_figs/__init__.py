"""Paper figures: one module per figure, each with ``draw(index_df, out_dir, results_root)``.

``python -m paper_figs NAME`` draws one figure, ``python -m paper_figs all`` draws them all.
"""
from __future__ import annotations

# In the paper's order. Each is a module paper_figs/<name>.py.
FIGURES: tuple[str, ...] = (
    "memory_breakdown", "batch_size", "latency_vs_rate", "sharing",
    "block_size", "memory_pressure", "memory_map", "token_time",
    "parallel_rate", "beam_rate", "prefix_rate", "chatbot_rate", "kernel_latency", "block_size_rate",
    "preempt_block", "announcement",
)  # fmt: skip

# Beyond the paper (results/beyond): the allocators that came after PagedAttention.
BEYOND_FIGURES: tuple[str, ...] = ("allocators_2025", "vattention_pages", "radix_multiturn",
                                  "policy_rate", "preempt_cliff", "lpm_starvation", "offload_capacity")

# Mixed models (results/paper/hybrid): per-layer-group KV allocators on Gemma 3, gpt-oss, Qwen3-Next.
HYBRID_FIGURES: tuple[str, ...] = ("hybrid_models",)

# Production traces (results/paper/traces): Azure 2023, Mooncake, arXiv.
TRACE_FIGURES: tuple[str, ...] = ("traces_azure", "traces_prefix", "traces_pages")
