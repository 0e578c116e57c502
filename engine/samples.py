"""Parallel sampling (SamplingParams.n): one request's n samples, queued as n sequences.

Sample 0 keeps the request's id; sample k (0 < k < n) is queued as "<id>/<k>" with the
request's seed + k (vLLM's rule; unseeded samples each get their own derived seed). Later
samples point to sample 0 (Sequence.fork_of) and the scheduler lets them share its full
prompt pages: sample 0 stops its prefill at the last whole page before its last prompt
token, and in the next step every sample computes only the rest of its prompt (under one
page) and draws its first token. So n samples of a 100k-token prompt compute it about once,
and hold its pages once. A sample admitted later (max_num_seqs, or a preemption) shares the
pages of sample 0, or once that one is done of a running sibling; with none left running it
computes its whole prompt.

A penalized sample that shares has its device penalty row seeded with the prompt tokens
before its first step (engine/penalties.py). In a hybrid model's windowed pool (whose pages
go back behind the window) a sample takes its donor's pages from the one its first query's
window starts in, the places before it released (`share`), while the donor still holds them
(`can_share`); a model with a window on every layer does not share (the scheduler's rule).
Prompt logprobs are computed by sample 0 and shown on every sample's record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus


def sample_ids(request_id: str, n: int) -> tuple[str, ...]:
    """The request ids of a request's n samples, sample 0's (the request's own) first."""
    return (request_id, *(f"{request_id}/{k}" for k in range(1, n)))


def sample_params(params: SamplingParams, k: int) -> SamplingParams:
    """Sample k's own settings: one sample, seed + k (wrapping at 2**32); prompt logprobs
    only on sample 0 (the only one that computes the whole prompt when they share)."""
    if params.n == 1:
        return params
    seed = None if params.seed is None else (params.seed + k) % 2**32
    return dataclasses.replace(
        params, n=1, seed=seed, prompt_logprobs=params.prompt_logprobs if k == 0 else False
    )


def link_records(records: list) -> None:
    """A request's n RequestOutputs, sample 0's first: it lists them all (`samples`), and
    the others show its prompt logprobs (only sample 0 scores the prompt)."""
    first = records[0]
    first.samples = records
    for rec in records[1:]:
        rec.prompt_logprobs = first.prompt_logprobs
        rec.prompt_top_logprobs = first.prompt_top_logprobs


class SampleGroups:
    """The unfinished samples of each queued n > 1 request, by its id: `abort(id)` stops
    all of them, and the id stays taken until the last one finishes."""

    def __init__(self):
        self._left: dict[str, set[str]] = {}  # request id -> its samples not finished
        self._group_of: dict[str, str] = {}  # sample id -> its request's id

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._left

    def __len__(self) -> int:
        return len(self._left)

    def add(self, request_id: str, n: int) -> None:
        ids = sample_ids(request_id, n)
        self._left[request_id] = set(ids)
        self._group_of.update(dict.fromkeys(ids, request_id))

    def members(self, request_id: str) -> tuple[str, ...]:
        """The unfinished samples of request `request_id`, or just that id when it is not
        an n > 1 request's."""
        left = self._left.get(request_id)
        return (request_id,) if left is None else tuple(sorted(left))

    def done(self, sample_id: str) -> None:
        """`sample_id` finished (its last delta is made); forget the group after its last."""
        group = self._group_of.pop(sample_id, None)
        if group is not None:
            left = self._left[group]
            left.discard(sample_id)
            if not left:
                del self._left[group]


def share_point(seq: Sequence, page_size: int) -> int:
    """Prompt positions a later sample can take from its first sample's pages: whole
    pages, short of the last prompt token (whose logits each sample computes)."""
    return (seq.num_prompt_tokens - 1) // page_size * page_size


def donor(seq: Sequence, page_size: int, computed: Callable[[Sequence], int]) -> Sequence | None:
    """Whose prompt pages a waiting `seq` shares now: its first sample's, or once that one
    is done a running sibling's (its table holds the same prompt up to the share point);
    None while the first sample is still to compute them; `seq` itself when it computes its
    whole prompt (nothing to share). `computed(seq)`: its KV length once the steps in
    flight are done."""
    first, point = seq.fork_of, share_point(seq, page_size)
    if first is None or not point:
        return seq
    for sibling in (first, *first.forks):
        if sibling.status is SequenceStatus.RUNNING and computed(sibling) >= point:
            return sibling
    return seq if first.is_finished else None


def can_share(donor: Sequence, seq: Sequence, pools) -> bool:
    """Whether `donor` still holds, in each of `pools`, the pages `seq` would share (in a
    windowed pool, a donor far past the share point gave them back)."""
    point = share_point(seq, pools[0].pages.page_size)
    return all(getattr(donor, p.released) <= p.first_held(point) for p in pools)


def share(seq: Sequence, donor: Sequence, num_tokens: int, pools) -> None:
    """`seq` takes `donor`'s pages of its first `num_tokens` positions (whole pages) in each
    of `pools` (kv_pages.PagePools): every one, or in a windowed pool those from the place
    its next query's window starts (the places before released: the first of those stands
    in for them, never read)."""
    for pool in pools:
        first = pool.first_held(num_tokens)
        held = pool.table(donor)[first : num_tokens // pool.pages.page_size]
        for page in held:
            pool.pages.incref(page)
        setattr(seq, pool.ids, (held[:1] or (0,)) * first + held)
        setattr(seq, pool.released, first)
