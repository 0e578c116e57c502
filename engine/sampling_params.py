"""Per-request sampling settings and the finished-request record (the public API types)."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.structured import StructuredOutputsParams

MAX_LOGPROBS = 20  # top logprobs per token at most (vLLM's default max_logprobs)
MAX_STOP_CHARS = 1024  # per stop string; the stop check decodes ~4 tokens per character
MAX_PENALTY = 2.0  # presence/frequency penalties' range, +-, as the OpenAI API's
# HF and vLLM only ask for > 0; a bound each way keeps logit / r and logit * r finite (at
# r = 1e-38 a positive logit overflowed to inf and the row sampled garbage).
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 0.01, 100.0
TOP_K_MAX = 2**31 - 1  # the step carries top_k as int32; any k >= the vocabulary keeps all
MAX_LOGIT_BIAS = 100.0  # the OpenAI API's bias range, +-
# logit_bias, allowed_token_ids and stop_token_ids each list at most this many tokens: each
# step uploads the lists of its requests that use them (engine/logit_bias.py).
MAX_LISTED_TOKENS = 2048
MAX_SAMPLES = 128  # SamplingParams.n at most (the OpenAI API's bound)
MAX_BAD_WORDS = 256  # bad_words (and bad_words_token_ids) per request


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples and when it stops. Checked at construction."""

    temperature: float = 0.0  # 0 = greedy (so is anything below 1e-5, sampler.GREEDY_TEMPERATURE)
    max_tokens: int = 16  # new tokens at most; 0 returns no tokens
    seed: int | None = None  # per-request RNG seed; None = derived from the engine seed
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    stop_token_ids: tuple[int, ...] = ()  # stop (inclusive) on any of these
    ignore_eos: bool = False  # keep going past the model's EOS tokens
    # Also report log p(prompt[i] | prompt[:i]) for i >= 1 (True); an integer k (vLLM's
    # form) also the k most likely tokens at each of those positions (0 = True: none).
    prompt_logprobs: bool | int = False
    # Stop once the output text contains one of these (needs the model's tokenizer); the
    # finished text ends before it, or after it with include_stop_str_in_output.
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    # Also report, per generated token, the `logprobs` most likely tokens and their logprobs
    # (unscaled distribution, as `RequestOutput.logprobs`); None or 0 = off.
    logprobs: int | None = None
    min_p: float = 0.0  # keep tokens at least min_p times as likely as the top one; 0 = off
    # Penalties on the logits before sampling (greedy included), as vLLM and the OpenAI API:
    # a token already in the output loses presence_penalty once and frequency_penalty per
    # occurrence; a token in the prompt or the output has its logit divided by
    # repetition_penalty when positive, multiplied when negative (Keskar et al. 2019, HF's
    # RepetitionPenaltyLogitsProcessor). 0, 0 and 1 are off. engine/penalties.py.
    presence_penalty: float = 0.0  # in [-2, 2]
    frequency_penalty: float = 0.0  # in [-2, 2]
    repetition_penalty: float = 1.0  # > 0; > 1 discourages repeats, < 1 encourages them
    # Until min_tokens tokens are out, the model's EOS tokens (unless ignore_eos) and
    # stop_token_ids cannot be sampled and no stop string ends the request (vLLM's rule).
    min_tokens: int = 0
    # Added to the logits of these token ids before sampling (greedy included), as the
    # OpenAI API's logit_bias: {token id: bias in [-100, 100]}; -100 all but bans a token.
    # Stored as ((id, bias), ...) sorted by id. None = off.
    logit_bias: tuple[tuple[int, float], ...] | None = None
    # Sample only among these token ids (vLLM's allowed_token_ids); None = the vocabulary.
    allowed_token_ids: tuple[int, ...] | None = None
    # Keep only the prompt's last k tokens (vLLM's truncate_prompt_tokens: a long document
    # cut from the left to fit max_model_len; a text prompt is cut after tokenizing, so its
    # BOS goes too). The request's prompt_token_ids and prompt_logprobs are the kept tokens'.
    # None = the whole prompt.
    truncate_prompt_tokens: int | None = None
    # Samples to draw for the prompt (vLLM's n): sample k > 0 is queued as "<id>/<k>" with
    # seed + k (when seeded) and shares the prompt's pages with sample 0 (engine/samples.py);
    # generate's record for the prompt is sample 0 and lists all n in `samples`.
    n: int = 1
    # Words the output must not contain (vLLM's bad_words): a word's last token is banned
    # whenever the output so far ends with its other tokens (a one-token word: always).
    # The engine tokenizes each word, with and without a leading space, into
    # bad_words_token_ids, which may also be given as token id sequences. Multi-token words
    # read the output before each token, so their steps are not scheduled ahead.
    bad_words: tuple[str, ...] = ()
    bad_words_token_ids: tuple[tuple[int, ...], ...] | None = None
    # The output must match a regex, be one of some strings, or be JSON a schema accepts
    # (vLLM's structured outputs; engine/structured.py). Its steps are not scheduled ahead.
    structured_outputs: StructuredOutputsParams | None = None
    # RequestOutput.text (vLLM's): with the tokenizer's special tokens too (stop strings
    # then match them), or not made at all (detokenize=False: text None, no stop strings).
    skip_special_tokens: bool = True
    detokenize: bool = True

    def __post_init__(self):
        # numpy scalars are taken (and stored as Python numbers); bools are not numbers here.
        set_ = functools.partial(object.__setattr__, self)
        t = self.temperature
        if not _is_number(t) or math.isnan(t) or t < 0 or math.isinf(t):
            raise ValueError(f"temperature={t!r}: must be a finite number >= 0")
        set_("temperature", float(t))
        if not _is_int(self.max_tokens) or self.max_tokens < 0:
            raise ValueError(f"max_tokens={self.max_tokens!r}: must be an integer >= 0")
        set_("max_tokens", int(self.max_tokens))
        p = self.top_p
        if not _is_number(p) or math.isnan(p) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p={p!r}: must be in (0, 1]")
        set_("top_p", float(p))
        if not _is_int(self.top_k) or not 0 <= self.top_k <= TOP_K_MAX:
            raise ValueError(
                f"top_k={self.top_k!r}: must be an integer in [0, {TOP_K_MAX}] (0 = off)"
            )
        set_("top_k", int(self.top_k))
        m = self.min_p
        if not _is_number(m) or math.isnan(m) or not 0.0 <= m <= 1.0:
            raise ValueError(f"min_p={m!r}: must be in [0, 1] (0 = off)")
        set_("min_p", float(m))
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not _is_number(v) or math.isnan(v) or not -MAX_PENALTY <= v <= MAX_PENALTY:
                raise ValueError(
                    f"{name}={v!r}: must be in [-{MAX_PENALTY}, {MAX_PENALTY}] (0 = off)"
                )
            set_(name, float(v))
        r = self.repetition_penalty
        if (
            not _is_number(r)
            or math.isnan(r)
            or not MIN_REPETITION_PENALTY <= r <= MAX_REPETITION_PENALTY
        ):
            raise ValueError(
                f"repetition_penalty={r!r}: must be in [{MIN_REPETITION_PENALTY}, "
                f"{MAX_REPETITION_PENALTY}] (1 = off)"
            )
        set_("repetition_penalty", float(r))
        if self.seed is not None:
            if not _is_int(self.seed) or not 0 <= self.seed < 2**32:
                raise ValueError(f"seed={self.seed!r}: must be an integer in [0, 2**32)")
            set_("seed", int(self.seed))
        stop = self.stop_token_ids
        if isinstance(stop, str | bytes) or not isinstance(stop, Iterable):
            raise ValueError(f"stop_token_ids={stop!r}: must be a sequence of token ids")
        stop = tuple(stop)
        if not all(_is_int(t) and t >= 0 for t in stop):
            raise ValueError(f"stop_token_ids={stop!r}: token ids must be integers >= 0")
        if len(stop) > MAX_LISTED_TOKENS:
            raise ValueError(f"stop_token_ids: {len(stop)} token ids, at most {MAX_LISTED_TOKENS}")
        set_("stop_token_ids", tuple(int(t) for t in stop))
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        if isinstance(stop, bytes) or not isinstance(stop, Iterable):
            raise ValueError(f"stop={self.stop!r}: must be a string or a sequence of strings")
        stop = tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop={self.stop!r}: each stop string must be a non-empty str")
        if any(len(s) > MAX_STOP_CHARS for s in stop):
            raise ValueError(
                f"stop={self.stop!r}: a stop string has at most {MAX_STOP_CHARS} characters"
            )
        set_("stop", tuple(str(s) for s in stop))  # numpy strings as Python ones
        if self.logprobs is not None:
            if not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS:
                raise ValueError(
                    f"logprobs={self.logprobs!r}: must be an integer in [0, {MAX_LOGPROBS}] or None"
                )
            set_("logprobs", int(self.logprobs))
        k = self.prompt_logprobs
        if isinstance(k, bool | np.bool_) or k is None:
            set_("prompt_logprobs", bool(k))
        elif _is_int(k) and 0 <= k <= MAX_LOGPROBS:  # vLLM's form; 0: no top tokens
            set_("prompt_logprobs", int(k) or True)
        else:
            raise ValueError(
                f"prompt_logprobs={k!r}: must be True/False or an integer in [0, {MAX_LOGPROBS}]"
            )
        bools = ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "detokenize")
        for name in bools:
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name}={getattr(self, name)!r}: must be True or False")
            set_(name, bool(getattr(self, name)))
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens={self.min_tokens!r}: must be an integer in [0, max_tokens="
                f"{self.max_tokens}]"
            )
        set_("min_tokens", int(self.min_tokens))
        if self.logit_bias is not None:
            set_("logit_bias", _logit_bias(self.logit_bias))
        if self.allowed_token_ids is not None:
            set_("allowed_token_ids", _token_ids("allowed_token_ids", self.allowed_token_ids))
        if not _is_int(self.n) or not 1 <= self.n <= MAX_SAMPLES:
            raise ValueError(f"n={self.n!r}: must be an integer in [1, {MAX_SAMPLES}]")
        set_("n", int(self.n))
        words = self.bad_words
        words = (words,) if isinstance(words, str) else words
        if isinstance(words, bytes) or not isinstance(words, Iterable):
            raise ValueError(f"bad_words={self.bad_words!r}: must be a sequence of strings")
        words = tuple(words)
        if not all(isinstance(w, str) and w.strip() for w in words) or any(
            len(w) > MAX_STOP_CHARS for w in words
        ):
            raise ValueError(
                f"bad_words={self.bad_words!r}: each must be a str with a non-space character, "
                f"of at most {MAX_STOP_CHARS} characters"
            )
        if len(words) > MAX_BAD_WORDS:
            raise ValueError(f"bad_words: {len(words)} words, at most {MAX_BAD_WORDS}")
        set_("bad_words", tuple(str(w) for w in words))
        if self.bad_words_token_ids is not None:
            set_("bad_words_token_ids", _token_sequences(self.bad_words_token_ids))
            banned = {w[0] for w in self.bad_words_token_ids if len(w) == 1}
            if self.allowed_token_ids is not None and banned.issuperset(self.allowed_token_ids):
                raise ValueError(
                    f"allowed_token_ids={self.allowed_token_ids}: bad_words ban every one of them"
                )
        k = self.truncate_prompt_tokens
        if k is not None:
            if not _is_int(k) or k < 1:
                raise ValueError(
                    f"truncate_prompt_tokens={k!r}: must be an integer >= 1 (or None: no cut)"
                )
            set_("truncate_prompt_tokens", int(k))
        so = self.structured_outputs
        if so is not None and not isinstance(so, StructuredOutputsParams):
            raise ValueError(
                f"structured_outputs={so!r}: must be a StructuredOutputsParams (or None)"
            )
        if self.stop and not self.detokenize:
            raise ValueError(f"stop={self.stop!r}: stop strings need detokenize=True")
        if self.prompt_logprobs and self.max_tokens == 0:
            # The prompt is scored by the steps that compute it; max_tokens=0 runs none.
            raise ValueError("prompt_logprobs=True: needs max_tokens >= 1 (max_tokens=0)")

    @property
    def num_prompt_top_logprobs(self) -> int:
        """The most likely tokens reported at each prompt position (prompt_logprobs=k)."""
        k = self.prompt_logprobs
        return 0 if isinstance(k, bool) else k

    @property
    def penalized(self) -> bool:
        """Whether any of the three penalties is on (the step then keeps token counts)."""
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )


