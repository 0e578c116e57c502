"""KV offloading to host memory: a second, larger tier for the prefix cache.

vLLM's `kv_offloading_size` (GiB of CPU memory for its native OffloadingConnector), SGLang's
hierarchical cache: `LLM(enable_prefix_caching=True, kv_offloading_size=GiB)`. Device pages
are few (HBM) and a long prompt's pages are many, so a prefix cache on the device alone
forgets a document, a long system prompt or a conversation's history as soon as a few other
long prompts pass; host memory holds tens to hundreds of times more, and copying a page back
is far cheaper than computing it again.

How (write-back, as SGLang's write_back policy): the prefix cache (engine/prefix_cache.py)
evicts an indexed page when PageManager.allocate hands it out again (`on_reuse`). With a
host tier, the evicted page's key and block id go into this tier's index (HostTier.store)
and its rows are copied to host memory: a page is copied once, when the device gives it up,
not each time it is computed. The tier holds `capacity` (bytes, or pages for the
OffloadingConnector's num_cpu_blocks) and drops its least recently used pages to take
another. A lookup (PrefixCache.match) that misses on the device goes on in
the tier; a request that takes a host page gets a new device page, indexed under the same
key and block id (so the chain of pages after it, on either tier, stays reachable), and the
rows are copied into it (HostTier.load). The host copy stays: when the device gives that
page up again nothing is copied.

A hybrid model's windowed pool (engine/prefix_cache.WindowCache) gives its pages to the
same tier, under ("window", block id), with copies of their own kinds ("window out",
"window in": the windowed layers' leaves, at that pool's page ids). Each page counts its own
pool's bytes (gpt-oss's pages of either pool hold half the layers; Gemma 4's windowed pages
are narrower than its global layers' ones).

Order: the tier records its copies (out: device page -> HostPage; in: HostPage -> device
page) as the scheduler decides them, and the engine runs them in that order before it
launches the next step (KVOffload.flush). A page is copied out before any step can write it
again (it was free when allocate handed it out, and only a step launched after the copy can
write it); a page is copied in before the step that reads it. A copy out is read back to
the host in the background and taken off the device at a later flush; a copy in of rows
still on their way waits for them. A step taken back after its scheduling (LLM._launch)
leaves its copies recorded: the next launch runs them, so an indexed page always gets its
rows before anything reads it.

Exact: a page's rows are a function of its key (engine/prefix_cache.py says why), copied
bit for bit both ways; in batch-invariant mode a request on pages from the host gives the
bits it gives cold. On a mesh the copies out are gathered whole (replicated, as the KV
transfer's rows: every process holds the host tier of the whole model) and copied in with
the cache's shardings; every process makes the same decisions, as it schedules alike.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import time

import jax
import numpy as np

from configs.model_config import ModelConfig
from engine import kv_budget
from engine.runner import next_pow2
from sharding.placement import put_replicated
from sharding.rules import replicated

GIB = 1 << 30


@dataclasses.dataclass(eq=False)
class HostPage:
    """One page in host memory: its prefix-cache key, block id and rows (one array per
    cache leaf, [page_size, ...]; None until its copy out reaches the host)."""

    key: tuple
    block: int
    rows: list | None = None
    cost: int = 1  # of the tier's capacity


class HostTier:
    """The host tier's index and the copies it has asked for (host bookkeeping, no jax)."""

    def __init__(self, capacity: int, costs: tuple[int, int] = (1, 1)):
        """`capacity` in the units of `costs`, what a page of the main pool and one of a
        hybrid model's windowed pool take: pages (1, 1), or bytes."""
        self.capacity, self.costs = capacity, costs
        self.used = 0
        self._index: collections.OrderedDict[tuple, HostPage] = collections.OrderedDict()
        self._copies: list[tuple[str, int, HostPage]] = []

    def __len__(self) -> int:
        return len(self._index)

    def get(self, key: tuple) -> HostPage | None:
        return self._index.get(key)

    def store(self, page: int, key: tuple, block: int, window: bool = False) -> None:
        """The device gives up `page`, indexed under `key` with `block`: keep its rows
        (`window`: a hybrid model's windowed pool's page, engine/prefix_cache.WindowCache)."""
        if key in self._index:  # the host has them (the page was copied in from here)
            self._index.move_to_end(key)
            return
        entry = self._index[key] = HostPage(key, block, cost=self.costs[window])
        self.used += entry.cost
        while self.used > self.capacity:  # least recently used first
            self.used -= self._index.popitem(last=False)[1].cost
        self._copies.append(("window out" if window else "out", page, entry))

    def load(self, entry: HostPage, page: int, window: bool = False) -> None:
        """Copy `entry`'s rows into device `page` (of the windowed pool) before the next
        step."""
        if entry.key in self._index:
            self._index.move_to_end(entry.key)
        self._copies.append(("window in" if window else "in", page, entry))

    def drain(self) -> list[tuple[str, int, HostPage]]:
        """The copies recorded since the last drain, in order."""
        copies, self._copies = self._copies, []
        return copies

    def reset(self) -> int:
        """Forget every page (with the prefix cache: new weights). Copies already recorded
        still run: a copy in may need a copy out's rows. Returns how many were held."""
        num = len(self._index)
        self._index.clear()
        self.used = 0
        return num


