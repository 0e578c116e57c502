"""The records the scheduler hands out (engine/scheduler.py): one step's batch and what
each request gained from it (vLLM's SchedulerOutput, in its own module as there); and the
plan of a step it is building."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from engine.sequence import Sequence


# The two records made per sequence per step are NamedTuples: immutable like a frozen
# dataclass, and ~2.5 us cheaper each to build (4.3 -> 1.8 us for ScheduledItem, measured),
# which at 256 decodes is ~1 ms of a step's host time.
class ScheduledItem(NamedTuple):
    """One sequence's tokens in a step (a decode is a 1-token item)."""

    request_id: str
    token_ids: tuple[int, ...]  # tokens fed this step, positions start_pos..kv_len_after-1
    start_pos: int  # absolute position of token_ids[0]
    page_ids: tuple[int, ...]  # the sequence's whole page table after this step's allocation
    sample: bool  # the last token's logits produce a new output token
    sampling_params: Any
    num_generated: int  # tokens generated before this step: the per-request RNG step index
    # Scheduled ahead: token_ids is a placeholder and the fed token is the one the previous
    # step samples at this item index (read on the device); -1 = token_ids are real.
    feed_index: int = -1
    # Hybrid models: the windowed layers' page table (Sequence.window_page_ids); () if none.
    window_page_ids: tuple[int, ...] = ()
    # Speculative decoding: token_ids is the decode's token then this many drafts
    # (engine/speculative.py); its sample is the token after the last draft.
    num_drafts: int = 0
    lora_id: int = 0  # the request's adapter (engine/lora.py); 0: none
    # KV transfer (engine/kv_transfer.py): positions [0, num_loaded) are written from the KV
    # store before the step (its admission; start_pos == num_loaded).
    num_loaded: int = 0
    # The token after the last one fed when it is known already (a prefill chunk before the
    # end of what the sequence holds); -1: none (the step samples it). Read by engine/mtp.py.
    next_token: int = -1
    state_slot: int = 0  # linear-attention models: its recurrent state's row (Sequence's)
    # Their prefix caching (engine/state_cache.py): a snapshot row copied to state_slot
    # before the step (0: none), and (span-relative end, row) of each snapshot it writes.
    state_from: int = 0
    state_snapshots: tuple[tuple[int, int], ...] = ()

    @property
    def kv_len_after(self) -> int:
        """KV length once this step's tokens are written (what the device masks by)."""
        return self.start_pos + len(self.token_ids)


@dataclass(frozen=True)
class SchedulerOutput:
    items: tuple[ScheduledItem, ...]  # decodes first, then prefill chunks, oldest first each
    num_batched_tokens: int  # sum of len(item.token_ids)
    preempted: tuple[str, ...]  # request ids preempted (pages freed) by this call
    finished_aborted: tuple[str, ...]  # ids aborted since the previous call; pages now free


class StepResult(NamedTuple):
    """What one request gained in a step, for streaming."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_logprobs: tuple[float, ...]
    finished: bool
    finish_reason: str | None  # "stop" | "length" once finished
    # What made a "stop": the stop token id or stop string (None for EOS, as in vLLM).
    stop_reason: int | str | None = None
    # The tokens whose KV the prefix cache (or the KV store) supplied at its last admission.
    num_cached_tokens: int = 0


@dataclass
class StepPlan:
    """A step being built (Scheduler internals): what is scheduled so far and the token
    budget left."""

    budget: int
    decodes: dict[Sequence, int] = field(default_factory=dict)  # in scheduling order
    prefills: dict[Sequence, int] = field(default_factory=dict)
    long: set[Sequence] = field(default_factory=set)  # prefills of long sequences
    preempted: list[str] = field(default_factory=list)
    allowance: int | None = None  # long-prefill tokens allowed (None: the budget)
    allowance_known: bool = False
    ahead: bool = False  # built by schedule_ahead: never preempt, fall back instead
    drafts: dict[Sequence, tuple[int, ...]] = field(default_factory=dict)  # in decodes' counts
    loads: dict[Sequence, int] = field(default_factory=dict)  # admitted with stored KV

    @property
    def long_tokens(self) -> int:
        return sum(self.prefills[seq] for seq in self.long)

    def drop(self, seq: Sequence) -> None:
        """Take a preempted sequence out of the step and return its tokens to the budget."""
        self.budget += self.decodes.pop(seq, 0) + self.prefills.pop(seq, 0)
        self.drafts.pop(seq, None)
        self.loads.pop(seq, None)
        self.long.discard(seq)
