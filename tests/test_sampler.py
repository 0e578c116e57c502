"""engine/sampler.py against numpy references of the allowed set and the distribution."""

import json
import pathlib

import jax
import numpy as np
import pytest

from engine.sampler import allowed_mask, apply_top_k_top_p, sample
from engine.sampling_params import SamplingParams

VOCAB = 16
ROWS = 4096  # one shape for the set, frequency and logprob tests: one compilation

sample_jit = jax.jit(sample)
filter_jit = jax.jit(apply_top_k_top_p)


def allowed_ref(logits, temperature, top_k, top_p):
    """Per row: (kept-token mask [V], renormalized probs [V], whether a top-p cut is a near tie).

    Division in float32 like the sampler, so equal logits stay equal; the rest in float64.
    """
    scaled = (logits.astype(np.float32) / np.float32(temperature)).astype(np.float64)
    order = np.argsort(-scaled, kind="stable")  # ties -> lower id first
    k = top_k if 0 < top_k <= len(scaled) else len(scaled)
    s = scaled[order][:k]
    p = np.exp(s - s.max())
    p /= p.sum()
    before = np.cumsum(p) - p
    n = k if top_p >= 1.0 else int(np.sum(before < top_p))
    near = top_p < 1.0 and np.min(np.abs(before - top_p)) < 1e-5
    keep = np.zeros(len(scaled), bool)
    keep[order[:n]] = True
    probs = np.zeros(len(scaled))
    probs[order[:n]] = p[:n] / p[:n].sum()
    return keep, probs, near


def log_softmax_ref(logits):
    x = logits.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def random_params(rng, rows):
    # Integer-valued logits in a quarter of the rows create exact ties at the k / p boundary.
    logits = rng.standard_normal((rows, VOCAB)) * 2.0
    ties = rng.random(rows) < 0.25
    logits[ties] = np.round(logits[ties])
    temperature = rng.choice([0.5, 1.0, 1.7], rows).astype(np.float32)
    top_k = rng.choice([0, 1, 3, 5, 16, 40], rows).astype(np.int32)
    top_p = rng.choice([1.0, 0.95, 0.6, 0.3, 0.05], rows).astype(np.float32)
    seed = rng.integers(0, 2**32, rows, dtype=np.uint32)
    step = rng.integers(0, 1000, rows).astype(np.int32)
    return logits.astype(np.float32), temperature, top_k, top_p, seed, step


def test_greedy_is_argmax_with_lowest_id_on_ties():
    rng = np.random.default_rng(0)
    logits, _, top_k, top_p, seed, step = random_params(rng, ROWS)
    logits[:8] = 0.0
    logits[:8, [3, 9]] = 1.0  # tie between ids 3 and 9
    # Temperatures too small to divide by (logits / 2e-38 overflows) are greedy too.
    temperature = rng.choice([0.0, 2e-38, 1e-6, 9.9e-6], ROWS).astype(np.float32)
    tokens, logprobs = sample_jit(logits, temperature, top_k, top_p, seed, step)
    expected = np.argmax(logits, axis=-1)  # numpy also returns the first maximum
    np.testing.assert_array_equal(tokens, expected)
    assert np.all(np.asarray(tokens[:8]) == 3)
    ref = log_softmax_ref(logits)[np.arange(ROWS), expected]
    np.testing.assert_allclose(logprobs, ref, atol=1e-5, rtol=1e-5)


def test_filter_matches_reference_and_samples_stay_inside():
    rng = np.random.default_rng(1)
    logits, temperature, top_k, top_p, seed, step = random_params(rng, ROWS)

    filtered = np.asarray(filter_jit(logits / temperature[:, None], top_k, top_p))
    tokens, logprobs = sample_jit(logits, temperature, top_k, top_p, seed, step)
    tokens = np.asarray(tokens)

    n_checked = 0
    for r in range(ROWS):
        keep, _, near = allowed_ref(logits[r], temperature[r], top_k[r], top_p[r])
        assert keep[tokens[r]], (r, tokens[r], np.flatnonzero(keep))
        if not near:  # an f32 vs f64 cumsum may legitimately differ right at the cut
            np.testing.assert_array_equal(np.isfinite(filtered[r]), keep, err_msg=f"row {r}")
            n_checked += 1
    assert n_checked > 0.9 * ROWS
    ref = log_softmax_ref(logits)[np.arange(ROWS), tokens]
    np.testing.assert_allclose(logprobs, ref, atol=1e-5, rtol=1e-5)