def host_tier_for(
    size_gib, prefix_caching: bool, cfg: ModelConfig, kv_dtype, page_size: int, transfer=None
) -> HostTier | None:
    """The host tier `kv_offloading_size` GiB holds, or vLLM's other spelling, a
    `transfer` (engine/kv_transfer.KVTransferConfig) with kv_connector "OffloadingConnector"
    and {"num_cpu_blocks": N, "block_size": tokens} (None: no offloading); checked before
    any weight is read. The tier keeps a hybrid model's windowed pages too
    (engine/prefix_cache.WindowCache; DeepSeek-V4's per-token rows), each page counted in
    its own pool's bytes (num_cpu_blocks: in pages). A model without attention (Mamba's)
    has no KV in its pages: refused."""
    offloading = size_gib is not None or (transfer is not None and transfer.offloading)
    if offloading and cfg.attention_free:
        option = "kv_offloading_size" if size_gib is not None else "kv_transfer_config"
        raise ValueError(
            f"{option}: {cfg.model_type} has no attention layer, so no KV page to offload "
            "(its prefix cache keeps state snapshots: num_state_snapshots)"
        )
    if transfer is not None and transfer.offloading:
        if size_gib is not None:
            raise ValueError(
                "kv_offloading_size: set beside kv_transfer_config's OffloadingConnector "
                "(one or the other)"
            )
        if not prefix_caching:
            raise ValueError(
                "kv_transfer_config (OffloadingConnector): needs enable_prefix_caching=True "
                "(the host tier keeps the prefix cache's evicted pages)"
            )
        extra = transfer.kv_connector_extra_config
        block = extra.get("block_size", page_size)
        if block % page_size:
            raise ValueError(
                f"kv_connector_extra_config.block_size={block}: must be a multiple of "
                f"page_size={page_size}"
            )
        return HostTier(extra["num_cpu_blocks"] * (block // page_size))
    if size_gib is None:
        return None
    if isinstance(size_gib, bool) or not isinstance(size_gib, int | float):
        raise ValueError(f"kv_offloading_size={size_gib!r}: expected a number of GiB")
    if not size_gib > 0:
        raise ValueError(f"kv_offloading_size={size_gib}: must be > 0 GiB")
    if not prefix_caching:
        raise ValueError(
            "kv_offloading_size: needs enable_prefix_caching=True (the host tier keeps the "
            "prefix cache's evicted pages)"
        )
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if size_gib * GIB > physical:
        raise ValueError(
            f"kv_offloading_size={size_gib}: more than this machine's memory "
            f"({physical / GIB:.1f} GiB)"
        )
    costs = page_bytes(cfg, kv_dtype, page_size)
    capacity = int(size_gib * GIB)
    if capacity < max(costs):
        raise ValueError(
            f"kv_offloading_size={size_gib}: holds no page (a page of {page_size} tokens "
            f"is {max(costs)} bytes: at least {max(costs) / GIB:.3g} GiB)"
        )
    return HostTier(capacity, costs)


def page_bytes(cfg: ModelConfig, kv_dtype, page_size: int) -> tuple[int, int]:
    """Bytes of one page of the main pool and of the windowed pool (a hybrid model's
    windowed layers, or DeepSeek-V4's per-token rows, in a pool of their own: the engine's
    pools, kv_budget.window_pages_for; any other model: every layer in the main pool)."""
    if cfg.hybrid_window is None:
        full = kv_budget.kv_pool_bytes(cfg, 1, None, page_size, kv_dtype)
        return full, full
    pools = ((1, 0), (0, 1))  # (no page has no bytes: a tier's capacity is finite)
    main, window = (max(1, kv_budget.kv_pool_bytes(cfg, *n, page_size, kv_dtype)) for n in pools)
    return main, window


def _gather(kv, pages, pool: tuple[bool, ...]) -> list[jax.Array]:
    """Each cache leaf's `pages` [N]: [N, page_size, ...], of the leaves in the pool
    (`pool[i]`: whether leaf i is)."""
    return [leaf[pages] for leaf, mine in zip(jax.tree.leaves(kv), pool, strict=True) if mine]


def _scatter(kv, pages, rows, pool: tuple[bool, ...]):
    """`kv` with the pool's leaves' `pages` [N] set to `rows` (pages past the pool: none)."""
    leaves, tree = jax.tree.flatten(kv)
    rows = iter(rows)
    new = [
        leaf.at[pages].set(next(rows), mode="drop") if mine else leaf
        for leaf, mine in zip(leaves, pool, strict=True)
    ]
    return jax.tree.unflatten(tree, new)


class KVOffload:
    """The engine's side: runs the tier's copies on the cache (`flush`, before each launch)."""

    def __init__(self, tier: HostTier, kv, num_pages: int, mesh=None, windowed=None):
        """`windowed`: for each cache leaf, whether it lives in a hybrid model's windowed
        pool (kv_transfer.windowed_leaves; None: none does), whose pages the tier keeps
        under their own kinds of copy ("window out", "window in")."""
        self.tier = tier
        self._mesh = mesh
        leaves = jax.tree.leaves(kv)
        windowed = tuple(windowed or [False] * len(leaves))
        pools = {False: tuple(not w for w in windowed), True: windowed}
        # Past each pool: a copy in there is dropped.
        sizes = [x.shape[0] for x, w in zip(leaves, windowed, strict=True) if w]
        self._pad_page = {False: num_pages, True: sizes[0] if sizes else 0}
        self._gather, self._scatter = {}, {}
        shardings = None if mesh is None else jax.tree.map(lambda x: x.sharding, kv)
        for window, pool in pools.items():
            gather = functools.partial(_gather, pool=pool)
            scatter = functools.partial(_scatter, pool=pool)
            if mesh is None:
                self._gather[window] = jax.jit(gather)
                self._scatter[window] = jax.jit(scatter, donate_argnums=0)
            else:  # rows leave replicated (every process keeps them), the cache as it came
                self._gather[window] = jax.jit(gather, out_shardings=replicated(mesh))
                self._scatter[window] = jax.jit(scatter, donate_argnums=0, out_shardings=shardings)
        # Copies out on their way to the host: (their pages, each leaf's rows).
        self._fetching: list[tuple[list[HostPage], list[jax.Array]]] = []
        self.num_stored = self.num_loaded = 0
        self.seconds = 0.0  # the host's time in flush (rows received, copies launched)

    def flush(self, kv):
        """Run the copies the tier recorded, in order; returns the cache."""
        start = time.perf_counter()
        self._receive()
        copies = self.tier.drain()
        first = 0
        while first < len(copies):  # runs of one kind, each one device call
            kind, stop = copies[first][0], first + 1
            while stop < len(copies) and copies[stop][0] == kind:
                stop += 1
            run, window = copies[first:stop], kind.startswith("window")
            if kind.endswith("out"):
                self._copy_out(kv, run, window)
            else:
                kv = self._copy_in(kv, run, window)
            first = stop
        self.seconds += time.perf_counter() - start
        return kv

    def _padded(self, pages: list[int], pad: int) -> np.ndarray:
        out = np.full(next_pow2(len(pages)), pad, np.int32)  # a program per power of two
        out[: len(pages)] = pages
        return put_replicated(out, self._mesh) if self._mesh is not None else out

    def _copy_out(self, kv, run, window: bool) -> None:
        rows = self._gather[window](kv, self._padded([page for _, page, _ in run], 0))
        # One device's copy of each (replicated) leaf: the whole rows, in any process.
        rows = [r.addressable_data(0) for r in rows]
        for r in rows:
            r.copy_to_host_async()
        self._fetching.append(([entry for _, _, entry in run], rows))
        self.num_stored += len(run)

    def _receive(self) -> None:
        """Take the copies out off the device (their own host arrays, not views)."""
        for entries, rows in self._fetching:
            host = [np.asarray(r) for r in rows]
            for i, entry in enumerate(entries):
                entry.rows = [h[i].copy() for h in host]
        self._fetching.clear()

    def _copy_in(self, kv, run, window: bool):
        if any(entry.rows is None for _, _, entry in run):
            self._receive()  # (rows copied out since the last flush: wait for them)
        pages = self._padded([page for _, page, _ in run], self._pad_page[window])
        rows = []
        for i, first in enumerate(run[0][2].rows):
            leaf = np.stack([entry.rows[i] for _, _, entry in run])
            pad = np.zeros((pages.shape[0] - len(run), *first.shape), first.dtype)
            rows.append(np.concatenate([leaf, pad]))
        if self._mesh is not None:
            rows = put_replicated(rows, self._mesh)
        self.num_loaded += len(run)
        return self._scatter[window](kv, pages, rows)

    def stats(self) -> dict[str, int]:
        return {
            "kv_offload_pages": len(self.tier),  # held in host memory now
            # (main-pool pages; a windowed pool's pages take their own bytes)
            "kv_offload_capacity_pages": self.tier.capacity // self.tier.costs[0],
            "kv_offload_stored_pages": self.num_stored,  # copied out since creation
            "kv_offload_loaded_pages": self.num_loaded,  # copied back in
            "kv_offload_seconds": self.seconds,
        }
