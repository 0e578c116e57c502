"""Speculative decoding with a smaller draft model of the same vocabulary.

vLLM's `speculative_config={"model": "path-or-preset", "num_speculative_tokens": k}` (or
"method": "draft_model"): before a step that feeds drafts is built, the draft model
greedily decodes k tokens after each speculating decode's tokens, in one batch, and those
are its drafts (engine/speculative.py feeds them and keeps those the target model agrees
with, so the tokens are those decoding without drafts, greedy or sampled).

The draft model runs in an engine of its own (`DraftModelProposer.start`, built once the
target's pool is, from the memory left; checked before the target's weights are read): its
own weights, pages and prefix cache. Each step it is asked for a sequence's drafts it
takes the pages of the sequence's longest cached prefix (its own from the step before: the
tokens since then are the target's kept ones) and computes the rest, at most a page and
the tokens kept since, then decodes k tokens; its max_model_len is the target's plus k (at
most its own: a longer sequence gets no drafts), and its pool holds every sequence's
context. Steps with drafts are built synchronously (the drafts follow the tokens the step
before kept). Beside a target on a mesh the draft engine runs on the default device,
unsharded; not across processes (each would draft on its own, and every process must
schedule alike). Each step reads every speculating sequence's whole context (a list for
the draft engine, and its prefix-cache lookup): O(context) host work a step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

METHOD = "draft_model"
_KEYS = {"method", "model", "num_speculative_tokens", "quantization"}


@dataclasses.dataclass
class DraftModelProposer:
    """A draft model's greedy continuations as drafts (engine/speculative.add_drafts)."""

    num_speculative_tokens: int
    model: str
    quantization: str | None = None  # the draft's weights on load (LLM's quantization)
    _llm: Any = dataclasses.field(default=None, init=False, repr=False)
    _config: Any = dataclasses.field(default=None, init=False, repr=False)
    # request id -> (the token count the drafts follow, drafts)
    _drafts: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    num_draft_steps: int = dataclasses.field(default=0, init=False)  # the draft engine's

    def __post_init__(self):
        from engine.speculative import MAX_DRAFTS  # (engine/speculative.py imports this one)

        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFTS:
            raise ValueError(
                f"speculative_config.num_speculative_tokens={k!r}: must be in [1, {MAX_DRAFTS}]"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(
                f"speculative_config.model={self.model!r}: expected a preset name or a "
                "directory path"
            )

    @classmethod
    def from_config(cls, config: dict) -> DraftModelProposer:
        """vLLM's {"model": ..., "num_speculative_tokens": k} ("method": "draft_model"; and
        "quantization": the draft's, e.g. the target itself in int4)."""
        unknown = sorted(set(config) - _KEYS)
        if unknown:
            raise ValueError(
                f"speculative_config: unknown keys {unknown} for method {METHOD!r}; "
                f"known: {sorted(_KEYS)}"
            )
        for key in ("model", "num_speculative_tokens"):
            if key not in config:
                raise ValueError(f"speculative_config.{key}: missing")
        return cls(config["num_speculative_tokens"], config["model"], config.get("quantization"))

    def check(self, target, mesh: str) -> None:
        """Before the target's weights are read: ValueError naming the field (a mesh over
        several processes, another vocabulary than the target's, `target` its
        ModelConfig), FileNotFoundError for a draft model that is not there."""
        from models.load import model_config

        if mesh and jax.process_count() > 1:
            raise ValueError(
                f"speculative_config.model: not on a mesh of {jax.process_count()} processes "
                f"yet (mesh={mesh!r}; every process would have to draft alike)"
            )
        self._config = model_config(self.model, None, self.quantization)
        if self._config.vocab_size != target.vocab_size:
            raise ValueError(
                f"speculative_config.model={self.model!r}: vocab_size="
                f"{self._config.vocab_size}, the target's is {target.vocab_size} (drafts are "
                "the target's token ids)"
            )

    def start(
        self,
        max_model_len: int,
        page_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        batch_invariant: bool,
        attention_impl: str,
    ) -> None:
        """Build the draft engine (after `check`) for a target engine with these settings,
        serving up to `max_model_len` tokens. Built after the target's pools, its own is
        sized from the memory they left (at most every sequence's context, as any
        engine's)."""
        from engine.llm import LLM  # (engine/llm.py imports this module's users)

        # (A sequence longer than the draft model takes, less k, gets no drafts.)
        k, limit = self.num_speculative_tokens, self._config.max_position_embeddings
        self._llm = LLM(
            self.model,
            max_model_len=min(max_model_len + k, limit),
            page_size=page_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            batch_invariant=batch_invariant,
            attention_impl=attention_impl,
            enable_prefix_caching=True,
            quantization=self.quantization,
        )

    def prepare(self, seqs) -> None:
        """Draft for `seqs` (engine/sequence.py Sequences decoding in the step being built):
        k greedy tokens each after its tokens, in one batch of the draft engine."""
        from engine.sampling_params import SamplingParams

        self._drafts = {}
        room = self._llm.max_model_len - self.num_speculative_tokens
        seqs = [seq for seq in seqs if seq.num_tokens <= room]
        if not seqs:
            return
        params = SamplingParams(
            temperature=0.0, max_tokens=self.num_speculative_tokens, ignore_eos=True
        )
        before = self._llm._num_steps  # (not stats(): every step, its whole dict twice)
        outs = self._llm.generate([list(seq.all_token_ids) for seq in seqs], params)
        self.num_draft_steps += self._llm._num_steps - before
        for seq, out in zip(seqs, outs, strict=True):
            self._drafts[seq.request_id] = (seq.num_tokens, tuple(out.token_ids))

    def drafts(self, seq, cap: int) -> tuple[int, ...]:
        """`seq`'s drafts from `prepare`, if they follow its tokens now (at most `cap`)."""
        got = self._drafts.get(seq.request_id)
        if got is None or got[0] != seq.num_tokens:
            return ()
        return got[1][:cap]

    def sleep(self) -> None:
        """The draft engine's device memory freed, its weights kept on the host (the
        target's LLM.sleep)."""
        self._llm.sleep(1)

    def wake_up(self) -> None:
        self._llm.wake_up()

    def stats(self) -> dict[str, int]:
        return {"num_draft_model_steps": self.num_draft_steps}
