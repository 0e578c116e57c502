"""Speculative decoding with n-gram (prompt lookup) drafts, for greedy requests.

A decode whose last tokens occurred earlier in its own prompt or output guesses that what
followed then follows again: up to k draft tokens are fed after its last token in the same
step (Scheduler: a decode of 1 + k tokens), and the step scores the rows the drafts follow
(the with_scores step at StepBatch.score_index: the top-1 token and logprob there, and the
draft's logprob). The host keeps the drafts the model
agrees with, in order, and adds the model's own token where they part (or its sampled
token after the last draft): 1 to k + 1 tokens a step for the price of one wider step.
vLLM's "ngram" method (`speculative_config={"method": "ngram", "num_speculative_tokens": k,
"prompt_lookup_max": n, "prompt_lookup_min": m}`).

Greedy only: each kept token is the argmax the model gives at its position, as decoding one
token at a time would take (bitwise so in batch-invariant mode, where a row's logits do not
depend on the step's shape). Steps with drafts are built synchronously (the next needs
the kept count), and a draft never preempts anyone (drafts_for). Requests whose next
token also depends on lists, penalties, a grammar or top logprobs decode one token at a
time (`eligible`). Rejected drafts' K/V stay in slots past the sequence's KV length,
where attention never reads and the next tokens overwrite them.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from engine import draft_model, mtp

MAX_DRAFTS = 16
SEARCH_TOKENS = 4096  # drafts come from the last this many tokens of a sequence


@dataclasses.dataclass(frozen=True)
class NgramProposer:
    """Drafts for a sequence from an earlier occurrence of its last n tokens."""

    num_speculative_tokens: int
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 1
    # Each running sequence's tokens as an array, grown as it appends (so a step converts
    # only its new tokens, not its context): sequence -> (array, tokens filled).
    _arrays: weakref.WeakKeyDictionary = dataclasses.field(
        default_factory=weakref.WeakKeyDictionary, init=False, repr=False, compare=False
    )

    def __post_init__(self):
        k, hi, lo = self.num_speculative_tokens, self.prompt_lookup_max, self.prompt_lookup_min
        for name, value in (("num_speculative_tokens", k), ("prompt_lookup_max", hi)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
                raise ValueError(f"speculative_config.{name}={value!r}: must be in [1, 64]")
        if k > MAX_DRAFTS:
            raise ValueError(
                f"speculative_config.num_speculative_tokens={k}: must be <= {MAX_DRAFTS}"
            )
        if isinstance(lo, bool) or not isinstance(lo, int) or not 1 <= lo <= hi:
            raise ValueError(
                f"speculative_config.prompt_lookup_min={lo!r}: must be in [1, "
                f"prompt_lookup_max={hi}]"
            )

    @classmethod
    def from_config(cls, config: dict):
        """vLLM's {"method": "ngram", "num_speculative_tokens": k, ...}."""
        config = {k: v for k, v in config.items() if k != "method"}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"speculative_config: unknown keys {unknown}; known: {sorted(known)}")
        if "num_speculative_tokens" not in config:
            raise ValueError("speculative_config.num_speculative_tokens: missing")
        return cls(**config)

    def drafts(self, seq, cap: int) -> tuple[int, ...]:
        """Up to `cap` drafts after `seq`'s tokens (engine/sequence.py Sequence)."""
        return self.propose(self.window(seq), cap)

    def propose(self, tokens: np.ndarray, k: int) -> tuple[int, ...]:
        """Up to `k` drafts after `tokens` (a sequence's last tokens, int array): what
        followed the latest earlier occurrence of its longest suffix of n tokens,
        prompt_lookup_max >= n >= prompt_lookup_min; () when none occurs."""
        length = tokens.shape[0]
        # Earlier places the last token occurs (match ends), then how far back each match
        # runs, one comparison per candidate and length: a few candidates, not the window.
        ends = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])
        matched = np.ones(ends.shape[0], np.int64)
        for n in range(2, min(self.prompt_lookup_max, length - 1) + 1):
            back = ends - (n - 1)
            ok = (matched == n - 1) & (back >= 0)
            ok[ok] &= tokens[back[ok]] == tokens[length - n]
            matched[ok] = n
        if not ends.size or matched.max() < self.prompt_lookup_min:
            return ()
        start = int(ends[np.flatnonzero(matched == matched.max())[-1]]) + 1
        return tuple(tokens[start : start + k].tolist())

    def window(self, seq) -> np.ndarray:
        """`seq`'s last SEARCH_TOKENS tokens as an array (engine/sequence.py Sequence)."""
        array, filled = self._arrays.get(seq, (np.zeros(0, np.int64), 0))
        length = seq.num_tokens
        if length > array.shape[0]:
            array = np.concatenate([array[:filled], np.zeros(max(length, 2 * filled), np.int64)])
        if length > filled:
            array[filled:length] = seq.token_ids_range(filled, length)
            self._arrays[seq] = (array, length)
        return array[max(0, length - SEARCH_TOKENS) : length]


