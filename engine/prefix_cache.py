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

A hybrid model's windowed layers (ModelConfig.hybrid_window: gpt-oss, Qwen2 with
max_window_layers, Llama 4's chunked layers, DeepSeek-V4's per-token rows) keep their KV in
a pool of their own, where a sequence gives back the pages behind its window (kv_pages
PagePool.release_behind_window). `WindowCache` indexes those pages under the block id of
the main pool's page at the same place (the id names the whole prefix up to it): a match
is cut to its longest prefix whose last window is still there (the window pages a query at
its end reads), as vLLM's sliding-window cache manager finds its hits; the places before
that are released ones in the new sequence's table.

A host tier (engine/kv_offload.py, `kv_offloading_size`) keeps the pages the device gives
up: an evicted page's key and block id move there, a lookup goes on there where the device
index ends, and a page taken from there is a new device page indexed under the same key and
block id, its rows copied in before the step that reads them.

Host-side bookkeeping only (no jax), like the page pool it indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engine.kv_pages import PageManager, first_place

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


def _num_free(manager: PageManager, pages: Sequence[int | HostPage]) -> int:
    """How many of a match's `pages` use up a free page of `manager` when taken: device
    pages no one holds, and the host tier's (each copied into a new page)."""
    return sum(not isinstance(p, int) or manager.refcount(p) == 0 for p in pages)


def _hold(manager: PageManager, pages: Sequence[int | HostPage]) -> None:
    """Hold each of a match's device pages once more (back off the free list if no one
    held it); host pages are left to the caller."""
    for page in pages:
        if not isinstance(page, int):
            continue
        if manager.refcount(page):
            manager.incref(page)
        else:
            manager.reclaim(page)