def _token_ids(name: str, ids) -> tuple[int, ...]:
    """A non-empty sequence of token ids, deduplicated and sorted."""
    if isinstance(ids, str | bytes | Mapping) or not isinstance(ids, Iterable):
        raise ValueError(f"{name}={ids!r}: must be a sequence of token ids")
    ids = tuple(ids)
    if not ids or not all(_is_int(t) and t >= 0 for t in ids):
        raise ValueError(f"{name}={ids!r}: must be one or more integer token ids >= 0")
    ids = tuple(sorted({int(t) for t in ids}))
    if len(ids) > MAX_LISTED_TOKENS:
        raise ValueError(f"{name}: {len(ids)} token ids, at most {MAX_LISTED_TOKENS}")
    return ids


def _token_sequences(seqs) -> tuple[tuple[int, ...], ...]:
    """bad_words_token_ids: non-empty token id sequences, repeats dropped, order kept."""
    name = "bad_words_token_ids"
    if isinstance(seqs, str | bytes | Mapping) or not isinstance(seqs, Iterable):
        raise ValueError(f"{name}={seqs!r}: must be a sequence of token id sequences")
    out = {}
    for seq in seqs:
        if isinstance(seq, str | bytes | Mapping) or not isinstance(seq, Iterable):
            raise ValueError(f"{name}: {seq!r} is not a sequence of token ids")
        seq = tuple(seq)
        if not seq or not all(_is_int(t) and t >= 0 for t in seq):
            raise ValueError(f"{name}: {seq!r} must be one or more integer token ids >= 0")
        out[tuple(int(t) for t in seq)] = None
    if len(out) > MAX_BAD_WORDS or sum(map(len, out)) > MAX_LISTED_TOKENS:
        raise ValueError(
            f"{name}: {len(out)} sequences of {sum(map(len, out))} tokens, at most "
            f"{MAX_BAD_WORDS} of {MAX_LISTED_TOKENS} in all"
        )
    return tuple(out)


