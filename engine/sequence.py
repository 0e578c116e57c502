"""One request's mutable host-side state: tokens, KV progress, page table, status."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

FINISH_REASONS = ("stop", "length", "abort")


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # queued: not yet admitted, or preempted and holding no pages
    RUNNING = "running"  # admitted: holds pages, scheduled every step it fits
    FINISHED = "finished"  # done; `finish_reason` says why


@dataclass(eq=False)
class Sequence:
    """A request as the scheduler sees it; the LLM layer creates it and reads the result.

    `sampling_params` is opaque here except for `max_tokens` (None: bounded only by
    max_model_len), `stop_token_ids`, `ignore_eos`, `stop` (stop strings), `min_tokens` and
    `bad_words_token_ids` (one of several tokens keeps its decodes from being scheduled
    ahead: their bans read the output).
    Compared by identity (eq=False) so two requests with equal tokens stay distinct.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling_params: Any
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    # FCFS order; stamped by Scheduler.add (-1: never queued).
    arrival: int = -1
    status: SequenceStatus = SequenceStatus.WAITING
    # Tokens whose K/V is in the cache (positions 0..num_computed_tokens-1).
    num_computed_tokens: int = 0
    # Page table: page_ids[i] holds positions [i * page_size, (i + 1) * page_size). A tuple,
    # rebound when it changes: a step's ScheduledItem shares it as is, and the packer knows
    # an unchanged table by identity (runner.PageRows) instead of comparing its ids.
    page_ids: tuple[int, ...] = ()
    # Sliding-window models: the first num_released_pages pages hold only keys behind every
    # later query's window; they went back to the pool (their ids stay in the table, where
    # attention masks them and zeroes their values, so the table keeps its positions).
    num_released_pages: int = 0
    # Hybrid models (ModelConfig.hybrid_window): the windowed layers' page table, in their
    # own pool, laid out like page_ids; its first num_released_window_pages pages went back
    # (or, after a prefix-cache hit, were never held: engine/prefix_cache.WindowCache).
    window_page_ids: tuple[int, ...] = ()
    num_released_window_pages: int = 0
    # Linear-attention models (Scheduler state_slots): its row of the recurrent state,
    # held while it runs (0: none); with prefix caching, the snapshot row its admission
    # took, copied there before its first step (engine/state_cache.py; 0: none).
    state_slot: int = 0
    state_from: int = 0
    finish_reason: str | None = None  # one of FINISH_REASONS once finished
    num_preemptions: int = 0
    lora_id: int = 0  # LoRARequest.lora_int_id of its adapter (engine/lora.py); 0: none
    priority: int = 0  # under Scheduler(policy="priority"): lower goes first (vLLM's)
    # Async scheduling (Scheduler.schedule_ahead): tokens scheduled in steps not yet passed
    # to update(), and of those steps' samples, how many are not read back yet. Both 0 in
    # the synchronous protocol whenever schedule() runs.
    num_inflight_tokens: int = 0
    num_pending_samples: int = 0
    # Parallel sampling (SamplingParams.n): a later sample of a request points to its first
    # (`fork_of`), which lists them (`forks`). Admitted while that one holds its prompt's
    # full pages, the sample shares them (num_shared_tokens positions, a whole number of
    # pages short of its last prompt token) and computes only the rest of its prompt.
    fork_of: Sequence | None = field(default=None, repr=False)
    forks: list[Sequence] = field(default_factory=list, repr=False)
    num_shared_tokens: int = 0
    # Prefix caching (engine/prefix_cache.py): of num_shared_tokens, those whose pages the
    # cache supplied at this admission; and the block id of each page of the table indexed
    # so far (the chain its next full page is indexed under).
    num_cached_tokens: int = 0
    # KV transfer (engine/kv_transfer.py): prompt positions whose KV is in the KV store (set
    # when queued, short of the last prompt token), and those written from there at its
    # last admission (then also in num_shared_tokens).
    num_external_tokens: int = 0
    num_loaded_tokens: int = 0
    # A linear-attention model's producer: its prefill's chunks end at this position (0:
    # none), where the step leaves the state the store keeps (its last prompt token's
    # computed in a step after it).
    prefill_stop: int = 0
    # Speculative decoding (engine/speculative.py): its decodes may carry drafts.
    speculate: bool = False
    prefix_blocks: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.prompt_token_ids = tuple(self.prompt_token_ids)
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r}: prompt_token_ids must not be empty")

    @property
    def rank(self) -> tuple[int, int]:
        """Its place under Scheduler(policy="priority"): priority, then arrival."""
        return self.priority, self.arrival

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> tuple[int, ...]:
        return self.prompt_token_ids + tuple(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def token_ids_range(self, start: int, stop: int) -> tuple[int, ...]:
        """Tokens at positions [start, stop) without concatenating the whole sequence.

        Decodes of 128k-token sequences read one token per step; building `all_token_ids`
        each time would make every step O(context).
        """
        n_prompt = len(self.prompt_token_ids)
        if stop <= n_prompt:
            return self.prompt_token_ids[start:stop]
        out = self.output_token_ids[max(0, start - n_prompt) : stop - n_prompt]
        return self.prompt_token_ids[start:] + tuple(out)
