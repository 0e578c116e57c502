"""Iteration-level scheduler (vLLM v1 style, Sarathi chunked prefill), plain Python.

Each `schedule()` builds one step: every running sequence with a single token left to feed
decodes it (oldest first), then prefill chunks fill the rest of `max_num_batched_tokens`:
the running partial prefill first, then waiting sequences admitted in strict FCFS order.
`update()` applies the step's sampled tokens, checks stop conditions and frees pages.

Invariants (they make the policy simple and starvation-free):
- Every running sequence arrived before every waiting one: admission takes the head of the
  waiting queue and preemption takes the newest running sequence, putting it back at the
  head. So "preempt the newest running" never hurts an older request, and the oldest
  unfinished request gets tokens every step it exists.
- At most one running sequence is mid-prefill with more than one token left, and it is the
  newest: a chunk shorter than the remaining prompt only happens when it used up the
  budget, which stops admission. So the sequence a prefill chunk preempts for pages is
  itself, and no sequence preempted in a step has already been scheduled in that step.
- A request is accepted only if its largest possible KV footprint fits in the whole pool
  (`check_fits`), so the oldest request can always make room by preempting newer ones and
  the system cannot deadlock or livelock.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from engine.kv_pages import PageManager
from engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledItem:
    """One sequence's tokens in a step (a decode is a 1-token item)."""

    request_id: str
    token_ids: tuple[int, ...]  # tokens fed this step, positions start_pos..kv_len_after-1
    start_pos: int  # absolute position of token_ids[0]
    page_ids: tuple[int, ...]  # the sequence's whole page table after this step's allocation
    sample: bool  # the last token's logits produce a new output token
    sampling_params: Any
    num_generated: int  # tokens generated before this step: the per-request RNG step index

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