def _logit_bias(bias) -> tuple[tuple[int, float], ...]:
    """{id: bias} (or (id, bias) pairs) as ((id, bias), ...) sorted by id."""
    pairs = bias.items() if isinstance(bias, Mapping) else bias
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Iterable):
        raise ValueError(f"logit_bias={bias!r}: must map token ids to biases")
    out = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"logit_bias={bias!r}: must map token ids to biases")
        t, b = pair
        if not _is_int(t) or t < 0:
            raise ValueError(f"logit_bias: token id {t!r} must be an integer >= 0")
        if not _is_number(b) or math.isnan(b) or not -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS:
            raise ValueError(
                f"logit_bias[{t}]={b!r}: must be in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]"
            )
        if int(t) in out:
            raise ValueError(f"logit_bias: token id {t} given twice")
        out[int(t)] = float(b)
    if len(out) > MAX_LISTED_TOKENS:
        raise ValueError(f"logit_bias: {len(out)} token ids, at most {MAX_LISTED_TOKENS}")
    return tuple(sorted(out.items()))


def _is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


@dataclass
class RequestOutput:
    """What `LLM.generate` returns for one prompt."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # log p(token_ids[i]), temperature 1
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    text: str | None = None  # decoded token_ids when the model has a tokenizer
    # log p(prompt[i] | prompt[:i]) for i = 1..len(prompt)-1, when asked for (prompt_logprobs)
    prompt_logprobs: list[float] | None = None
    # New fields go after the old ones: callers may build a RequestOutput positionally.
    # What made a "stop": the stop token id (stop_token_ids) or the stop string `text` is cut
    # at (stop); None for the model's EOS and for other finish reasons (vLLM's
    # CompletionOutput.stop_reason).
    stop_reason: int | str | None = None
    # Per generated token, [(token id, logprob), ...] of the most likely tokens, most likely
    # first (equal logprobs: lower id first), when asked for (SamplingParams.logprobs).
    top_logprobs: list[list[tuple[int, float]]] | None = None
    # SamplingParams.n > 1: the records of all n samples, this one (sample 0) first; each
    # later one has its own request_id ("<id>/<k>"), tokens, logprobs and finish reason.
    samples: list[RequestOutput] | None = field(default=None, repr=False, compare=False)
    # SamplingParams.prompt_logprobs=k: per prompt_logprobs entry (position i predicting
    # prompt[i]), [(token id, logprob), ...] of the k most likely tokens there, as
    # top_logprobs.
    prompt_top_logprobs: list[list[tuple[int, float]]] | None = None
    # Once finished: the tokens whose KV came from the prefix cache (or the KV store of
    # LLM(kv_transfer_config=...)) at the request's last admission (vLLM's field).
    num_cached_tokens: int | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @classmethod
    def new(cls, request_id: str, ids, params: SamplingParams) -> RequestOutput:
        """A queued request's empty record, with room for what its params ask for."""
        out = cls(request_id, list(ids))
        if params.prompt_logprobs:  # filled in by the steps that compute the prompt
            out.prompt_logprobs = [0.0] * (len(ids) - 1)
            if params.num_prompt_top_logprobs:
                out.prompt_top_logprobs = [[] for _ in ids[1:]]
        if params.logprobs:
            out.top_logprobs = []
        return out


