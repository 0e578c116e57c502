"""Packs a scheduler decision into the padded numpy StepBatch the jitted step takes, keeps
the record of a launched step, and reads the step's results back."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from engine.scheduler_output import SchedulerOutput
from engine.step import StepBatch, StepOutput


class Dispatched(NamedTuple):
    """A step launched on the device whose outputs are not read back yet."""

    sched: SchedulerOutput
    out: StepOutput
    score_rows: list
    compiles: bool
    start: float
    with_top: bool  # the step also returned each row's top logprobs
    score_top: int  # ... and every scored row's top this many (prompt_logprobs=k)
    drafts: tuple  # speculative.prepare_drafts: (draft rows, the rows scored or None)


class StickyFeatures:
    """The sampling features an engine's steps keep once a step has used them: the sampler
    (not the greedy-only program), top logprobs, the penalty state, token lists at the
    widest width seen (logit_bias.lists_for's min_width), the structured-output mask
    (StructuredOutputs.masks_for's always). A step compiles per feature set, so features
    switched per batch would give up to 2**5 programs per shape under mixed traffic (a new
    one mid-serving whenever a new mix arrives: seconds of compile on a GPU); kept on, an
    engine's programs per shape grow with each feature's first use (and each wider list),
    as vLLM's sampler always takes its tensors. A row that does not ask for a feature gets
    what it gets without it, bit for bit (no penalty slot, no listed token, every mask bit
    set, top logprobs not read; tests/test_sampling_options.py)."""

    def __init__(self):
        self.sampling = self.with_top = self.penalized = self.masked = False
        self.list_width = 0

    def apply(self, sampling: bool, with_top: bool, penalized: bool, lists, mask):
        """This step's (sampling, with_top, penalized): its own, or on where an earlier
        step's were; records its `lists` (TokenLists or None) and `mask` (or None)."""
        self.sampling |= sampling
        self.with_top |= with_top
        self.penalized |= penalized
        self.masked |= mask is not None
        if lists is not None:
            self.list_width = max(self.list_width, lists.ids.shape[1])
        return self.sampling, self.with_top, self.penalized


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# A step pads its sequences to at least this many rows (or T, if fewer). Those rows cost an
# lm_head and sampler row each (on a GPU 8 lm_head rows read the same weights as 1; on CPU
# ~1 ms per step, docs/benchmarks.md "Step buckets"), and the floor drops the S = 1, 2, 4
# variants of every larger T: at the defaults (2048 tokens, 64 sequences) 33 buckets
# instead of 63, about half the compilations to warm up (30 with TOKEN_FLOOR).
SEQ_FLOOR = 8
# And its tokens to at least this many (or the largest T or S, if fewer): a decode of one
# to eight sequences runs one program, not four (T = 1, 2, 4, 8), as a CUDA-graph capture
# size serves every batch up to it. On a GPU 8 rows of a weight-read-bound matmul cost
# what 1 does, padding tokens belong to no sequence (no KV written, no attention), and
# (on one device) their MoE rows take a real token's experts (engine/step.py), so they
# read no weights of their own. Not above SEQ_FLOOR (nor the largest S): a decode-only
# step is told by its bucket alone (T <= S: the decode tilings, the Mosaic MLA decode
# kernel, the linear attention's row-at-a-time rule), which a 16-token floor over 8 rows
# would lose for every decode of up to 8 sequences. On CPU: three compilations fewer per
# engine whose traffic reaches them (docs/benchmarks.md "A token floor").
TOKEN_FLOOR = 8
# Async scheduling feeds a step the tokens the previous one sampled as a fixed-size vector
# (StepBatch.prev_tokens) of this many rows or the largest S, if more: engines that differ
# only in their token budget (which caps max_num_seqs) then share their compiled steps.
FEED_ROWS_FLOOR = 64


class Buckets:
    """Padded shapes: tokens T and sequences S each round up to a power of two.

    T is at least min(TOKEN_FLOOR, the largest T, the largest S) and S at least min(T,
    SEQ_FLOOR, the largest S), never more than T: a decode-only batch lands where T <= S.
    Every step compiles for one (T, S) pair, so the number of compilations is at most
    `len(pairs)`, however the traffic mixes decodes and prefill chunks. The page table
    width P is fixed (max_model_len / page_size): it is small and the attention loop bound
    is traced, so a fixed P costs nothing at run time.

    `token_buckets` (LLM's option) picks the T sizes: fewer programs to compile (warm-up,
    tests) for more padding, as vLLM's cudagraph capture sizes and JetStream's prefill
    lengths do; powers of two, the largest at least the token budget. None: every power of
    two from TOKEN_FLOOR up to the budget's.

    With `min_rows` (batch-invariant mode) both T and S are padded to at least that many
    rows, so every matmul runs in one kernel regime whatever the real batch is.
    `window_tables` (hybrid models, ModelConfig.hybrid_window): every batch also carries
    the windowed layers' page table and slots (StepBatch.window_page_table).
    `state_slots` (linear-attention models): every batch carries each sequence's recurrent
    state row (StepBatch.state_slots; padding sequences row 0, which no sequence holds),
    and with `state_layout` (state_cache.StateLayout: their prefix caching, speculative
    decoding) the states its items leave in other rows ([S, K], K = T // block + 1, every
    boundary a span of up to T crosses, + drafts) and the spans feeding drafts.
    """

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        pages_per_seq: int,
        min_rows: int = 1,
        window_tables: bool = False,
        state_slots: bool = False,
        state_layout=None,
        token_buckets=None,
    ):
        if min_rows < 1 or min_rows & (min_rows - 1):
            raise ValueError(f"min_rows={min_rows}: must be a power of two >= 1")
        self.min_rows = min_rows
        self.max_tokens = max(next_pow2(max_num_batched_tokens), min_rows)
        self.max_seqs = max(next_pow2(max_num_seqs), min_rows)
        self.pages_per_seq = pages_per_seq
        self.window_tables, self.state_slots = window_tables, state_slots
        self.state_layout = state_layout
        floor = min(TOKEN_FLOOR, self.max_tokens, self.max_seqs)
        self.token_sizes = [t for t in self._sizes(self.max_tokens) if t >= floor]
        if token_buckets is not None:
            self.token_sizes = _token_buckets(token_buckets, max_num_batched_tokens, min_rows)
            self.max_tokens = self.token_sizes[-1]
        self.seq_sizes = self._sizes(self.max_seqs)
        self.feed_rows = max(self.max_seqs, FEED_ROWS_FLOOR)  # StepBatch.prev_tokens' length

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
        t = next(t for t in self.token_sizes if t >= num_tokens)
        return t, min(max(next_pow2(num_seqs), self._seq_floor(t)), t)


def _token_buckets(sizes, budget: int, min_rows: int) -> list[int]:
    """LLM(token_buckets=...) checked: a sequence of powers of two, each >= min_rows (the
    batch-invariant floor), the largest >= the token budget; sorted, repeats dropped."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise ValueError(f"token_buckets={sizes!r}: expected a sequence of powers of two")
    sizes = list(sizes)
    bad = [t for t in sizes if isinstance(t, bool) or not isinstance(t, (int, np.integer))]
    bad += [t for t in sizes if t not in bad and (t < 1 or t & (t - 1))]
    if not sizes or bad:
        raise ValueError(f"token_buckets={sizes!r}: every entry a power of two >= 1 ({bad})")
    if min(sizes) < min_rows:
        raise ValueError(
            f"token_buckets={sizes!r}: each must be >= {min_rows} (the batch-invariant "
            f"mode's rows on this mesh)"
        )
    if max(sizes) < budget:
        raise ValueError(
            f"token_buckets={sizes!r}: the largest must be >= max_num_batched_tokens={budget}"
        )
    return sorted({int(t) for t in sizes})


class PageRows:
    """Each scheduled sequence's page ids as an int32 row, carried from one step to the next.

    Turning a sequence's page ids (Python ints) into an array costs ~45 ns a page, paid for
    its whole table every step: 64 decodes at 32k keys (2,048 pages each) were 6 of the 7.6
    ms `pack` took (measured, CPU). Between steps a running sequence's table only grows: a
    row whose ids are the very tuple it had (most decodes: the scheduler rebinds a table
    only when it changes, Sequence.page_ids) is reused as is, without a compare; one whose
    previous ids are the new ids' prefix (compared by value; the ints are the same objects,
    so that is a fast identity walk) converts only its new pages. Anything
    else (pages given back by an undone step ahead, a preempted sequence re-admitted)
    converts the whole table again. Rows are kept for the last step's sequences only.
    `attr` names the item's table: "page_ids", or "window_page_ids" (hybrid models).
    """

    def __init__(self, attr: str = "page_ids"):
        self._rows: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
        self._attr = attr

    def rows(self, items) -> list[np.ndarray]:
        """[len(item.<attr>)] int32 per item, in order."""
        kept = {}
        for it in items:
            ids = tuple(getattr(it, self._attr))
            old = self._rows.get(it.request_id)
            if old is not None and old[0] is ids:  # the same table (Sequence.page_ids)
                row = old[1]
            elif old is not None and len(old[0]) <= len(ids) and ids[: len(old[0])] == old[0]:
                row = old[1]
                if len(ids) > len(row):
                    row = np.concatenate([row, np.asarray(ids[len(row) :], np.int32)])
            else:
                row = np.asarray(ids, np.int32)
            kept[it.request_id] = (ids, row)
        self._rows = kept
        return [kept[it.request_id][1] for it in items]


def pack(
    items,
    page_size: int,
    buckets: Buckets,
    page_rows: PageRows | None = None,
    window_rows: PageRows | None = None,
) -> StepBatch:
    """Flatten scheduled items (decodes first, then prefill chunks) into a padded StepBatch.

    Each item carries token_ids, start_pos, page_ids, kv_len_after, sampling (with a resolved
    seed), num_generated and feed_index (ScheduledItem), and window_page_ids when
    `buckets.window_tables`. Padding tokens write nowhere (slot -1); padding sequences have
    kv_len 0, so they attend to nothing and their samples are ignored by the caller.
    `page_rows` / `window_rows` (an engine's, kept across steps) convert only the pages a
    sequence gained since its last step.

    One pass over the items gathers their fields into lists; everything per token is then
    whole-array numpy (a per-item numpy slice costs ~1 us: with a dozen of them an item took
    ~30 us, 7-9 ms for 256 decodes; docs/benchmarks.md "Host: a decode step at large
    batch").
    """
    n = len(items)
    lens, starts, tokens, feeds, fields = [], [], [], [], []
    for it in items:
        sp = it.sampling_params
        lens.append(len(it.token_ids))
        starts.append(it.start_pos)
        tokens += it.token_ids
        feeds.append(it.feed_index)
        fields.append(
            (
                sp.temperature,
                sp.top_p,
                sp.top_k,
                sp.seed,
                it.num_generated,
                sp.min_p,
                sp.repetition_penalty,
                sp.presence_penalty,
                sp.frequency_penalty,
            )
        )
    num_tokens = len(tokens)
    lens, starts = np.asarray(lens, np.int32), np.asarray(starts, np.int32)
    t_pad, s_pad = buckets.pick(num_tokens, n)
    cu_q_lens = np.full(s_pad + 1, num_tokens, np.int32)
    cu_q_lens[0] = 0
    np.cumsum(lens, out=cu_q_lens[1 : n + 1])
    ends = cu_q_lens[1 : n + 1]
    kv_lens = np.zeros(s_pad, np.int32)
    kv_lens[:n] = starts + lens
    # Token t of item i sits at position starts[i] + (t - cu_q_lens[i]).
    owner = np.repeat(np.arange(n, dtype=np.int32), lens)
    positions = np.zeros(t_pad, np.int32)
    positions[:num_tokens] = np.arange(num_tokens, dtype=np.int32) + (starts - cu_q_lens[:n])[owner]
    token_ids = np.zeros(t_pad, np.int32)
    token_ids[:num_tokens] = tokens
    pos = positions[:num_tokens]

    def table_and_slots(rows: PageRows, attr: str) -> tuple[np.ndarray, np.ndarray]:
        page_table = np.zeros((s_pad, buckets.pages_per_seq), np.int32)
        num_pages = np.zeros(n, np.int32)
        for i, pages in enumerate(rows.rows(items)):
            page_table[i, : len(pages)] = pages
            num_pages[i] = len(pages)
        # The slots below read the table, where a missing page would read as page 0
        # (another sequence's): the scheduler never hands out such an item; pack refuses one.
        short = np.flatnonzero(num_pages * page_size < kv_lens[:n])
        if short.size:
            i = int(short[0])
            raise ValueError(
                f"items[{i}].{attr}: {num_pages[i]} pages of {page_size} cannot hold "
                f"kv_len_after={int(kv_lens[i])}"
            )
        slots = np.full(t_pad, -1, np.int32)
        slots[:num_tokens] = page_table[owner, pos // page_size] * page_size + pos % page_size
        return page_table, slots

    page_table, slot_mapping = table_and_slots(page_rows or PageRows(), "page_ids")
    window = (None, None)
    if buckets.window_tables:
        attr = "window_page_ids"
        window = table_and_slots(window_rows or PageRows(attr), attr)
    sample_index = np.zeros(s_pad, np.int32)
    sample_index[:n] = ends - 1
    sampling = np.zeros((9, s_pad), np.float64)
    sampling[1] = 1.0  # top_p of padding rows
    sampling[6] = 1.0  # their repetition penalty (off)
    if n:
        sampling[:, :n] = np.asarray(fields, np.float64).T
    state_slots = snap_end = snap_row = None
    if buckets.state_slots:
        state_slots = np.zeros(s_pad, np.int32)
        state_slots[:n] = [it.state_slot for it in items]
    drafting = None
    layout = buckets.state_layout
    if layout is not None and (layout.block or layout.drafts):
        k = (t_pad // layout.block + 1 if layout.block else 0) + layout.drafts
        snap_end = np.full((s_pad, k), -1, np.int32)
        snap_row = np.full(snap_end.shape, -1, np.int32)
        for i, it in enumerate(items):
            for j, (end, row) in enumerate(it.state_snapshots):
                snap_end[i, j], snap_row[i, j] = end, row
        if layout.drafts:
            drafting = np.zeros(s_pad, bool)
            drafting[:n] = [it.num_drafts > 0 for it in items]
    feed_index = np.full(t_pad, -1, np.int32)
    # Scheduled ahead (feed_index >= 0): a 1-token decode of a pending sample.
    feeds = np.asarray(feeds, np.int32)
    feed_index[ends[feeds >= 0] - 1] = feeds[feeds >= 0]
    return StepBatch(
        token_ids,
        positions,
        slot_mapping,
        cu_q_lens,
        kv_lens,
        page_table,
        sample_index,
        sampling[0].astype(np.float32),  # temperature
        sampling[1].astype(np.float32),  # top_p
        sampling[2].astype(np.int32),  # top_k (SamplingParams keeps it within int32)
        sampling[3].astype(np.uint32),  # seed: < 2**32, exact in float64
        sampling[4].astype(np.int32),  # sample_step
        np.full(t_pad, -1, np.int32),  # score_targets: filled by the caller when scoring
        feed_index,
        np.zeros(buckets.feed_rows, np.int32),  # prev_tokens: the caller passes the last step's
        sampling[5].astype(np.float32),  # min_p
        # Penalty slots and prompt lengths: filled by the caller (penalties.PenaltySlots).
        np.full(s_pad, -1, np.int32),
        np.zeros(s_pad, np.int32),
        np.ascontiguousarray(sampling[6:9].T, np.float32),  # repetition, presence, frequency
        window_page_table=window[0],
        window_slot_mapping=window[1],
        state_slots=state_slots,
        state_snap_end=snap_end,
        state_snap_row=snap_row,
        state_drafting=drafting,
    )


def fill_score_targets(items, batch, prompt_of) -> list[tuple[str, int, int, int]]:
    """Set batch.score_targets for the items that asked for prompt logprobs
    (`prompt_of(item)`: the item's prompt token ids).

    Returns (request id, index into its prompt_logprobs, token row, top logprobs wanted
    there) per scored row: the row at position p scores prompt[p + 1]. A recompute after
    preemption scores the same positions again and overwrites them.
    """
    rows = []
    for i, it in enumerate(items):
        if not it.sampling_params.prompt_logprobs:
            continue
        prompt = prompt_of(it)
        first = int(batch.cu_q_lens[i])
        for j in range(len(it.token_ids)):
            pos = it.start_pos + j
            if pos + 1 < len(prompt):
                batch.score_targets[first + j] = prompt[pos + 1]
                k = it.sampling_params.num_prompt_top_logprobs
                rows.append((it.request_id, pos, first + j, k))
    return rows


def pairs(ids: np.ndarray, logprobs: np.ndarray) -> list[tuple[int, float]]:
    """[(token id, logprob), ...] from a row of top-logprob ids and values."""
    return list(zip(ids.tolist(), logprobs.tolist(), strict=True))


def store_prompt_logprobs(score_rows, records: dict, scores, top_ids, top_logprobs) -> None:
    """Write a step's scored prompt positions (fill_score_targets' rows) into the records
    still kept (by request id): each position's logprob, and its top k when asked."""
    for rid, index, row, k in score_rows:
        rec = records.get(rid)  # None if aborted and dropped since
        if rec is not None:
            rec.prompt_logprobs[index] = float(scores[row])
            if k:
                rec.prompt_top_logprobs[index] = pairs(top_ids[row, :k], top_logprobs[row, :k])


def sampled_top_logprobs(items, top_ids, top_logprobs) -> dict[str, tuple]:
    """Request id -> its sampled row's SamplingParams.logprobs most likely (token, logprob)
    pairs, most likely first, for the items that asked."""
    tops = {}
    for i, it in enumerate(items):
        if it.sample and it.sampling_params.logprobs:
            n = it.sampling_params.logprobs
            tops[it.request_id] = tuple(pairs(top_ids[i, :n], top_logprobs[i, :n]))
    return tops


def read_back(out, scored: bool, score_top: int, with_top: bool) -> tuple:
    """A step's results on the host: (tokens, logprobs, expert_load, scores, score top ids,
    score top logprobs, top ids, top logprobs, draft tokens, draft logprobs), None for what
    the step was not asked for."""
    tokens, logprobs, load = jax.device_get((out.tokens, out.logprobs, out.expert_load))
    scores = jax.device_get(out.score_logprobs) if scored else None
    drawn = (None, None)
    if scored and out.draft_tokens is not None:  # (a step without drafts: not read)
        drawn = jax.device_get((out.draft_tokens, out.draft_logprobs))
    score_ids = score_lps = top_ids = top_lps = None
    if score_top:
        score_ids, score_lps = jax.device_get((out.score_top_ids, out.score_top_logprobs))
    if with_top:
        top_ids, top_lps = jax.device_get((out.top_ids, out.top_logprobs))
    return tokens, logprobs, load, scores, score_ids, score_lps, top_ids, top_lps, *drawn
