"""Per-request token lists applied to the logits before sampling: `logit_bias`,
`allowed_token_ids`, the stop tokens `min_tokens` holds back and the last tokens of
`bad_words` the output is one token short of; and structured outputs' bitmask
(`apply_allowed_mask`; the masks are built in engine/structured.py).

Each step that has such a request gets, per row, a short list of (token id, value) pairs
padded to a power-of-two width B (at least MIN_WIDTH): the value is added to that token's
logit, -inf bans it, and a row marked `restrict` keeps only its listed tokens. The lists
are small (an OpenAI logit_bias has at most 300 entries; vLLM's min_tokens bans the stop
ids; each list is capped at sampling_params.MAX_LISTED_TOKENS), so they travel with the
step like the sampling parameters, and the step compiles one variant per width it meets
(8 up to 8192: a list of 2,048 plus up to 2,048 stop ids and the EOS ids min_tokens bans).

vLLM's order: allowed tokens, then min_tokens' ban and the bias, all before the penalties,
temperature and the filters; logprobs stay those of the raw logits. A row with no list
is bitwise unchanged, so batch invariance holds.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

MIN_WIDTH = 8


class TokenLists(NamedTuple):
    """One step's lists: [S, B] token ids (-1 = padding) and values, [S] restrict flags."""

    ids: np.ndarray
    values: np.ndarray
    restrict: np.ndarray


def apply_token_lists(
    logits: jax.Array,  # [S, V] f32
    ids: jax.Array,  # [S, B] int32, -1 = none
    values: jax.Array,  # [S, B] f32, added to the listed logits (-inf bans)
    restrict: jax.Array,  # [S] bool: only the listed tokens may be sampled
) -> jax.Array:
    num_rows, vocab = logits.shape
    rows = jnp.arange(num_rows)[:, None]
    cols = jnp.where(ids >= 0, ids, vocab)  # padding: out of range, dropped
    bias = jnp.zeros_like(logits).at[rows, cols].add(values, mode="drop")
    listed = jnp.zeros(logits.shape, bool).at[rows, cols].set(True, mode="drop")
    out = jnp.where(listed, logits + bias, logits)
    return jnp.where(restrict[:, None] & ~listed, -jnp.inf, out)


