"""Radix-tree prefix cache (SGLang's RadixAttention) over paged blocks.

The tree stores block ids, never K/V. A node holds a run of whole pages: ``tokens`` (pages x
``block_size`` ids) and ``blocks`` (one per page); children are keyed by their first page's
token tuple. The path from the root to a node spells a token prefix whose K/V its blocks
hold. ``block_size`` is the page size: 1 makes the cache token-granular.

Only computed tokens enter the tree. A sequence's tokens count as computed once the engine
has called ``commit()`` after the forward that wrote them, and only while their ids are
known (a grow past the prompt with ``token_ids=None`` ends what the sequence can insert).

* Insert: ``free`` (finish or preemption) inserts the sequence's full computed pages. With
  ``insert_running`` (default), ``commit`` also inserts each running sequence's newly
  computed full prompt pages, so that requests arriving while it decodes already hit; decode
  pages enter at ``free`` (as SGLang caches unfinished requests after prefill).
* Match on admit: the longest run of whole pages of ``prompt[:-1]`` found in the tree (the last
  prompt token is always computed); a node matched in part is split. Hits are shared (ref + 1)
  and reported as ``num_cached_tokens``. ``prefix_queries`` / ``prefix_hits`` count pages,
  as ``paged_prefix`` counts blocks, so the two hit rates compare; a re-admission after a
  preemption counts apart (``preempted_*``, ``allocators.prefix_stats``).
* Block states: live (ref > 0, in some table), cached (ref 0, in the tree), free (neither).
  ``len(self._free)`` counts free + cached: the room a sequence can take.
* Eviction: a free block is taken first; when none is left, the ``eviction`` policy
  (``allocators.cache_policy``; keys are leaves whose last page is unreferenced, offered at
  their last access time) names a leaf, which gives up its last page (tail first) and is
  requeued; a leaf emptied this way leaves the tree, which may make its parent a leaf. Time
  ticks once per admit, insert and free; matching or inserting through a node sets its time.
  With ``lru`` (the default) the least recently used such leaf goes first.
* Duplicates: two sequences may compute the same prefix before either is inserted. A running
  insert re-points the sequence's duplicate page to the tree's block (same tokens, same K/V)
  when nobody else holds the duplicate, and stops otherwise; an insert on ``free`` walks past
  duplicates and hangs the rest of the sequence below them, stopping at the first page a
  live fork still holds.

Invariant (check_invariants): in every live table the tree blocks are a prefix, and they are
exactly the blocks of the tree path that spells those pages. So references never grow going
down the tree, every cached block can be evicted leaf-first, and the free + cached count is
exact room.

Usage: cached blocks are their own category (``MemoryUsage.cached``), not external.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from allocators.base import Admission, AllocatorError, Fit, MemoryUsage, ceil_div
from allocators.paged import PagedAllocator, _PagedSeq
from allocators.paged_prefix import eviction_policy
from allocators.prefix_stats import PrefixLookups
from allocators.run_sums import RunSums


@dataclass(eq=False, slots=True)
class _Node:
    parent: _Node | None  # None for the root and for a node that left the tree
    key: tuple[int, ...]  # its first page's token ids (the parent's key for it)
    tokens: list[int]
    blocks: list[int]
    children: dict[tuple[int, ...], _Node] = field(default_factory=dict)
    last_access: int = 0


@dataclass(slots=True)
class _RadixSeq(_PagedSeq):
    token_ids: list[int]  # known ids of positions [0, len(token_ids))
    ids_known: bool  # False once a computed token's id was not given
    computed: int  # tokens whose K/V is written (as of the last commit)
    inserted_pages: int = 0  # prompt pages a running insert already handled


class _Room:
    """Blocks a sequence can take: free ones (a deque, reused first) plus ``cached`` evictable."""

    __slots__ = ("free", "cached")

    def __init__(self, num_blocks: int) -> None:
        self.free: deque[int] = deque(range(num_blocks))
        self.cached = 0

    def __len__(self) -> int:
        return len(self.free) + self.cached

    def __iter__(self):
        return iter(self.free)


class RadixAllocator(PagedAllocator):
    """``paged`` plus a radix-tree prefix cache; see the module docstring for the policies."""

    name = "radix"
    _tracks_ids = True

    def __init__(self, num_slots: int, block_size: int = 16, insert_running: bool = True,
                 eviction: str = "lru", debug: bool = False) -> None:
        if not isinstance(insert_running, bool):
            raise AllocatorError(f"insert_running must be true or false, got {insert_running!r}")
        super().__init__(num_slots, block_size, debug)
        self.insert_running = insert_running
        self.eviction = eviction
        self._root = _Node(None, (), [], [])
        self._node_of: list[_Node | None] = [None] * self.num_blocks
        self._policy = eviction_policy(eviction, self.num_blocks)  # keys: evictable leaves (lazily)
        self._clock = 0
        self._lookups = PrefixLookups()
        self._evictions = 0

    # -- room: free blocks, then cached ones by eviction ---------------------------------------
    def _init_free_list(self) -> None:
        self._free = _Room(self.num_blocks)  # type: ignore[assignment]

    def _take_block(self) -> int:
        room = self._free
        if room.free:
            return room.free.popleft()
        return self._evict_one()

    def _release_blocks(self, blocks: list[int]) -> None:
        room = self._free
        for b in blocks:
            node = self._node_of[b]
            if node is None:
                room.free.append(b)
            else:
                room.cached += 1
                if b == node.blocks[-1]:
                    self._offer(node)

    def _offer(self, node: _Node) -> None:
        """Queue ``node`` for eviction if it is a leaf whose last page nobody holds."""
        if not node.children and node.blocks and not self._ref[node.blocks[-1]]:
            self._policy.add(node, node.last_access)

    def _evictable(self, node: _Node) -> bool:
        """A queued node still a leaf in the tree with an unreferenced last page."""
        return node.parent is not None and not node.children and not self._ref[node.blocks[-1]]

    def _evict_one(self) -> int:
        bs = self.block_size
        node = self._policy.evict(self._evictable)
        block = node.blocks.pop()
        del node.tokens[-bs:]
        self._node_of[block] = None
        self._free.cached -= 1
        self._evictions += 1
        if node.blocks:
            if not self._ref[node.blocks[-1]]:
                self._policy.requeue(node, node.last_access)
        else:
            parent = node.parent
            del parent.children[node.key]
            node.parent = None
            if parent is not self._root:
                self._offer(parent)
        return block

    # -- tree ------------------------------------------------------------------------------------
    def _page(self, tokens: Sequence[int], index: int) -> tuple[int, ...]:
        bs = self.block_size
        return tuple(tokens[index * bs:(index + 1) * bs])

    def _match(self, tokens: list[int], limit: int) -> tuple[list[tuple[_Node, int]], list[int]]:
        """Longest path of whole pages of ``tokens[:limit pages]``: [(node, pages matched)], blocks."""
        bs = self.block_size
        node, page = self._root, 0
        path: list[tuple[_Node, int]] = []
        blocks: list[int] = []
        while page < limit:
            child = node.children.get(self._page(tokens, page))
            if child is None:
                break
            n, size = 0, len(child.blocks)
            while n < size and page < limit and child.tokens[n * bs:(n + 1) * bs] == tokens[page * bs:(page + 1) * bs]:
                n += 1
                page += 1
            path.append((child, n))
            blocks.extend(child.blocks[:n])
            if n < size:
                break
            node = child
        return path, blocks

    def _split(self, node: _Node, pages: int) -> _Node:
        """Cut ``node`` after ``pages`` pages; the upper part (returned) takes its place."""
        bs = self.block_size
        upper = _Node(node.parent, node.key, node.tokens[:pages * bs], node.blocks[:pages],
                      {}, node.last_access)
        upper.parent.children[upper.key] = upper
        node.tokens = node.tokens[pages * bs:]
        node.blocks = node.blocks[pages:]
        node.key = tuple(node.tokens[:bs])
        node.parent = upper
        upper.children[node.key] = node
        for b in upper.blocks:
            self._node_of[b] = upper
        return upper

    def _add_leaf(self, parent: _Node, tokens: list[int], blocks: list[int]) -> _Node:
        leaf = _Node(parent, tuple(tokens[:self.block_size]), tokens, blocks, {}, self._clock)
        parent.children[leaf.key] = leaf
        for b in blocks:
            self._node_of[b] = leaf
        return leaf

    def _insert(self, seq: _RadixSeq, pages: int, dropping: bool) -> None:
        """Put the sequence's first ``pages`` pages into the tree (``dropping``: it is being freed)."""
        self._clock += 1
        last = self._insert_path(seq, pages, dropping)
        if last is not self._root:
            self._offer(last)  # its time changed: a queued entry of it went stale

    def _insert_path(self, seq: _RadixSeq, pages: int, dropping: bool) -> _Node:
        """The insert's walk; returns the deepest node it touched (only that one can be a leaf)."""
        bs, ref, table, tokens = self.block_size, self._ref, seq.table, seq.token_ids
        node, page = self._root, 0
        diverged = False
        while page < pages:
            child = node.children.get(self._page(tokens, page))
            if child is None:
                end = page
                while end < pages and (not diverged or ref[table[end]] == 1):
                    end += 1
                if end > page:
                    return self._add_leaf(node, tokens[page * bs:end * bs], table[page:end])
                return node
            n, size = 0, len(child.blocks)
            while n < size and page < pages and child.tokens[n * bs:(n + 1) * bs] == tokens[page * bs:(page + 1) * bs]:
                mine, theirs = table[page], child.blocks[n]
                if mine != theirs:
                    if dropping:
                        diverged = True
                    elif ref[mine] == 1:
                        self._adopt(seq, page, theirs)
                    else:
                        return child  # a fork still shares the duplicate: the rest stays private
                n += 1
                page += 1
            if n < size and page < pages:
                child = self._split(child, n)  # the lower part keeps its time (and queue entry)
            child.last_access = self._clock
            node = child
        return node

    def _adopt(self, seq: _RadixSeq, page: int, block: int) -> None:
        """Point the sequence's page at the tree's ``block`` (same tokens, same K/V) and free its own."""
        ref = self._ref
        own = seq.table[page]
        if not ref[block]:
            self._free.cached -= 1
        ref[block] += 1
        ref[own] = 0
        seq.table[page] = block
        self._free.free.append(own)

    # -- lifecycle -------------------------------------------------------------------------------
    def cached_prefix_len(self, tokens: Sequence[int]) -> int:
        """Leading tokens of ``tokens`` whose whole pages the tree holds now (as admit would hit)."""
        tokens = list(tokens)
        _, blocks = self._match(tokens, (len(tokens) - 1) // self.block_size if tokens else 0)
        return len(blocks) * self.block_size

    def admit(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None = None) -> Admission:
        refusal = self._refuse(seq_id, prompt, max_len, final_len)
        if refusal is not None:
            return refusal
        tokens = list(prompt)
        queries = (len(tokens) - 1) // self.block_size if tokens else 0
        path, hits = self._match(tokens, queries)
        ref = self._ref
        needed = self._blocks_needed(tokens, hits)
        if needed > len(self._free):
            return Admission(Fit.LATER, f"prompt needs {needed} free blocks; {len(self._free)} free or cached")
        fresh = ceil_div(len(tokens), self.block_size) - len(hits)
        self._clock += 1
        if path and path[-1][1] < len(path[-1][0].blocks):
            node, pages = path[-1]
            path[-1] = (self._split(node, pages), pages)
        for node, _ in path:
            node.last_access = self._clock
        for b in hits:
            if not ref[b]:
                self._free.cached -= 1
            ref[b] += 1
        table = hits + self._take_fresh(fresh)
        cached = len(hits) * self.block_size
        self._seqs[seq_id] = _RadixSeq(table, cached, len(tokens), max_len, tokens, True, cached)
        self._lookups.record(seq_id, queries=queries, hits=len(hits), query_tokens=max(len(prompt) - 1, 0),
                             hit_tokens=cached)
        if self.debug:
            self.check_invariants()
        return Admission(Fit.OK, num_cached_tokens=cached)

    def _note_ids(self, seq_id: int, seq: _RadixSeq,  # type: ignore[override]
                  token_ids: Sequence[int] | None) -> None:
        known = seq.token_ids
        if not seq.ids_known or seq.num_tokens <= len(known):
            return
        if token_ids is None:
            seq.ids_known = False
        else:
            known.extend(token_ids[len(known) - seq.num_tokens:])

    def _insertable_pages(self, seq: _RadixSeq, limit: int) -> int:
        return min(seq.computed, len(seq.token_ids), limit) >> self._shift

    def commit(self) -> None:
        for seq in self._seqs.values():
            seq.computed = seq.num_tokens
            if self.insert_running:
                pages = self._insertable_pages(seq, seq.prompt_len)
                if pages > seq.inserted_pages:
                    seq.inserted_pages = pages
                    self._insert(seq, pages, dropping=False)
        if self.debug:
            self.check_invariants()

    def note_preempted(self, seq_id: int) -> None:
        self._lookups.note_preempted(seq_id)

    def free(self, seq_id: int) -> None:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise AllocatorError(f"unknown sequence {seq_id}")
        pages = self._insertable_pages(seq, seq.num_tokens)
        if pages:
            self._insert(seq, pages, dropping=True)
        super().free(seq_id)

    def _child_of(self, parent: _PagedSeq) -> _PagedSeq:
        assert isinstance(parent, _RadixSeq)
        # the child shares the parent's computed tokens only: ids past them are the parent's future
        return _RadixSeq(list(parent.table), parent.num_tokens, parent.prompt_len, parent.max_len,
                         parent.token_ids[:parent.num_tokens], parent.ids_known, parent.computed,
                         parent.inserted_pages)

    # -- decode runs (kvbench.engine.decode_run): many rounds of one-token grows at once -------
    def decode_run_ready(self, num_running: int) -> bool:
        """As paged's, with shared tree blocks (full, never grown into) but every partial block
        private, everything committed, and no prompt page left for a running insert (a round's
        commit then changes nothing but ``computed``)."""
        seqs = self._seqs
        if len(seqs) != num_running or not self._partials_private():
            return False
        running = self.insert_running
        return all([s.computed == s.num_tokens
                    and (not running or s.inserted_pages >= self._insertable_pages(s, s.prompt_len))
                    for s in seqs.values()])

    def _cache_room(self) -> tuple[int, int]:
        return self._free.cached, len(self._free.free)

    def admit_waits(self, seq_id: int, prompt: Sequence[int], max_len: int, final_len: int | None,
                    taken: int) -> bool:
        """Whether ``admit`` would answer LATER, changing nothing, after ``taken`` more blocks go
        (an eviction of one of the prompt's hits only raises what it needs)."""
        if self._refuse(seq_id, prompt, max_len, final_len) is not None:
            return False
        tokens = list(prompt)
        _, hits = self._match(tokens, (len(tokens) - 1) // self.block_size if tokens else 0)
        return self._blocks_needed(tokens, hits) > len(self._free) - taken

    def grow_decode_run(self, run: RunSums, steps: int, token_ids: Sequence[Sequence[int]]) -> None:
        """As paged's (a grow short of free blocks evicts as ``_take_block`` does); then the ids
        the rounds computed, and every round's commit: ``computed`` catches up."""
        super().grow_decode_run(run, steps, token_ids)
        seqs = self._seqs
        for seq_id, ids in zip(run.seq_ids, token_ids):
            seq = seqs[seq_id]
            known = seq.token_ids
            if seq.ids_known and seq.num_tokens > len(known):
                known.extend(ids[len(known):seq.num_tokens])
        for seq in seqs.values():
            seq.computed = seq.num_tokens

    # -- views -----------------------------------------------------------------------------------
    def _usage(self, partial: int, filled: int, reserved: int, internal: int) -> MemoryUsage:
        u = super()._usage(partial, filled, reserved, internal)
        cached = self._free.cached * self.block_size
        return MemoryUsage(u.token, u.reserved, u.internal, u.external - cached, cached)

    def cached_blocks(self) -> list[int]:
        """Blocks in the tree that no live sequence holds."""
        return [b for b, node in enumerate(self._node_of) if node is not None and not self._ref[b]]

    def stats(self) -> dict[str, float | int | None]:
        out = super().stats()
        out.update(self._lookups.stats())
        out["cached_free_blocks"] = self._free.cached
        out["evictions"] = self._evictions
        return out

    def _free_block_ids(self) -> list[int]:
        return list(self._free.free) + self.cached_blocks()

    def check_invariants(self) -> None:
        super().check_invariants()
        bs, ref = self.block_size, self._ref
        depth_of: dict[int, int] = {}  # tree block -> its page index on the path
        stack = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            for key, child in node.children.items():
                assert child.parent is node and child.key == key == tuple(child.tokens[:bs]), "child key or parent wrong"
                assert child.blocks and len(child.tokens) == len(child.blocks) * bs, "node pages and tokens disagree"
                for i, b in enumerate(child.blocks):
                    assert self._node_of[b] is child, f"block {b} not mapped to its node"
                    assert b not in depth_of, f"block {b} twice in the tree"
                    depth_of[b] = depth + i
                    if i:
                        assert ref[b] <= ref[child.blocks[i - 1]], f"block {b}: ref grows inside a node"
                if node is not self._root:
                    assert ref[child.blocks[0]] <= ref[node.blocks[-1]], "ref grows from parent to child"
                stack.append((child, depth + len(child.blocks)))
        assert sum(1 for n in self._node_of if n is not None) == len(depth_of), "a block maps to a node outside the tree"
        for b in depth_of:
            node = self._node_of[b]
            if b == node.blocks[-1] and not node.children and not ref[b]:
                assert node in self._policy, f"evictable leaf ending in block {b} is not queued"
        assert self._free.cached == sum(1 for b in depth_of if not ref[b]), "cached count is wrong"
        assert all(self._node_of[b] is None and not ref[b] for b in self._free.free), "a free block is in the tree or held"
        for seq_id, seq in self._seqs.items():
            assert isinstance(seq, _RadixSeq)
            assert seq.computed <= seq.num_tokens, f"seq {seq_id}: computed past its tokens"
            in_tree = [b in depth_of for b in seq.table]
            k = in_tree.index(False) if False in in_tree else len(in_tree)
            assert not any(in_tree[k:]), f"seq {seq_id}: tree blocks are not a prefix of its table"
            for p in range(k):
                b = seq.table[p]
                assert depth_of[b] == p, f"seq {seq_id}: tree block {b} at page {p} sits at depth {depth_of[b]}"
                node = self._node_of[b]
                i = node.blocks.index(b)
                assert node.tokens[i * bs:(i + 1) * bs] == seq.token_ids[p * bs:(p + 1) * bs], \
                    f"seq {seq_id}: tree block {b} spells other tokens"
                if p:
                    prev = seq.table[p - 1]
                    assert (node.blocks[i - 1] if i else node.parent.blocks[-1]) == prev, \
                        f"seq {seq_id}: tree block {b} is not below its previous page"