class PrefixCache:
    """The content index of one PageManager's full pages."""

    def __init__(
        self,
        pages: PageManager,
        host: HostTier | None = None,
        states=None,
        windows: WindowCache | None = None,
    ):
        """`states`: linear-attention models' state snapshots (engine/state_cache.py);
        `windows`: a hybrid model's windowed pages."""
        if pages.on_reuse is not None:
            raise ValueError("pages: already indexed by another prefix cache")
        self.pages, self.host, self.states, self.windows = pages, host, states, windows
        # (parent block id, the page's tokens) -> (page, block id); and page -> its key.
        self._blocks: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
        self._key_of: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._next_block = ROOT + 1
        pages.on_reuse = self._evict

    def __len__(self) -> int:
        """Pages indexed (held or free)."""
        return len(self._blocks)

    def check_pools(self, pages: PageManager, window_pages, sliding_window) -> None:
        """ValueError unless this cache indexes a scheduler's pools: `pages`, and a hybrid
        model's `window_pages` (a sliding window on every layer is not supported)."""
        if (
            self.pages is not pages
            or (sliding_window is not None and window_pages is None)
            or getattr(self.windows, "pages", None) is not window_pages
        ):
            raise ValueError(
                "prefix_cache: must index page_manager, and window_pages when given (a "
                "sliding window on every layer: not supported)"
            )

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
        with a state snapshot, whose row goes to `seq.state_from` (engine/state_cache.py),
        for hybrid models to the last page whose window is indexed (WindowCache)."""
        hits, blocks = self.match(seq.token_ids_range, seq.num_tokens - 1, seq.lora_id)
        if self.states is not None:  # (LFM3, both: a boundary whose window is indexed too)
            covered = None if self.windows is None else self.windows.covers
            hits, blocks, seq.state_from = self.states.usable(hits, blocks, covered)
        elif self.windows is not None:
            hits, blocks = self.windows.usable(hits, blocks)
        return hits, blocks

    def index(self, seq: SequenceLike, num_tokens: int) -> None:
        """`register` the full pages of a sequence's first `num_tokens` positions (KV
        written) after those indexed (seq.prefix_blocks, extended)."""
        start = len(seq.prefix_blocks)
        self.register(seq.page_ids, seq.token_ids_range, num_tokens, seq.prefix_blocks, seq.lora_id)
        if self.windows is not None:
            self.windows.settle(seq, start)
        if self.states is not None:  # its state snapshots at those pages' ends
            self.states.settle(seq)

    def num_free(self, pages: Sequence[int | HostPage], blocks: list[int]) -> tuple[int, int]:
        """How many of a match's `pages` use up a free page when taken (device pages no one
        holds, and the host tier's: each copied into a new page), and of a hybrid model's
        window pages for it (WindowCache.pages_for), how many are free."""
        main = _num_free(self.pages, pages)
        if self.windows is None:
            return main, 0
        return main, self.windows.num_free(self.windows.pages_for(blocks)[1])

    def admit(self, seq: SequenceLike, pages: Sequence[int | HostPage], blocks: list[int]) -> None:
        """`seq` admitted on a `lookup` match: its table holds the `take`n pages, its block
        ids the match's, and a hybrid model's windowed table the window pages (WindowCache
        .take)."""
        seq.page_ids, seq.prefix_blocks = tuple(self.take(pages)), blocks
        seq.num_cached_tokens = len(blocks) * self.pages.page_size
        if self.windows is not None:
            seq.window_page_ids, seq.num_released_window_pages = self.windows.take(blocks)

    def take(self, pages: Sequence[int | HostPage]) -> list[int]:
        """Hold each matched device page once more (back off the free list if no one held
        it), then give each host page a new device page, indexed under its key and block id,
        its rows to be copied in (HostTier.load). Returns the device page ids."""
        _hold(self.pages, pages)
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
        if self.windows is not None:
            self.windows.reset()
        return num

    def _evict(self, page: int) -> None:
        key = self._key_of.pop(page, None)
        if key is not None:
            _, block = self._blocks.pop(key)
            if self.host is not None:  # its rows go to the host tier
                self.host.store(page, key, block)


class WindowCache:
    """A hybrid model's windowed pages (its second pool), each indexed under the block id
    of the main pool's page at the same place in its sequence's table."""

    def __init__(self, pages: PageManager, window: int, host: HostTier | None = None):
        """`window`: the keys a query sees back, itself included (the pool's); `host`: the
        prefix cache's host tier, which keeps the windowed pages the pool gives up too
        (under ("window", block id))."""
        if pages.on_reuse is not None:
            raise ValueError("pages: already indexed by another prefix cache")
        if window < 1:
            raise ValueError(f"window={window}: must be >= 1")
        self.pages, self.window, self.host = pages, window, host
        self._page_of: dict[int, int] = {}  # block id -> page
        self._block_of: dict[int, int] = {}  # page -> block id
        pages.on_reuse = self._evict

    def __len__(self) -> int:
        """Pages indexed (held or free)."""
        return len(self._page_of)

    def first_read(self, num_pages: int) -> int:
        """The first place in a table that a query right after its first `num_pages` pages
        reads (keys from its position + 1 - window on); those before it are released."""
        size = self.pages.page_size
        return first_place(num_pages * size, self.window, size)

    def usable(self, hits: list, blocks: list[int]) -> tuple[list, list[int]]:
        """A prefix-cache match cut to its longest prefix whose window pages (the places
        from `first_read` to its end) are all indexed; ([], []) when none is."""
        runs, run = [], 0  # runs[i]: indexed places in a row ending at place i
        for block in blocks:
            run = run + 1 if self._find(block) is not None else 0
            runs.append(run)
        for n in range(len(blocks), 0, -1):
            if runs[n - 1] >= n - self.first_read(n):
                return hits[:n], blocks[:n]
        return [], []

    def covers(self, blocks: list[int]) -> bool:
        """Whether the window pages a query right after `blocks` reads are all indexed."""
        return all(self._find(b) is not None for b in blocks[self.first_read(len(blocks)) :])

    def _find(self, block: int) -> int | HostPage | None:
        """`block`'s windowed page: on the device, else in the host tier, else None."""
        page = self._page_of.get(block)
        if page is None and self.host is not None:
            return self.host.get(("window", block))
        return page

    def pages_for(self, blocks: list[int]) -> tuple[int, list[int | HostPage]]:
        """For a `usable` match's block ids: (first_read, the indexed pages from there:
        device page ids, or the host tier's HostPages)."""
        first = self.first_read(len(blocks))
        return first, [self._find(block) for block in blocks[first:]]

    def num_free(self, pages: list[int | HostPage]) -> int:
        """How many of `pages` use up a free page when taken: device pages no one holds,
        and the host tier's (each copied into a new page)."""
        return _num_free(self.pages, pages)

    def take(self, blocks: list[int]) -> tuple[tuple[int, ...], int]:
        """The windowed table of a sequence admitted on a `usable` match's `blocks`, and how
        many of its places are released: the pages from `first_read` on, held once more
        (back off the free list if no one held them; a host page: a new page, its rows
        copied in); before them the first of those (or page 0) stands in, never read
        (attention masks keys behind the window)."""
        first, pages = self.pages_for(blocks)
        _hold(self.pages, pages)
        held = list(pages)  # (after the device hits are held: allocating evicts others)
        for i, entry in enumerate(pages):
            if not isinstance(entry, int):
                held[i] = page = self.pages.allocate(1)[0]
                self._page_of[entry.block], self._block_of[page] = page, entry.block
                self.host.load(entry, page, window=True)
        return (held[0] if held else 0,) * first + tuple(held), first

    def settle(self, seq: SequenceLike, start: int) -> None:
        """Index `seq`'s windowed pages at the places from `start` that its main pages have
        block ids for now (PrefixCache.index), those it still holds (not behind its window:
        a released page may hold another sequence's rows by now)."""
        table, blocks = seq.window_page_ids, seq.prefix_blocks
        for i in range(max(start, seq.num_released_window_pages), min(len(blocks), len(table))):
            block, page = blocks[i], table[i]
            if block not in self._page_of and page not in self._block_of:
                self._page_of[block], self._block_of[page] = page, block

    def reset(self) -> None:
        self._page_of.clear()
        self._block_of.clear()

    def _evict(self, page: int) -> None:
        block = self._block_of.pop(page, None)
        if block is not None:
            del self._page_of[block]
            if self.host is not None:  # its rows go to the host tier
                self.host.store(page, ("window", block), block, window=True)
