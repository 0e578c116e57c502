"""The public engine: `LLM(...)`, `generate`, streaming, `abort`, `stats`."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from engine import batch_invariant as batch_invariant_lib
from engine import chat, inputs, kv_budget, kv_quant, logit_bias, lora, penalties, runner, samples
from engine.attention_ops import resolve_impl
from engine.beam_search import beam_search
from engine.draft_model import DraftModelProposer
from engine.eplb import EPLBConfig, balancer_for
from engine.kv_offload import KVOffload, host_tier_for
from engine.kv_pages import PageManager, pages_for_tokens
from engine.kv_transfer import (
    KVTransfer,
    KVTransferConfig,
    StoreUnreadable,
    check_engine,
    windowed_leaves,
)
from engine.linear_state import check_model_engine
from engine.llm_control import EngineControl
from engine.mtp import fill_batch, with_mtp
from engine.prefix_cache import PrefixCache, WindowCache
from engine.sampler import GREEDY_TEMPERATURE
from engine.sampling_params import MAX_LOGPROBS, RequestOutput, SamplingParams, StreamDelta
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.speculative import eligible, keep_drafts, prepare_drafts, proposer_for
from engine.state_cache import StateCopier, state_layout
from engine.step import StepVariants, init_kv_pages
from engine.stop_strings import check_stop_strings, final_text
from engine.structured import StructuredOutputs
from long_context.policy import LongPrefillPolicy, policy_for_processes
from models import rope
from models.load import load_model, model_config
from sharding.mesh import parse_mesh
from sharding.placement import check_model_layout, put_replicated, shard_model

# KV positions reduced together by the attention's online softmax (see paged_attention).
_KV_BLOCK_TOKENS = 128


class LLM(EngineControl):
    """Offline and streaming generation over a paged KV cache with continuous batching.

    Args (DESIGN.md "Public API"): `model` is a preset name, a Hugging Face directory or an
    orbax directory; `num_pages=None` sizes the pool from a memory budget, less the penalty
    state's room (never more than max_num_seqs full-length sequences need); `max_num_seqs`
    is clamped to `max_num_batched_tokens`: every running sequence must decode each step;
    `long_prefill` (long_context/policy.py) sets how long prompts share steps with running
    decodes (None: the default policy; `LongPrefillPolicy.token_budget_only()` turns it off).
    Integer arguments take Python or numpy integers (never bools), `seed` is in
    [0, 2**32) and the flags are True/False (engine/inputs.py); a `num_pages` pool larger
    than the memory there is refused before the weights are read.
    `async_scheduling` dispatches the next step before reading back the previous one's
    tokens (Scheduler.schedule_ahead; same outputs); False runs steps one by one.
    `kv_cache_dtype="fp8"` stores K/V (or the MLA latent) as float8_e4m3fn pages with a
    float32 scale per row (engine/kv_quant.py): about half the bf16 cache. Linear-attention
    models keep a recurrent state row per running sequence (engine/linear_state.py).
    Hybrid models (ModelConfig.hybrid_window: gpt-oss, Qwen2 with max_window_layers) keep
    windowed layers' KV in a pool of their own (kv_pages.window_pool_pages pages, never the
    first to run out, or `swa_full_tokens_ratio` (SGLang's) of `num_pages` when more: a
    prefix cache keeps windows longer; stats num_window_pages_total); `num_pages`: the others'.
    `generation_config` (vLLM's): "auto": requests without SamplingParams take the model
    folder's generation_config.json settings; "vllm" ignores them; a folder path reads its.
    vLLM's: `enable_prefix_caching` (engine/prefix_cache.py): full KV pages stay indexed by
    content, a request takes its longest cached prefix's (stats prefix_cache_queries /
    _hits); a hybrid model's windowed pages too, not a sliding window on every layer's;
    linear-attention models' states kept at multiples of
    `mamba_block_size` tokens, `num_state_snapshots` (max_num_seqs) of them
    (engine/state_cache.py). `kv_offloading_size`: GiB of host memory keeping the pages the
    device evicts (engine/kv_offload.py). `speculative_config`: "ngram" drafts
    (engine/speculative.py), "mtp" ones from the model's MTP module (engine/mtp.py), or a
    draft model's ({"model": ..., "num_speculative_tokens": k}: engine/draft_model.py).
    `enable_lora`: PEFT adapters per request (LoRARequest), up to `max_loras` in a step,
    ranks up to `max_lora_rank` (engine/lora.py). `kv_transfer_config` (disaggregated
    prefill / decode, engine/kv_transfer.py). `scheduling_policy`: "fcfs", or "priority" by
    the requests' `priority` (lower first). `enable_eplb`, `eplb_config`: redundant experts
    placed by measured load over an ep mesh (engine/eplb.py). `quantization="fp8"`: fp8
    projection weights, a scale per block (models/quantization.py). `token_buckets`: the
    token counts steps pad to, powers of two (default: all from runner.TOKEN_FLOOR up to the
    budget's; runner.Buckets).
    """

    def __init__(
        self,
        model: str,
        dtype: str | None = None,
        mesh: str = "",
        page_size: int = 16,
        num_pages: int | None = None,
        max_num_batched_tokens: int = 2048,
        max_num_seqs: int = 64,
        max_model_len: int | None = None,
        batch_invariant: bool = False,
        attention_impl: str = "auto",
        seed: int = 0,
        long_prefill: LongPrefillPolicy | None = None,
        async_scheduling: bool = True,
        kv_cache_dtype: str = "auto",
        generation_config: str = "auto",
        enable_prefix_caching: bool = False,
        kv_offloading_size: float | None = None,
        speculative_config: dict | None = None,
        quantization: str | None = None,
        enable_lora: bool = False,
        max_loras: int = 1,
        max_lora_rank: int = 16,
        kv_transfer_config: dict | str | KVTransferConfig | None = None,
        scheduling_policy: str = "fcfs",
        enable_eplb: bool = False,
        eplb_config: dict | str | EPLBConfig | None = None,
        mamba_block_size: int | None = None,
        num_state_snapshots: int | None = None,
        token_buckets=None,
        swa_full_tokens_ratio: float | None = None,
    ):
        model = inputs.as_model_path(model)
        self._default_params = inputs.default_sampling_params(generation_config, model)
        page_size = inputs.as_int("page_size", page_size)
        max_num_batched_tokens = inputs.as_int("max_num_batched_tokens", max_num_batched_tokens)
        max_num_seqs = inputs.as_int("max_num_seqs", max_num_seqs)
        if num_pages is not None:
            # Slot ids (page * page_size + offset) are int32.
            num_pages = inputs.as_int(
                "num_pages", num_pages, high=max(1, inputs.INT32_MAX // page_size)
            )
        if max_model_len is not None:  # its upper limit comes with the config, below
            max_model_len = inputs.as_int("max_model_len", max_model_len)
        batch_invariant = inputs.as_bool("batch_invariant", batch_invariant)
        async_scheduling = inputs.as_bool("async_scheduling", async_scheduling)
        enable_prefix_caching = inputs.as_bool("enable_prefix_caching", enable_prefix_caching)
        enable_lora = inputs.as_bool("enable_lora", enable_lora)
        lora.check_engine(enable_lora, max_loras, max_lora_rank)
        proposer = proposer_for(speculative_config)
        transfer = KVTransferConfig.of(kv_transfer_config)
        if scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy={scheduling_policy!r}: 'fcfs' or 'priority'")
        # Request seeds derive from it modulo 2**32 (numpy's seed range, as vLLM's).
        seed = inputs.as_int("seed", seed, low=0, high=2**32 - 1)
        if long_prefill is not None and not isinstance(long_prefill, LongPrefillPolicy):
            raise ValueError(f"long_prefill={long_prefill!r}: expected a LongPrefillPolicy or None")
        self.attention_impl = resolve_impl(attention_impl, batch_invariant)
        kv_dtype = kv_quant.resolve_kv_cache_dtype(kv_cache_dtype)
        mesh_config = parse_mesh(mesh)  # ValueError on a bad string, before loading
        long_prefill = policy_for_processes(long_prefill, jax.process_count())

        # Everything the config decides is checked before the weights are read.
        cfg = with_mtp(model_config(model, dtype, quantization), proposer, model)
        if mesh:
            check_model_layout(cfg, mesh_config)
        check_engine(transfer, cfg)
        opts = (enable_prefix_caching, mamba_block_size, num_state_snapshots, page_size)
        cfg = check_model_engine(cfg, transfer, kv_dtype, enable_lora, opts)
        tier = host_tier_for(
            kv_offloading_size, enable_prefix_caching, cfg, kv_dtype, page_size, transfer
        )
        self._eplb = balancer_for(enable_eplb, eplb_config, cfg, mesh_config if mesh else None)
        max_model_len = inputs.model_len(max_model_len, cfg)
        cfg = rope.for_max_model_len(cfg, max_model_len)  # (LongRoPE's factors)
        max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
        states = state_layout(cfg, *opts, max_num_seqs, proposer)  # (linear layers' rows)
        # The windowed layers' pool of a hybrid model (None for any other).
        window_ratio = kv_budget.check_window_ratio(cfg, swa_full_tokens_ratio)
        window_num_pages = kv_budget.window_pages_for(
            cfg, page_size, max_num_seqs, max_num_batched_tokens, num_pages, window_ratio
        )
        if num_pages is not None:
            fits = (num_pages, page_size, kv_dtype, mesh_config if mesh else None)
            kv_budget.check_kv_fits(cfg, *fits, window_num_pages, states.rows)
        pages_per_seq = pages_for_tokens(max_model_len, page_size)
        # Tokens are split over dp x ep on a mesh: each shard gets MIN_ROWS rows or more.
        min_rows = batch_invariant_lib.MIN_ROWS * mesh_config.dp * mesh_config.ep
        self._buckets = runner.Buckets(  # (token_buckets checked here, before loading)
            max_num_batched_tokens,
            max_num_seqs,
            pages_per_seq,
            min_rows=runner.next_pow2(min_rows) if batch_invariant else 1,
            window_tables=window_num_pages is not None,
            state_slots=bool(cfg.linear_attention_layers),
            state_layout=states,
            token_buckets=token_buckets,
        )
        if isinstance(proposer, DraftModelProposer):  # (its engine: after the pools, below)
            proposer.check(cfg, mesh)
        # On a mesh checkpoint params stay on the host until shard_model puts each device's
        # shards: a checkpoint larger than one device never lands whole on the first (preset
        # weights are drawn on the default device first: random-weight test models).
        self.config, self.params, tokenizer_path = load_model(
            model, dtype, seed, cfg, host=bool(mesh)
        )
        # mesh="" keeps the one-device path; any mesh, even "dp=1", shards and runs EP MoE.
        self.mesh = None
        if mesh:
            self.mesh, self.params = shard_model(cfg, self.params, mesh_config, self._eplb)
        # The adapters' slots (engine/lora.py); None without enable_lora.
        self._lora = lora.slots_for(enable_lora, cfg, max_loras, max_lora_rank, self.mesh)
        self.max_model_len = max_model_len
        self.page_size = page_size
        if num_pages is None:  # measured now that the weights take their memory
            budget = (kv_budget.default_backend_kv_budget(), page_size, kv_dtype, max_num_seqs)
            num_pages, window_num_pages = kv_budget.pools_from_budget(
                cfg, *budget, pages_per_seq, window_num_pages, states.rows, window_ratio
            )
        self.num_pages = num_pages
        self.window_num_pages = window_num_pages
        # prompt_bos_id: the BOS a text prompt must start with (None: the tokenizer's way).
        self.tokenizer, self.prompt_bos_id, self.chat_template, self.special_tokens = (
            inputs.load_text_side(tokenizer_path, cfg)
        )
        self._structured = StructuredOutputs(self.tokenizer, cfg.vocab_size, cfg.eos_token_ids)
        self._pages = PageManager(num_pages, page_size)
        hybrid = window_num_pages is not None
        window_pages = PageManager(window_num_pages, page_size) if hybrid else None
        prefix_cache = None
        if enable_prefix_caching:  # (a hybrid model's windowed pages indexed too)
            windows = WindowCache(window_pages, cfg.hybrid_window, tier) if hybrid else None
            prefix_cache = PrefixCache(self._pages, tier, states.snapshots, windows)
        self._scheduler = Scheduler(
            self._pages,
            max_num_batched_tokens,
            max_num_seqs,
            max_model_len,
            eos_token_ids=cfg.eos_token_ids,
            long_prefill=long_prefill,
            sliding_window=cfg.hybrid_window if hybrid else cfg.kv_window,
            detokenize=None if self.tokenizer is None else self._detokenize,
            window_pages=window_pages,
            prefix_cache=prefix_cache,
            speculative=proposer,
            max_loras=max_loras if enable_lora else 0,
            policy=scheduling_policy,
            state_slots=max_num_seqs if cfg.linear_attention_layers else 0,
        )
        self.batch_invariant = bool(batch_invariant)
        self.kv_dtype = jnp.dtype(cfg.dtype if kv_dtype is None else kv_dtype)
        # A zeroed cache (again after sleep: engine/llm_control.py).
        self._new_kv = functools.partial(
            init_kv_pages,
            cfg,
            num_pages,
            page_size,
            self.kv_dtype,
            mesh=self.mesh,
            window_num_pages=window_num_pages,
            state_rows=states.rows,
        )
        self._kv = self._new_kv()
        if isinstance(proposer, DraftModelProposer):  # from the memory the pools left
            shape = (page_size, max_num_seqs, max_num_batched_tokens, batch_invariant)
            proposer.start(max_model_len, *shape, attention_impl)
        self._state_copier = StateCopier(cfg, self._kv, self.mesh) if states.copied else None
        if transfer is not None and not transfer.offloading:  # (that one: the host tier)
            self._transfer = KVTransfer(
                transfer, cfg, self._kv, page_size, num_pages, self.mesh, self._lora
            )
        if tier is not None:  # (a hybrid model's windowed pages: copies of their own)
            windowed = windowed_leaves(cfg, self._kv)
            self._offload = KVOffload(tier, self._kv, num_pages, self.mesh, windowed)
        kv_block_pages = max(1, _KV_BLOCK_TOKENS // page_size)
        self._top_k = min(MAX_LOGPROBS, cfg.vocab_size)
        impl = (self.attention_impl, self.mesh, self.batch_invariant, self.kv_dtype)
        self._steps = StepVariants(self._top_k, cfg, kv_block_pages, *impl)
        # Penalized requests' slots in a device state of token counts (engine/penalties.py).
        self._penalty_slots = penalties.PenaltySlots(max_num_seqs)
        self._penalty_state: penalties.PenaltyState | None = None
        self._seed = seed
        self._request_counter = itertools.count()
        self._outputs: dict[str, RequestOutput] = {}  # unfinished, and finished for generate
        self._collecting: set[str] = set()  # ids whose finished record generate() returns
        # Ids a closed stream() or a raising generate() aborted: no "abort" delta for them.
        self._unwatched: set[str] = set()
        self._groups = samples.SampleGroups()  # requests with n > 1 samples, until done
        self._num_steps = 0
        self._step_shapes: set[tuple[int, int]] = set()  # (T, S) buckets this engine ran
        # (variant, penalized, list width, masked, rows scored, T, S): step programs run.
        self._variant_shapes: set[tuple] = set()
        self._sticky = runner.StickyFeatures()  # sampling features kept on once used
        self._page_rows = runner.PageRows()  # page tables as arrays, grown step by step
        self._window_rows = runner.PageRows("window_page_ids")
        self._num_tokens_generated = 0
        self._expert_load = np.zeros((0, 0), np.int64)  # [L_moe, E] last step
        self._expert_load_total = np.zeros((0, 0), np.int64)  # [L_moe, E] since creation
        self.async_scheduling = bool(async_scheduling)
        # Steps dispatched, not yet read back (their tokens on the host), oldest first.
        self._dispatched: list[runner.Dispatched] = []
        # Deltas the next step() returns: aborts, requests finished at once (max_tokens=0),
        # and a step's increments when a later part of the same call raised.
        self._outbox: list[StreamDelta] = []
        self._last_readback, self._num_dispatched_ahead = 0.0, 0
        self._host_seconds = 0.0  # step() time not spent waiting for the device's tokens
        self._wait_seconds = 0.0  # step() time blocked reading a step's tokens back
        self._no_prev_tokens = None  # prev_tokens of a step with nothing in flight

    # ---- requests ----------------------------------------------------------------------

    def _validate(self, ids: list[int], params: SamplingParams, lora_id: int) -> None:
        vocab = self.config.vocab_size
        inputs.check_prompt(ids, vocab, self.max_model_len)
        logit_bias.check_token_lists(params, vocab, self.config.eos_token_ids)
        self._scheduler.check_fits(len(ids), params.max_tokens)
        check_stop_strings(params.stop, self._scheduler.detokenize)
        if params.structured_outputs is not None:  # compiled now: errors before queueing
            self._structured.index(params.structured_outputs)
        if self._transfer:  # a stored prompt made with other settings is refused
            self._transfer.num_loadable(ids, params, lora_id, strict=True)

    def _prepare(self, prompts, sampling_params, lora_request, priority=None) -> list[tuple]:
        """Normalize and validate every request before any is queued (all or nothing):
        (token ids, SamplingParams, lora_int_id, priority) each. `lora_request`: one
        LoRARequest for all, or one (or None) per prompt (its adapter is read now);
        `priority`: None, one int or one per prompt (scheduling_policy="priority")."""
        self._check_awake()
        prompts = inputs.split_prompts(prompts)
        sps = inputs.sampling_list(sampling_params, len(prompts), self._default_params)
        lora_ids = lora.lora_ids(self._lora, lora_request, len(prompts))
        ranks = inputs.priorities(priority, len(prompts), self._scheduler.policy)
        reqs = []
        for prompt, params, lora_id, rank in zip(prompts, sps, lora_ids, ranks, strict=True):
            ids = self.tokenize(prompt)
            if params.truncate_prompt_tokens is not None:
                ids = ids[-params.truncate_prompt_tokens :]
            if params.bad_words:
                words = inputs.bad_word_ids(self.tokenizer, params.bad_words)
                words += params.bad_words_token_ids or ()
                params = dataclasses.replace(params, bad_words_token_ids=words)
            self._validate(ids, params, lora_id)
            reqs.append((ids, params, lora_id, rank))
        return reqs

    def _id_in_use(self, request_id: str) -> bool:
        """An id is taken until its last delta is returned (or generate/stream returns it)."""
        return (
            request_id in self._outputs
            or request_id in self._groups
            or self._scheduler.has_request(request_id)
            or any(d.request_id == request_id for d in self._outbox)
        )

    def _enqueue_samples(
        self,
        ids: list[int],
        params: SamplingParams,
        request_id: str | None,
        announce: bool,
        lora_id: int = 0,
        priority: int = 0,
    ) -> list[Sequence]:
        """Queue a validated request as its SamplingParams.n samples (engine/samples.py);
        returns their sequences, sample 0 first."""
        seqs = []
        if params.n == 1:
            seqs.append(self._enqueue(ids, params, request_id, announce, None, lora_id, priority))
            return seqs
        while request_id is None:  # a free id whose sample ids are free too
            request_id = str(next(self._request_counter))
            if any(map(self._id_in_use, samples.sample_ids(request_id, params.n))):
                request_id = None
        self._groups.add(request_id, params.n)
        for k, rid in enumerate(samples.sample_ids(request_id, params.n)):
            fork_of = seqs[0] if seqs else None
            kth = samples.sample_params(params, k)
            seqs.append(self._enqueue(ids, kth, rid, announce, fork_of, lora_id, priority))
        return seqs

    def _enqueue(
        self,
        ids: list[int],
        params: SamplingParams,
        request_id: str | None,
        announce: bool = False,
        fork_of: Sequence | None = None,
        lora_id: int = 0,
        priority: int = 0,
    ) -> Sequence:
        """Queue a validated request (one sample). A request with max_tokens=0 finishes
        here; with `announce` (add_request) its finish delta is returned by the next step()
        and no record is kept, else (generate, stream) the caller collects its record."""
        n = next(self._request_counter)
        if request_id is None:
            while self._id_in_use(str(n)):  # an id a caller chose: skip it
                n = next(self._request_counter)
            request_id = str(n)
        if params.seed is None:
            # Unseeded requests still get a distinct, reproducible stream per engine seed.
            seed = (self._seed * 1_000_003 + n) % (2**32)
            params = dataclasses.replace(params, seed=seed)
        spec = self._scheduler.speculative is not None and eligible(params)
        seq = Sequence(request_id, tuple(ids), params, fork_of=fork_of, speculate=spec)
        seq.lora_id, seq.priority = lora_id, priority
        if self._transfer:
            seq.num_external_tokens = self._transfer.num_loadable(ids, params, lora_id)
            seq.prefill_stop = self._transfer.prefill_stop(ids)
        out = RequestOutput.new(request_id, ids, params)
        # Queued last: nothing that can fail stands between it and the record below, so a
        # caller that takes back what it queued (_collect) knows every queued request.
        self._scheduler.add(seq)
        if seq.is_finished:  # max_tokens == 0
            self._groups.done(request_id)
            out.finish_reason = seq.finish_reason
            if announce:
                self._outbox.append(StreamDelta(request_id, (), (), out.finish_reason))
                return seq
        self._outputs[request_id] = out
        return seq

    def add_request(
        self,
        prompt,
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        lora_request: lora.LoRARequest | None = None,
        priority: int = 0,
    ) -> str:
        """Queue one request; returns its id. Raises ValueError before queueing anything.

        Its increments come from step(), the last one with a finish_reason (a request with
        max_tokens=0 gets that at the next step()). An id is in use until then. With
        SamplingParams.n > 1 the deltas of sample k > 0 carry the id "<id>/<k>".
        """
        if request_id is not None and not isinstance(request_id, str):
            raise ValueError(f"request_id={request_id!r}: must be a string (or None)")
        ((ids, params, lora_id, rank),) = self._prepare(
            [prompt], sampling_params, lora_request, priority
        )
        taken = request_id and next(
            filter(self._id_in_use, samples.sample_ids(request_id, params.n)), None
        )
        if taken:
            raise ValueError(
                f"request_id={taken!r}: already in use (queued, running, or its last "
                "delta not yet returned by step())"
            )
        return self._enqueue_samples(ids, params, request_id, True, lora_id, rank)[0].request_id

    def abort(self, request_id: str) -> bool:
        """Stop a request now (finish_reason "abort"), every sample of it when it has n > 1
        ("<id>/<k>" stops just that one). The next step() frees its pages and returns its
        "abort" delta (with a step in flight, once that step is read back)."""
        return any([self._abort_one(rid) for rid in self._groups.members(request_id)])

    def _abort_one(self, request_id: str) -> bool:
        if not self._scheduler.abort(request_id):
            return False
        self._penalty_slots.release((request_id,))
        self._structured.release(request_id)
        out = self._outputs.get(request_id)
        if out is not None:
            out.finish_reason = "abort"
        return True

    def has_unfinished(self) -> bool:
        """True while step() has work to do or deltas to return (`while llm.has_unfinished():
        llm.step()` sees every request's last delta)."""
        return bool(self._outbox or self._dispatched) or self._scheduler.has_unfinished()

    # ---- the loop ----------------------------------------------------------------------

    def step(self) -> list[StreamDelta]:
        """Run one engine step; returns the token increments it produced.

        With async scheduling the step in flight (or a new one) gets the next step
        dispatched behind it before its tokens are read back; when that is not possible
        (Scheduler.schedule_ahead returns None) the steps run one after another.
        """
        start, waited = time.perf_counter(), self._wait_seconds
        deltas = self._advance()
        self._host_seconds += time.perf_counter() - start - (self._wait_seconds - waited)
        return deltas

    def _advance(self) -> list[StreamDelta]:
        """One step() call. If any part raises (a launch that fails, Ctrl-C while waiting
        for the device), the engine stays consistent: a step that was not launched is
        taken back (Scheduler.cancel), one launched stays to be read back by the next
        call, and deltas already produced wait in the outbox."""
        if not self._dispatched:
            sched = self._scheduler.schedule()
            self._penalty_slots.release(sched.preempted)  # they restart from position 0
            self._deliver_aborts(sched.finished_aborted)
            if sched.items:
                self._launch(sched)
        if self._dispatched:
            if self.async_scheduling and len(self._dispatched) == 1:
                nxt = self._scheduler.schedule_ahead()
                if nxt is not None:
                    self._launch(nxt)
                    self._num_dispatched_ahead += 1
            self._complete_oldest()
            if len(self._dispatched) == 1 and self._scheduler.in_flight_all_finished():
                # Nothing left to gain from it: read it back now so its pages come back.
                self._complete_oldest()
        if not self._dispatched:
            # Requests aborted while a step was in flight: free their pages now.
            self._deliver_aborts(self._scheduler.release_aborted())
        deltas, self._outbox = self._outbox, []
        return deltas

    def _deliver_aborts(self, request_ids) -> None:
        for rid in request_ids:
            self._groups.done(rid)
            if rid in self._unwatched:
                self._unwatched.discard(rid)
                continue
            self._outbox.append(StreamDelta(rid, (), (), "abort"))
            if rid not in self._collecting:
                self._outputs.pop(rid, None)

    def _launch(self, sched: SchedulerOutput) -> None:
        """Dispatch `sched` behind the steps in flight; if that fails, the scheduler takes
        the step back, so the engine can go on (the same work is scheduled again)."""
        prev_out = self._dispatched[-1].out if self._dispatched else None
        try:
            self._dispatched.append(self._dispatch(sched, prev_out))
        except StoreUnreadable:  # its prompts are computed in the next step instead
            self._scheduler.cancel(sched)
        except BaseException:
            self._scheduler.cancel(sched)
            raise

    def _dispatch(self, sched, prev_out) -> runner.Dispatched:
        """Pack and launch one step without waiting for it; `prev_out` is the step in
        flight whose sampled tokens feed this one's placeholders."""
        batch = runner.pack(
            sched.items, self.page_size, self._buckets, self._page_rows, self._window_rows
        )
        shape = (batch.token_ids.shape[0], batch.kv_lens.shape[0])
        score_rows = runner.fill_score_targets(sched.items, batch, self._prompt_of)
        min_rows, proposer = self._buckets.min_rows, self._scheduler.speculative
        drafts, batch = prepare_drafts(sched.items, batch, bool(score_rows), min_rows, proposer)
        batch = fill_batch(sched.items, batch, self.page_size) if self.config.mtp_drafts else batch
        with_top = any(it.sample and it.sampling_params.logprobs for it in sched.items)
        output_of = lambda it: self._outputs[it.request_id].token_ids  # whole: not ahead
        penalized = self._penalty_slots.fill(
            sched.items,
            batch.penalty_params,
            self._prompt_of,
            batch.penalty_slot,
            batch.penalty_prompt_len,
            output_of,
        )
        sticky = self._sticky  # (features an earlier step used stay on)
        eos = self.config.eos_token_ids
        lists = logit_bias.lists_for(sched.items, shape[1], eos, output_of, sticky.list_width)
        mask = self._structured.masks_for(sched.items, shape[1], output_of, sticky.masked)
        batch, params = lora.for_step(self._lora, sched.items, batch, self.params)
        # As sampler.sample's all-greedy test, on the same packed temperatures.
        sampling = bool(np.any(batch.temperature >= np.float32(GREEDY_TEMPERATURE)))
        sampling, with_top, penalized = sticky.apply(sampling, with_top, penalized, lists, mask)
        if mask is not None:
            batch = batch._replace(allowed_mask=mask)
        list_width = 0
        if lists is not None:
            batch = batch._replace(
                listed_ids=lists.ids, listed_values=lists.values, listed_restrict=lists.restrict
            )
            list_width = lists.ids.shape[1]
        # Drafts need each row's argmax alone: a top-1 step (top-20 costs more on a CPU).
        score_top = self._top_k if any(r[3] for r in score_rows) else 0
        variant = (bool(score_rows) or drafts[1] is not None, with_top, sampling, score_top)
        scored = None if drafts[1] is None else drafts[1].shape[0]
        key = (variant, penalized, list_width, mask is not None, scored, *shape)
        compiles = key not in self._variant_shapes
        step_fn = self._steps.get(variant)
        if self.mesh is not None:
            # Every process passes the same batch (see sharding/distributed.py).
            batch = put_replicated(batch, self.mesh)
        if prev_out is not None:  # a device array: the tokens never visit the host
            batch = batch._replace(prev_tokens=prev_out.feed_tokens)
        elif self.mesh is None:
            # An uncommitted device array, as a step's output (a host one compiles again).
            if self._no_prev_tokens is None:
                self._no_prev_tokens = jnp.zeros(self._buckets.feed_rows, jnp.int32)
            batch = batch._replace(prev_tokens=self._no_prev_tokens)
        if self._offload:  # pages to and from host memory, before the step writes or reads
            self._kv = self._offload.flush(self._kv)
        if self._transfer:  # admissions' stored KV, written before the step reads it
            self._kv = self._transfer.load(self._kv, sched.items, self._prompt_of)
        if self._state_copier:  # admissions' state snapshots, likewise
            self._kv = self._state_copier(self._kv, sched.items)
            if self._transfer:  # a prompt whose snapshot is its stop point: stored now
                self._transfer.save(self._kv, sched, self._prompt_of, before=True)
        start = time.perf_counter()
        if penalized:
            # Made on first use, rows seeded; donated: the step's output holds the only copy.
            self._penalty_state = self._penalty_slots.ready(
                self._penalty_state, self.config.vocab_size, self.mesh
            )
            self._kv, out = step_fn(params, self._kv, batch, self._penalty_state)
            self._penalty_state = out.penalty_state
        else:
            self._kv, out = step_fn(params, self._kv, batch)
        if self._transfer:  # the prompts it completes, gathered behind it
            self._transfer.save(self._kv, sched, self._prompt_of)
        self._step_shapes.add(shape)
        self._variant_shapes.add(key)
        return runner.Dispatched(
            sched, out, score_rows, compiles, start, with_top, score_top, drafts
        )

    def _complete_oldest(self) -> None:
        """Read back the oldest dispatched step's tokens and apply them (Scheduler.update);
        its deltas go to the outbox. If the readback raises, the step stays dispatched."""
        d = self._dispatched[0]
        sched, out, score_rows = d.sched, d.out, d.score_rows
        begin = time.perf_counter()
        got = runner.read_back(out, bool(score_rows or d.drafts[0]), d.score_top, d.with_top)
        tokens, logprobs, load, scores, score_ids, score_lps, top_ids, top_lps, *drawn = got
        self._dispatched.pop(0)
        if self.config.mtp_drafts:  # the drafts for the next step (engine/mtp.py)
            self._scheduler.speculative.record(sched.items, out)
        if self._transfer:
            self._transfer.written(sched)
        # Step times steer long prefills (not a compiling step's; one dispatched ahead
        # starts when the one before it ends).
        end = time.perf_counter()
        self._wait_seconds += end - begin
        seconds = None if d.compiles or score_rows else end - max(d.start, self._last_readback)
        self._last_readback = end
        runner.store_prompt_logprobs(score_rows, self._outputs, scores, score_ids, score_lps)
        self._expert_load = self._eplb.record(load) if self._eplb else np.asarray(load, np.int64)
        if self._expert_load_total.shape != self._expert_load.shape:
            self._expert_load_total = np.zeros_like(self._expert_load)
        self._expert_load_total += self._expert_load
        sampled = {
            it.request_id: (int(tokens[i]), float(logprobs[i]))
            for i, it in enumerate(sched.items)
            if it.sample
        }
        if d.drafts[0]:  # the drafts the model agrees with, then its own token
            keep_drafts(sched.items, d.drafts, sampled, scores, *drawn)
        self._num_steps += 1
        tops = runner.sampled_top_logprobs(sched.items, top_ids, top_lps) if d.with_top else {}
        results = self._scheduler.update(sched, sampled, seconds)
        # Before anything below can raise: a finished request's slot must not leak.
        self._penalty_slots.release(r.request_id for r in results if r.finished)
        for r in results:
            if r.finished:
                self._structured.release(r.request_id)
        for res in results:
            out_rec = self._outputs[res.request_id]
            out_rec.token_ids.extend(res.new_token_ids)
            out_rec.logprobs.extend(res.new_logprobs)
            top = None
            if res.new_token_ids and res.request_id in tops:
                top = (tops[res.request_id],)
                out_rec.top_logprobs.extend(list(t) for t in top)
            self._num_tokens_generated += len(res.new_token_ids)
            if res.finished:
                self._groups.done(res.request_id)
                out_rec.finish_reason = res.finish_reason
                out_rec.stop_reason = res.stop_reason
                out_rec.num_cached_tokens = res.num_cached_tokens
                params = next(
                    it.sampling_params for it in sched.items if it.request_id == res.request_id
                )
                detok = None if self.tokenizer is None else self._detokenize
                out_rec.text = final_text(detok, out_rec.token_ids, params, res.stop_reason)
                if res.request_id not in self._collecting:
                    del self._outputs[res.request_id]
            self._outbox.append(StreamDelta.of(res, top, out_rec))
        if self._eplb and self._eplb.due():
            self.rebalance_experts()

    def _prompt_of(self, item) -> list[int]:
        return self._outputs[item.request_id].prompt_token_ids

    beam_search = beam_search  # vLLM's LLM.beam_search(prompts, BeamSearchParams)

    def tokenize(self, prompt) -> list[int]:
        """One prompt's token ids as a request would have them (text through the model's
        tokenizer with its BOS rule, engine/inputs.py; ids checked to be integers)."""
        return inputs.tokenize(prompt, self.tokenizer, self.prompt_bos_id)

    def get_default_sampling_params(self) -> SamplingParams:
        """What a request without SamplingParams gets (`generation_config`)."""
        return self._default_params

    def score(self, prompts) -> list[np.ndarray]:
        """Log-probability of each prompt token given its prefix: for a prompt of n tokens,
        an array of n - 1 values log p(prompt[i] | prompt[:i]), i = 1..n-1 (perplexity)."""
        params = SamplingParams(max_tokens=1, ignore_eos=True, prompt_logprobs=True)
        outs = self.generate(prompts, params)
        return [np.asarray(o.prompt_logprobs, np.float32) for o in outs]

    def _detokenize(self, ids: list[int], skip_special_tokens: bool = True) -> str | None:
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def stream(
        self, prompts, sampling_params=None, lora_request=None, priority=None
    ) -> Iterator[list[StreamDelta]]:
        """Queue `prompts` and yield each step's increments until they all finish. A
        request with max_tokens=0 gets its finish delta in the first yield. Each yield
        holds all of the step's deltas (requests added by hand included); with
        SamplingParams.n > 1, sample k > 0's deltas carry the id "<id>/<k>". Closing the
        generator early aborts the requests it has not finished; no later step() returns
        their "abort" deltas (no one is left to read them)."""
        records, _ = self._collect(self._prepare(prompts, sampling_params, lora_request, priority))
        try:
            done = [
                StreamDelta(r.request_id, (), (), r.finish_reason) for r in records if r.finished
            ]
            if done:
                yield done
            # Ends on the records, not on finish deltas: a generate() or step() may take them.
            while any(not r.finished for r in records):
                deltas = self.step()
                if deltas:
                    yield deltas
        finally:
            self._release(records)

    def generate(
        self, prompts, sampling_params=None, lora_request=None, priority=None
    ) -> list[RequestOutput]:
        """Generate for every prompt: one prompt or a list of them (engine/inputs.py: a string,
        token ids, or a {"prompt": ...} / {"prompt_token_ids": ...} dict). One record per
        prompt; with SamplingParams.n > 1 it is sample 0's and its `samples` lists all n. If
        it raises (or is interrupted), its unfinished requests are aborted."""
        reqs = self._prepare(prompts, sampling_params, lora_request, priority)
        records, firsts = self._collect(reqs)
        try:
            while any(not r.finished for r in records):
                self.step()
        finally:
            self._release(records)
        return firsts

    def chat(
        self,
        messages,
        sampling_params=None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        chat_template_kwargs: dict | None = None,
        continue_final_message: bool = False,
        lora_request=None,
        priority=None,
    ) -> list[RequestOutput]:
        """vLLM's LLM.chat: generate for one conversation ([{"role": ..., "content": ...}])
        or a list of them, each rendered by `chat_template` or the model's into prompt token
        ids as transformers renders it (engine/chat.py); then as generate()."""
        template = self.chat_template if chat_template is None else chat_template
        prompts = chat.prompt_ids(
            self.tokenizer,
            template,
            messages,
            self.special_tokens,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            continue_final_message=continue_final_message,
            **(chat_template_kwargs or {}),
        )
        return self.generate(prompts, sampling_params, lora_request, priority)

    def _collect(self, reqs) -> list[RequestOutput]:
        """Queue validated requests (_prepare) whose records the caller keeps (generate,
        stream); all or none (an error part-way takes back the ones already queued)."""
        records, firsts = [], []  # every sample's record; each request's sample 0
        try:
            for ids, params, lora_id, rank in reqs:
                for seq in self._enqueue_samples(ids, params, None, False, lora_id, rank):
                    self._collecting.add(seq.request_id)
                    records.append(self._outputs[seq.request_id])
                firsts.append(records[-params.n])
                if params.n > 1:
                    samples.link_records(records[-params.n :])
        except BaseException:
            self._release(records)
            # Nothing of theirs ran: free them now, not at the next step().
            self._deliver_aborts(self._scheduler.release_aborted())
            raise
        return records, firsts

    def _release(self, records: list[RequestOutput]) -> None:
        """Drop the records of a generate/stream call; abort what it leaves unfinished."""
        for r in records:
            self._collecting.discard(r.request_id)
            if not r.finished and self._abort_one(r.request_id):
                self._unwatched.add(r.request_id)
            if self._outputs.get(r.request_id) is r:
                del self._outputs[r.request_id]
