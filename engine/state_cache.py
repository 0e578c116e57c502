"""Prefix caching for linear-attention models: recurrent-state snapshots at block boundaries.

A gated DeltaNet or KDA layer's state sums up every token before it, so a cached prefix's
KV pages alone cannot start a sequence past position 0 (engine/linear_state.py). As vLLM's
hybrid-model prefix caching does (its `mamba_block_size`, "align" mode), the state is also
kept at every multiple of `block_size` tokens a step's computation passes: the step copies
the span's state there into a snapshot row of the state arrays, inside the rule's loop
where one of its chunks ends (Segments.snap_end / snap_row; block_size is a multiple of the
chunk and of the page size), without cutting the step's chunk short. A snapshot is indexed
under the block id of the page that ends at its boundary (engine/prefix_cache.py: the id
names the whole prefix, and the adapter) when the sequence indexes that page: once the
step writing both is launched (a step built ahead reads them after it ran).

A new request takes its cached pages only up to the last boundary whose snapshot is kept,
and its state row gets that snapshot copied in (StateCopier, before the step that reads
it); it computes from there. Snapshot rows follow the running sequences' rows
(linear_state.state_rows): a pool of `num_rows`, the least recently used given up for a
new snapshot (a row handed to a step is written by it, after the copies before it ran).
Hits are exact as page hits are: bitwise in batch-invariant mode (the rule runs row by row
there, its state at a boundary the same however the tokens were split into steps), to
float rounding otherwise.
"""

from __future__ import annotations

import collections
import math
from typing import NamedTuple

import jax
import numpy as np

from configs.model_config import ModelConfig
from engine import inputs
from engine.linear_state import state_rows
from engine.mtp import MtpProposer
from engine.sequence import Sequence
from models.linear_attention import CHUNK
from sharding.placement import put_replicated

DEFAULT_BLOCK_TOKENS = 512  # block_size's default (rounded up to a multiple of the page)


