"""vAttention (Prabhu et al., ASPLOS 2025): virtual-contiguous K/V, physical pages mapped on demand.

Each sequence reserves a virtual range for its ``max_len`` tokens (free: virtual address space
is abundant), so the attention kernel sees its K/V as one contiguous tensor per layer and K|V.
Physical memory backs that range in pages of ``page_bytes`` (2 MiB as the CUDA driver maps;
64 KiB and 256 KiB with the paper's driver patch), mapped as the sequence grows. A page of one
layer's K (or V) tensor holds ``tokens_per_page = page_bytes // token_bytes`` tokens, where
``token_bytes`` = KV heads x head size x dtype bytes is one token of one layer and one tensor:
so page size matters per model (Llama-3-8B, 2 KiB per token: 1024 tokens per 2 MiB page).

Books in slots (one slot = one token of every layer's K and V, as everywhere): the pool is cut
into ``num_slots // tokens_per_page`` page groups (one page per layer and tensor, mapped and
unmapped together); the slots after the last whole group can never be mapped (external). The
block table lists every block of every mapped page in token order; inside a page the blocks
are consecutive, which is the virtual contiguity the kernel relies on.

``block_size`` (the block table's granularity, inside a page) defaults to the largest power of
two up to 16 dividing ``tokens_per_page`` (OPT-13B, 10 KiB per token and tensor: 6, 25 and 204
tokens per 64 KiB, 256 KiB and 2 MiB page, so blocks of 2, 1 and 4).

* ``admit`` maps pages for the whole prompt (LATER when too few are free; NEVER when the
  prompt needs more than the pool has). ``grow`` maps a page when a token lands past the last.
* ``fork`` cannot share: the child gets its own range and pages for the parent's tokens and
  one ``CopyOp`` per page of computed tokens (False when pages are short).
* ``free``: ``reclaim="unmap"`` unmaps the pages; ``reclaim="pool"`` keeps them mapped in a
  pool that later sequences take first, with no map call (the paper's deferred reclamation).
  Free pages are external either way. ``take_page_ops()`` drains (maps, unmaps) for the cost
  model, per page group (each stands for 2 x num_layers driver calls on a GPU).

Usage: a mapped page's slots past the sequence's final length are internal (the partly filled
last page, per layer and tensor); up to it, reserved. ``page_bytes % token_bytes`` bytes of
every page are never usable; they are under one token per page and not in the breakdown.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocators.base import (
    Admission,
    Allocator,
    AllocatorError,
    CopyOp,
    Fit,
    MemoryUsage,
    ceil_div,
    check_block_size,
    check_length,
    grow_end,
    refuse_never,
)

MIB = 1 << 20
PAGE_SIZES = {"64KiB": 64 << 10, "256KiB": 256 << 10, "2MiB": 2 * MIB}
RECLAIM = ("unmap", "pool")


@dataclass(slots=True)
class _VSeq:
    pages: list[int]  # page groups backing the virtual range, in token order
    num_tokens: int
    prompt_len: int
    max_len: int


class VAttentionAllocator(Allocator):
    """Per-sequence virtual range, pages of ``tokens_per_page`` slots mapped on demand."""

    name = "vattention"

    def __init__(self, num_slots: int, block_size: int | None = None, page_bytes: int = 2 * MIB,
                 token_bytes: int = 2048, reclaim: str = "unmap", debug: bool = False) -> None:
        check_length("page_bytes", page_bytes, 1)
        check_length("token_bytes", token_bytes, 1)
        if reclaim not in RECLAIM:
            raise AllocatorError(f"reclaim must be one of {', '.join(RECLAIM)}, got {reclaim!r}")
        tokens = page_bytes // token_bytes
        if block_size is None:  # the largest power of two, at most 16, that divides a page
            block_size = min(16, tokens & -tokens) if tokens else 1
        self.block_size = check_block_size(block_size, num_slots)
        if tokens < block_size or tokens % block_size:
            raise AllocatorError(f"a page of {page_bytes} bytes holds {page_bytes / token_bytes:g} tokens of "
                                 f"{token_bytes} bytes: not a whole number of blocks of {block_size}")
        if num_slots < tokens:
            raise AllocatorError(f"num_slots={num_slots} is smaller than one page ({tokens} tokens)")
        self.num_slots = num_slots
        self.page_bytes = page_bytes
        self.token_bytes = token_bytes
        self.tokens_per_page = tokens
        self.reclaim = reclaim
        self.debug = bool(debug)
        self.num_pages = num_slots // tokens
        self._unmapped: deque[int] = deque(range(self.num_pages))
        self._mapped: deque[int] = deque()  # free but still mapped (reclaim="pool")
        self._seqs: dict[int, _VSeq] = {}
        self._copy_ops: list[CopyOp] = []
        self._num_copy_ops = self._copied_slots = 0
        self._maps = self._unmaps = 0  # totals
        self._pending_maps = self._pending_unmaps = 0  # since the last take_page_ops

    # -- pages -----------------------------------------------------------------------------------
    def _free_pages(self) -> int:
        return len(self._unmapped) + len(self._mapped)

    def _take_pages(self, count: int) -> list[int]:
        pages = []
        for _ in range(count):
            if self._mapped:
                pages.append(self._mapped.popleft())
            else:
                pages.append(self._unmapped.popleft())
                self._maps += 1
                self._pending_maps += 1
        return pages

    def take_page_ops(self) -> tuple[int, int]:
        """(page groups mapped, unmapped) since the last call."""
        ops = (self._pending_maps, self._pending_unmaps)
        self._pending_maps = self._pending_unmaps = 0
        return ops

    # -- lifecycle -------------------------------------------------------------------------------
    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        refusal = refuse_never(self._seqs, seq_id, prompt, max_len, final_len, self.tokens_per_page,
                               self.num_pages, "pages")
        if refusal is not None:
            return refusal
        need = ceil_div(len(prompt), self.tokens_per_page)
        if need > self._free_pages():
            return Admission(Fit.LATER, f"prompt needs {need} pages; {self._free_pages()} free")
        self._seqs[seq_id] = _VSeq(self._take_pages(need), 0, len(prompt), max_len)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK)

    def grow(self, seq_id: int, num_tokens: int, token_ids: Sequence[int] | None = None) -> list[int] | None:
        seq = self._seqs.get(seq_id)
        end = grow_end(seq_id, seq, num_tokens, token_ids)
        tpp = self.tokens_per_page
        need = ceil_div(end, tpp) - len(seq.pages)
        if need > 0:
            if need > self._free_pages():
                return None
            seq.pages.extend(self._take_pages(need))
        pages = seq.pages
        slots = [pages[p // tpp] * tpp + p % tpp for p in range(seq.num_tokens, end)]
        seq.num_tokens = end
        if self.debug:
            self.check_invariants()
        return slots

    def fork(self, parent_id: int, child_id: int, final_len: int | None = None) -> bool:
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise AllocatorError(f"sequence {child_id} is already live")
        if final_len is not None:
            check_length("final_len", final_len)
        count = len(parent.pages)
        if count > self._free_pages():
            return False
        pages = self._take_pages(count)
        tpp = self.tokens_per_page
        for index, (src, dst) in enumerate(zip(parent.pages, pages)):
            held = min(parent.num_tokens - index * tpp, tpp)
            if held > 0:
                self._copy_ops.append(CopyOp(src * tpp, dst * tpp, held))
                self._num_copy_ops += 1
                self._copied_slots += held
        self._seqs[child_id] = _VSeq(pages, parent.num_tokens, parent.prompt_len, parent.max_len)
        if self.debug:
            self.check_invariants()
        return True

    def free(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        if self.reclaim == "pool":
            self._mapped.extend(reversed(seq.pages))
        else:
            self._unmapped.extend(reversed(seq.pages))
            self._unmaps += len(seq.pages)
            self._pending_unmaps += len(seq.pages)
        if self.debug:
            self.check_invariants()

    # -- views -----------------------------------------------------------------------------------
    def block_table(self, seq_id: int) -> list[int]:
        per_page = self.tokens_per_page // self.block_size
        return [page * per_page + i for page in self._get(seq_id).pages for i in range(per_page)]

    def num_tokens(self, seq_id: int) -> int:
        return self._get(seq_id).num_tokens

    def live_sequences(self) -> list[int]:
        return list(self._seqs)

    def free_blocks(self) -> list[int]:
        """Free page groups: mapped ones (taken first), then unmapped ones."""
        return list(self._mapped) + list(self._unmapped)

    def usage(self, final_lens: Mapping[int, int]) -> MemoryUsage:
        token = reserved = mapped = 0
        for seq_id, seq in self._seqs.items():
            try:
                final = final_lens[seq_id]
            except KeyError:
                raise AllocatorError(f"usage() needs the final length of live sequence {seq_id}") from None
            size = len(seq.pages) * self.tokens_per_page
            mapped += size
            token += seq.num_tokens
            reserved += max(0, min(final, size) - seq.num_tokens)
        return MemoryUsage(token, reserved, mapped - token - reserved, self.num_slots - mapped)

    def stats(self) -> dict[str, float | int | None]:
        mapped = sum(len(s.pages) for s in self._seqs.values()) * self.tokens_per_page
        tokens = sum(s.num_tokens for s in self._seqs.values())
        return {
            "prefix_hit_rate": None,
            "prefix_queries": None,
            "prefix_hits": None,
            "logical_slots": tokens,
            "physical_slots": tokens,
            "allocated_slots": mapped,
            "live_sequences": len(self._seqs),
            "copy_ops": self._num_copy_ops,
            "copied_slots": self._copied_slots,
            "page_maps": self._maps,
            "page_unmaps": self._unmaps,
            "tokens_per_page": self.tokens_per_page,
        }

    def check_invariants(self) -> None:
        seen: list[int] = list(self._unmapped) + list(self._mapped)
        for seq_id, seq in self._seqs.items():
            assert 0 <= seq.num_tokens <= seq.max_len, f"seq {seq_id}: {seq.num_tokens} tokens, max_len {seq.max_len}"
            want = ceil_div(max(seq.num_tokens, seq.prompt_len), self.tokens_per_page)
            assert len(seq.pages) == want, f"seq {seq_id}: {len(seq.pages)} pages, expected {want}"
            seen.extend(seq.pages)
        assert sorted(seen) == list(range(self.num_pages)), "a page is lost or owned twice"
        if self.reclaim == "unmap":
            assert not self._mapped, "unmap keeps no mapped free pages"
