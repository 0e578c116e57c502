"""Automatic prefix caching: full KV pages found again by their content.

A page the scheduler has filled (page_size tokens written) is indexed under its block key:
(the block id of the page before it in the sequence, the page's tokens). A block id is an
integer this index gives out once and never again, so a key names the whole prefix up to
and including its page, exactly: no hash can collide, and a key whose parent page was
evicted is simply never reached again. A new request walks its tokens page by page from
the root and takes the pages found (Scheduler admission), up to the last whole page before
its last token (whose logits it must compute), and computes only the rest; vLLM's automatic
prefix caching, with the chain of token tuples in place of its chain of hashes.

Pages stay indexed after their last holder frees them: a free page keeps its content until
PageManager.allocate hands it out again, which evicts it from the index (`on_reuse`) before
its new holder writes it. The free list is FIFO, and a finished sequence frees its pages
last page first, so a long prefix loses its tail before its head (the part other prompts
share) and the least recently freed pages go first.

Why a hit is exact: a page's K/V rows are a function of its tokens, their positions (page i
holds positions i*P..i*P+P-1, the same in every sequence), the tokens before them and the
LoRA adapter the request runs with (engine/lora.py); the key pins all of those: a chain
starts at its adapter's root, ROOT for the base model and ROOT - lora_id for an adapter
(LoRARequest.lora_int_id: one adapter per id for an engine's life), never a block id.
Bitwise, in batch-invariant mode: the rows do not depend on which step, chunk or batch
wrote them (engine/batch_invariant.py); otherwise they match a recompute to float rounding,
as a different prefill chunking does.

A host tier (engine/kv_offload.py, `kv_offloading_size`) keeps the pages the device gives
up: an evicted page's key and block id move there, a lookup goes on there where the device
index ends, and a page taken from there is a new device page indexed under the same key and
block id, its rows copied in before the step that reads them.

Host-side bookkeeping only (no jax), like the page pool it indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engine.kv_pages import PageManager

if TYPE_CHECKING:  # (a host page is anything but an int page id: no jax imported here)
    from engine.kv_offload import HostPage, HostTier
    from engine.sequence import Sequence as SequenceLike

ROOT = 0  # the block id before a sequence's first page (base model)


def reads_cache(params) -> bool:
    """Whether a request may take pages from the cache. Prompt logprobs need every prompt
    position's logits: such a request computes its whole prompt (its pages are still
    indexed for others). A penalized one may: its device row is seeded with the tokens
    before its first step (engine/penalties.py)."""
    return not getattr(params, "prompt_logprobs", False)


class PrefixCache:
    """The content index of one PageManager's full pages."""

    def __init__(self, pages: PageManager, host: HostTier | None = None, states=None):
        """`states`: linear-attention models' state snapshots (engine/state_cache.py)."""
        if pages.on_reuse is not None:
            raise ValueError("pages: already indexed by another prefix cache")
        self.pages, self.host, self.states = pages, host, states
        # (parent block id, the page's tokens) -> (page, block id); and page -> its key.
        self._blocks: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
        self._key_of: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._next_block = ROOT + 1
        pages.on_reuse = self._evict

    def __len__(self) -> int:
        """Pages indexed (held or free)."""
        return len(self._blocks)

    def match(
        self, tokens: Callable[[int, int], Sequence[int]], num_tokens: int, lora_id: int = 0
    ) -> tuple[list[int | HostPage], list[int]]:
        """The indexed pages holding the longest prefix of a sequence's first `num_tokens`
        tokens, in whole pages (device page ids, or the host tier's HostPages), and their
        block ids. `tokens(start, stop)` reads the sequence's tokens at positions [start,
        stop); `lora_id`: its adapter (0: none)."""
        size = self.pages.page_size
        pages, blocks = [], []
        parent = ROOT - lora_id
        for start in range(0, num_tokens - size + 1, size):
            key = (parent, tuple(tokens(start, start + size)))
            found = self._blocks.get(key)
            if found is None and self.host is not None:
                entry = self.host.get(key)
                found = None if entry is None else (entry, entry.block)
            if found is None:
                break
            page, parent = found
            pages.append(page)
            blocks.append(parent)
        return pages, blocks

    def lookup(self, seq: SequenceLike) -> tuple[list[int | HostPage], list[int]]:
        """`match` for a sequence: its longest cached prefix short of its last token (whose
        logits it computes), for linear-attention models cut to the last block boundary
        with a state snapshot, whose row goes to `seq.state_from` (engine/state_cache.py)."""
        hits, blocks = self.match(seq.token_ids_range, seq.num_tokens - 1, seq.lora_id)
        if self.states is not None:
            hits, blocks, seq.state_from = self.states.usable(hits, blocks)
        return hits, blocks

    def index(self, seq: SequenceLike, num_tokens: int) -> None:
        """`register` the full pages of a sequence's first `num_tokens` positions (KV
        written) after those indexed (seq.prefix_blocks, extended)."""
        self.register(seq.page_ids, seq.token_ids_range, num_tokens, seq.prefix_blocks, seq.lora_id)
        if self.states is not None:  # its state snapshots at those pages' ends
            self.states.settle(seq)

    def num_free(self, pages: Sequence[int | HostPage]) -> int:
        """How many of `pages` (a match) use up a free page when taken: device pages no one
        holds, and the host tier's (each copied into a new page)."""
        return sum(not isinstance(p, int) or self.pages.refcount(p) == 0 for p in pages)

    def take(self, pages: Sequence[int | HostPage]) -> list[int]:
        """Hold each matched device page once more (back off the free list if no one held
        it), then give each host page a new device page, indexed under its key and block id,
        its rows to be copied in (HostTier.load). Returns the device page ids."""
        for page in pages:
            if not isinstance(page, int):
                continue
            if self.pages.refcount(page):
                self.pages.incref(page)
            else:
                self.pages.reclaim(page)
        # (After the device hits are held: allocating evicts free pages, never those.)
        held = list(pages)
        for i, entry in enumerate(pages):
            if not isinstance(entry, int):
                held[i] = page = self.pages.allocate(1)[0]
                self._blocks[entry.key] = (page, entry.block)
                self._key_of[page] = entry.key
                self.host.load(entry, page)
        return held

    def register(
        self,
        page_ids: Sequence[int],
        tokens: Callable[[int, int], Sequence[int]],
        num_tokens: int,
        blocks: list[int],
        lora_id: int = 0,
    ) -> None:
        """Index the pages of a sequence's table `page_ids` that its first `num_tokens`
        computed tokens fill, after the `len(blocks)` already indexed; `blocks`, the
        sequence's block ids page by page, is extended in place. A page whose content is
        already indexed (another sequence computed the same prefix) is left out, and the
        chain goes on through the indexed one's block id. `lora_id`: its adapter (0: none)."""
        size = self.pages.page_size
        for i in range(len(blocks), num_tokens // size):
            parent = blocks[-1] if blocks else ROOT - lora_id
            key = (parent, tuple(tokens(i * size, (i + 1) * size)))
            found = self._blocks.get(key)
            if found is not None:
                blocks.append(found[1])
                continue
            entry = None if self.host is None else self.host.get(key)
            if entry is not None:  # computed again: the host's block id, its chain goes on
                block = entry.block
            else:
                block = self._next_block
                self._next_block += 1
            page = page_ids[i]
            if page not in self._key_of:  # (it always is new, short of a bookkeeping bug)
                self._blocks[key] = (page, block)
                self._key_of[page] = key
            blocks.append(block)

    def reset(self) -> int:
        """Forget every indexed page (vLLM's reset_prefix_cache: e.g. after new weights);
        held pages stay held. Returns how many were indexed. Sequences already running keep
        their block ids, whose keys no new lookup reaches."""
        num = len(self._blocks)
        self._blocks.clear()
        self._key_of.clear()
        if self.host is not None:
            num += self.host.reset()
        if self.states is not None:
            self.states.reset()
        return num

    def _evict(self, page: int) -> None:
        key = self._key_of.pop(page, None)
        if key is not None:
            _, block = self._blocks.pop(key)
            if self.host is not None:  # its rows go to the host tier
                self.host.store(page, key, block)