def block_size_for(block_size: int | None, page_size: int) -> int:
    """`mamba_block_size` checked (a multiple of the page size and of the chunked rule's
    CHUNK rows), or the default: DEFAULT_BLOCK_TOKENS rounded up to such a multiple."""
    unit = math.lcm(page_size, CHUNK)
    if block_size is None:
        return int(-(-DEFAULT_BLOCK_TOKENS // unit) * unit)
    block_size = inputs.as_int("mamba_block_size", block_size)
    if block_size % unit:
        raise ValueError(
            f"mamba_block_size={block_size}: must be a positive multiple of {unit} (the "
            f"page size {page_size} and the linear-attention chunk {CHUNK})"
        )
    return block_size


class StateLayout(NamedTuple):
    """A linear-attention model's state rows (engine/linear_state.py)."""

    rows: int  # of each layer's state arrays (0: no linear layers)
    snapshots: StateCache | None  # prefix caching's
    block: int  # tokens between snapshots (mamba_block_size; 0: none)
    drafts: int  # draft rows per sequence (speculative decoding; 0: none)

    @property
    def copied(self) -> bool:
        """Whether steps may start a sequence from a state another row holds."""
        return bool(self.block or self.drafts)


def state_layout(
    cfg: ModelConfig,
    enable_prefix_caching: bool,
    block_size: int | None,
    num_snapshots: int | None,
    page_size: int,
    max_num_seqs: int,
    proposer=None,
) -> StateLayout:
    """The LLM's prefix-caching options checked against the model (ValueError naming the
    first that does not apply: a sliding window on every layer is refused, the snapshot
    options need a linear-attention model with prefix caching), and the state rows they
    and `proposer`'s drafts (speculative decoding: ngram; MTP refused) take."""
    if enable_prefix_caching and cfg.kv_window:
        raise ValueError(
            f"enable_prefix_caching=True: not supported for {cfg.model_type}'s sliding-"
            f"window attention on every layer (window {cfg.kv_window} tokens)"
        )
    linear = bool(cfg.linear_attention_layers)
    for name, value in (("mamba_block_size", block_size), ("num_state_snapshots", num_snapshots)):
        if value is not None and not (linear and enable_prefix_caching):
            raise ValueError(
                f"{name}={value}: only for prefix caching (enable_prefix_caching=True) of a "
                f"model with linear-attention layers ({cfg.model_type} "
                f"{'has them' if linear else 'has none'})"
            )
    if not linear:
        return StateLayout(0, None, 0, 0)
    if isinstance(proposer, MtpProposer):
        raise ValueError(
            f"speculative_config.method='mtp': not supported for {cfg.model_type}'s "
            "linear-attention models (their MTP module is not read); 'ngram' is"
        )
    drafts = proposer.num_speculative_tokens if proposer is not None else 0
    if not enable_prefix_caching:
        return StateLayout(state_rows(cfg, max_num_seqs, 0, drafts), None, 0, drafts)
    block_size = block_size_for(block_size, page_size)
    num_rows = max_num_seqs if num_snapshots is None else num_snapshots
    num_rows = inputs.as_int("num_state_snapshots", num_rows, low=1)
    cache = StateCache(block_size, page_size, max_num_seqs + 1, num_rows)
    return StateLayout(state_rows(cfg, max_num_seqs, num_rows, drafts), cache, block_size, drafts)


class StateCache:
    """Snapshot rows first_row .. first_row + num_rows - 1, indexed by block id."""

    def __init__(self, block_size: int, page_size: int, first_row: int, num_rows: int):
        if num_rows < 1:
            raise ValueError(f"num_state_snapshots={num_rows}: must be >= 1")
        self.block_size, self.page_size, self.num_rows = block_size, page_size, num_rows
        self._first = first_row
        self._free = list(range(first_row + num_rows - 1, first_row - 1, -1))
        self._row_of: dict[int, int] = {}  # block id -> row
        # Indexed rows -> their block ids, least recently used first.
        self._lru: collections.OrderedDict[int, int] = collections.OrderedDict()
        # Rows handed to steps, not yet indexed, by sequence: row -> the page ending there.
        self._pending: dict[Sequence, dict[int, int]] = {}
        self.num_snapshots = self.num_restored = 0  # indexed, and taken by admissions

    @property
    def num_indexed(self) -> int:
        """Snapshots indexed. (No __len__: an empty cache must not read as None.)"""
        return len(self._row_of)

    def usable(self, hits: list, blocks: list[int], covered=None) -> tuple[list, list[int], int]:
        """A prefix-cache match cut to the last block boundary with a snapshot (and, for a
        model with windowed layers too, `covered(blocks)`: its window pages indexed): (its
        pages, its block ids, the snapshot's row); ([], [], 0) when none has one."""
        per = self.block_size // self.page_size
        for n in range(len(blocks) // per * per, 0, -per):
            row = self._row_of.get(blocks[n - 1])
            if row is not None and (covered is None or covered(blocks[:n])):
                self._lru.move_to_end(row)
                return hits[:n], blocks[:n], row
        return [], [], 0

    def boundary_rows(self, seq: Sequence, start: int, stop: int) -> tuple:
        """A row for each boundary in (start, stop] a step computing `seq`'s positions
        start .. stop - 1 passes: ((span-relative end, row), ...); fewer when every row is
        in a step not yet applied."""
        snaps, size = [], self.block_size
        for pos in range((start // size + 1) * size, stop + 1, size):
            row = self._take_row()
            if row is None:
                break
            snaps.append((pos - start, row))
            self._pending.setdefault(seq, {})[row] = pos // self.page_size - 1
        return tuple(snaps)

    def count_restore(self, row: int, sign: int = 1) -> None:
        """A step item copies `row` into its sequence's (sign -1: a step that never ran):
        counted if it is a snapshot."""
        self.num_restored += sign * (self._first <= row < self._first + self.num_rows)

    def _take_row(self) -> int | None:
        if self._free:
            return self._free.pop()
        if not self._lru:
            return None  # every row is in a step not yet applied
        row, block = self._lru.popitem(last=False)
        del self._row_of[block]
        return row

    def settle(self, seq: Sequence) -> None:
        """Index `seq`'s snapshots whose pages it has indexed now (PrefixCache.index: their
        step was launched) under those pages' block ids; a block with one already frees
        the new row."""
        rows = self._pending.get(seq, {})
        for row, page in list(rows.items()):
            if page < len(seq.prefix_blocks):
                del rows[row]
                block = seq.prefix_blocks[page]
                if block in self._row_of:
                    self._free.append(row)
                    continue
                self._row_of[block], self._lru[row] = row, block
                self.num_snapshots += 1
        if not rows:
            self._pending.pop(seq, None)

    def release(self, items, seqs: dict[str, Sequence]) -> None:
        """The rows of the items' snapshots not indexed by now (their step was applied, or
        never ran) go back: their pages were not indexed (a sequence finished meanwhile).
        `seqs`: the items' sequences by request id."""
        for item in items:
            seq = seqs[item.request_id]
            rows = self._pending.get(seq, {})
            for _, row in item.state_snapshots:
                if rows.pop(row, None) is not None:
                    self._free.append(row)
            if not rows:
                self._pending.pop(seq, None)

    def cancel(self, item, seq: Sequence) -> None:
        """A step item that never ran: its rows back (its copy is made again)."""
        self.release((item,), {item.request_id: seq})
        self.count_restore(item.state_from, -1)

    def reset(self) -> int:
        """Forget every snapshot (with the prefix cache's pages); returns how many."""
        num = len(self._row_of)
        self._free.extend(self._lru)  # (pending rows stay: their steps write them)
        self._row_of.clear()
        self._lru.clear()
        return num


class StateCopier:
    """The device side: a step's admissions' snapshots (ScheduledItem.state_from) copied
    to their state rows in every linear-attention layer before the step runs; one program
    per power of two of copies (padding copies row 0 onto itself: the padding sequences'
    row, which no sequence holds)."""

    def __init__(self, cfg: ModelConfig, kv, mesh=None):
        layers = tuple(cfg.linear_attention_layers)

        def copy(kv, src, dst):
            kv = list(kv)
            for i in layers:
                kv[i] = tuple(arr.at[dst].set(arr[src]) for arr in kv[i])
            return kv

        shardings = None if mesh is None else jax.tree.map(lambda x: x.sharding, kv)
        self._copy = jax.jit(copy, donate_argnums=0, out_shardings=shardings)
        self._mesh = mesh

    def __call__(self, kv, items) -> list:
        """`kv` after the copies `items` ask for (itself when none does)."""
        copies = [(it.state_from, it.state_slot) for it in items if it.state_from]
        if not copies:
            return kv
        rows = np.zeros((2, 1 << (len(copies) - 1).bit_length()), np.int32)
        rows[:, : len(copies)] = np.asarray(copies, np.int32).T
        if self._mesh is not None:
            rows = put_replicated(rows, self._mesh)
        return self._copy(kv, rows[0], rows[1])
