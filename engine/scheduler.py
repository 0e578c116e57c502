"""Iteration-level scheduler (vLLM v1 style, Sarathi chunked prefill), plain Python.

Each `schedule()` builds one step: every running sequence with a single token left to feed
decodes it (oldest first), then prefill chunks fill the rest of `max_num_batched_tokens`:
running partial prefills first, then waiting sequences admitted in FCFS order.
`update()` applies the step's sampled tokens, checks stop conditions and frees pages.

Long prompts (long_context/policy.py, optional): while decodes run, a long prefill's chunk
keeps the step within `max_decode_slowdown` of a decode-only step; a waiting shorter request
gets room in the budget; at most `max_long_prefills` run at once, shorter prompts pass.

Invariants (they make the policy simple and starvation-free):
- Running sequences are kept in admission order; preemption takes the newest admitted and
  puts it back at the head of the waiting queue. Without long prompts held back by
  `max_long_prefills`, admission is strict FCFS, so every running sequence arrived before
  every waiting one and "preempt the newest running" never hurts an older request; the
  oldest running request gets tokens every step it exists.
- Without a long-prefill policy at most one running sequence is mid-prefill with more than
  one token left, and it is the newest: a chunk shorter than the remaining prompt only
  happens when it used up the budget, which stops admission. With one, a long chunk can
  leave budget over and several sequences may be mid-prefill; a sequence preempted for
  pages is then taken out of the step even if it was already scheduled in it.
- A request is accepted only if its largest possible KV footprint fits in the whole pool
  (`check_fits`), so the oldest request can always make room by preempting newer ones and
  the system cannot deadlock or livelock.

Async scheduling (`schedule_ahead`, pipeline depth 1): while step N runs, step N+1 is built
from optimistic state: tokens scheduled in N count as computed (`num_inflight_tokens`) and
a sequence whose N item samples decodes a placeholder fed on the device from N's output
(`feed_index`). It never preempts, frees aborted pages, or schedules a sequence that N
certainly finishes (max_tokens / max_model_len, counting pending samples); when step N+1
would need a preemption it returns None and the caller falls back to the synchronous order
(update N, then schedule). Admission only uses pages free now (conservative). A sequence
that stops at N while in N+1 is finished by update(N), its N+1 sample is dropped, and its
pages are released by update(N+1), so a later step never reuses them while N+1 may write.

Prefix caching (engine/prefix_cache.py): full pages are indexed by content in update(), or
when schedule_ahead builds the step after the launched one filling them; admission takes a
sequence's longest cached prefix (as shared tokens; pages from a host tier, kv_offload.py,
are new pages the engine copies them into; linear-attention models' state snapshots:
engine/state_cache.py; a hybrid model's windowed pages from its last window on, the places
before them released ones). Speculative decoding (speculative.py, mtp.py): a decode may
carry drafts; update() gets its kept tokens (counted per position). Priority
(`policy="priority"`, vLLM's): waiting and running sequences are kept in (priority, arrival)
order, so admission takes the best waiting first and preemption the worst running;
admission never preempts, and lower priorities wait while higher ones come. KV transfer
(engine/kv_transfer.py): a sequence with prompt KV (and state) in the store is admitted with
those positions computed (a windowed pool's table from its window on), its item's
`num_loaded` has the runner write them first; a producer's prefill stops at prefill_stop."""

from __future__ import annotations

import collections

from engine import samples
from engine.kv_pages import PageManager, PagePool
from engine.linear_state import StateRows
from engine.prefix_cache import PrefixCache, reads_cache
from engine.scheduler_output import ScheduledItem, SchedulerOutput, StepPlan, StepResult
from engine.sequence import Sequence, SequenceStatus
from engine.speculative import MAX_DRAFTS, NgramProposer, add_drafts
from engine.stop_strings import Detokenize, check_stop_strings, stop_reason
from long_context.policy import LongPrefillController, LongPrefillPolicy


def _bans_read_output(seq: Sequence) -> bool:
    """Bad words of several tokens, structured outputs: a step's bans depend on the tokens
    before it."""
    p = seq.sampling_params
    words = getattr(p, "bad_words_token_ids", 0) or ()
    return getattr(p, "structured_outputs", None) is not None or any(len(w) > 1 for w in words)


class _FallBack(Exception):
    """schedule_ahead cannot build the step without state the step in flight decides."""


