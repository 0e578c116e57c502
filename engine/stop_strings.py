"""Stop strings (`SamplingParams.stop`): end a request when its output text contains one.

Host-side and plain Python. The scheduler asks after every sampled token whether the output
now holds a stop string; it decodes only the output's tail, so a check costs the same at
token 10 and token 10,000. The tail is long enough to hold the longest stop string: a token
decodes to at least one byte (byte-level BPE; byte-fallback SentencePiece) and a character
is at most four bytes, so a stop string of L characters spans at most 4 L tokens. The few
tokens before those only absorb what decoding a cut-off sequence gets wrong at its start (a
half character, a dropped leading space); what a suffix decodes to past that is what the
whole output decodes to there. Decoding a suffix never invents text (it only drops or
replaces what it starts with), so the check cannot fire before the stop string is there.
Special tokens decode to nothing: a stop string they interrupt is still found across up to
`_LEAD_TOKENS` of them.

As in vLLM the token that completes a stop string is kept in `token_ids`, and the finished
`text` ends before the first stop string (after it with `include_stop_str_in_output`).
"""

from collections.abc import Callable, Sequence

# Tokens before a stop string's longest possible span, for the decoder's start effects.
_LEAD_TOKENS = 8

Detokenize = Callable[[Sequence[int]], str]


def tail_tokens(stops: Sequence[str]) -> int:
    """How many of the newest output tokens can hold any of `stops`, with the lead."""
    return 4 * max(len(s) for s in stops) + _LEAD_TOKENS


def stop_string_hit(
    detokenize: Detokenize, token_ids: Sequence[int], stops: Sequence[str]
) -> str | None:
    """The first of `stops` (in their order) that the text of `token_ids` contains, checked
    on its tail only; None if none does."""
    if not stops or not token_ids:
        return None
    text = detokenize(token_ids[-tail_tokens(stops) :])
    return next((s for s in stops if s in text), None)


def truncate_at_stop(text: str, stops: Sequence[str], include: bool) -> str:
    """`text` up to its first stop string (where the earliest one starts; the longest one
    if several start there), with that string when `include`; `text` if none occurs."""
    best = None  # (start, -length)
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or (i, -len(s)) < best):
            best = (i, -len(s))
    if best is None:
        return text
    start, neg_len = best
    return text[: start - neg_len] if include else text[:start]
