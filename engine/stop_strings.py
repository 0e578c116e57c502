"""Stop strings (`SamplingParams.stop`): end a request when its output text contains one.

Host-side and plain Python. The scheduler asks after every sampled token whether the output
now holds a stop string; it decodes only the output's tail, so a check costs the same at
token 10 and token 10,000. The tail is long enough to hold the longest stop string: a token
decodes to at least one byte (byte-level BPE; byte-fallback SentencePiece) and a character
is at most four bytes, so a stop string of L characters spans at most 4 L tokens. The few
tokens before those only absorb what decoding a cut-off sequence gets wrong at its start (a
half character, a dropped leading space); what a suffix decodes to past that is what the
whole output decodes to there. A suffix's start can also read as text the whole output
does not hold (WordPiece keeps the "##" of a continuation token that starts it; a byte
fallback or byte-level decoder turns a cut-off character into U+FFFD), so a hit in the tail
is confirmed on the whole output's text (one full decode, normally once per request, at its
stop): the check never fires before the whole text holds a stop string. Special tokens
decode to nothing: a stop string they interrupt is still found across up to `_LEAD_TOKENS`
of them.

`stop_reason` holds every rule that ends a request after a sampled token (EOS, stop ids,
stop strings, max_tokens, max_model_len), for the scheduler.

As in vLLM the token that completes a stop string is kept in `token_ids`, and the finished
`text` ends before the first stop string (after it with `include_stop_str_in_output`).
"""

import functools
import os
from collections.abc import Callable, Sequence

# Tokens before a stop string's longest possible span, for the decoder's start effects.
_LEAD_TOKENS = 8

Detokenize = Callable[[Sequence[int]], str]


def for_params(detokenize: Detokenize, params) -> Detokenize:
    """`detokenize` as a request reads its text: with special tokens when it asks
    (SamplingParams.skip_special_tokens=False), so a stop string may match them."""
    if getattr(params, "skip_special_tokens", True):
        return detokenize
    return functools.partial(detokenize, skip_special_tokens=False)


def final_text(detokenize: Detokenize | None, token_ids: Sequence[int], params, stop_reason):
    """A finished request's `text`: None without a tokenizer or with detokenize=False;
    cut at the stop string that ended it (`stop_reason` a str; truncate_at_stop)."""
    if detokenize is None or not params.detokenize:
        return None
    detokenize = for_params(detokenize, params)
    text = detokenize(token_ids)
    if isinstance(stop_reason, str):
        after = protected_chars(detokenize, token_ids, params.min_tokens, text)
        text = truncate_at_stop(text, params.stop, params.include_stop_str_in_output, after)
    return text


def check_stop_strings(stop: tuple[str, ...], detokenize: Detokenize | None) -> None:
    """ValueError if a request has stop strings and there is no tokenizer to read them."""
    if stop and detokenize is None:
        raise ValueError(
            f"stop={stop!r}: stop strings need the model's tokenizer (a tokenizer.json "
            "in the model directory); use stop_token_ids instead"
        )


def stop_reason(
    seq, token_id: int, eos_token_ids, detokenize: Detokenize | None, max_model_len: int
) -> tuple[str | None, int | str | None]:
    """Whether `seq` (engine/sequence.py), which just sampled `token_id`, is done: (finish
    reason, the stop token id or string behind a "stop"), or (None, None). "stop" wins over
    "length" when the last allowed token is also a stop token. The first `min_tokens`
    tokens never stop a request (the step bans their stop ids: engine/logit_bias.py)."""
    params = seq.sampling_params
    if seq.num_output_tokens > params.min_tokens:
        if token_id in eos_token_ids and not params.ignore_eos:
            return "stop", None
        if token_id in (params.stop_token_ids or ()):
            return "stop", token_id
        if params.stop:
            detok = for_params(detokenize, params)
            hit = stop_string_hit(detok, seq.output_token_ids, params.stop, params.min_tokens)
            if hit is not None:
                return "stop", hit
    if params.max_tokens is not None and seq.num_output_tokens >= params.max_tokens:
        return "length", None
    if seq.num_tokens >= max_model_len:
        return "length", None
    return None, None


def tail_tokens(stops: Sequence[str]) -> int:
    """How many of the newest output tokens can hold any of `stops`, with the lead."""
    return 4 * max(len(s) for s in stops) + _LEAD_TOKENS


def stop_string_hit(
    detokenize: Detokenize, token_ids: Sequence[int], stops: Sequence[str], min_tokens: int = 0
) -> str | None:
    """The stop string the text of `token_ids` is cut at (`first_stop`), looked for in its
    tail and confirmed on the whole text; None if the text holds none.

    With `min_tokens` (SamplingParams.min_tokens) nothing stops until more tokens than that
    are out, and then only a stop string that ends past the text of the first min_tokens
    tokens (`protected_chars`): vLLM's rule, whose check only reads text added after them.
    """
    if not stops or len(token_ids) <= min_tokens:
        return None
    n = tail_tokens(stops)
    text = detokenize(token_ids[-n:])
    if not any(s in text for s in stops):
        return None
    if len(token_ids) > n:
        text = detokenize(token_ids)
    return first_stop(text, stops, protected_chars(detokenize, token_ids, min_tokens, text))


def protected_chars(
    detokenize: Detokenize, token_ids: Sequence[int], min_tokens: int, text: str
) -> int:
    """How many leading characters of the output's whole `text` the first `min_tokens`
    tokens make: no stop string may end within them. The common prefix of their own
    decode and `text`: a character they leave unfinished decodes alone as U+FFFD (one per
    byte with byte fallback) and counts as new text, as vLLM's incremental detokenizer
    holds such a character back."""
    if not min_tokens:
        return 0
    return len(os.path.commonprefix([detokenize(token_ids[:min_tokens]), text]))


def first_stop(text: str, stops: Sequence[str], after: int = 0) -> str | None:
    """The stop string `text` is cut at: of the occurrences that end past `after`
    characters, the one that starts earliest (the longest one if several start there);
    None if none occurs."""
    found = _earliest(text, stops, after)
    return None if found is None else found[1]


def _earliest(text: str, stops: Sequence[str], after: int = 0) -> tuple[int, str] | None:
    """(where, which) of first_stop's stop string in `text`."""
    best = None  # (start, -length, stop string)
    for s in stops:
        i = text.find(s, max(0, after - len(s) + 1))  # ends at i + len(s) > after
        if i >= 0 and (best is None or (i, -len(s)) < best[:2]):
            best = (i, -len(s), s)
    return None if best is None else (best[0], best[2])


def truncate_at_stop(text: str, stops: Sequence[str], include: bool, after: int = 0) -> str:
    """`text` up to its first stop string (`first_stop`, ending past `after` characters),
    with that string when `include`; `text` if none occurs."""
    found = _earliest(text, stops, after)
    if found is None:
        return text
    start, s = found
    return text[: start + len(s)] if include else text[:start]
