"""The public engine: `LLM(...)`, `generate`, streaming, `abort`, `stats`."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from collections.abc import Sequence as Seq

import jax
import numpy as np

from engine import runner
from engine.attention_ops import resolve_impl
from engine.kv_pages import PageManager, pages_for_budget, pages_for_tokens
from engine.sampling_params import RequestOutput, SamplingParams, StreamDelta
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.step import init_kv_pages, make_step
from models.load import load_model

# KV memory when num_pages is not given: a fraction of the accelerator's free memory, or a
# fixed budget on CPU (host RAM is shared with everything else).
_CPU_KV_BUDGET = 512 << 20
_ACCEL_KV_FRACTION = 0.8
# KV positions reduced together by the attention's online softmax (see paged_attention).
_KV_BLOCK_TOKENS = 32


def _default_backend_kv_budget() -> int:
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return _CPU_KV_BUDGET
    mem = dev.memory_stats() or {}
    free = mem.get("bytes_limit", 0) - mem.get("bytes_in_use", 0)
    return int(free * _ACCEL_KV_FRACTION) if free > 0 else _CPU_KV_BUDGET


class LLM:
    """Offline and streaming generation over a paged KV cache with continuous batching.

    Args (DESIGN.md "Public API"): `model` is a preset name, a Hugging Face directory or an
    orbax directory; `num_pages=None` sizes the pool from a memory budget (never more than
    max_num_seqs full-length sequences need); `max_num_seqs` is clamped to
    `max_num_batched_tokens` because every running sequence must decode each step.
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
    ):
        for name, value in (
            ("page_size", page_size),
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an integer >= 1")
        if num_pages is not None and (not isinstance(num_pages, int) or num_pages < 1):
            raise ValueError(f"num_pages={num_pages!r}: must be an integer >= 1")
        self.attention_impl = resolve_impl(attention_impl)
        if mesh:
            raise ValueError(f"mesh={mesh!r}: sharded meshes are not supported yet; use ''")
        if batch_invariant:
            raise ValueError("batch_invariant=True: not supported yet")

        self.config, self.params, tokenizer_path = load_model(model, dtype=dtype, seed=seed)
        cfg = self.config
        if max_model_len is None:
            max_model_len = cfg.max_position_embeddings
        if not isinstance(max_model_len, int) or not 1 <= max_model_len <= (
            cfg.max_position_embeddings
        ):
            raise ValueError(
                f"max_model_len={max_model_len!r}: must be in [1, max_position_embeddings="
                f"{cfg.max_position_embeddings}]"
            )
        self.max_model_len = max_model_len
        self.page_size = page_size
        max_num_seqs = min(max_num_seqs, max_num_batched_tokens)
        pages_per_seq = pages_for_tokens(max_model_len, page_size)
        if num_pages is None:
            num_pages = min(
                pages_for_budget(_default_backend_kv_budget(), cfg.kv_bytes_per_token(), page_size),
                max_num_seqs * pages_per_seq,
            )
        self.num_pages = num_pages
        self.tokenizer = None
        if tokenizer_path is not None:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(os.fspath(tokenizer_path))

        self._pages = PageManager(num_pages, page_size)
        self._scheduler = Scheduler(
            self._pages,
            max_num_batched_tokens,
            max_num_seqs,
            max_model_len,
            eos_token_ids=cfg.eos_token_ids,
        )
        self._buckets = runner.Buckets(max_num_batched_tokens, max_num_seqs, pages_per_seq)
        self._kv = init_kv_pages(cfg, num_pages, page_size)
        kv_block_pages = max(1, _KV_BLOCK_TOKENS // page_size)
        self._step = make_step(cfg, kv_block_pages, self.attention_impl)
        self._seed = seed
        self._request_counter = itertools.count()
        self._outputs: dict[str, RequestOutput] = {}  # unfinished, and finished for generate
        self._collecting: set[str] = set()  # ids whose finished record generate() returns
        self._num_steps = 0
        self._step_shapes: set[tuple[int, int]] = set()  # (T, S) buckets this engine ran
        self._num_tokens_generated = 0

    # ---- requests ----------------------------------------------------------------------

    def _tokenize(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    "prompt: a string prompt needs a tokenizer.json in the model directory; "
                    "pass token ids instead"
                )
            ids = self.tokenizer.encode(prompt).ids
            if self.config.bos_token_id is not None and (
                not ids or ids[0] != self.config.bos_token_id
            ):
                ids = [self.config.bos_token_id, *ids]
            return ids
        try:
            ids = [int(t) for t in prompt]
        except (TypeError, ValueError):
            raise ValueError(
                f"prompt: expected a string or a list of token ids, got {type(prompt).__name__}"
            ) from None
        if any(not isinstance(t, int | np.integer) for t in prompt):
            raise ValueError("prompt: token ids must be integers")
        return ids

    def _validate(self, ids: list[int], params: SamplingParams) -> None:
        if not isinstance(params, SamplingParams):
            raise ValueError(
                f"sampling_params: expected SamplingParams, got {type(params).__name__}"
            )
        if not ids:
            raise ValueError("prompt: must not be empty")
        vocab = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if len(ids) > self.max_model_len:
            raise ValueError(
                f"prompt: length {len(ids)} exceeds max_model_len={self.max_model_len}"
            )
        self._scheduler.check_fits(len(ids), params.max_tokens)

    def _prepare(self, prompts, sampling_params) -> list[tuple[list[int], SamplingParams]]:
        """Normalize and validate every request before any is queued (all or nothing)."""
        if isinstance(prompts, str) or (
            isinstance(prompts, Seq) and prompts and isinstance(prompts[0], int | np.integer)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        if not prompts:
            raise ValueError("prompts: must contain at least one prompt")
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        sampling_params = list(sampling_params)
        if len(sampling_params) != len(prompts):
            raise ValueError(
                f"sampling_params: {len(sampling_params)} given for {len(prompts)} prompts"
            )
        reqs = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            ids = self._tokenize(prompt)
            self._validate(ids, params)
            reqs.append((ids, params))
        return reqs

    def _enqueue(self, ids: list[int], params: SamplingParams, request_id: str | None) -> str:
        n = next(self._request_counter)
        request_id = str(n) if request_id is None else request_id
        if params.seed is None:
            # Unseeded requests still get a distinct, reproducible stream per engine seed.
            seed = (self._seed * 1_000_003 + n) % (2**32)
            params = SamplingParams(**{**params.__dict__, "seed": seed})
        seq = Sequence(request_id, tuple(ids), params)
        self._scheduler.add(seq)
        out = RequestOutput(request_id, list(ids))
        self._outputs[request_id] = out
        if seq.is_finished:  # max_tokens == 0
            out.finish_reason = seq.finish_reason
        return request_id

    def add_request(
        self, prompt, sampling_params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        """Queue one request; returns its id. Raises ValueError before queueing anything."""
        if (
            request_id is not None
            and request_id in self._outputs
            and not (self._outputs[request_id].finished)
        ):
            raise ValueError(f"request_id={request_id!r}: already in use")
        ((ids, params),) = self._prepare([prompt], sampling_params)
        return self._enqueue(ids, params, request_id)

    def abort(self, request_id: str) -> bool:
        """Stop a request now (finish_reason "abort"); its pages are freed at the next step."""
        if not self._scheduler.abort(request_id):
            return False
        out = self._outputs.get(request_id)
        if out is not None:
            out.finish_reason = "abort"
        return True

    def has_unfinished(self) -> bool:
        return self._scheduler.has_unfinished()

    # ---- the loop ----------------------------------------------------------------------

    def step(self) -> list[StreamDelta]:
        """Run one engine step; returns the token increments it produced."""
        sched = self._scheduler.schedule()
        deltas = [StreamDelta(rid, (), (), "abort") for rid in sched.finished_aborted]
        for rid in sched.finished_aborted:
            if rid not in self._collecting:
                self._outputs.pop(rid, None)
        if not sched.items:
            return deltas
        batch = runner.pack(sched.items, self.page_size, self._buckets)
        self._step_shapes.add((batch.token_ids.shape[0], batch.kv_lens.shape[0]))
        self._kv, out = self._step(self.params, self._kv, batch)
        tokens, logprobs = jax.device_get((out.tokens, out.logprobs))
        sampled = {
            it.request_id: (int(tokens[i]), float(logprobs[i]))
            for i, it in enumerate(sched.items)
            if it.sample
        }
        self._num_steps += 1
        for res in self._scheduler.update(sched, sampled):
            out_rec = self._outputs[res.request_id]
            out_rec.token_ids.extend(res.new_token_ids)
            out_rec.logprobs.extend(res.new_logprobs)
            self._num_tokens_generated += len(res.new_token_ids)
            if res.finished:
                out_rec.finish_reason = res.finish_reason
                out_rec.text = self._detokenize(out_rec.token_ids)
                if res.request_id not in self._collecting:
                    del self._outputs[res.request_id]
            deltas.append(
                StreamDelta(res.request_id, res.new_token_ids, res.new_logprobs, res.finish_reason)
            )
        return deltas

    def _detokenize(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)

    def stream(self, prompts, sampling_params=None) -> Iterator[list[StreamDelta]]:
        """Queue `prompts` and yield each step's increments until they all finish."""
        ids = [self._enqueue(i, p, None) for i, p in self._prepare(prompts, sampling_params)]
        pending = set()
        for rid in ids:
            if self._outputs[rid].finished:  # max_tokens == 0: done before any step
                del self._outputs[rid]
            else:
                pending.add(rid)
        while pending:
            deltas = self.step()
            pending -= {d.request_id for d in deltas if d.finish_reason is not None}
            if deltas:
                yield deltas

    def generate(self, prompts, sampling_params=None) -> list[RequestOutput]:
        """Generate for every prompt (a string, a token-id list, or a list of those)."""
        reqs = self._prepare(prompts, sampling_params)
        ids = [self._enqueue(i, p, None) for i, p in reqs]
        self._collecting.update(ids)
        try:
            while any(not self._outputs[rid].finished for rid in ids):
                self.step()
        finally:
            self._collecting.difference_update(ids)
        return [self._outputs.pop(rid) for rid in ids]

    def stats(self) -> dict:
        s = self._scheduler.stats()
        s.update(
            # Compilations of this model's step in this process (engines serving the same
            # model config share them), against the buckets this engine can ever use.
            num_compiles=self._step._cache_size(),
            num_buckets=len(self._buckets.pairs),
            num_step_shapes=len(self._step_shapes),
            num_steps=self._num_steps,
            num_tokens_generated=self._num_tokens_generated,
            page_size=self.page_size,
            max_model_len=self.max_model_len,
        )
        return s