class Scheduler:
    """Decides each step's batch; owns the waiting queue, running list and page tables.

    Protocol: `out = schedule()`, run the step, `update(out, sampled)`, repeat while
    `has_unfinished()`. A step whose output has items must be passed to `update` (or, if
    it could not be launched, to `cancel`) before the next `schedule()`.
    """

    def __init__(
        self,
        page_manager: PageManager,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        max_model_len: int,
        eos_token_ids: tuple[int, ...] = (),
        long_prefill: LongPrefillPolicy | None = None,
        sliding_window: int | None = None,
        detokenize: Detokenize | None = None,
        window_pages: PageManager | None = None,
        prefix_cache: PrefixCache | None = None,
        speculative: NgramProposer | None = None,
        max_loras: int = 0,
        policy: str = "fcfs",
        state_slots: int = 0,
    ):
        """`sliding_window`: set when every layer of the model attends only to the last
        that many keys (ModelConfig.kv_window); a running sequence then gives back the
        pages behind its window as it advances (Sequence.num_released_pages).
        `window_pages`: hybrid models (ModelConfig.hybrid_window), whose layers with the
        `sliding_window` keep their KV in this second pool (Sequence.window_page_ids, given
        back behind the window) while `page_manager` holds the other layers' (all kept).
        A sequence runs only with room in both; either running out preempts.
        `detokenize(token_ids) -> str`: the model's tokenizer, for requests with stop
        strings (SamplingParams.stop); without it such requests are refused.
        `prefix_cache`: an index of `page_manager`'s full pages (engine/prefix_cache.py),
        whose longest match admission takes; with `window_pages`, its WindowCache indexes
        theirs (not with a sliding window on every layer).
        `speculative`: drafts for `speculate` sequences' decodes (NgramProposer, MtpProposer).
        `max_loras`: distinct adapters (Sequence.lora_id) running at once; 0: no limit.
        `policy`: "fcfs" or "priority" (Sequence.priority, then arrival). `state_slots`:
        linear-attention models' recurrent state rows 1..state_slots, one per sequence from
        admission to release (Sequence.state_slot; engine/linear_state.StateRows, with the
        prefix cache's snapshots and drafts' rows); admission waits for a free one."""
        if policy not in ("fcfs", "priority"):
            raise ValueError(f"policy={policy!r}: expected 'fcfs' or 'priority'")
        for name, value in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
            ("max_model_len", max_model_len),
        ):
            if value < 1:
                raise ValueError(f"{name}={value}: must be >= 1")
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"sliding_window={sliding_window}: must be >= 1 or None")
        if window_pages is not None and sliding_window is None:
            raise ValueError("window_pages: a pool for windowed layers needs sliding_window")
        if prefix_cache is not None:
            prefix_cache.check_pools(page_manager, window_pages, sliding_window)
        if window_pages is not None and window_pages.page_size != page_manager.page_size:
            raise ValueError(
                f"window_pages.page_size={window_pages.page_size}: must equal the main pool's "
                f"{page_manager.page_size}"
            )
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
        self.sliding_window = sliding_window
        self.window_pages = window_pages
        main = PagePool(page_manager, sliding_window, "page_ids", "num_released_pages")
        self._pools = (main,)
        if window_pages is not None:  # (the windowed layers' tables, in a pool of their own)
            names = ("window_page_ids", "num_released_window_pages")
            windowed = PagePool(window_pages, sliding_window, *names)
            self._pools = (main._replace(window=None), windowed)
        self._windowed_pools = tuple(p for p in self._pools if p.window is not None)
        self.detokenize = detokenize
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._running: list[Sequence] = []  # in arrival order
        self._active: dict[str, Sequence] = {}  # waiting + running, by request id
        self._aborted: list[Sequence] = []  # aborted since the last schedule()
        # Steps handed out and not yet passed to update(), oldest first (at most 2): each
        # with its sequences by request id (identity: ids can be reused) and its work
        # (decodes, long prefill tokens, other prefill tokens) for the long-prefill policy.
        self._in_flight: list[tuple[SchedulerOutput, dict[str, Sequence], tuple]] = []
        self._release_later: set[Sequence] = set()  # finished while in a later step
        self.num_scheduled_ahead = 0  # steps built by schedule_ahead
        self._next_arrival = self._num_preemptions = 0
        self._num_shared_tokens = self._num_loaded_tokens = 0
        self.prefix_cache, self.speculative = prefix_cache, speculative
        drafts = speculative.num_speculative_tokens if speculative else 0
        states = None if prefix_cache is None else prefix_cache.states
        self._rows = StateRows(state_slots, states, drafts)
        self._forks_share = not self._rows.num_slots and self._pools[0].window is None
        self.max_loras, self.policy = max_loras, policy
        self._num_drafts, self._kept_at = 0, [0] * MAX_DRAFTS  # drafts kept per position
        self._num_cache_queries = self._num_cache_hits = 0  # tokens, at admissions
        self.long_prefill = None if long_prefill is None else LongPrefillController(long_prefill)

    # ---- admission control -------------------------------------------------------------

    def max_kv_len(self, num_prompt_tokens: int, max_tokens: int | None) -> int:
        """Largest KV length a request can ever need: the last sampled token is never fed,
        and a sequence stops once it has max_model_len tokens, so the KV holds at most
        max(prompt, min(prompt + max_tokens - 1, max_model_len - 1)) tokens (a recompute
        after preemption needs no more)."""
        if max_tokens == 0:
            return 0
        cap = self.max_model_len - 1
        if max_tokens is not None:
            cap = min(cap, num_prompt_tokens + max_tokens - 1)
        return max(num_prompt_tokens, cap)

    def check_fits(self, num_prompt_tokens: int, max_tokens: int | None = None) -> None:
        """Raise ValueError if a request can never run; the LLM calls this before queueing.
        A request whose KV could outgrow the whole pool would preempt itself forever."""
        if num_prompt_tokens < 1:
            raise ValueError(f"prompt length={num_prompt_tokens}: must be >= 1 token")
        if num_prompt_tokens > self.max_model_len:
            raise ValueError(
                f"prompt length={num_prompt_tokens}: exceeds max_model_len={self.max_model_len}"
            )
        if max_tokens is not None and max_tokens < 0:
            raise ValueError(f"max_tokens={max_tokens}: must be >= 0")
        kv_len = self.max_kv_len(num_prompt_tokens, max_tokens)
        for pool, name in zip(self._pools, ("num_pages", "window pool's num_pages"), strict=False):
            need = self.pages_held_at_most(kv_len, pool.window)
            if need > pool.pages.num_total:
                window = "" if pool.window is None else f" (sliding window {pool.window})"
                raise ValueError(
                    f"prompt length={num_prompt_tokens} with max_tokens={max_tokens}: needs up "
                    f"to {kv_len} KV tokens{window} = {need} pages, but {name}="
                    f"{pool.pages.num_total} (page_size={pool.pages.page_size})"
                )

    def pages_held_at_most(self, kv_len: int, window: int | None = None) -> int:
        """Most pages a sequence of up to `kv_len` KV tokens holds at once in a pool: all of
        them, or with a sliding `window` W the pages under a step's chunk (<= the token
        budget) and the W - 1 keys before it: L consecutive positions touch at most 1 +
        ceil((L - 1) / P) pages of P (the pages wholly before them are given back after the
        previous step)."""
        need = self.pages.pages_needed(kv_len)
        if window is None:
            return need
        span = window - 1 + self.max_num_batched_tokens
        return min(need, 1 + self.pages.pages_needed(span - 1))

    def add(self, seq: Sequence) -> None:
        """Queue a new request (FCFS by the arrival index stamped here). `check_fits` runs
        first. A request with max_tokens == 0 does no work: it finishes at once with
        finish_reason "length", is never queued, and no StepResult mentions it."""
        if seq.request_id in self._active:
            raise ValueError(f"request_id={seq.request_id!r}: already queued or running")
        if self.has_request(seq.request_id):  # aborted, pages not yet released
            raise ValueError(
                f"request_id={seq.request_id!r}: its abort is still being processed; the id "
                "is free again after the next step"
            )
        if (
            seq.status is not SequenceStatus.WAITING
            or seq.page_ids
            or seq.window_page_ids
            or seq.num_computed_tokens
            or seq.num_shared_tokens
            or seq.prefix_blocks
            or seq.state_slot
        ):
            raise ValueError(f"request_id={seq.request_id!r}: must be a new WAITING sequence")
        if seq.fork_of is not None and seq.fork_of.prompt_token_ids != seq.prompt_token_ids:
            raise ValueError(f"request_id={seq.request_id!r}: fork_of has another prompt")
        max_tokens = seq.sampling_params.max_tokens
        self.check_fits(seq.num_prompt_tokens, max_tokens)
        check_stop_strings(seq.sampling_params.stop, self.detokenize)
        seq.arrival = self._next_arrival
        self._next_arrival += 1
        if max_tokens == 0:
            seq.status = SequenceStatus.FINISHED
            seq.finish_reason = "length"
            return
        self._place(self._waiting, seq)
        self._active[seq.request_id] = seq
        if seq.fork_of is not None:
            seq.fork_of.forks.append(seq)

    def abort(self, request_id: str) -> bool:
        """Finish a request with reason "abort"; False if it is unknown or already done. A
        running request's pages are freed at the next `schedule()`, not now, so a step
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
        if self._in_flight:
            raise RuntimeError("schedule() called before update() of the previous step")
        aborted = self.release_aborted()
        return self._build(StepPlan(self.max_num_batched_tokens), aborted)

    def release_aborted(self) -> tuple[str, ...]:
        """Free the pages of requests aborted since the last call, when no step in flight
        can still write them; their ids (schedule(): `finished_aborted`), taken till then."""
        if self._in_flight:
            return ()
        aborted = tuple(seq.request_id for seq in self._aborted)
        for seq in self._aborted:
            self._release_pages(seq)
        self._aborted.clear()
        return aborted

    def cancel(self, sched_out: SchedulerOutput) -> None:
        """Take back the newest step handed out, which never ran (its launch failed): its
        tokens count as not computed again and its samples as not pending, so the next
        steps schedule the same work. What building it did stays: pages allocated (the
        retry writes them), admissions (running prefills now) and preemptions."""
        if not self._in_flight or sched_out is not self._in_flight[-1][0]:
            raise ValueError("sched_out: not the newest step handed out")
        _, seqs, _ = self._in_flight.pop()
        for item in sched_out.items:
            seq = seqs[item.request_id]
            seq.num_inflight_tokens -= len(item.token_ids)
            seq.num_pending_samples -= item.sample
            self._rows.cancel(item, seq)
            if item.num_loaded:  # the rows may not be written (or readable): compute them
                self._num_loaded_tokens -= item.num_loaded
                seq.num_computed_tokens = seq.num_shared_tokens = seq.num_loaded_tokens = 0
                seq.num_external_tokens = 0
                if seq.num_released_window_pages:  # (no windowed pages to compute them in)
                    self._preempt(seq)

    def schedule_ahead(self) -> SchedulerOutput | None:
        """Build the next step while the previous one is still in flight (not updated).
        Sequences whose in-flight item samples decode a placeholder fed from that step's
        output (`ScheduledItem.feed_index`). Returns None, changing nothing, when the step
        cannot be built without knowing the in-flight step's results (a preemption, aborted
        pages to free, a long-prefill probe) or would be empty: the caller then passes the
        in-flight step to update() and calls schedule()."""
        if len(self._in_flight) != 1:
            raise RuntimeError("schedule_ahead() needs exactly one step in flight")
        if self._aborted or (self.speculative and any(s.speculate for s in self._running)):
            return None  # (drafts come from the tokens before them: a synchronous step)
        if self.prefix_cache is not None:
            # The step in flight was launched: the pages it fills are written before the
            # step built now reads them, so requests admitted now may take them.
            for seq in self._in_flight[0][1].values():
                if not seq.is_finished:
                    self.prefix_cache.index(seq, min(self._computed(seq), seq.num_tokens))
        running, waiting = list(self._running), collections.deque(self._waiting)
        num_pages = {seq: [len(p.table(seq)) for p in self._pools] for seq in running}
        none_held = [0] * len(self._pools)  # a sequence this step admitted
        try:
            out = self._build(StepPlan(self.max_num_batched_tokens, ahead=True), ())
        except _FallBack:
            out = None
        if out is None or not out.items:
            for seq in self._running:  # undo allocations and admissions
                for pool, n in zip(self._pools, num_pages.get(seq, none_held), strict=True):
                    pool.truncate(seq, n)
                if seq not in num_pages:
                    seq.status = SequenceStatus.WAITING
                    self._count_admission(seq, -1)
                    self._forget_progress(seq)
                    self._rows.release(seq)
            self._running, self._waiting = running, waiting
            return None
        self.num_scheduled_ahead += 1
        return out

    def _build(self, plan: StepPlan, aborted: tuple[str, ...]) -> SchedulerOutput:
        # Decodes, oldest first. budget >= max_num_seqs >= len(running): all of them fit.
        for seq in list(self._running):
            if (
                seq.status is SequenceStatus.RUNNING
                and self._tokens_left(seq) == 1
                and not self._surely_done(seq)
            ):
                if plan.ahead and seq.num_pending_samples and _bans_read_output(seq):
                    raise _FallBack  # its bans need the token the step in flight samples
                if self._make_room(seq, self._computed(seq) + 1, plan):
                    plan.decodes[seq] = 1
                    plan.budget -= 1
        if self.speculative is not None and not plan.ahead:
            add_drafts(plan, self.speculative, self.max_model_len, self._pools)

        # Running partial prefills continue, oldest first.
        for seq in list(self._running):
            left = self._tokens_left(seq)
            if seq.status is SequenceStatus.RUNNING and left > 1 and plan.budget > 0:
                chunk = self._chunk(seq, left, plan)
                if chunk and self._make_room(seq, self._computed(seq) + chunk, plan):
                    self._add_prefill(plan, seq, chunk)

        # Admission in FCFS order. Not after a preemption: memory is short, and a just
        # preempted sequence would be readmitted only to lose its pages again. Only long
        # prompts held back by max_long_prefills are passed; a probe step (a long prompt
        # left out to time the decodes alone) admits nobody after it, or the prefills
        # admitted would spoil every probe and the long prompt would wait forever.
        i = 0
        while (
            not plan.preempted
            and i < len(self._waiting)
            and plan.budget > 0
            and len(self._running) < self.max_num_seqs
            and self._rows.can_admit()
        ):
            seq = self._waiting[i]
            donor = self._donor(seq)
            # A later sample waits for its first one's prompt pages; a request whose adapter
            # would be one more than max_loras running waits (later ones may pass it).
            if donor is None or self._lora_waits(seq):
                i += 1
                continue
            cache = self.prefix_cache if donor is seq and self._reads_cache(seq) else None
            hits, blocks = cache.lookup(seq) if cache else ([], [])
            size = self.pages.page_size
            shared = len(hits) * size if donor is seq else samples.share_point(seq, size)
            # More of it in the KV store than in the cache: new pages, written from there.
            loaded = seq.num_external_tokens if donor is seq else 0
            loaded = loaded if loaded > shared else 0
            if loaded:  # (and its state: the store's, not a snapshot's)
                hits, blocks, shared, seq.state_from = [], [], loaded, 0
            seq.num_shared_tokens = shared
            left = seq.num_tokens - shared
            chunk = 0 if self._long_held_back(seq, plan) else self._chunk(seq, left, plan)
            need = self.pages.pages_needed(shared + chunk) - (shared - loaded) // size
            # (Taking a free page off the free list uses it up like a new one.)
            taken = list(self.prefix_cache.num_free(hits, blocks)) if hits else [0, 0]
            if loaded and self.window_pages is not None:  # (its window's places only)
                taken[1] -= self._pools[1].first_held(loaded)
            fits = all(p.pages.can_allocate(need + taken[i]) for i, p in enumerate(self._pools))
            if not chunk or not fits:
                seq.num_shared_tokens = 0
                if chunk or (plan.allowance_known and plan.allowance == 0):
                    break  # this request waits; nobody behind it overtakes
                i += 1
                continue
            if hits:  # the indexed pages of its prefix (and of its last window)
                self.prefix_cache.admit(seq, hits, blocks)
            elif shared and not loaded:  # the donor's prompt pages
                samples.share(seq, donor, shared, self._pools)
            seq.num_computed_tokens, seq.num_loaded_tokens = shared, loaded
            if loaded:
                plan.loads[seq] = loaded
                for pool in self._windowed_pools:
                    pool.skip_behind_window(seq, loaded)
            self._count_admission(seq, 1)
            self._rows.admit(seq)
            for pool in self._pools:
                pool.grow(seq, shared + chunk)
            del self._waiting[i]
            seq.status = SequenceStatus.RUNNING
            self._place(self._running, seq)
            self._add_prefill(plan, seq, chunk)

        scheduled = list(plan.decodes.items()) + list(plan.prefills.items())
        feed = {}
        if plan.ahead:
            prev = self._in_flight[0][0]
            feed = {it.request_id: i for i, it in enumerate(prev.items) if it.sample}
        items = tuple(
            self._item(seq, n, feed, plan.drafts.get(seq, ()), plan.loads.get(seq, 0))
            for seq, n in scheduled
        )
        out = SchedulerOutput(
            items=items,
            num_batched_tokens=self.max_num_batched_tokens - plan.budget,
            preempted=tuple(plan.preempted),
            finished_aborted=aborted,
        )
        if items:
            long_tokens = plan.long_tokens
            work = (len(plan.decodes), long_tokens, sum(plan.prefills.values()) - long_tokens)
            self._in_flight.append((out, {seq.request_id: seq for seq, _ in scheduled}, work))
            for (seq, n), item in zip(scheduled, items, strict=True):
                seq.num_inflight_tokens += n
                seq.num_pending_samples += item.sample
        return out

    def update(
        self,
        sched_out: SchedulerOutput,
        sampled: dict[str, tuple[int, float]],
        step_seconds: float | None = None,
    ) -> list[StepResult]:
        """Apply a finished step: advance KV progress, append sampled tokens, stop, free.
        `sampled[request_id] = (token_id, logprob)` for every item with `sample`; requests
        aborted while the step ran are skipped. `step_seconds`, the step's wall time (None
        when unknown or when it included a compilation), steers long-prefill chunks."""
        if not self._in_flight or sched_out is not self._in_flight[0][0]:
            raise ValueError(
                "sched_out: not the output of the latest schedule() call (oldest in flight)"
            )
        _, seqs, work = self._in_flight.pop(0)
        if self.long_prefill is not None and step_seconds is not None:
            self.long_prefill.observe(*work, step_seconds)
        results = []
        for item in sched_out.items:
            seq = seqs[item.request_id]
            seq.num_inflight_tokens -= len(item.token_ids)
            seq.num_pending_samples -= item.sample
            if seq.is_finished:  # aborted during the step, or stopped in the previous one
                if seq in self._release_later and not self._in_later_step(seq):
                    self._release_later.discard(seq)
                    self._release_pages(seq)
                continue
            new = sampled.get(item.request_id) if item.sample else None
            if item.sample and new is None:
                raise ValueError(f"sampled: no token for request_id={item.request_id!r}")
            if item.num_drafts:  # the KV of the drafts kept (the last new token is not fed)
                seq.num_computed_tokens = item.start_pos + len(new)
                self._rows.kept(seq, item, len(new))  # (a recurrent state: the one after them)
                self._num_drafts += item.num_drafts
                for j in range(len(new) - 1):
                    self._kept_at[j] += 1
            else:
                seq.num_computed_tokens = item.kv_len_after
            if self.prefix_cache is not None:
                self.prefix_cache.index(seq, seq.num_computed_tokens)
            for pool in self._windowed_pools:
                pool.release_behind_window(seq)
            if new is not None:
                results.append(self._append(seq, new if item.num_drafts else (new,)))
        if self._rows.snapshots is not None:  # rows whose pages were not indexed
            self._rows.snapshots.release(sched_out.items, seqs)
        return results

    def _append(self, seq: Sequence, new) -> StepResult:
        """Append a step's new (token, logprob) pairs to `seq` up to the first that ends it."""
        kept = 0
        for token_id, logprob in new:
            kept += 1
            seq.output_token_ids.append(token_id)
            seq.output_logprobs.append(logprob)
            reason, why = stop_reason(
                seq, token_id, self.eos_token_ids, self.detokenize, self.max_model_len
            )
            if reason is not None:
                self._finish(seq, reason)
                break
        # Most steps bring one token: its tuples built directly (no zip on the hot path).
        ids, lps = ((token_id,), (logprob,)) if kept == 1 else zip(*new[:kept], strict=True)
        done = reason is not None
        cached = seq.num_cached_tokens + seq.num_loaded_tokens
        return StepResult(seq.request_id, ids, lps, done, reason, why, cached)

    # ---- queries -----------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        """True while requests wait or run, or aborted pages still await `schedule()`."""
        return bool(self._waiting or self._running or self._aborted or self._in_flight)

    def has_request(self, request_id: str) -> bool:
        """Whether `request_id` is taken: queued, running, or aborted and not yet released."""
        return request_id in self._active or any(s.request_id == request_id for s in self._aborted)

    def stats(self) -> dict[str, int]:
        s = {
            "num_running": len(self._running),
            "num_waiting": len(self._waiting),
            "num_preemptions": self._num_preemptions,
            # Prompt tokens later samples (SamplingParams.n) took from their first one's pages.
            "num_prompt_tokens_shared": self._num_shared_tokens,
            # Prompt tokens whose KV admissions wrote from the store (engine/kv_transfer.py).
            "num_loaded_kv_tokens": self._num_loaded_tokens,
            "num_pages_free": self.pages.num_free,
            "num_pages_total": self.pages.num_total,
        }
        if self.speculative is not None:  # drafts fed, and of those the ones kept
            k, s["num_draft_tokens"] = self.speculative.num_speculative_tokens, self._num_drafts
            s["num_accepted_tokens"] = sum(self._kept_at)
            s["num_accepted_tokens_per_pos"] = self._kept_at[:k]
        if self.prefix_cache is not None:
            # Tokens of the admitted sequences that could read the cache, and of those the
            # ones whose pages it supplied (vLLM's queries and hits); pages indexed now.
            s["prefix_cache_queries"] = self._num_cache_queries
            s["prefix_cache_hits"] = self._num_cache_hits
            s["prefix_cache_pages"] = len(self.prefix_cache)
            if self.prefix_cache.windows is not None:  # a hybrid model's windowed pages
                s["prefix_cache_window_pages"] = len(self.prefix_cache.windows)
            if (states := self._rows.snapshots) is not None:  # indexed, and copied in
                s["prefix_cache_state_snapshots"] = states.num_indexed
                s["prefix_cache_states_restored"] = states.num_restored
        if self.window_pages is not None:
            s["num_window_pages_free"] = self.window_pages.num_free
            s["num_window_pages_total"] = self.window_pages.num_total
        return s

    def in_flight_all_finished(self) -> bool:
        """Whether the newest step in flight holds only finished sequences (stopped or aborted)."""
        return bool(self._in_flight) and all(s.is_finished for s in self._in_flight[-1][1].values())

    def lora_ids_queued(self) -> set[int]:
        """The adapters (Sequence.lora_id; 0: none) of every waiting or running request."""
        return {seq.lora_id for seq in self._active.values()}

    # ---- internals ---------------------------------------------------------------------

    @staticmethod
    def _computed(seq: Sequence) -> int:
        """KV length once the steps in flight are done (optimistic accounting)."""
        return seq.num_computed_tokens + seq.num_inflight_tokens

    @staticmethod
    def _tokens_left(seq: Sequence) -> int:
        """Tokens (known or being sampled) not yet in the KV cache (1 for a decode)."""
        return seq.num_tokens + seq.num_pending_samples - Scheduler._computed(seq)

    def _surely_done(self, seq: Sequence) -> bool:
        """A pending sample will finish `seq` by length whatever it is (never in sync use)."""
        if not seq.num_pending_samples:
            return False
        max_tokens = seq.sampling_params.max_tokens
        n_out = seq.num_output_tokens + seq.num_pending_samples
        return (max_tokens is not None and n_out >= max_tokens) or (
            seq.num_tokens + seq.num_pending_samples >= self.max_model_len
        )

    def _in_later_step(self, seq: Sequence) -> bool:
        return any(seqs.get(seq.request_id) is seq for _, seqs, _ in self._in_flight)

    def _make_room(self, seq: Sequence, num_tokens: int, plan: StepPlan) -> bool:
        """Grow `seq`'s pages to `num_tokens`, preempting the newest running sequences.

        Returns False if `seq` itself was the newest and got preempted. A victim already
        scheduled in this step is taken out of it.
        """
        if self.window_pages is None:  # one pool (kept apart: it is most decodes' path)
            need = self.pages.num_new_pages(seq.page_ids, num_tokens)
            if not need:  # most decodes: the last page has room
                return True
            needs = [(self.pages, need)]
        else:
            needs = [
                (p.pages, p.pages.num_new_pages(p.table(seq), num_tokens)) for p in self._pools
            ]
            if not any(n for _, n in needs):
                return True

        def fits() -> bool:
            return all(pages.can_allocate(n) for pages, n in needs)

        if plan.ahead and not fits():
            raise _FallBack
        while not fits():
            victim = self._running[-1]
            self._preempt(victim)
            plan.preempted.append(victim.request_id)
            plan.drop(victim)
            if victim is seq:
                return False
        for pool in self._pools:
            pool.grow(seq, num_tokens)
        return True

    def _lora_waits(self, seq: Sequence) -> bool:
        running = {s.lora_id for s in self._running} - {0}
        return bool(self.max_loras and seq.lora_id) and (
            seq.lora_id not in running and len(running) >= self.max_loras
        )

    def _is_long(self, seq: Sequence) -> bool:
        policy = None if self.long_prefill is None else self.long_prefill.policy
        return policy is not None and policy.is_long(seq.num_tokens - seq.num_shared_tokens)

    def _donor(self, seq: Sequence) -> Sequence | None:
        """samples.donor, if it still holds the pages (samples.can_share); `seq` itself when
        the main pool gives pages back, or for recurrent states (not in pages)."""
        if not self._forks_share:
            return seq
        donor = samples.donor(seq, self.pages.page_size, self._computed)
        return donor if donor is None or samples.can_share(donor, seq, self._pools) else seq

    def _chunk(self, seq: Sequence, left: int, plan: StepPlan) -> int:
        """Tokens of `seq`'s prefill to schedule now: the budget (to its prefill_stop), and
        for a long sequence the policy's allowance and room for a shorter waiting request. A
        first sample whose later samples wait stops at the pages they share."""
        chunk = min(left, plan.budget)
        chunk = min(chunk, max(seq.prefill_stop - self._computed(seq), 0) or chunk)
        if seq.forks and self._forks_share:
            computed, point = self._computed(seq), samples.share_point(seq, self.pages.page_size)
            if computed < point and any(f.status is SequenceStatus.WAITING for f in seq.forks):
                chunk = min(chunk, point - computed)
        if not self._is_long(seq):
            return chunk
        policy = self.long_prefill.policy
        if plan.ahead and policy.max_decode_slowdown is not None:
            raise _FallBack  # the allowance depends on the in-flight step's time
        if not plan.allowance_known:
            plan.allowance = self.long_prefill.allowance(bool(plan.decodes))
            plan.allowance_known = True
        if plan.allowance is not None:
            chunk = min(chunk, max(0, plan.allowance - plan.long_tokens))
        short = next((w for w in self._waiting if w is not seq and not self._is_long(w)), None)
        if short is not None and chunk and len(self._running) < self.max_num_seqs:
            room = min(short.num_tokens, plan.budget // 2)
            chunk = min(chunk, max(plan.budget - room, policy.chunk_quantum))
        return chunk

    def _long_held_back(self, seq: Sequence, plan: StepPlan) -> bool:
        """A long waiting sequence waits while max_long_prefills are in progress."""
        if not self._is_long(seq):
            return False
        cap = self.long_prefill.policy.max_long_prefills
        if cap is None:
            return False
        in_progress = sum(
            self._is_long(r) and self._tokens_left(r) - plan.prefills.get(r, 0) > 1
            for r in self._running
        )
        return in_progress >= cap

    def _add_prefill(self, plan: StepPlan, seq: Sequence, chunk: int) -> None:
        plan.prefills[seq] = chunk
        plan.budget -= chunk
        if self._is_long(seq):
            plan.long.add(seq)

    def _preempt(self, seq: Sequence) -> None:
        """Drop `seq`'s KV and requeue it at the head; it later recomputes from position 0."""
        self._running.remove(seq)
        self._release_pages(seq)
        self._forget_progress(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self._num_preemptions += 1
        # FCFS: it is newer than every running sequence and older than every waiting one.
        self._place(self._waiting, seq, front=True)

    def _place(self, queue, seq: Sequence, front: bool = False) -> None:
        """Put `seq` in the waiting or running `queue`: at its end (or front) under FCFS,
        after every sequence of a better or equal (priority, arrival) under "priority"."""
        if self.policy == "fcfs":
            return queue.appendleft(seq) if front else queue.append(seq)
        later = (i for i, s in enumerate(queue) if s.rank > seq.rank)
        queue.insert(next(later, len(queue)), seq)

    def _item(
        self,
        seq: Sequence,
        num_tokens: int,
        feed: dict[str, int],
        drafts: tuple[int, ...],
        loaded: int,
    ) -> ScheduledItem:
        start = self._computed(seq)
        stop = start + num_tokens - len(drafts)
        token_ids, feed_index = seq.token_ids_range(start, stop), -1
        if stop > seq.num_tokens:  # a decode of the token the step in flight samples
            token_ids, feed_index = (0,), feed[seq.request_id]
        extra = self._rows.item_fields(seq, start, stop + len(drafts), len(drafts))
        return ScheduledItem(
            request_id=seq.request_id,
            token_ids=token_ids + drafts,
            start_pos=start,
            page_ids=seq.page_ids,
            sample=stop == seq.num_tokens + seq.num_pending_samples,
            sampling_params=seq.sampling_params,
            # A drafting decode samples after its drafts: that token's generation index.
            num_generated=seq.num_output_tokens + seq.num_pending_samples + len(drafts),
            feed_index=feed_index,
            window_page_ids=seq.window_page_ids,
            num_drafts=len(drafts),
            lora_id=seq.lora_id,
            num_loaded=loaded,
            next_token=seq.token_ids_range(stop, stop + 1)[0] if stop < seq.num_tokens else -1,
            **extra,
        )

    def _finish(self, seq: Sequence, reason: str) -> None:
        self._running.remove(seq)
        del self._active[seq.request_id]
        if self._in_later_step(seq):  # a step scheduled ahead may still write its pages
            self._release_later.add(seq)
        else:
            self._release_pages(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def _reads_cache(self, seq: Sequence) -> bool:
        return self.prefix_cache is not None and reads_cache(seq.sampling_params)

    def _count_admission(self, seq: Sequence, sign: int) -> None:
        """Add (sign 1) or take back (-1) an admission's shared tokens and cache lookup."""
        cached, loaded = seq.num_cached_tokens, seq.num_loaded_tokens
        self._num_shared_tokens += sign * (seq.num_shared_tokens - cached - loaded)
        self._num_loaded_tokens += sign * loaded
        if seq.num_shared_tokens == cached and self._reads_cache(seq):  # it looked up
            self._num_cache_queries += sign * seq.num_tokens
            self._num_cache_hits += sign * cached

    @staticmethod
    def _forget_progress(seq: Sequence) -> None:
        """A sequence back to waiting, holding no pages: it restarts from position 0."""
        seq.num_computed_tokens = seq.num_shared_tokens = seq.num_cached_tokens = 0
        seq.num_loaded_tokens = seq.state_from = 0
        seq.prefix_blocks = []

    def _release_pages(self, seq: Sequence) -> None:
        for pool in self._pools:
            held = pool.table(seq)[getattr(seq, pool.released) :]
            # Last page first: a prefix cache evicts a prefix's tail before its head.
            pool.pages.free(held[::-1] if self.prefix_cache is not None else held)
            setattr(seq, pool.ids, ())
            setattr(seq, pool.released, 0)
        self._rows.release(seq)