def apply_allowed_mask(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Structured outputs (engine/structured.py): send the logits of tokens whose bit is
    clear to -inf. logits [S, V] f32, mask [S, ceil(V / 32)] int32 (bit t % 32 of word
    t // 32); a row with every bit set is unchanged."""
    num_rows, vocab = logits.shape
    # A shift per bit position, broadcast over the words (no gather): [S, W, 32] -> [S, V].
    bits = (mask[:, :, None] >> jnp.arange(32, dtype=jnp.int32)) & 1
    bits = bits.reshape(num_rows, -1)[:, :vocab]
    return jnp.where(bits != 0, logits, -jnp.inf)


# Per SamplingParams object (by id, dropped when it is collected): what every step of the
# request reads, built once. Kept off the object, whose __dict__ callers rebuild it from
# (SamplingParams(**vars(p))).
_CACHE: dict[tuple[int, str], object] = {}


def _cached(params, name: str, build):
    key = (id(params), name)
    got = _CACHE.get(key)
    if got is None:
        got = _CACHE[key] = build(params)
        weakref.finalize(params, _CACHE.pop, key, None)
    return got


def listed_tokens(params) -> tuple[np.ndarray, np.ndarray]:
    """logit_bias, allowed_token_ids and the one-token bad words as one list: token ids
    (int32, ascending) and the values added to their logits (float32): allowed tokens get 0
    plus their bias; a bias on a token outside the allowed set is dropped (that token is
    banned either way); a bad word's token gets -inf (not listed when it is not allowed
    anyway). Built once per SamplingParams object; read-only."""
    return _cached(params, "listed", _build_listed)


def _build_listed(params) -> tuple[np.ndarray, np.ndarray]:
    entries = dict.fromkeys(params.allowed_token_ids or (), 0.0)
    for token, bias in params.logit_bias or ():
        if params.allowed_token_ids is None or token in entries:
            entries[token] = entries.get(token, 0.0) + bias
    for (token,) in (w for w in params.bad_words_token_ids or () if len(w) == 1):
        if params.allowed_token_ids is None or token in entries:
            entries[token] = -np.inf
    ids = np.fromiter(sorted(entries), np.int32, len(entries))
    values = np.asarray([entries[t] for t in ids.tolist()], np.float32)
    ids.flags.writeable = values.flags.writeable = False
    return ids, values


def followed_bans(params, output: Sequence[int]) -> list[int]:
    """The last tokens of the request's bad words of several tokens whose other tokens the
    output (the tokens generated so far) ends with (vLLM's rule: the prompt is not looked
    at). One dictionary lookup per word length, whatever the number of words."""
    bans = []
    for k, last_of in _cached(params, "words", _build_word_table).items():
        if len(output) >= k:
            bans += last_of.get(tuple(output[len(output) - k :]), ())
    return bans


def _build_word_table(params) -> dict[int, dict[tuple[int, ...], list[int]]]:
    """{k: {a word's first k tokens: the last tokens of the words of k + 1 tokens}}."""
    table: dict[int, dict[tuple[int, ...], list[int]]] = {}
    for word in params.bad_words_token_ids or ():
        if len(word) > 1:
            table.setdefault(len(word) - 1, {}).setdefault(word[:-1], []).append(word[-1])
    return table


def held_back(params, eos_token_ids) -> tuple[int, ...]:
    """The tokens min_tokens bans: stop_token_ids, and the EOS tokens unless ignore_eos."""
    eos = () if params.ignore_eos else tuple(eos_token_ids)
    return tuple(sorted(set(params.stop_token_ids) | set(eos)))


def _row(params, num_generated: int, eos_token_ids, output) -> tuple[np.ndarray, np.ndarray]:
    """One item's (ids, values): its own list, plus -inf for the ids min_tokens still bans
    and the longer bad words' bans after `output` (an id also listed gets bias + -inf =
    -inf from the step's scatter-add). A restricted row bans only allowed ids: the others
    are excluded anyway."""
    ids, values = listed_tokens(params)
    ban = followed_bans(params, output) if output is not None else []
    if num_generated < params.min_tokens:
        ban += held_back(params, eos_token_ids)
    if not ban:
        return ids, values
    ban = np.asarray(sorted(set(ban)), np.int32)
    if params.allowed_token_ids is not None:
        ban = ban[np.isin(ban, ids)]
    return np.concatenate([ids, ban]), np.concatenate(
        [values, np.full(ban.size, -np.inf, np.float32)]
    )


def lists_for(
    items,
    num_rows: int,
    eos_token_ids,
    output_of: Callable[[Any], Sequence[int]],
    min_width: int = 0,
) -> TokenLists | None:
    """The step's TokenLists for `items` (ScheduledItems, rows in order, padded to
    `num_rows`); None when no item lists a token. Each row is a slice copy of arrays
    built once per request (listed_tokens) plus, while min_tokens holds, its few banned
    ids, and its bad words' bans from `output_of(item)`, the tokens generated before it
    (only read for sampled rows: whole after the step before, as no step that reads it is
    scheduled ahead; engine/scheduler.py). `min_width` > 0: at least that wide, and lists
    of no token rather than None (an engine that keeps the feature on,
    runner.StickyFeatures)."""
    rows = []
    for i, it in enumerate(items):
        sp = it.sampling_params
        words = sp.bad_words_token_ids
        if sp.logit_bias is None and sp.allowed_token_ids is None and not (sp.min_tokens or words):
            continue
        output = output_of(it) if words and it.sample else None
        ids, values = _row(sp, it.num_generated, eos_token_ids, output)
        if ids.size:
            rows.append((i, ids, values, sp.allowed_token_ids is not None))
    if not rows and not min_width:
        return None
    longest = max((ids.size for _, ids, _, _ in rows), default=1)
    width = max(MIN_WIDTH, min_width, 1 << (longest - 1).bit_length())  # a power of two
    out = TokenLists(
        np.full((num_rows, width), -1, np.int32),
        np.zeros((num_rows, width), np.float32),
        np.zeros(num_rows, bool),
    )
    for i, ids, values, only in rows:
        out.ids[i, : ids.size] = ids
        out.values[i, : ids.size] = values
        out.restrict[i] = only
    return out


def check_token_lists(params, vocab: int, eos_token_ids: tuple[int, ...]) -> None:
    """ValueError, naming the field, if a request's token lists (SamplingParams) hold an id
    outside [0, vocab), or min_tokens would ban every one of its allowed_token_ids."""
    for name, listed in (
        ("stop_token_ids", params.stop_token_ids),
        ("logit_bias", [t for t, _ in params.logit_bias or ()]),
        ("allowed_token_ids", params.allowed_token_ids or ()),
        ("bad_words_token_ids", [t for w in params.bad_words_token_ids or () for t in w]),
    ):
        bad = [t for t in listed if t >= vocab]
        if bad:
            raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    allowed = params.allowed_token_ids
    if params.min_tokens and allowed is not None:
        banned = set(held_back(params, eos_token_ids))
        if banned.issuperset(allowed):
            raise ValueError(
                f"allowed_token_ids={allowed}: min_tokens={params.min_tokens} bans every "
                "one of them (they are stop tokens) for the first tokens"
            )
