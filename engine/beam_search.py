"""Beam search over the engine (vLLM's LLM.beam_search and BeamSearchParams).

Each step runs every live beam of every prompt as one request of one token, asking for
its 2W most likely next tokens (SamplingParams.logprobs, under the unscaled distribution);
each candidate extends its beam by one token, and each prompt keeps its W best candidates
by score. A candidate that ends with an EOS token (unless ignore_eos) leaves the search as
a finished sequence; the others are the next step's beams. After max_tokens steps (or once
no beam is live, or at max_model_len) the finished and live sequences are ranked together
and the W best returned, best first. vLLM's rules: the score is the summed log-probability
over len ** length_penalty, len counting the prompt (and not a final EOS).

Steps are ordinary requests, so with `LLM(enable_prefix_caching=True)` a beam takes its
pages from the cache and computes only its newest token; without it every step computes
every beam whole. Checked against transformers' beam search (tests/fixtures/
make_beam_search_fixture.py): with the EOS off both keep the W best continuations of every
step, whatever their rules for finished beams.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from engine import inputs
from engine.sampling_params import MAX_LOGPROBS, SamplingParams


@dataclasses.dataclass(frozen=True)
class BeamSearchParams:
    """vLLM's: W beams, up to max_tokens new tokens each."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    length_penalty: float = 1.0

    def __post_init__(self):
        for name, high in (("beam_width", MAX_LOGPROBS // 2), ("max_tokens", 1 << 20)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an int in [1, {high}]")
        lp = self.length_penalty
        if not isinstance(lp, int | float) or isinstance(lp, bool) or not math.isfinite(lp):
            raise ValueError(f"length_penalty={lp!r}: must be a finite number")


@dataclasses.dataclass
class BeamSearchSequence:
    """One beam: the prompt and its new tokens, their logprobs and their sum."""

    tokens: list[int]  # prompt + generated
    logprobs: list[float]  # of each generated token
    cum_logprob: float = 0.0
    finish_reason: str | None = None  # "stop" (an EOS) | "length"
    text: str | None = None  # the generated tokens decoded (with a tokenizer)


@dataclasses.dataclass
class BeamSearchOutput:
    """A prompt's best sequences, best first."""

    sequences: list[BeamSearchSequence]


def score(seq: BeamSearchSequence, eos: frozenset[int], length_penalty: float) -> float:
    """vLLM's beam score: cum_logprob / len ** length_penalty (len: prompt and generated
    tokens, less a final EOS)."""
    n = len(seq.tokens) - (seq.tokens[-1] in eos)
    return seq.cum_logprob / n**length_penalty


# (token lists, SamplingParams of one token and 2W logprobs) -> each list's [(token id,
# logprob)] of its next token, most likely first: one round of requests to the engine.
RunStep = Callable[[list[list[int]], SamplingParams], list[list[tuple[int, float]]]]


def search(
    starts: list[list[int]], params: BeamSearchParams, eos, max_model_len: int, run: RunStep
) -> list[list[BeamSearchSequence]]:
    """Each prompt's best sequences, best first (their `text` unset); `eos`: the model's
    EOS ids (ignored with ignore_eos); `run`: how a round of requests reaches the engine
    (LLM.generate offline, the engine loop in the server)."""
    width = params.beam_width
    eos = frozenset(() if params.ignore_eos else eos)
    key = lambda s: score(s, eos, params.length_penalty)  # noqa: E731
    step = SamplingParams(temperature=0.0, max_tokens=1, logprobs=2 * width, detokenize=False)
    live = [[BeamSearchSequence(list(ids), [])] for ids in starts]
    done: list[list[BeamSearchSequence]] = [[] for _ in starts]
    for _ in range(params.max_tokens):
        beams = [b for group in live for b in group if len(b.tokens) < max_model_len]
        if not beams:
            break
        tops = iter(run([b.tokens for b in beams], step))
        for i, group in enumerate(live):
            grown = []
            for beam in group:
                if len(beam.tokens) >= max_model_len:
                    done[i].append(dataclasses.replace(beam, finish_reason="length"))
                    continue
                for token, logprob in next(tops):
                    cand = BeamSearchSequence(
                        beam.tokens + [token],
                        beam.logprobs + [logprob],
                        beam.cum_logprob + logprob,
                    )
                    if token in eos:
                        cand.finish_reason = "stop"
                        done[i].append(cand)
                    else:
                        grown.append(cand)
            live[i] = sorted(grown, key=key, reverse=True)[:width]
    for group in live:
        for beam in group:
            beam.finish_reason = beam.finish_reason or "length"
    return [sorted(d + g, key=key, reverse=True)[:width] for d, g in zip(done, live, strict=True)]


def beam_search(llm, prompts, params: BeamSearchParams) -> list[BeamSearchOutput]:
    """The beam search of every prompt (one or a list, as generate takes them)."""
    if not isinstance(params, BeamSearchParams):
        raise ValueError(f"params={params!r}: expected a BeamSearchParams")
    starts = [llm.tokenize(p) for p in inputs.split_prompts(prompts)]

    def run(token_lists, step):
        return [out.top_logprobs[0] for out in llm.generate(token_lists, step)]

    best = search(starts, params, llm.config.eos_token_ids, llm.max_model_len, run)
    for start, seqs in zip(starts, best, strict=True):
        for seq in seqs:
            new = seq.tokens[len(start) :]
            seq.text = None if llm.tokenizer is None else llm.tokenizer.decode(new)
    return [BeamSearchOutput(seqs) for seqs in best]