def proposer_for(config: dict | None):
    """vLLM's speculative_config (None: off): an NgramProposer ("ngram", the default
    method), an engine/mtp.py MtpProposer ("mtp", "deepseek_mtp"), or an
    engine/draft_model.py DraftModelProposer ("draft_model", the default with a "model")."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise ValueError(f"speculative_config={config!r}: must be a dict or None")
    method = config.get("method", draft_model.METHOD if "model" in config else "ngram")
    if method in mtp.METHODS:
        return mtp.MtpProposer.from_config(config)
    if method == draft_model.METHOD:
        return draft_model.DraftModelProposer.from_config(config)
    if method != "ngram":
        raise ValueError(
            f"speculative_config.method={method!r}: expected 'ngram', 'mtp', 'deepseek_mtp' "
            "or 'draft_model'"
        )
    return NgramProposer.from_config(config)


def add_drafts(plan, proposer: NgramProposer, max_model_len: int, pools) -> None:
    """Extend the decodes of `speculate` sequences in a step being built (Scheduler's
    StepPlan) by their drafts (drafts_for); `pools`: the kv_pages.PagePools they grow in
    (a hybrid model's windowed pool beside the main one). A draft model drafts for them
    all first, in one batch (DraftModelProposer.prepare)."""
    if isinstance(proposer, draft_model.DraftModelProposer):
        proposer.prepare([seq for seq in plan.decodes if seq.speculate])
    for seq in list(plan.decodes):
        if seq.speculate and plan.budget > 0:
            drafts = drafts_for(seq, proposer, plan.budget, max_model_len, pools)
            if drafts:
                for pool in pools:
                    pool.grow(seq, seq.num_tokens + len(drafts))
                plan.drafts[seq] = drafts
                plan.decodes[seq] += len(drafts)
                plan.budget -= len(drafts)


def drafts_for(seq, proposer: NgramProposer, budget: int, max_model_len: int, pools):
    """The drafts `seq` (engine/sequence.py, decoding its last token this step) feeds after
    that token: at most `budget`, none past max_tokens or max_model_len (each kept draft is
    an output token), and only as many as fit in the pages it holds in each of `pools`
    (kv_pages.PagePools) where one cannot give it more without preempting someone: a
    guess never costs another request."""
    max_tokens = seq.sampling_params.max_tokens
    cap = min(
        budget,
        proposer.num_speculative_tokens,
        max_model_len - 1 - seq.num_tokens,
        seq.num_tokens if max_tokens is None else max_tokens - seq.num_output_tokens - 1,
    )
    if cap <= 0:
        return ()
    drafts = proposer.drafts(seq, cap)
    for pool in pools:
        pages, table = pool.pages, pool.table(seq)
        if not pages.can_allocate(pages.num_new_pages(table, seq.num_tokens + len(drafts))):
            drafts = drafts[: max(0, len(table) * pages.page_size - seq.num_tokens)]
    return drafts


def eligible(params) -> bool:
    """Whether a request's next token is drawn from the model's logits under its
    temperature / top-k / top-p / min-p alone (no penalties, token lists, grammar) and it
    wants no top logprobs: what verification redraws (greedy and sampled alike)."""
    return (
        not params.penalized
        and params.logit_bias is None
        and params.allowed_token_ids is None
        and not params.bad_words_token_ids
        and params.min_tokens == 0
        and params.structured_outputs is None
        and not params.logprobs
    )


def fill_draft_targets(items, batch) -> list[tuple[int, int]]:
    """Set batch.score_targets at every row a draft follows (the row at position p scores
    the token fed at p + 1); returns (item index, its first row) per item with drafts."""
    rows = []
    for i, it in enumerate(items):
        if it.num_drafts:
            first = int(batch.cu_q_lens[i])
            batch.score_targets[first : first + it.num_drafts] = it.token_ids[1:]
            rows.append((i, first))
    return rows


def score_index(draft_rows, items, size: int) -> np.ndarray:
    """The rows a step with drafts (and no prompt logprobs) scores, for
    StepBatch.score_index: each draft's row, padded with row 0 to `size` (scored_rows)."""
    rows = [first + j for i, first in draft_rows for j in range(items[i].num_drafts)]
    if len(rows) > size:
        raise AssertionError(f"{len(rows)} draft rows: more than the bucket's {size}")
    index = np.zeros(size, np.int32)
    index[: len(rows)] = rows
    return index


def scored_rows(num_tokens: int, num_seqs: int, max_drafts: int, min_rows: int) -> int:
    """How many rows a speculating engine's step of a (T, S) bucket scores: as many as its
    sequences' drafts can fill (S x num_speculative_tokens, no more than T) rounded up to a
    power of two of at least `min_rows` (batch-invariant mode: the logits' matmul stays in
    its regime, runner.Buckets). One count per bucket, drafts or none in the step: each
    bucket compiles one step program (a count per step's drafts was up to log2(T) programs
    per bucket; tests/test_mtp.py, docs/benchmarks.md "Compilations of a
    speculating engine")."""
    return max(min(num_tokens, 1 << (num_seqs * max_drafts - 1).bit_length()), min_rows)


def expand(index: np.ndarray, num_rows: int, *arrays):
    """Per-row outputs of a step scored at `index` ([R, ...] each) spread back to all of its
    `num_rows` rows (rows not scored: 0), so rows are read by their place in the step."""
    out = []
    for a in arrays:
        full = np.zeros((num_rows, *a.shape[1:]), a.dtype)
        full[index] = a
        out.append(full)
    return out


def verify(items, draft_rows, sampled: dict, drawn, drawn_logprobs, target_logprobs) -> None:
    """Replace each drafting item's sampled (token, logprob) by its new tokens: the drafts
    equal to what the step drew at their rows, in order, then the drawn token where they
    part, or the sampled token after the last. `drawn`, `drawn_logprobs`: [T] the token
    each row drew as its request's next one (StepOutput.draft_tokens) and its logprob;
    `target_logprobs`: [T] each row's log p(score target).

    Exact for any sampling settings: the token a row draws is the one decoding a token a
    step would draw there (same logits, seed and generation index), and a draft counts
    only where it equals it, so every token kept is that draw. For a draft that is a fixed
    token (n-gram lookup) this keeps it with probability p(draft), as rejection sampling
    would."""
    for i, first in draft_rows:
        it = items[i]
        drafts = it.token_ids[1:]
        got = drawn[first : first + len(drafts)].tolist()
        kept = []
        for j, (draft, token) in enumerate(zip(drafts, got, strict=True)):
            if draft != token:
                kept.append((token, float(drawn_logprobs[first + j])))
                break
            kept.append((draft, float(target_logprobs[first + j])))
        else:
            kept.append(sampled[it.request_id])
        sampled[it.request_id] = kept


def prepare_drafts(items, batch, prompt_scored: bool, min_rows: int, proposer):
    """A step's draft rows: (fill_draft_targets' rows, the scored rows' index or None) and
    the batch to run. Without prompt logprobs in the step only the drafts' rows are scored
    (StepBatch.score_index), not every row of a step that may hold a long prefill chunk;
    beside prompt logprobs, every row in order. A speculating engine's (`proposer` not
    None) steps score `scored_rows` rows whether they carry drafts or not (padding rows: 0,
    no target), so a bucket's steps share one program."""
    rows = fill_draft_targets(items, batch)
    if proposer is None:
        return (rows, None), batch
    t, s = batch.token_ids.shape[0], batch.kv_lens.shape[0]
    if prompt_scored:
        index = np.arange(t, dtype=np.int32)
    else:
        k = proposer.num_speculative_tokens
        index = score_index(rows, items, scored_rows(t, s, k, min_rows))
    return (rows, index), batch._replace(score_index=index)


def keep_drafts(items, drafts, sampled: dict, scores, drawn, drawn_logprobs) -> None:
    """`verify` a step's drafts (prepare_drafts' value) from its read-back scores and
    draws (StepOutput.draft_tokens / draft_logprobs, one per scored row)."""
    rows, index = drafts
    n = int(index.max()) + 1
    scores, drawn, drawn_logprobs = expand(index, n, scores, drawn, drawn_logprobs)
    verify(items, rows, sampled, drawn, drawn_logprobs, scores)
