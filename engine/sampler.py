"""In-step token sampler: greedy, temperature, top-k, top-p, min-p, with per-request seeds.

Pure jnp and row-independent: a row's token and logprob depend only on its own logits,
parameters, seed and step, bitwise, never on the other rows or the batch size, so a request
reproduces whatever traffic it shares a step with. Every float reduction is therefore either
exact (max, argmax, integer counts) or spelled out in a fixed order (`fixed_order_sum`,
`jnp.cumsum`, which lowers to an elementwise scan), in every step, batch-invariant or not
(the model's own row sums are fixed-order only in the batch-invariant step:
models/reductions.py).

No sort: XLA:CPU sorts a [16, 8192] f32 array in ~40 ms, against ~3 ms for a whole decode
step of a 20M-parameter model. Top-k and top-p instead find their cut-off value by bisection
over the 2^32 float keys, and sampling inverts the CDF with one uniform per row (a threefry
draw per vocab entry, as Gumbel-max needs, costs ~4 ms at [16, 8192]).
"""

import jax
import jax.numpy as jnp
from jax import lax

from models.reductions import fixed_order_sum


def _float_key(x: jax.Array) -> jax.Array:  # f32 [S, V] -> uint32 [S, V]
    """Order-preserving map of float32 to uint32, so a value cut-off can be bisected exactly."""
    x = jnp.where(x == 0, 0.0, x)  # -0.0 and 0.0 compare equal, so give them one key
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(1 << 31))


def _smallest_key_where(pred, num_rows: int) -> jax.Array:  # -> uint32 [S]
    """Per row, the smallest key t with pred(t) true; pred: uint32 [S] -> bool [S], monotone.

    pred(2^32 - 1) must hold. 32 halvings of the 2^32 keys make the answer exact.
    """

    def body(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        ok = pred(mid)
        return jnp.where(ok, lo, mid + 1), jnp.where(ok, mid, hi)

    lo = jnp.zeros((num_rows,), jnp.uint32)
    hi = jnp.full((num_rows,), 0xFFFFFFFF, jnp.uint32)
    return lax.fori_loop(0, 32, body, (lo, hi))[1]


def _exclusive_cumsum(x: jax.Array) -> jax.Array:  # [S, V] -> [S, V]
    return jnp.pad(jnp.cumsum(x, axis=-1)[:, :-1], ((0, 0), (1, 0)))


def top_k_top_p_mask(
    logits: jax.Array,  # [S, V] f32, already temperature-scaled
    top_k: jax.Array,  # [S] int32, <= 0 = off
    top_p: jax.Array,  # [S] f32, >= 1 = off
) -> jax.Array:  # [S, V] bool, tokens that may be sampled
    """Top-k, then the nucleus of the renormalized top-k distribution.

    Same sets as sorting by (logit descending, token id ascending) and applying HF's
    TopKLogitsWarper then TopPLogitsWarper: equal logits are taken in id order, so the kept
    set is always exactly determined.
    """
    num_rows, vocab = logits.shape
    keys = _float_key(logits)

    def cut(threshold, take_tie):
        """Keeps keys above the threshold, and tokens at it where take_tie says."""
        at = keys == threshold[:, None]
        return (keys > threshold[:, None]) | (at & take_tie(at))

    # Top-k: the k-th largest key is the smallest t with fewer than k keys above it. A row
    # with top-k off gets an all-true mask from this too, so the stage may be skipped when no
    # row uses it without changing any row's result; likewise for top-p below.
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)[:, None]

    def count_above(t):
        return jnp.sum(keys > t[:, None], axis=-1, dtype=jnp.int32)

    def top_k_keep():
        kth = _smallest_key_where(lambda t: count_above(t) < k[:, 0], num_rows)
        room = k - count_above(kth)[:, None]  # how many of the tied tokens still fit
        return cut(kth, lambda at: jnp.cumsum(at, axis=-1, dtype=jnp.int32) <= room)

    all_true = jnp.ones((num_rows, vocab), bool)
    keep = lax.cond(jnp.any(k < vocab), top_k_keep, lambda: all_true)

    # Nucleus (Holtzman et al. 2020): a token stays while the mass ranked strictly ahead of it
    # is below top_p; the top token always does. Masses stay unnormalized (compared against
    # top_p * total) to avoid another rounding step.
    def top_p_keep():
        mass = jnp.where(keep, jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True)), 0.0)
        # The floor keeps the budget positive, so the top token survives even top_p = 0.
        p = jnp.maximum(top_p, jnp.finfo(jnp.float32).tiny)
        budget = (p * fixed_order_sum(mass))[:, None]

        def mass_above(t):
            return fixed_order_sum(jnp.where(keys > t[:, None], mass, 0.0))

        last = _smallest_key_where(lambda t: mass_above(t) < budget[:, 0], num_rows)
        ahead = mass_above(last)[:, None]

        def take_tie(at):  # tied tokens in id order, while the mass ahead stays in budget
            return ahead + _exclusive_cumsum(jnp.where(at, mass, 0.0)) < budget

        # top_p >= 1 is off outright: round-off could otherwise cut off a tail of tiny masses.
        return cut(last, take_tie) | (top_p[:, None] >= 1.0)

    return keep & lax.cond(jnp.any(top_p < 1.0), top_p_keep, lambda: all_true)


