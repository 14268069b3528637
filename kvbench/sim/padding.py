"""The work of a padded static batch (``engine.batching=static``): every row computes as many
tokens as the longest, at the longest one's positions, until the batch ends.

``padded_summary`` turns a step's ``StepSummary`` (live chunks only) into that of the padded
tensor batch its ``PaddedRows`` describe: ``rows`` rows of ``query_len`` tokens at positions
``start_pos...``, one lm_head row and one draw each; copies, swaps and page maps stay as they
are. A step whose live work exceeds the padded rows (a group preempted and re-admitted inside
the batch) keeps its live counts.
"""
from __future__ import annotations

import dataclasses

from kvbench.sim.cost_model import StepSummary


def padded_summary(live: StepSummary, padding) -> StepSummary:
    rows, q, start = int(padding.rows), int(padding.query_len), int(padding.start_pos)
    if rows * q < live.num_tokens:
        return live
    bs = live.block_size
    ctx = start + q
    blocks = rows * -(-ctx // bs)
    if q > 1:
        pre_pairs, pre_blocks, dec_pairs, dec_blocks = rows * (q * start + q * (q + 1) // 2), blocks, 0, 0
    else:
        pre_pairs, pre_blocks, dec_pairs, dec_blocks = 0, 0, rows * ctx, blocks
    return dataclasses.replace(live, num_tokens=rows * q, num_seqs=rows, num_sampled=rows, num_draws=rows,
                               prefill_pairs=pre_pairs, prefill_blocks=pre_blocks, decode_pairs=dec_pairs,
                               decode_blocks=dec_blocks)
