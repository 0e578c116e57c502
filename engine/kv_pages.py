"""KV page pool: fixed-size pages, a deterministic free list and per-page reference counts.

Host-side bookkeeping only (no jax): the device holds `k_pages [N, P, K, Dh]` (or the MLA
latent pages) and this class decides which page ids a sequence may write. A slot id on the
device is `page * page_size + offset`.

Why reused pages never leak another sequence's K/V: a sequence only attends to positions
`< kv_len`, and every one of them was written by that sequence itself (the device masks by
`kv_len`). The host keeps this true by (1) returning a page to the free list only when its
reference count reaches 0, i.e. after every holder released it, and (2) restarting a
preempted sequence from position 0 (recompute), so the first `ceil(kv_len / page_size)`
entries of its page table are always pages it has (re)written in its current life. Shared
pages (`incref`, for prefix sharing) hold identical tokens by construction of the sharer.
Sliding-window models are the one exception: a sequence gives back the pages wholly behind
its window (Scheduler, Sequence.num_released_pages) while their ids stay in its table; the
attention masks those keys and zeroes their values, so whatever another holder writes
there never reaches it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple


class OutOfPagesError(RuntimeError):
    """`allocate` asked for more pages than are free; callers check `can_allocate` first."""


def pages_for_tokens(num_tokens: int, page_size: int) -> int:
    """Pages needed to hold `num_tokens` tokens: ceil(num_tokens / page_size)."""
    if num_tokens < 0:
        raise ValueError(f"num_tokens={num_tokens}: must be >= 0")
    if page_size < 1:
        raise ValueError(f"page_size={page_size}: must be >= 1")
    return -(-num_tokens // page_size)


def pages_for_budget(budget_bytes: int, kv_bytes_per_token: int, page_size: int) -> int:
    """Number of pages a KV memory budget holds (the default pool size).

    `kv_bytes_per_token` covers all layers (K and V, or the MLA latent) of one token.
    """
    if page_size < 1:
        raise ValueError(f"page_size={page_size}: must be >= 1")
    if kv_bytes_per_token < 1:
        raise ValueError(f"kv_bytes_per_token={kv_bytes_per_token}: must be >= 1")
    page_bytes = kv_bytes_per_token * page_size
    num_pages = budget_bytes // page_bytes
    if num_pages < 1:
        raise ValueError(
            f"budget_bytes={budget_bytes}: holds no KV page; one page needs {page_bytes} bytes "
            f"(page_size={page_size} x kv_bytes_per_token={kv_bytes_per_token})"
        )
    return num_pages


def window_pool_pages(
    window: int, page_size: int, max_num_seqs: int, max_num_batched_tokens: int
) -> int:
    """Pages that the windowed layers' pool of a hybrid model needs so that it never runs
    out before the full-attention pool (ModelConfig.hybrid_window; Scheduler window_pages).

    A sequence that has computed c tokens and schedules k more holds the pages from the one
    holding key c + 1 - W (those wholly before it went back) to the one holding position
    c + k - 1: at most 1 + (P - 1 + W - 1 + k) / P pages of P. Over n sequences whose
    chunks add up to at most two steps' token budgets B (one step in flight, the next being
    scheduled ahead), that is at most (n (2P + W - 2) + 2B) / P.
    """
    for name, value in (
        ("window", window),
        ("page_size", page_size),
        ("max_num_seqs", max_num_seqs),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        if value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")
    span = max_num_seqs * (2 * page_size + window - 2) + 2 * max_num_batched_tokens
    return pages_for_tokens(span, page_size)


def first_place(position: int, window: int, page_size: int) -> int:
    """The first place of a page table that a query at `position` reads through a sliding
    `window` (keys from position + 1 - window on); the places before it are behind it."""
    return max(0, position + 1 - window) // page_size


class PageManager:
    """A pool of `num_pages` KV pages of `page_size` tokens each.

    The free list is FIFO: `allocate` takes from the front, pages whose count drops to 0 go
    to the back, in the order given. Pages start as 0..N-1, so page ids are deterministic
    and the most recently freed pages are reused last: a prefix cache
    (engine/prefix_cache.py) keeps indexing a free page's content until `allocate` hands
    the page out again (`on_reuse`), and takes it back off the free list on a hit
    (`reclaim`), so its evictions are least recently freed first.
    """

    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 1:
            raise ValueError(f"num_pages={num_pages}: must be >= 1")
        if page_size < 1:
            raise ValueError(f"page_size={page_size}: must be >= 1")
        self.page_size = page_size
        self._num_pages = num_pages
        # An ordered set: popitem(last=False) takes the front, `reclaim` any page, in O(1).
        self._free: collections.OrderedDict[int, None] = collections.OrderedDict.fromkeys(
            range(num_pages)
        )
        self._refcount = [0] * num_pages
        # Called with each page `allocate` hands out, before its new holder writes it.
        self.on_reuse: Callable[[int], None] | None = None

    @property
    def num_total(self) -> int:
        return self._num_pages

    @property
    def num_free(self) -> int:
        return len(self._free)

    def pages_needed(self, num_tokens: int) -> int:
        """Pages needed to hold `num_tokens` tokens from position 0."""
        return pages_for_tokens(num_tokens, self.page_size)

    def num_new_pages(self, page_ids: Sequence[int], num_tokens: int) -> int:
        """Pages a table holding `page_ids` must gain to cover `num_tokens` tokens."""
        return max(0, self.pages_needed(num_tokens) - len(page_ids))

    def can_allocate(self, n_pages: int) -> bool:
        return n_pages <= len(self._free)

    def refcount(self, page: int) -> int:
        self._check_id(page)
        return self._refcount[page]

    def allocate(self, n: int) -> list[int]:
        """Take `n` free pages (refcount 1 each); raises OutOfPagesError if fewer are free."""
        if n < 0:
            raise ValueError(f"n={n}: number of pages to allocate must be >= 0")
        if n > len(self._free):
            raise OutOfPagesError(f"allocate({n}): only {len(self._free)} pages free")
        pages = [self._free.popitem(last=False)[0] for _ in range(n)]
        for page in pages:
            self._refcount[page] = 1
            if self.on_reuse is not None:
                self.on_reuse(page)
        return pages

    def reclaim(self, page: int) -> None:
        """Take a free page back off the free list, its content kept (refcount 1): a prefix
        cache hit on a page no one holds."""
        self._check_id(page)
        if self._refcount[page]:
            raise ValueError(f"page={page}: is held (refcount {self._refcount[page]}), not free")
        del self._free[page]
        self._refcount[page] = 1

    def incref(self, page: int) -> None:
        """Add a holder to an allocated page (prefix sharing)."""
        self._check_id(page)
        if self._refcount[page] == 0:
            raise ValueError(f"page={page}: is free; only allocated pages can be shared")
        self._refcount[page] += 1

    def free(self, pages: Iterable[int]) -> None:
        """Drop one reference per listed page; pages reaching 0 return to the free list.

        Validated as a whole first, so a bad call (double free) changes nothing.
        """
        pages = list(pages)
        for page, count in collections.Counter(pages).items():
            self._check_id(page)
            if count > self._refcount[page]:
                raise ValueError(
                    f"page={page}: freed {count} time(s) but has refcount {self._refcount[page]}"
                )
        for page in pages:
            self._refcount[page] -= 1
            if self._refcount[page] == 0:
                self._free[page] = None

    def ensure_capacity(self, page_ids: tuple[int, ...], num_tokens: int) -> tuple[int, ...]:
        """The page table `page_ids` grown to cover `num_tokens` tokens: a new tuple with the
        pages allocated appended, or `page_ids` itself when it already fits. Raises
        OutOfPagesError, allocating nothing, when not enough pages are free.
        """
        need = self.num_new_pages(page_ids, num_tokens)
        return page_ids + tuple(self.allocate(need)) if need else page_ids

    def _check_id(self, page: int) -> None:
        if not 0 <= page < self._num_pages:
            raise ValueError(f"page={page}: out of range [0, {self._num_pages})")


class PagePool(NamedTuple):
    """A KV page pool and the page table each sequence (engine/sequence.py) holds in it:
    the Scheduler's view of one pool (a hybrid model has two)."""

    pages: PageManager
    window: int | None  # keys a query sees back (pages behind them are given back), or None
    ids: str  # the Sequence attribute holding the table
    released: str  # the Sequence attribute counting its pages given back

    def table(self, seq: Any) -> tuple[int, ...]:
        return getattr(seq, self.ids)

    def grow(self, seq: Any, num_tokens: int) -> None:
        """`seq`'s table here covers `num_tokens` tokens (OutOfPagesError: nothing taken)."""
        setattr(seq, self.ids, self.pages.ensure_capacity(self.table(seq), num_tokens))

    def truncate(self, seq: Any, num_pages: int) -> None:
        """Give back the pages of `seq`'s table past its first `num_pages` (those it still
        holds: released places, e.g. before a prefix-cache hit's window, are not held)."""
        table, released = self.table(seq), getattr(seq, self.released)
        self.pages.free(table[max(num_pages, released) :])
        setattr(seq, self.ids, table[:num_pages])
        setattr(seq, self.released, min(released, num_pages))

    def first_held(self, position: int) -> int:
        """The first place of a table here that a query at `position` reads (first_place;
        0 without a window)."""
        if self.window is None:
            return 0
        return first_place(position, self.window, self.pages.page_size)

    def skip_behind_window(self, seq: Any, num_tokens: int) -> None:
        """Start `seq`'s table here for a sequence whose first `num_tokens` positions come
        written from elsewhere (a KV store): the places wholly behind its first query's
        window, released ones that page 0 stands in for (never read, never held)."""
        first = self.first_held(num_tokens)
        setattr(seq, self.ids, (0,) * first)
        setattr(seq, self.released, first)

    def release_behind_window(self, seq: Any) -> None:
        """Free the pages of a windowed pool wholly behind the window of every query `seq`
        will still make.

        Its next query is at position num_computed_tokens or later (a step in flight
        included: it follows the steps already updated) and sees keys from that position +
        1 - window on. Preemption recomputes from position 0 with new pages.
        """
        table, done = self.table(seq), getattr(seq, self.released)
        behind = min(self.first_held(seq.num_computed_tokens), len(table))
        if behind > done:
            self.pages.free(table[done:behind])
            setattr(seq, self.released, behind)