@dataclass(frozen=True)
class StepResult:
    """What one request gained in a step, for streaming."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_logprobs: tuple[float, ...]
    finished: bool
    finish_reason: str | None  # "stop" | "length" once finished


class Scheduler:
    """Decides each step's batch; owns the waiting queue, running list and page tables.

    Protocol: `out = schedule()`, run the step, `update(out, sampled)`, repeat while
    `has_unfinished()`. A step whose output has items must be passed to `update` before
    the next `schedule()`.
    """

    def __init__(
        self,
        page_manager: PageManager,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        max_model_len: int,
        eos_token_ids: tuple[int, ...] = (),
    ):
        for name, value in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
            ("max_model_len", max_model_len),
        ):
            if value < 1:
                raise ValueError(f"{name}={value}: must be >= 1")
        # Every running sequence must be able to decode each step (no decode starvation).
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={max_num_batched_tokens}: must be >= "
                f"max_num_seqs={max_num_seqs}"
            )
        self.pages = page_manager
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset(eos_token_ids)
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._running: list[Sequence] = []  # in arrival order
        self._active: dict[str, Sequence] = {}  # waiting + running, by request id
        self._aborted: list[Sequence] = []  # aborted since the last schedule()
        self._in_flight: SchedulerOutput | None = None
        self._in_flight_seqs: dict[str, Sequence] = {}  # by identity: ids can be reused
        self._next_arrival = 0
        self._num_preemptions = 0

    # ---- admission control -------------------------------------------------------------

    def max_kv_len(self, num_prompt_tokens: int, max_tokens: int | None) -> int:
        """Largest KV length a request can ever need.

        The last sampled token is never fed, and a sequence stops once it has
        max_model_len tokens, so the KV holds at most max(prompt, min(prompt + max_tokens - 1,
        max_model_len - 1)) tokens; a recompute after preemption needs no more than that.
        """
        if max_tokens == 0:
            return 0
        cap = self.max_model_len - 1
        if max_tokens is not None:
            cap = min(cap, num_prompt_tokens + max_tokens - 1)
        return max(num_prompt_tokens, cap)

    def check_fits(self, num_prompt_tokens: int, max_tokens: int | None = None) -> None:
        """Raise ValueError if a request can never run; the LLM calls this before queueing.

        A request whose KV could outgrow the whole pool would preempt itself forever, so it
        is rejected up front instead of being queued.
        """
        if num_prompt_tokens < 1:
            raise ValueError(f"prompt length={num_prompt_tokens}: must be >= 1 token")
        if num_prompt_tokens > self.max_model_len:
            raise ValueError(
                f"prompt length={num_prompt_tokens}: exceeds max_model_len={self.max_model_len}"
            )
        if max_tokens is not None and max_tokens < 0:
            raise ValueError(f"max_tokens={max_tokens}: must be >= 0")
        kv_len = self.max_kv_len(num_prompt_tokens, max_tokens)
        need = self.pages.pages_needed(kv_len)
        if need > self.pages.num_total:
            raise ValueError(
                f"prompt length={num_prompt_tokens} with max_tokens={max_tokens}: needs up to "
                f"{kv_len} KV tokens = {need} pages, but num_pages={self.pages.num_total} "
                f"(page_size={self.pages.page_size})"
            )

    def add(self, seq: Sequence) -> None:
        """Queue a new request (FCFS by the arrival index stamped here).

        `check_fits` runs first. A request with max_tokens == 0 does no work: it finishes
        at once with finish_reason "length", is never queued, and no StepResult mentions
        it; the caller reads `seq.is_finished`.
        """
        if seq.request_id in self._active:
            raise ValueError(f"request_id={seq.request_id!r}: already queued or running")
        if seq.status is not SequenceStatus.WAITING or seq.page_ids or seq.num_computed_tokens:
            raise ValueError(f"request_id={seq.request_id!r}: must be a new WAITING sequence")
        max_tokens = seq.sampling_params.max_tokens
        self.check_fits(seq.num_prompt_tokens, max_tokens)
        seq.arrival = self._next_arrival
        self._next_arrival += 1
        if max_tokens == 0:
            seq.status = SequenceStatus.FINISHED
            seq.finish_reason = "length"
            return
        self._waiting.append(seq)
        self._active[seq.request_id] = seq

    def abort(self, request_id: str) -> bool:
        """Finish a request with reason "abort"; False if it is unknown or already done.

        A running request's pages are freed at the next `schedule()`, not now, so a step
        already handed to the device never has its pages given to someone else.
        """
        seq = self._active.pop(request_id, None)
        if seq is None:
            return False
        if seq.status is SequenceStatus.WAITING:
            self._waiting.remove(seq)
        else:
            self._running.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "abort"
        self._aborted.append(seq)
        return True

    # ---- one step ----------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Choose this step's decodes and prefill chunks, preempting if pages run out."""
        if self._in_flight is not None:
            raise RuntimeError("schedule() called before update() of the previous step")
        aborted = tuple(seq.request_id for seq in self._aborted)
        for seq in self._aborted:
            self._release_pages(seq)
        self._aborted.clear()

        budget = self.max_num_batched_tokens
        decodes: list[tuple[Sequence, int]] = []  # (sequence, number of tokens)
        prefills: list[tuple[Sequence, int]] = []
        preempted: list[str] = []

        # Decodes, oldest first. budget >= max_num_seqs >= len(running): all of them fit.
        for seq in list(self._running):
            if seq.status is SequenceStatus.RUNNING and self._tokens_left(seq) == 1:
                if self._make_room(seq, seq.num_computed_tokens + 1, preempted):
                    decodes.append((seq, 1))
                    budget -= 1

        # The (single, newest) running partial prefill continues.
        for seq in list(self._running):
            left = self._tokens_left(seq)
            if left > 1 and budget > 0:
                chunk = min(left, budget)
                if self._make_room(seq, seq.num_computed_tokens + chunk, preempted):
                    prefills.append((seq, chunk))
                    budget -= chunk

        # Admission, strict FCFS. Not after a preemption: memory is short, and a just
        # preempted sequence would be readmitted only to lose its pages again.
        while (
            not preempted
            and self._waiting
            and budget > 0
            and len(self._running) < self.max_num_seqs
        ):
            seq = self._waiting[0]
            chunk = min(seq.num_tokens, budget)
            if not self.pages.can_allocate(self.pages.pages_needed(chunk)):
                break  # the head waits; nobody overtakes it
            self._waiting.popleft()
            self.pages.ensure_capacity(seq.page_ids, chunk)
            seq.status = SequenceStatus.RUNNING
            self._running.append(seq)
            prefills.append((seq, chunk))
            budget -= chunk

        items = tuple(self._item(seq, n) for seq, n in decodes + prefills)
        out = SchedulerOutput(
            items=items,
            num_batched_tokens=self.max_num_batched_tokens - budget,
            preempted=tuple(preempted),
            finished_aborted=aborted,
        )
        self._in_flight = out if items else None
        self._in_flight_seqs = {seq.request_id: seq for seq, _ in decodes + prefills}
        return out

    def update(
        self, sched_out: SchedulerOutput, sampled: dict[str, tuple[int, float]]
    ) -> list[StepResult]:
        """Apply a finished step: advance KV progress, append sampled tokens, stop, free.

        `sampled[request_id] = (token_id, logprob)` for every item with `sample`; requests
        aborted while the step ran are skipped.
        """
        if sched_out is not self._in_flight:
            raise ValueError("sched_out: not the output of the latest schedule() call")
        self._in_flight = None
        results = []
        for item in sched_out.items:
            seq = self._in_flight_seqs[item.request_id]
            if seq.is_finished:  # aborted during the step
                continue
            seq.num_computed_tokens = item.kv_len_after
            if not item.sample:
                continue
            if item.request_id not in sampled:
                raise ValueError(f"sampled: no token for request_id={item.request_id!r}")
            token_id, logprob = sampled[item.request_id]
            seq.output_token_ids.append(token_id)
            seq.output_logprobs.append(logprob)
            reason = self._stop_reason(seq, token_id)
            if reason is not None:
                self._finish(seq, reason)
            results.append(
                StepResult(seq.request_id, (token_id,), (logprob,), reason is not None, reason)
            )
        return results

    # ---- queries -----------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        """True while requests wait or run, or aborted pages still await `schedule()`."""
        return bool(self._waiting or self._running or self._aborted)

    def stats(self) -> dict[str, int]:
        return {
            "num_running": len(self._running),
            "num_waiting": len(self._waiting),
            "num_preemptions": self._num_preemptions,
            "num_pages_free": self.pages.num_free,
            "num_pages_total": self.pages.num_total,
        }

    # ---- internals ---------------------------------------------------------------------

    @staticmethod
    def _tokens_left(seq: Sequence) -> int:
        """Known tokens not yet in the KV cache (1 for a decode: the last sampled token)."""
        return seq.num_tokens - seq.num_computed_tokens

    def _make_room(self, seq: Sequence, num_tokens: int, preempted: list[str]) -> bool:
        """Grow `seq`'s pages to `num_tokens`, preempting the newest running sequences.

        Returns False if `seq` itself was the newest and got preempted. By the invariants
        in the module docstring, victims are never already scheduled in this step.
        """
        need = self.pages.num_new_pages(seq.page_ids, num_tokens)
        while not self.pages.can_allocate(need):
            victim = self._running[-1]
            self._preempt(victim)
            preempted.append(victim.request_id)
            if victim is seq:
                return False
        self.pages.ensure_capacity(seq.page_ids, num_tokens)
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Drop `seq`'s KV and requeue it at the head; it later recomputes from position 0."""
        self._running.remove(seq)
        self._release_pages(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self._num_preemptions += 1
        # It is newer than every running sequence and older than every waiting one.
        self._waiting.appendleft(seq)

    def _item(self, seq: Sequence, num_tokens: int) -> ScheduledItem:
        start = seq.num_computed_tokens
        stop = start + num_tokens
        return ScheduledItem(
            request_id=seq.request_id,
            token_ids=seq.token_ids_range(start, stop),
            start_pos=start,
            page_ids=tuple(seq.page_ids),
            sample=stop == seq.num_tokens,
            sampling_params=seq.sampling_params,
            num_generated=seq.num_output_tokens,
        )

    def _stop_reason(self, seq: Sequence, token_id: int) -> str | None:
        """ "stop" wins over "length" when the last allowed token is also a stop token."""
        params = seq.sampling_params
        if token_id in self.eos_token_ids and not params.ignore_eos:
            return "stop"
        if token_id in (params.stop_token_ids or ()):
            return "stop"
        if params.max_tokens is not None and seq.num_output_tokens >= params.max_tokens:
            return "length"
        if seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _finish(self, seq: Sequence, reason: str) -> None:
        self._running.remove(seq)
        del self._active[seq.request_id]
        self._release_pages(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def _release_pages(self, seq: Sequence) -> None:
        self.pages.free(seq.page_ids)
        seq.page_ids = []