def apply_top_k_top_p(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """`logits: [S, V]` with the tokens top-k / top-p exclude set to -inf."""
    return jnp.where(top_k_top_p_mask(logits, top_k, top_p), logits, -jnp.inf)


GREEDY_TEMPERATURE = 1e-5  # rows with a lower temperature sample greedily


def _row_uniform(seed: jax.Array, step: jax.Array) -> jax.Array:  # [] f32 in [0, 1)
    # The key derives from the request alone, so its draw is the same in any batch.
    key = jax.random.fold_in(jax.random.key(seed), step)
    return jax.random.uniform(key, (), jnp.float32)


def min_p_mask(scaled: jax.Array, min_p: jax.Array) -> jax.Array:  # [S, V], [S] -> [S, V]
    """Tokens at least `min_p` times as likely as the most likely one (Nguyen et al. 2024;
    HF MinPLogitsWarper): p_i / p_max = exp(s_i - s_max), so no normalizer is needed. The
    top token always stays; min_p = 0 keeps all."""
    ratio = jnp.exp(scaled - jnp.max(scaled, axis=-1, keepdims=True))
    return ratio >= min_p[:, None]


def allowed_mask(
    scaled: jax.Array,  # [S, V] f32, temperature-scaled logits
    top_k: jax.Array,  # [S] int32, <= 0 = off
    top_p: jax.Array,  # [S] f32, >= 1 = off
    min_p: jax.Array,  # [S] f32, 0 = off
) -> jax.Array:  # [S, V] bool
    """The tokens a sampled row may draw: top-k, then top-p, then min-p, the order of
    Hugging Face's warpers (vLLM applies min-p first; the sets differ only through top-p's
    mass when both are set). Top-k and top-p never drop the top token, so min-p's ratio to
    it is the same before or after them."""
    keep = top_k_top_p_mask(scaled, top_k, top_p)
    return keep & lax.cond(
        jnp.any(min_p > 0), min_p_mask, lambda s, _: jnp.ones(s.shape, bool), scaled, min_p
    )


def _sample_rows(scaled, top_k, top_p, seed, sample_step, min_p):  # [S, V] -> [S] int32
    """Inverse-CDF draw from softmax(scaled) restricted to the allowed set."""
    keep = allowed_mask(scaled, top_k, top_p, min_p)
    mass = jnp.where(keep, jnp.exp(scaled - jnp.max(scaled, axis=-1, keepdims=True)), 0.0)
    cdf = jnp.cumsum(mass, axis=-1)
    u = jax.vmap(_row_uniform)(seed, sample_step)
    positive = mass > 0
    # The first token whose CDF passes u * total; requiring positive mass means a token the
    # filter removed can never be drawn, whatever the scan's rounding.
    hit = positive & (cdf > (u * cdf[:, -1])[:, None])
    first_hit = jnp.argmax(hit, axis=-1)
    # u * total can round up to total itself: then the last token with mass is the draw.
    last_positive = scaled.shape[-1] - 1 - jnp.argmax(positive[:, ::-1], axis=-1)
    return jnp.where(jnp.any(hit, axis=-1), first_hit, last_positive).astype(jnp.int32)


def sample(
    logits: jax.Array,  # [S, V] f32
    temperature: jax.Array,  # [S] f32, 0 (or below GREEDY_TEMPERATURE) = greedy
    top_k: jax.Array,  # [S] int32, 0 = off
    top_p: jax.Array,  # [S] f32, 1.0 = off
    seed: jax.Array,  # [S] uint32
    sample_step: jax.Array,  # [S] int32, tokens the request generated before this one
    min_p: jax.Array | None = None,  # [S] f32, 0 = off
    *,
    greedy_only: bool = False,
) -> tuple[jax.Array, jax.Array]:  # tokens [S] int32, logprobs [S] f32
    """Samples one token per row; logprobs are under the unscaled, unfiltered distribution.

    `greedy_only` (static): the caller knows every row is greedy; the sampling branch is
    then not traced at all (what the all-greedy `lax.cond` branch below computes)."""
    logits = jnp.asarray(logits, jnp.float32)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # ties -> lowest id
    if greedy_only:
        return greedy, token_logprobs(logits, greedy)
    if min_p is None:
        min_p = jnp.zeros(logits.shape[:1], jnp.float32)
    # Below GREEDY_TEMPERATURE, logits / temperature overflows (inf - inf = NaN in the
    # softmax, which drew the last token id): such rows are greedy, as in vLLM.
    greedy_row = temperature < GREEDY_TEMPERATURE
    scaled = logits / jnp.where(greedy_row, 1.0, temperature)[:, None]
    # An all-greedy step (the determinism suites) skips the sampling work entirely.
    sampled = lax.cond(
        jnp.all(greedy_row),
        lambda *_: greedy,
        _sample_rows,
        scaled,
        top_k,
        top_p,
        seed,
        sample_step,
        min_p,
    )
    tokens = jnp.where(greedy_row, greedy, sampled)

    return tokens, token_logprobs(logits, tokens)


def _shifted_and_log_norm(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
    return shifted, jnp.log(fixed_order_sum(jnp.exp(shifted)))


def token_logprobs(logits: jax.Array, ids: jax.Array) -> jax.Array:  # [R, V], [R] -> [R]
    """log_softmax(logits)[r, ids[r]] with a batch-invariant (fixed-order) normalizer."""
    shifted, log_norm = _shifted_and_log_norm(logits)
    chosen = jnp.take_along_axis(shifted, ids[:, None], axis=-1)[:, 0]
    return chosen - log_norm


def top_logprobs(logits: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The k most likely tokens of each row, most likely first (equal logits: lower id
    first), as ids [R, k] int32 and their log-probabilities [R, k] f32, computed as
    token_logprobs computes them (bitwise the same value for the same token)."""
    shifted, log_norm = _shifted_and_log_norm(jnp.asarray(logits, jnp.float32))
    values, ids = lax.top_k(shifted, k)
    return ids.astype(jnp.int32), values - log_norm[:, None]
