"""The engine as the harness's `generate_fn` / `score_fn`: every engine feature applies."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine import SamplingParams
from long_context.evals.tasks import RetrievalTask, TextTask, TokenizerCodec, TokenTask


class LLMAdapter:
    """Greedy generation and prompt scoring through one `engine.LLM`."""

    def __init__(self, llm):
        self.llm = llm
        cfg = llm.config
        # Text prompts start as the engine starts them (the tokenizer's rule, not the config's
        # bos_token_id, which e.g. Qwen never adds); token-space prompts with the config's.
        self.codec = None if llm.tokenizer is None else TokenizerCodec(llm.tokenizer)
        self.bos_token_id = cfg.bos_token_id if self.codec is None else llm.prompt_bos_id
        # Never used as filler / answers in token space: ids with a meaning of their own.
        bos = () if cfg.bos_token_id is None else (cfg.bos_token_id,)
        self.reserved_ids = tuple(sorted({0, *bos, *cfg.eos_token_ids}))

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outs = self.llm.generate([[int(t) for t in p] for p in prompts], params)
        return [list(o.token_ids) for o in outs]

    def score(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """log p(prompt[i] | prompt[:i]) for i >= 1, via `LLM.score`."""
        score = getattr(self.llm, "score", None)
        if score is None:
            raise NotImplementedError(
                "perplexity needs LLM.score(prompts) -> per-token prompt logprobs, which this "
                "engine does not provide yet"
            )
        return [np.asarray(s) for s in score([[int(t) for t in p] for p in prompts])]

    def retrieval_task(
        self, name: str, mode: str = "auto", haystack_text: str | None = None, seed: int = 0
    ) -> RetrievalTask:
        """`name` in words when the model has a tokenizer (mode "auto" or "text"), else in ids."""
        if mode not in ("auto", "text", "tokens"):
            raise ValueError(f"mode={mode!r}: expected auto, text or tokens")
        if mode == "text" and self.codec is None:
            raise ValueError("mode='text': the model has no tokenizer.json; use mode='tokens'")
        if self.codec is not None and mode != "tokens":
            return TextTask(name, self.codec, self.bos_token_id, haystack_text)
        vocab = self.llm.config.vocab_size
        return TokenTask(name, vocab, self.reserved_ids, seed, self.bos_token_id)
