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

Host-side bookkeeping only (no jax), like the page pool it indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.kv_pages import PageManager

ROOT = 0  # the block id before a sequence's first page (base model)


def reads_cache(params) -> bool:
    """Whether a request may take pages from the cache. Prompt logprobs need every prompt
    position's logits, and a penalized request's device row is set up by the step that
    feeds its position 0 (engine/penalties.py): both compute their whole prompt (their
    pages are still indexed for others)."""
    return not getattr(params, "prompt_logprobs", False) and not getattr(params, "penalized", False)


class PrefixCache:
    """The content index of one PageManager's full pages."""

    def __init__(self, pages: PageManager):
        if pages.on_reuse is not None:
            raise ValueError("pages: already indexed by another prefix cache")
        self.pages = pages
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
    ) -> tuple[list[int], list[int]]:
        """The indexed pages holding the longest prefix of a sequence's first `num_tokens`
        tokens, in whole pages, and their block ids. `tokens(start, stop)` reads the
        sequence's tokens at positions [start, stop); `lora_id`: its adapter (0: none)."""
        size = self.pages.page_size
        pages, blocks = [], []
        parent = ROOT - lora_id
        for start in range(0, num_tokens - size + 1, size):
            found = self._blocks.get((parent, tuple(tokens(start, start + size))))
            if found is None:
                break
            page, parent = found
            pages.append(page)
            blocks.append(parent)
        return pages, blocks

    def num_free(self, pages: Sequence[int]) -> int:
        """How many of `pages` (a match) no one holds: taking them uses up free pages."""
        return sum(self.pages.refcount(page) == 0 for page in pages)

    def take(self, pages: Sequence[int]) -> None:
        """Hold each matched page once more (back off the free list if no one held it)."""
        for page in pages:
            if self.pages.refcount(page):
                self.pages.incref(page)
            else:
                self.pages.reclaim(page)

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
        return num

    def _evict(self, page: int) -> None:
        key = self._key_of.pop(page, None)
        if key is not None:
            del self._blocks[key]