def test_exact_ties_at_the_cut():
    """Equal logits give exactly equal masses, so the cut lands exactly on the budget."""
    logits = np.zeros((ROWS, VOCAB), np.float32)
    top_k = np.zeros(ROWS, np.int32)
    top_p = np.ones(ROWS, np.float32)
    cases = [  # (top_k, top_p, kept ids): mass ahead must be strictly below top_p * total
        (0, 0.25, range(4)),  # budget 4: ids 0..3 have 0..3 ahead, id 4 has exactly 4
        (0, 0.5, range(8)),
        (5, 1.0, range(5)),
        (5, 0.5, range(3)),  # top-k first: total 5, budget 2.5
        (VOCAB, 1.0, range(VOCAB)),
        (0, 0.0, range(1)),  # out of contract, but the top token always survives
    ]
    for r, (k, p, _) in enumerate(cases):
        top_k[r], top_p[r] = k, p
    keep = np.isfinite(np.asarray(filter_jit(logits, top_k, top_p)))
    for r, (_, _, kept) in enumerate(cases):
        np.testing.assert_array_equal(np.flatnonzero(keep[r]), list(kept), err_msg=str(cases[r]))


def test_frequencies_follow_renormalized_distribution():
    rng = np.random.default_rng(2)
    configs = [  # (temperature, top_k, top_p)
        (1.0, 0, 1.0),
        (0.7, 5, 1.0),
        (1.3, 0, 0.8),
        (1.0, 8, 0.9),
    ]
    draws = ROWS // len(configs)
    base = (rng.standard_normal((len(configs), VOCAB)) * 1.5).astype(np.float32)
    logits = np.repeat(base, draws, axis=0)
    temperature = np.repeat([c[0] for c in configs], draws).astype(np.float32)
    top_k = np.repeat([c[1] for c in configs], draws).astype(np.int32)
    top_p = np.repeat([c[2] for c in configs], draws).astype(np.float32)
    # One request drawing repeatedly: same seed, successive steps.
    seed = np.full(ROWS, 1234, np.uint32)
    step = np.tile(np.arange(draws, dtype=np.int32), len(configs))

    tokens = np.asarray(sample_jit(logits, temperature, top_k, top_p, seed, step)[0])

    for c, (temp, k, p) in enumerate(configs):
        keep, probs, near = allowed_ref(base[c], temp, k, p)
        assert not near
        counts = np.bincount(tokens[c * draws : (c + 1) * draws], minlength=VOCAB)
        assert np.all(counts[~keep] == 0)
        expected = probs[keep] * draws
        chi2 = np.sum((counts[keep] - expected) ** 2 / expected)
        dof = max(int(keep.sum()) - 1, 1)
        # Loose: mean dof, sd sqrt(2 dof); seeds are fixed so this cannot flake.
        assert chi2 < dof + 6 * np.sqrt(2 * dof) + 10, (c, chi2, dof, counts, expected)
        # ...and the bound has power: the plain softmax (T=1, no filter) fails it.
        if c > 0:
            _, plain, _ = allowed_ref(base[c], 1.0, 0, 1.0)
            plain_chi2 = np.sum((counts - plain * draws) ** 2 / (plain * draws))
            assert plain_chi2 > dof + 6 * np.sqrt(2 * dof) + 10, (c, plain_chi2)


def test_row_independent_of_batch_and_position():
    vocab = 1000
    rng = np.random.default_rng(3)
    rows = 8
    logits = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    temperature = np.array([0.0, 1.0, 0.8, 1.2, 1.0, 0.5, 1.0, 2.0], np.float32)
    top_k = np.array([0, 0, 50, 0, 10, 0, 200, 3], np.int32)
    top_p = np.array([1.0, 1.0, 1.0, 0.9, 0.7, 1.0, 0.95, 1.0], np.float32)
    seed = rng.integers(0, 2**32, rows, dtype=np.uint32)
    step = rng.integers(0, 100, rows).astype(np.int32)
    args = (logits, temperature, top_k, top_p, seed, step)

    full_tokens, full_lp = map(np.asarray, sample_jit(*args))
    for r in range(rows):
        alone = sample_jit(*(a[r : r + 1] for a in args))
        # Row r placed last among two different neighbours.
        others = [(r + 3) % rows, (r + 5) % rows]
        trio = sample_jit(*(a[others + [r]] for a in args))
        for tokens, lp, i in ((*alone, 0), (*trio, 2)):
            assert int(tokens[i]) == full_tokens[r]
            assert np.asarray(lp)[i] == full_lp[r]  # bitwise, for determinism suites
    # Different steps of the same request do draw different tokens.
    stepped = np.asarray(sample_jit(logits, temperature, top_k, top_p, seed, step + 1)[0])
    assert np.any(stepped[1:] != full_tokens[1:])


