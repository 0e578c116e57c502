"""Per-request token lists applied to the logits before sampling: `logit_bias`,
`allowed_token_ids` and the stop tokens `min_tokens` holds back.

Each step that has such a request gets, per row, a short list of (token id, value) pairs
padded to a power-of-two width B (at least MIN_WIDTH): the value is added to that token's
logit, -inf bans it, and a row marked `restrict` keeps only its listed tokens. The lists
are small (an OpenAI logit_bias has at most 300 entries; vLLM's min_tokens bans the stop
ids), so they travel with the step like the sampling parameters, and the step compiles one
variant per width it meets (at most log2(MAX_LISTED_TOKENS) of them).

vLLM's order: allowed tokens, then min_tokens' ban and the bias, all before the penalties,
temperature and the filters; logprobs stay those of the raw logits. A row with no list
is bitwise unchanged, so batch invariance holds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

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


def held_back(params, eos_token_ids) -> tuple[int, ...]:
    """The tokens min_tokens bans: stop_token_ids, and the EOS tokens unless ignore_eos."""
    eos = () if params.ignore_eos else tuple(eos_token_ids)
    return tuple(sorted(set(params.stop_token_ids) | set(eos)))


def lists_for(items, num_rows: int, eos_token_ids) -> TokenLists | None:
    """The step's TokenLists for `items` (ScheduledItems, rows in order, padded to
    `num_rows`); None when no item lists a token."""
    rows = []
    for i, it in enumerate(items):
        sp = it.sampling_params
        ban = it.num_generated < sp.min_tokens
        if sp.logit_bias is None and sp.allowed_token_ids is None and not ban:
            continue
        entries = sp.listed_tokens
        if ban:
            entries = {**entries, **dict.fromkeys(held_back(sp, eos_token_ids), -math.inf)}
        if entries:
            rows.append((i, entries, sp.allowed_token_ids is not None))
    if not rows:
        return None
    longest = max(len(e) for _, e, _ in rows)
    width = max(MIN_WIDTH, 1 << (longest - 1).bit_length())  # the next power of two
    ids = np.full((num_rows, width), -1, np.int32)
    values = np.zeros((num_rows, width), np.float32)
    restrict = np.zeros(num_rows, bool)
    for i, entries, only in rows:
        ids[i, : len(entries)] = list(entries)
        values[i, : len(entries)] = list(entries.values())
        restrict[i] = only
    return TokenLists(ids, values, restrict)
