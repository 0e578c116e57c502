"""Packs a scheduler decision into the padded numpy StepBatch the jitted step takes."""

from __future__ import annotations

import numpy as np

from engine.step import StepBatch


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# A step pads its sequences to at least this many rows (or T, if fewer). Those rows cost an
# lm_head and sampler row each (on a GPU 8 lm_head rows read the same weights as 1; on CPU
# ~1 ms per step, docs/benchmarks.md "Step buckets"), and the floor drops the S = 1, 2, 4
# variants of every larger T: at the defaults (2048 tokens, 64 sequences) 33 buckets
# instead of 63, about half the compilations to warm up.
SEQ_FLOOR = 8


class Buckets:
    """Padded shapes: tokens T and sequences S each round up to a power of two.

    S is at least min(T, SEQ_FLOOR, the largest S), never more than T. Every step compiles
    for one (T, S) pair, so the number of compilations is at most `len(pairs)`, however the
    traffic mixes decodes and prefill chunks. The page table width P is fixed (max_model_len
    / page_size): it is small and the attention loop bound is traced, so a fixed P costs
    nothing at run time.

    With `min_rows` (batch-invariant mode) both T and S are padded to at least that many
    rows, so every matmul runs in one kernel regime whatever the real batch is.
    """

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        pages_per_seq: int,
        min_rows: int = 1,
    ):
        if min_rows < 1 or min_rows & (min_rows - 1):
            raise ValueError(f"min_rows={min_rows}: must be a power of two >= 1")
        self.min_rows = min_rows
        self.max_tokens = max(next_pow2(max_num_batched_tokens), min_rows)
        self.max_seqs = max(next_pow2(max_num_seqs), min_rows)
        self.pages_per_seq = pages_per_seq
        self.token_sizes = self._sizes(self.max_tokens)
        self.seq_sizes = self._sizes(self.max_seqs)

    def _sizes(self, top: int) -> list[int]:
        return [1 << i for i in range(top.bit_length()) if 1 << i >= self.min_rows]

    def _seq_floor(self, t: int) -> int:
        return max(min(t, SEQ_FLOOR, self.max_seqs), self.min_rows)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return [
            (t, s) for t in self.token_sizes for s in self.seq_sizes if self._seq_floor(t) <= s <= t
        ]

    def pick(self, num_tokens: int, num_seqs: int) -> tuple[int, int]:
        t = max(next_pow2(num_tokens), self.min_rows)
        return t, min(max(next_pow2(num_seqs), self._seq_floor(t)), t)


class PageRows:
    """Each scheduled sequence's page ids as an int32 row, carried from one step to the next.

    Turning a sequence's page ids (Python ints) into an array costs ~45 ns a page, paid for
    its whole table every step: 64 decodes at 32k keys (2,048 pages each) were 6 of the 7.6
    ms `pack` took (measured, CPU). Between steps a running sequence's table only grows, so
    a row whose previous ids are the new ids' prefix (compared by value; the ints are the
    same objects, so that is a fast identity walk) converts only its new pages. Anything
    else (pages given back by an undone step ahead, a preempted sequence re-admitted)
    converts the whole table again. Rows are kept for the last step's sequences only.
    """

    def __init__(self):
        self._rows: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}

    def rows(self, items) -> list[np.ndarray]:
        """[len(item.page_ids)] int32 per item, in order."""
        kept = {}
        for it in items:
            ids = tuple(it.page_ids)
            old = self._rows.get(it.request_id)
            if old is not None and len(old[0]) <= len(ids) and ids[: len(old[0])] == old[0]:
                row = old[1]
                if len(ids) > len(row):
                    row = np.concatenate([row, np.asarray(ids[len(row) :], np.int32)])
            else:
                row = np.asarray(ids, np.int32)
            kept[it.request_id] = (ids, row)
        self._rows = kept
        return [kept[it.request_id][1] for it in items]


def pack(items, page_size: int, buckets: Buckets, page_rows: PageRows | None = None) -> StepBatch:
    """Flatten scheduled items (decodes first, then prefill chunks) into a padded StepBatch.

    Each item carries token_ids, start_pos, page_ids, kv_len_after, sampling (with a resolved
    seed), num_generated and feed_index (ScheduledItem). Padding tokens write nowhere (slot
    -1); padding sequences have kv_len 0, so they attend to nothing and their samples are
    ignored by the caller. `page_rows` (an engine's, kept across steps) converts only the
    pages a sequence gained since its last step.
    """
    num_tokens = sum(len(it.token_ids) for it in items)
    t_pad, s_pad = buckets.pick(num_tokens, len(items))
    token_ids = np.zeros(t_pad, np.int32)
    positions = np.zeros(t_pad, np.int32)
    slot_mapping = np.full(t_pad, -1, np.int32)
    cu_q_lens = np.full(s_pad + 1, num_tokens, np.int32)
    kv_lens = np.zeros(s_pad, np.int32)
    page_table = np.zeros((s_pad, buckets.pages_per_seq), np.int32)
    sample_index = np.zeros(s_pad, np.int32)
    temperature = np.zeros(s_pad, np.float32)
    top_p = np.ones(s_pad, np.float32)
    top_k = np.zeros(s_pad, np.int32)
    seed = np.zeros(s_pad, np.uint32)
    sample_step = np.zeros(s_pad, np.int32)
    feed_index = np.full(t_pad, -1, np.int32)
    rows = (page_rows or PageRows()).rows(items)
    off = 0
    for i, (it, pages) in enumerate(zip(items, rows, strict=True)):
        n = len(it.token_ids)
        pos = np.arange(it.start_pos, it.start_pos + n, dtype=np.int32)
        token_ids[off : off + n] = it.token_ids
        positions[off : off + n] = pos
        slot_mapping[off : off + n] = pages[pos // page_size] * page_size + pos % page_size
        cu_q_lens[i] = off
        kv_lens[i] = it.kv_len_after
        page_table[i, : len(pages)] = pages
        sample_index[i] = off + n - 1
        sp = it.sampling_params
        temperature[i] = sp.temperature
        top_p[i] = sp.top_p
        top_k[i] = sp.top_k
        seed[i] = sp.seed
        sample_step[i] = it.num_generated
        if it.feed_index >= 0:  # scheduled ahead: a 1-token decode of a pending sample
            feed_index[off + n - 1] = it.feed_index
        off += n
    cu_q_lens[len(items)] = num_tokens
    return StepBatch(
        token_ids,
        positions,
        slot_mapping,
        cu_q_lens,
        kv_lens,
        page_table,
        sample_index,
        temperature,
        top_p,
        top_k,
        seed,
        sample_step,
        np.full(t_pad, -1, np.int32),  # score_targets: filled by the caller when scoring
        feed_index,
        np.zeros(buckets.max_seqs, np.int32),  # prev_tokens: the caller passes the last step's
    )