@dataclass(frozen=True)
class StreamDelta:
    """One request's increment from one engine step (the streaming form)."""

    request_id: str
    token_ids: tuple[int, ...]  # tokens new in this step (0 or 1; more with kept drafts)
    logprobs: tuple[float, ...]
    finish_reason: str | None  # set on the request's last delta
    # Per token in token_ids, its step's most likely (token id, logprob) pairs, when the
    # request asked for them (SamplingParams.logprobs); else None.
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    # RequestOutput's stop_reason (on the request's last delta) and num_cached_tokens.
    stop_reason: int | str | None = None
    num_cached_tokens: int | None = None
    # SamplingParams.prompt_logprobs: RequestOutput's prompt_logprobs and
    # prompt_top_logprobs, on the delta that brings the request's first tokens (the prompt
    # is computed by then); else None.
    prompt_logprobs: tuple[float, ...] | None = None
    prompt_top_logprobs: tuple | None = None

    @classmethod
    def of(cls, res, top=None, record: RequestOutput | None = None) -> StreamDelta:
        """A scheduler StepResult as the delta step() returns (`top`: its top logprobs;
        `record`: the request's RequestOutput, its tokens already extended by this step's)."""
        prompt = (None, None)
        first = record is not None and len(record.token_ids) == len(res.new_token_ids)
        if first and res.new_token_ids and record.prompt_logprobs is not None:
            tops = record.prompt_top_logprobs
            prompt = (tuple(record.prompt_logprobs), None if tops is None else tuple(tops))
        return cls(
            res.request_id,
            res.new_token_ids,
            res.new_logprobs,
            res.finish_reason,
            top,
            res.stop_reason,
            res.num_cached_tokens,
            *prompt,
        )