def test_allowed_set_matches_hugging_face_warpers():
    """Temperature, top-k, top-p and min-p against transformers' warpers on 300 random rows
    (tests/fixtures/make_hf_sampler_fixture.py; rows with a cut float rounding could move
    are left out there)."""
    path = pathlib.Path(__file__).parent / "fixtures" / "sampler" / "hf_warpers.json"
    rows = json.loads(path.read_text())["rows"]
    logits = np.array([r["logits"] for r in rows], np.float32)
    temperature = np.array([r["temperature"] for r in rows], np.float32)
    top_k = np.array([r["top_k"] for r in rows], np.int32)
    top_p = np.array([r["top_p"] for r in rows], np.float32)
    min_p = np.array([r["min_p"] for r in rows], np.float32)
    scaled = logits / temperature[:, None]  # float32, as HF's TemperatureLogitsWarper
    keep = np.asarray(jax.jit(allowed_mask)(scaled, top_k, top_p, min_p))
    for i, r in enumerate(rows):
        assert np.flatnonzero(keep[i]).tolist() == r["keep"], (i, r["min_p"], r["top_k"])
    # The filters matter: min-p alone cuts most rows short of the whole vocabulary.
    assert sum(len(r["keep"]) < logits.shape[1] for r in rows if r["min_p"] >= 0.02) > 200


def test_a_small_min_p_filters_in_a_batch_of_small_min_p():
    # Probability ratios to the top token e^0, e^-1, e^-2.5, e^-3.5, e^-6 = 1, .37, .082,
    # .030, .0025: min_p = 0.05 keeps the first three; min_p = 0 keeps all, in the same batch.
    scaled = np.tile(np.array([[0.0, -1.0, -2.5, -3.5, -6.0]], np.float32), (2, 1))
    top_k, top_p = np.zeros(2, np.int32), np.ones(2, np.float32)
    min_p = np.array([0.05, 0.0], np.float32)
    keep = np.asarray(jax.jit(allowed_mask)(scaled, top_k, top_p, min_p))
    assert keep.tolist() == [[True, True, True, False, False], [True] * 5]


def test_min_p_samples_follow_the_renormalized_distribution():
    rng = np.random.default_rng(5)
    configs = [(1.0, 0.1), (0.7, 0.3), (1.5, 0.05)]  # (temperature, min_p)
    draws = ROWS // len(configs)
    n = draws * len(configs)
    base = (rng.standard_normal((len(configs), VOCAB)) * 1.5).astype(np.float32)
    logits = np.repeat(base, draws, axis=0)
    temperature = np.repeat([c[0] for c in configs], draws).astype(np.float32)
    min_p = np.repeat([c[1] for c in configs], draws).astype(np.float32)
    seed = np.full(n, 99, np.uint32)
    step = np.tile(np.arange(draws, dtype=np.int32), len(configs))
    top_k, top_p = np.zeros(n, np.int32), np.ones(n, np.float32)
    tokens = np.asarray(sample_jit(logits, temperature, top_k, top_p, seed, step, min_p)[0])
    for c, (temp, mp) in enumerate(configs):
        scaled = (base[c] / np.float32(temp)).astype(np.float64)
        ratio = np.exp(scaled - scaled.max())
        keep = ratio >= mp
        assert 1 < keep.sum() < VOCAB  # the cut is inside the vocabulary
        probs = np.where(keep, ratio, 0.0) / ratio[keep].sum()
        counts = np.bincount(tokens[c * draws : (c + 1) * draws], minlength=VOCAB)
        assert np.all(counts[~keep] == 0), (c, counts, keep)
        expected = probs[keep] * draws
        chi2 = np.sum((counts[keep] - expected) ** 2 / expected)
        dof = max(int(keep.sum()) - 1, 1)
        assert chi2 < dof + 6 * np.sqrt(2 * dof) + 10, (c, chi2, dof, counts, expected)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_min_p_outside_zero_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"min_p=.*: must be in \[0, 1\]"):
        SamplingParams(min_p=bad)
    assert SamplingParams(min_p=np.float32(0.25)).min_p == 0.25
    assert type(SamplingParams(min_p=np.float32(0.25)).min_p) is float
    # Both ends are allowed: 0 (off) and 1 (only tokens as likely as the top one).
    assert [SamplingParams(min_p=m).min_p for m in (0, 1)] == [0.0, 1.0]
