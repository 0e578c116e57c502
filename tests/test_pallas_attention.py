"""Pallas ragged paged attention (GQA and MLA) against their plain-jnp `_ref` twins.

On CPU the kernels run in interpret mode; the same cases run compiled under
`@pytest.mark.gpu` on a GPU. Each case compiles once and is checked on several random
ragged batches: decodes and prefill chunks, a 0-length span, lengths on and off page
boundaries, a sequence reaching the page table's last column, padding tokens, garbage page
ids past each sequence's pages, and NaN in every cache slot no sequence owns.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import kv_quant
from engine.paged_attention import build_metadata, paged_attention_gqa, paged_attention_mla
from pallas_kernels import (
    GQA_DECODE_CONFIG,
    MLA_DECODE_CONFIG,
    KernelConfig,
    UnsupportedShapeError,
    check_gqa_supported,
    mla_paged_attention,
    mla_paged_attention_ref,
    ragged_paged_attention,
    ragged_paged_attention_ref,
)

ON_GPU = jax.default_backend() == "gpu"
gqa_ref = jax.jit(ragged_paged_attention_ref, static_argnames=("scale", "softcap"))
mla_ref = jax.jit(mla_paged_attention_ref, static_argnames="scale")
NUM_TOKENS = 24  # padded T
NUM_SEQS = 6  # padded S (the last one is padding)
MAX_LEN = 72
SEEDS = (0, 1, 2)
TOL = {jnp.float32: 1e-5, jnp.bfloat16: 2e-2}


def ragged_batch(seed: int, page_size: int, num_pages: int) -> dict:
    """A random step: host metadata plus the set of cache slots sequences own."""
    rng = np.random.default_rng(seed)
    max_pages = -(-MAX_LEN // page_size)
    on_boundary = [page_size * m for m in range(1, MAX_LEN // page_size + 1)]
    first_chunk = int(rng.integers(1, 9))
    near = int(rng.choice(on_boundary))
    off_boundary = near - 1 if near == MAX_LEN else near + int(rng.choice([-1, 1]))
    seqs = [
        (int(rng.integers(2, 7)), MAX_LEN),  # prefill chunk reaching the table's last column
        (1, int(rng.choice(on_boundary))),  # decode whose KV ends on a page boundary
        (1, off_boundary),  # ... and one just off a boundary
        (0, int(rng.integers(1, MAX_LEN + 1))),  # 0-length span: nothing to compute this step
        (first_chunk, first_chunk),  # first chunk of a prompt
    ]
    seqs = [seqs[i] for i in rng.permutation(len(seqs))] + [(0, 0)]  # then a padding sequence
    perm = rng.permutation(num_pages)
    table = rng.integers(-2, num_pages + 3, size=(NUM_SEQS, max_pages)).astype(np.int32)
    cu, kv_lens, positions, owned, used = [0], [], np.zeros(NUM_TOKENS, np.int32), set(), 0
    for s, (q_len, kv) in enumerate(seqs):
        n = -(-kv // page_size)
        table[s, :n] = perm[used : used + n]
        used += n
        positions[cu[-1] : cu[-1] + q_len] = np.arange(kv - q_len, kv)
        cu.append(cu[-1] + q_len)
        kv_lens.append(kv)
        owned |= {int(table[s, j // page_size]) * page_size + j % page_size for j in range(kv)}
    assert cu[-1] < NUM_TOKENS and used <= num_pages
    return dict(
        cu_q_lens=np.asarray(cu, np.int32),
        positions=positions,
        kv_lens=np.asarray(kv_lens, np.int32),
        page_table=table,
        owned=np.asarray(sorted(owned)),
    )


def random_pages(rng, shape, owned, dtype) -> jax.Array:
    """Random cache rows, NaN in every slot no sequence owns (stale or never written)."""
    flat = np.full((shape[0] * shape[1], *shape[2:]), np.nan, np.float32)
    flat[owned] = rng.standard_normal((len(owned), *shape[2:]))
    return jnp.asarray(flat.reshape(shape), dtype)


def _meta(b: dict) -> tuple:
    return (b["cu_q_lens"], b["positions"], b["kv_lens"], b["page_table"])


def _check(out, ref, b, dtype):
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    assert np.isfinite(out).all()
    assert not out[b["cu_q_lens"][-1] :].any(), "padding tokens must get zeros"
    np.testing.assert_allclose(out, ref, atol=TOL[dtype], rtol=TOL[dtype])


GQA_CASES = {
    # name: (group, kv heads, head dim, page size, num pages, dtype, config)
    # at most 2 splits: 48 keys each over the whole table, a tile's own keys cut in two
    "g1_p8_f32_2splits": (1, 2, 16, 8, 48, jnp.float32, KernelConfig(16, 16, 32, max_splits=2)),
    "g3_d40_p16_bf16_fast": (
        3,
        2,
        40,
        16,
        40,
        jnp.bfloat16,
        KernelConfig(32, 16, 48, fast_softmax=True),
    ),
    "g4_p64_f32_fast": (4, 1, 32, 64, 16, jnp.float32, KernelConfig(16, 32, 64, fast_softmax=True)),
    # fixed splits, as batch-invariant mode runs them
    "g8_p8_bf16_2progs_fixed": (
        8,
        1,
        16,
        8,
        48,
        jnp.bfloat16,
        KernelConfig(16, 16, 32, max_heads_per_program=4, splits_follow_length=False),
    ),
    "g4_p16_f32_default": (4, 2, 32, 16, 40, jnp.float32, KernelConfig()),
    # a program target: the 64-key split shortens to min_split (16 keys, 5 splits at 72);
    # pages of 24 rows (a multiple of 8, not a power of two): blocks straddle pages
    "g4_p24_bf16_target_fast": (
        4,
        2,
        32,
        24,
        40,
        jnp.bfloat16,
        KernelConfig(16, 16, 64, target_programs=1024, min_split=16, fast_softmax=True),
    ),
}
MODES = [
    pytest.param(True, id="interpret"),
    pytest.param(False, id="gpu", marks=pytest.mark.gpu),
]


def _skip_unless_runnable(interpret: bool):
    if not interpret and not ON_GPU:
        pytest.skip("needs a GPU")


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case", list(GQA_CASES))
def test_gqa_kernel_matches_ref(case, interpret):
    _skip_unless_runnable(interpret)
    group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[case]
    shape = (num_pages, page_size, kv_heads, head_dim)
    kernel = jax.jit(
        functools.partial(
            ragged_paged_attention, scale=head_dim**-0.5, config=config, interpret=interpret
        )
    )
    for seed in SEEDS:
        b = ragged_batch(seed, page_size, num_pages)
        rng = np.random.default_rng(100 + seed)
        q = jnp.asarray(rng.standard_normal((NUM_TOKENS, group * kv_heads, head_dim)), dtype)
        k_pages = random_pages(rng, shape, b["owned"], dtype)
        v_pages = random_pages(rng, shape, b["owned"], dtype)
        out = kernel(q, k_pages, v_pages, *_meta(b))
        ref = gqa_ref(q, k_pages, v_pages, *_meta(b), scale=head_dim**-0.5)
        assert out.shape == q.shape and out.dtype == q.dtype
        _check(out, ref, b, dtype)


# Sliding windows: (case of GQA_CASES, window). One key; part of a block; windows that
# start inside a KV split after whole skipped blocks (and splits) with fixed and
# length-following splits; a window longer than any context (= no window).
WINDOW_CASES = [
    ("g1_p8_f32_2splits", 1),
    ("g3_d40_p16_bf16_fast", 5),
    ("g8_p8_bf16_2progs_fixed", 21),
    ("g4_p24_bf16_target_fast", 40),
    ("g4_p16_f32_default", 100),
]


def _rows_in_windows(b: dict, page_size: int, window: int) -> np.ndarray:
    """Cache slots some query of the step sees under a sliding window."""
    live = []
    for s, kv in enumerate(b["kv_lens"]):
        q_len = b["cu_q_lens"][s + 1] - b["cu_q_lens"][s]
        first = kv if q_len == 0 else max(0, kv - q_len + 1 - window)
        live += [
            b["page_table"][s, j // page_size] * page_size + j % page_size for j in range(first, kv)
        ]
    return np.asarray(sorted(live))


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case, window", WINDOW_CASES)
def test_gqa_kernel_with_a_sliding_window_matches_ref(case, window, interpret):
    """A token at position p sees keys p - window + 1 .. p; the twin checks it, and the twin
    itself is checked against the engine's XLA path (test_refs_match_the_engine_xla_path)."""
    _skip_unless_runnable(interpret)
    group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[case]
    shape = (num_pages, page_size, kv_heads, head_dim)
    scale = head_dim**-0.5
    kernel = jax.jit(
        functools.partial(
            ragged_paged_attention, scale=scale, window=window, config=config, interpret=interpret
        )
    )
    for seed in SEEDS[:2]:
        b = ragged_batch(seed, page_size, num_pages)
        rng = np.random.default_rng(300 + seed)
        q = jnp.asarray(rng.standard_normal((NUM_TOKENS, group * kv_heads, head_dim)), dtype)
        # NaN also in the rows before every query's window (pages given back to the pool).
        live = _rows_in_windows(b, page_size, window)
        k_pages = random_pages(rng, shape, live, dtype)
        v_pages = random_pages(rng, shape, live, dtype)
        out = kernel(q, k_pages, v_pages, *_meta(b))
        ref = gqa_ref(q, k_pages, v_pages, *_meta(b), scale=scale, window=window)
        _check(out, ref, b, dtype)
        finite = [jnp.nan_to_num(p) for p in (k_pages, v_pages)]
        full = gqa_ref(q, *finite, *_meta(b), scale=scale)
        ref = gqa_ref(q, *finite, *_meta(b), scale=scale, window=window)
        changed = np.abs(np.asarray(full, np.float32) - np.asarray(ref, np.float32)).max()
        assert changed == 0 if window >= MAX_LEN else changed > 0.1


def _gqa_batch(case: str, window: int | None, seed: int):
    """A ragged batch for GQA_CASES[case] (batch seed seed % 100), its rng (seeded `seed`),
    queries and K/V pages: random where its sequences own them (with a window, only the rows
    some query's window holds; NaN elsewhere)."""
    group, kv_heads, head_dim, page_size, num_pages, dtype, _ = GQA_CASES[case]
    b = ragged_batch(seed % 100, page_size, num_pages)
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((NUM_TOKENS, group * kv_heads, head_dim)), dtype)
    live = b["owned"] if window is None else _rows_in_windows(b, page_size, window)
    shape = (num_pages, page_size, kv_heads, head_dim)
    return b, rng, q, random_pages(rng, shape, live, dtype), random_pages(rng, shape, live, dtype)


# Attention sinks (gpt-oss): the kernel's splits merged with one sink logit per head, with
# several splits, the base-2 fast softmax and padded head blocks (group 3 in 4 rows), fixed
# splits (batch-invariant mode), and a window.
SINK_CASES = [
    ("g1_p8_f32_2splits", None),
    ("g3_d40_p16_bf16_fast", None),
    ("g8_p8_bf16_2progs_fixed", 21),
]


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case, window", SINK_CASES)
def test_gqa_kernel_with_attention_sinks_matches_ref(case, window, interpret):
    _skip_unless_runnable(interpret)
    group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[case]
    scale = head_dim**-0.5
    kernel = jax.jit(
        functools.partial(
            ragged_paged_attention, scale=scale, window=window, config=config, interpret=interpret
        )
    )
    for seed in SEEDS[:2]:
        b, rng, q, k_pages, v_pages = _gqa_batch(case, window, 500 + seed)
        sinks = jnp.asarray(2 * rng.standard_normal(group * kv_heads), jnp.float32)
        out = kernel(q, k_pages, v_pages, *_meta(b), sinks=sinks)
        ref = gqa_ref(q, k_pages, v_pages, *_meta(b), scale=scale, window=window, sinks=sinks)
        _check(out, ref, b, dtype)
        plain = gqa_ref(q, k_pages, v_pages, *_meta(b), scale=scale, window=window)
        assert np.abs(np.asarray(plain, np.float32) - np.asarray(ref, np.float32)).max() > 0.1


# Soft-capped scores (Gemma 2): 1.5 * tanh(s / 1.5) on scores of about 1, with several
# splits in f32, the base-2 fast softmax (the cap taken in natural units first), and fixed
# splits under a window, there with sinks as well.
SOFTCAP_CASES = [
    ("g1_p8_f32_2splits", None, False),
    ("g3_d40_p16_bf16_fast", None, False),
    ("g8_p8_bf16_2progs_fixed", 21, True),
]


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case, window, with_sinks", SOFTCAP_CASES)
def test_gqa_kernel_with_soft_capped_scores_matches_ref(case, window, with_sinks, interpret):
    _skip_unless_runnable(interpret)
    group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[case]
    scale, cap = head_dim**-0.5, 1.5
    kernel = jax.jit(
        functools.partial(
            ragged_paged_attention,
            scale=scale,
            window=window,
            config=config,
            interpret=interpret,
            softcap=cap,
        )
    )
    for seed in SEEDS[:2]:
        b, rng, q, k_pages, v_pages = _gqa_batch(case, window, 600 + seed)
        extra = {}
        if with_sinks:
            extra["sinks"] = jnp.asarray(2 * rng.standard_normal(group * kv_heads), jnp.float32)
        out = kernel(q, k_pages, v_pages, *_meta(b), **extra)
        args = (q, k_pages, v_pages, *_meta(b))
        ref = gqa_ref(*args, scale=scale, window=window, softcap=cap, **extra)
        _check(out, ref, b, dtype)
        uncapped = gqa_ref(*args, scale=scale, window=window, **extra)
        assert np.abs(np.asarray(uncapped, np.float32) - np.asarray(ref, np.float32)).max() > 0.1


# ALiBi (BLOOM, MPT): slope_h * (key - query position) on every score, inside the kernel's
# online softmax. f32 with group 1 over two splits; bf16 with group 3 (a padded head slot,
# slope 0), the base-2 fast softmax, a window, a softcap and sinks, over 48-key splits;
# group 8 in two head blocks (slopes laid out per block) over fixed 32-key splits.
ALIBI_CASES = [
    ("g1_p8_f32_2splits", None, 0.0, False),
    ("g3_d40_p16_bf16_fast", 5, 1.5, True),
    ("g8_p8_bf16_2progs_fixed", None, 0.0, False),
]


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case, window, cap, with_sinks", ALIBI_CASES)
def test_gqa_kernel_with_alibi_matches_ref(case, window, cap, with_sinks, interpret):
    _skip_unless_runnable(interpret)
    group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[case]
    scale = head_dim**-0.5
    static = dict(scale=scale, window=window, softcap=cap)
    kernel = jax.jit(
        functools.partial(ragged_paged_attention, **static, config=config, interpret=interpret)
    )
    for seed in SEEDS[:2]:
        b, rng, q, k_pages, v_pages = _gqa_batch(case, window, 700 + seed)
        # Slopes of 0.01-0.3: keys 10-100 positions back still count, across splits.
        extra = {"alibi": jnp.asarray(rng.uniform(0.01, 0.3, group * kv_heads), jnp.float32)}
        if with_sinks:
            extra["sinks"] = jnp.asarray(2 * rng.standard_normal(group * kv_heads), jnp.float32)
        args = (q, k_pages, v_pages, *_meta(b))
        out = kernel(*args, **extra)
        ref = gqa_ref(*args, **static, **extra)
        _check(out, ref, b, dtype)
        plain = gqa_ref(*args, **static, sinks=extra.get("sinks"))
        assert np.abs(np.asarray(plain, np.float32) - np.asarray(ref, np.float32)).max() > 0.1


def test_alibi_ref_matches_a_dense_softmax_with_hf_absolute_bias():
    """The twin against numpy in HF BLOOM's form, slope_h * key position (equal to the
    relative form: softmax is shift-invariant per row), for one prefill chunk of a paged
    sequence followed by padding tokens."""
    rng = np.random.default_rng(11)
    kv_heads, group, dim, page_size, kv_len, q_len = 2, 3, 8, 4, 19, 5
    heads, num_pages, max_pages = kv_heads * group, 8, 6
    table = rng.permutation(num_pages)[:max_pages].astype(np.int32)[None]  # [1, 6]
    k = rng.standard_normal((num_pages, page_size, kv_heads, dim)).astype(np.float32)
    v = rng.standard_normal((num_pages, page_size, kv_heads, dim)).astype(np.float32)
    q = rng.standard_normal((q_len + 2, heads, dim)).astype(np.float32)
    slopes = 2.0 ** -np.arange(1, heads + 1, dtype=np.float32)  # BLOOM's for 8 heads, first 6
    positions = np.r_[np.arange(kv_len - q_len, kv_len), 0, 0].astype(np.int32)
    meta = (np.array([0, q_len], np.int32), positions, np.array([kv_len], np.int32), table)
    out = gqa_ref(q, k, v, *meta, scale=0.3, alibi=slopes)

    slot = table[0, np.arange(kv_len) // page_size], np.arange(kv_len) % page_size
    keys, values = k[slot], v[slot]  # [kv_len, K, D]
    want = np.zeros_like(q)
    for t in range(q_len):
        for h in range(heads):
            s = 0.3 * keys[:, h // group] @ q[t, h] + slopes[h] * np.arange(kv_len)
            s[np.arange(kv_len) > positions[t]] = -np.inf
            p = np.exp(s - s.max())
            want[t, h] = (p / p.sum()) @ values[:, h // group]
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-5, rtol=1e-5)
    plain = np.asarray(gqa_ref(q, k, v, *meta, scale=0.3))
    assert np.abs(plain - want).max() > 0.1


def test_bad_alibi_slopes_are_refused():
    q = jnp.zeros((4, 4, 16), jnp.float32)
    pages = jnp.zeros((4, 8, 2, 16), jnp.float32)
    meta = (
        jnp.array([0, 2, 4], jnp.int32),
        jnp.arange(4, dtype=jnp.int32),
        jnp.array([2, 2], jnp.int32),
        jnp.zeros((2, 3), jnp.int32),
    )
    for fn in (ragged_paged_attention, ragged_paged_attention_ref):
        for bad in (jnp.zeros(2), jnp.zeros(5), jnp.zeros((1, 4))):
            with pytest.raises(ValueError, match=r"alibi .*expected \[H\] = \[4\]"):
                fn(q, pages, pages, *meta, scale=0.1, alibi=bad)
        with pytest.raises(ValueError, match="alibi=.*must be finite"):
            fn(q, pages, pages, *meta, scale=0.1, alibi=jnp.array([0.5, jnp.nan, 0.1, 0.2]))
    with pytest.raises(ValueError, match=r"alibi \(5,\)"):  # also under jit (traced)
        jax.jit(functools.partial(ragged_paged_attention, scale=0.1, interpret=True))(
            q, pages, pages, *meta, alibi=jnp.zeros(5)
        )


MLA_CASES = {
    # name: (heads, kv_lora_rank, rope dim, page size, num pages, dtype, config)
    # a 1-byte partials budget: one split over the whole page table (an MLA prefill's case)
    "h4_r32_dr8_p16_f32_unsplit": (
        4,
        32,
        8,
        16,
        40,
        jnp.float32,
        KernelConfig(16, 16, 32, max_partial_bytes=1),
    ),
    # at most 3 splits: 32-key ones over the table, 16-key ones in a tile of 40 keys
    "h16_r64_dr16_p8_bf16_2progs_3splits_fast": (
        16,
        64,
        16,
        8,
        48,
        jnp.bfloat16,
        KernelConfig(16, 16, 16, max_splits=3, max_heads_per_program=8, fast_softmax=True),
    ),
    "h3_r32_dr16_p64_f32_fast": (
        3,
        32,
        16,
        64,
        16,
        jnp.float32,
        KernelConfig(16, 32, 64, fast_softmax=True),
    ),
}


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case", list(MLA_CASES))
def test_mla_kernel_matches_ref(case, interpret):
    _skip_unless_runnable(interpret)
    heads, rank, rope, page_size, num_pages, dtype, config = MLA_CASES[case]
    scale = 0.5 * (rank + rope) ** -0.5
    kernel = jax.jit(
        functools.partial(mla_paged_attention, scale=scale, config=config, interpret=interpret)
    )
    for seed in SEEDS:
        b = ragged_batch(seed, page_size, num_pages)
        rng = np.random.default_rng(200 + seed)
        q_lat = jnp.asarray(rng.standard_normal((NUM_TOKENS, heads, rank)), dtype)
        q_pe = jnp.asarray(rng.standard_normal((NUM_TOKENS, heads, rope)), dtype)
        latent = random_pages(rng, (num_pages, page_size, rank + rope), b["owned"], dtype)
        out = kernel(q_lat, q_pe, latent, *_meta(b))
        ref = mla_ref(q_lat, q_pe, latent, *_meta(b), scale=scale)
        assert out.shape == q_lat.shape and out.dtype == dtype
        _check(out, ref, b, dtype)


def test_refs_match_the_engine_xla_path():
    """The twins encode the engine's semantics (positions, kv_lens, padding rows)."""
    b = ragged_batch(5, 16, 40)
    rng = np.random.default_rng(5)
    meta = build_metadata(*(jnp.asarray(x) for x in _meta(b)))
    xla_gqa = jax.jit(
        paged_attention_gqa, static_argnums=(4, 5), static_argnames=("window", "softcap")
    )
    xla_mla = jax.jit(paged_attention_mla, static_argnums=(4, 5))
    q = jnp.asarray(rng.standard_normal((NUM_TOKENS, 6, 40)), jnp.float32)
    k_pages = random_pages(rng, (40, 16, 2, 40), b["owned"], jnp.float32)
    v_pages = random_pages(rng, (40, 16, 2, 40), b["owned"], jnp.float32)
    sinks = jnp.asarray(rng.standard_normal(6), jnp.float32)
    alibi = jnp.asarray(2.0 ** -np.arange(1, 7), jnp.float32)  # (slopes 1/2 .. 1/64)
    sunk = {"sinks": sinks}
    cases = ((None, {}), (3, {}), (20, {}), (None, sunk), (3, sunk))
    cases += ((20, {**sunk, "softcap": 1.5}), (None, {"alibi": alibi}), (3, {"alibi": alibi}))
    for window, extra in cases:
        np.testing.assert_allclose(
            gqa_ref(q, k_pages, v_pages, *_meta(b), scale=0.2, window=window, **extra),
            xla_gqa(q, k_pages, v_pages, meta, 0.2, 2, window=window, **extra),
            atol=1e-5,
            rtol=1e-5,
        )
    q_lat = jnp.asarray(rng.standard_normal((NUM_TOKENS, 4, 32)), jnp.float32)
    q_pe = jnp.asarray(rng.standard_normal((NUM_TOKENS, 4, 8)), jnp.float32)
    latent = random_pages(rng, (40, 16, 40), b["owned"], jnp.float32)
    np.testing.assert_allclose(
        mla_ref(q_lat, q_pe, latent, *_meta(b), scale=0.2),
        xla_mla(q_lat, q_pe, latent, meta, 0.2, 2),
        atol=1e-5,
        rtol=1e-5,
    )


def test_split_size_is_fixed_by_the_page_table_not_the_batch():
    config = KernelConfig(block_kv=64, kv_split=2048, max_splits=16)
    assert config.split_size(8192) == 2048
    assert config.split_size(32768) == 2048
    assert config.split_size(131072) == 8192  # at most 16 splits
    assert config.split_size(100_000) % 64 == 0
    with pytest.raises(ValueError, match="kv_split"):
        KernelConfig(block_kv=64, kv_split=96)
    with pytest.raises(ValueError, match="block_kv"):
        KernelConfig(block_kv=8)


def test_steps_with_many_query_rows_lengthen_their_splits_to_bound_the_partials():
    config = KernelConfig(block_kv=64, kv_split=2048, max_splits=16, max_partial_bytes=1 << 30)
    # DeepSeek-V3 unsharded: a 2048-token step, 2 programs of 64 heads per token, f32
    # partials of 512 latent columns plus a log-sum-exp: 0.5 GiB per split.
    mla_prefill = 2 * (2048 + 1) * 64 * (512 + 1) * 4
    assert config.split_size(32768, split_bytes=mla_prefill) == 32768  # 1 split, not 16
    assert config.split_size(32768, split_bytes=256 << 20) == 8192  # 4 splits fit in 1 GiB
    assert config.split_size(32768, split_bytes=64 << 20) == 2048  # 16 fit: unchanged
    assert config.split_size(100_000, split_bytes=256 << 20) == 25_024  # whole key blocks
    unbounded = dataclasses.replace(config, max_partial_bytes=0)
    assert unbounded.split_size(32768, split_bytes=mla_prefill) == 2048
    # The bound wins over a program target's shorter splits.
    target = dataclasses.replace(GQA_DECODE_CONFIG, max_partial_bytes=1 << 30)
    assert target.split_size(32768, programs=8, split_bytes=256 << 20) == 8192
    with pytest.raises(ValueError, match="max_partial_bytes"):
        KernelConfig(max_partial_bytes=-1)


def test_splits_follow_each_tiles_keys_not_the_page_tables_width():
    """An engine's page table spans max_model_len; a tile's splits are cut from the keys it
    sees, as a table of its own length would cut them, within the grid the width sets."""
    wide = 131072
    decode = GQA_DECODE_CONFIG  # 64 x 8k, 8 KV heads: 512 programs
    keys = jnp.asarray([8192] * 64, jnp.int32)
    assert decode.split_size(wide, programs=512) == 8192  # the width's one piece of 8k
    num_splits, size = decode.tile_splits(keys, wide, programs=512)
    assert num_splits == 16
    assert size.tolist() == [decode.split_size(8192, programs=512)] * 64 == [2048] * 64
    # 1 x 2k: 8 splits of 256 keys, as in a 2k table.
    num_splits, size = decode.tile_splits(jnp.asarray([2048]), wide, programs=8)
    assert size.tolist() == [256] == [decode.split_size(2048, programs=8)]
    # A 2k prefill chunk ending at 32k: 2048-key splits (16), not 8192 (4).
    prefill = KernelConfig()
    num_splits, size = prefill.tile_splits(jnp.asarray([30784, 32768]), wide)
    assert num_splits == 16 and size.tolist() == [2048, 2048]
    # The partials bound still holds: an MLA prefill's 0.5 GiB a split gets one (1 GiB),
    # 256 MiB ones get four.
    mla_bytes = 2 * (2048 + 1) * 64 * (512 + 1) * 4
    num_splits, size = prefill.tile_splits(jnp.asarray([32768]), wide, split_bytes=mla_bytes)
    assert num_splits == 1 and size.tolist() == [32768]
    num_splits, size = prefill.tile_splits(jnp.asarray([32768]), wide, split_bytes=256 << 20)
    assert num_splits == 4 and size.tolist() == [8192]
    # Never more pieces than the grid holds, at any key count.
    rng = np.random.default_rng(0)
    keys = jnp.asarray(rng.integers(0, wide + 1, 500), jnp.int32)
    for config, programs in ((decode, 8), (decode, 512), (prefill, 0), (decode, 100)):
        num_splits, size = config.tile_splits(keys, wide, programs=programs)
        assert (np.asarray(size) > 0).all() and (np.asarray(size) % config.block_kv == 0).all()
        assert (-(-np.asarray(keys) // np.asarray(size)) <= num_splits).all()
    # Batch-invariant mode's fixed splits: the width's, whatever the keys.
    fixed = dataclasses.replace(decode, splits_follow_length=False)
    num_splits, size = fixed.tile_splits(keys[:3], wide, programs=512)
    assert num_splits == 16 and size.tolist() == [8192] * 3


def test_decode_splits_shorten_until_the_step_has_enough_programs():
    config = GQA_DECODE_CONFIG  # about 1024 programs, splits of at least 256 keys
    assert config.split_size(2048, programs=8) == 256  # 1 x 2k, 8 KV heads: 8 splits
    assert config.split_size(8192, programs=128) == 1024  # 16 x 8k: 8 splits
    assert config.split_size(32768, programs=8) == 256  # 1 x 32k: 128 splits, past max_splits
    # Enough programs already: the fixed split (64 x 8k, 16 x 32k), never a longer one.
    assert config.split_size(8192, programs=512) == 2048
    assert config.split_size(32768, programs=128) == 2048
    assert KernelConfig().split_size(2048, programs=8) == 2048  # no target: the batch is ignored
    # MLA decodes (two 64-head programs a token at 128 heads): about 264 programs.
    assert MLA_DECODE_CONFIG.split_size(2048, programs=2) == 128  # 1 x 2k: 16 splits
    assert MLA_DECODE_CONFIG.split_size(8192, programs=32) == 928  # 16 x 8k: 9 splits
    assert MLA_DECODE_CONFIG.split_size(8192, programs=128) == 2048  # 64 x 8k: as before
    with pytest.raises(ValueError, match="min_split"):
        KernelConfig(target_programs=64, min_split=100)


def test_unsupported_shapes_raise_a_clear_error():
    q = jnp.zeros((4, 8, 512), jnp.float32)
    pages = jnp.zeros((4, 8, 2, 512), jnp.float32)
    with pytest.raises(UnsupportedShapeError, match="head_dim=512"):
        check_gqa_supported(q, pages, pages)
    with pytest.raises(UnsupportedShapeError, match="dtypes"):
        check_gqa_supported(q[..., :64], pages[..., :64].astype(jnp.float16), pages[..., :64])
    with pytest.raises(ValueError, match="multiple of num kv heads"):
        check_gqa_supported(jnp.zeros((4, 3, 64)), pages[..., :64], pages[..., :64])


def test_malformed_metadata_and_configs_raise_a_clear_error():
    q = jnp.zeros((4, 4, 64), jnp.float32)
    pages = jnp.zeros((4, 8, 2, 64), jnp.float32)
    cu, pos, lens, table = (
        jnp.array([0, 2, 4], jnp.int32),
        jnp.arange(4, dtype=jnp.int32),
        jnp.array([2, 2], jnp.int32),
        jnp.zeros((2, 3), jnp.int32),
    )
    for bad in (
        (cu, pos, lens, table[0]),  # a 1-D page table
        (cu, pos, lens, table[None]),  # a 3-D one
        (cu, pos, lens[:, None], table),  # 2-D kv_lens
        (cu[:1], pos, lens[:0], table[:0]),  # no sequences
        (cu, pos, lens, table[:, :0]),  # no table columns
    ):
        with pytest.raises(ValueError, match=r"expected \[S \+ 1\], \[S\], \[S, Pmax\], \[T\]"):
            ragged_paged_attention(q, pages, pages, *bad, scale=0.1, interpret=True)
    for field, value in (("num_warps", 0), ("num_warps", 3), ("num_stages", 0)):
        with pytest.raises(ValueError, match=f"KernelConfig.{field}={value}"):
            KernelConfig(**{field: value})
    for cap in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="softcap=.*: must be a finite number >= 0"):
            ragged_paged_attention(q, pages, pages, cu, pos, lens, table, scale=0.1, softcap=cap)


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("window", [None, 20])
def test_gqa_kernel_is_batch_invariant(interpret, window):
    """A token's output is bitwise the same alone or among other sequences, at another row
    of the padded batch, and as a decode or as the last token of a prefill chunk; with a
    20-key window (keys 50..69: the first split and a block of the second skipped) too."""
    _skip_unless_runnable(interpret)
    page_size, num_pages, max_pages, kv_len = 16, 40, 5, 70  # 70 keys: 3 splits of 32
    config = KernelConfig(16, 16, 32)
    rng = np.random.default_rng(7)
    k_pages = jnp.asarray(rng.standard_normal((num_pages, page_size, 2, 32)), jnp.float32)
    v_pages = jnp.asarray(rng.standard_normal((num_pages, page_size, 2, 32)), jnp.float32)
    q_rows = jnp.asarray(rng.standard_normal((4, 8, 32)), jnp.float32)  # positions 66..69
    own_pages = np.arange(5, 10, dtype=np.int32)
    kernel = jax.jit(
        functools.partial(
            ragged_paged_attention, scale=0.2, window=window, config=config, interpret=interpret
        )
    )

    def run(num_tokens, spans, x_seq, x_q_len):
        """spans: (q_len, kv_len) per sequence; sequence x_seq is ours, ending at kv_len."""
        cu = np.concatenate([[0], np.cumsum([q for q, _ in spans])]).astype(np.int32)
        positions = np.zeros(num_tokens, np.int32)
        table = rng.integers(10, num_pages, size=(len(spans), max_pages)).astype(np.int32)
        q = jnp.asarray(rng.standard_normal((num_tokens, 8, 32)), jnp.float32)
        for s, (q_len, kv) in enumerate(spans):
            positions[cu[s] : cu[s + 1]] = np.arange(kv - q_len, kv)
        table[x_seq] = own_pages
        q = q.at[cu[x_seq] : cu[x_seq + 1]].set(q_rows[4 - x_q_len :])
        kv_lens = np.asarray([kv for _, kv in spans], np.int32)
        out = kernel(q, k_pages, v_pages, cu, positions, kv_lens, table)
        return np.asarray(out[cu[x_seq + 1] - 1])  # the token at position kv_len - 1

    alone = run(8, [(1, kv_len), (0, 0)], 0, 1)
    crowded = run(24, [(3, 20), (1, 33), (0, 9), (5, 48), (1, kv_len), (0, 0)], 4, 1)
    in_chunk = run(24, [(1, 17), (4, kv_len), (2, 31), (0, 0), (0, 0), (0, 0)], 1, 4)
    np.testing.assert_array_equal(alone, crowded)
    np.testing.assert_array_equal(alone, in_chunk)


FP8_CASES = {
    # name: (kernel, case of GQA_CASES / MLA_CASES whose shapes and query dtype it takes,
    #        pages as float8_e4m3fn or as their uint8 bits, as the engine keeps them)
    "gqa_g3_d40_p16_bf16_fast_bits": ("gqa", "g3_d40_p16_bf16_fast", "bits"),
    "gqa_g4_p16_f32_default_fp8": ("gqa", "g4_p16_f32_default", "fp8"),
    "mla_h16_r64_dr16_p8_bf16_2progs_3splits_fast_bits": (
        "mla",
        "h16_r64_dr16_p8_bf16_2progs_3splits_fast",
        "bits",
    ),
}


def random_fp8_pages(rng, shape, owned):
    """float8_e4m3fn pages and their float32 row scales; NaN rows where no sequence owns."""
    return kv_quant.quantize_rows(random_pages(rng, shape, owned, jnp.float32) * 4.0)


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case", list(FP8_CASES))
def test_kernels_read_fp8_pages_with_row_scales(case, interpret):
    """fp8 pages: the kernel applies the scales to scores and probabilities, the `_ref` twin
    dequantizes the pages whole; they agree to the query dtype's tolerance."""
    _skip_unless_runnable(interpret)
    kind, base, storage = FP8_CASES[case]

    def data(pages):
        return pages.data if storage == "bits" else pages.fp8()

    if kind == "gqa":
        group, kv_heads, head_dim, page_size, num_pages, dtype, config = GQA_CASES[base]
        shape, scale = (num_pages, page_size, kv_heads, head_dim), head_dim**-0.5
        kernel = jax.jit(
            functools.partial(
                ragged_paged_attention, scale=scale, config=config, interpret=interpret
            )
        )
    else:
        heads, rank, rope, page_size, num_pages, dtype, config = MLA_CASES[base]
        shape, scale = (num_pages, page_size, rank + rope), 0.5 * (rank + rope) ** -0.5
        kernel = jax.jit(
            functools.partial(mla_paged_attention, scale=scale, config=config, interpret=interpret)
        )
    for seed in SEEDS[:2]:
        b = ragged_batch(seed, page_size, num_pages)
        rng = np.random.default_rng(300 + seed)
        if kind == "gqa":
            q = jnp.asarray(rng.standard_normal((NUM_TOKENS, group * kv_heads, head_dim)), dtype)
            k, v = (
                random_fp8_pages(rng, shape, b["owned"]),
                random_fp8_pages(rng, shape, b["owned"]),
            )
            args = (q, data(k), data(v), *_meta(b))
            out = kernel(*args, k_scales=k.scale, v_scales=v.scale)
            ref = gqa_ref(*args, scale=scale, k_scales=k.scale, v_scales=v.scale)
        else:
            q_lat = jnp.asarray(rng.standard_normal((NUM_TOKENS, heads, rank)), dtype)
            q_pe = jnp.asarray(rng.standard_normal((NUM_TOKENS, heads, rope)), dtype)
            latent = random_fp8_pages(rng, shape, b["owned"])
            args = (q_lat, q_pe, data(latent), *_meta(b))
            out = kernel(*args, latent_scales=latent.scale)
            ref = mla_ref(*args, scale=scale, latent_scales=latent.scale)
        assert out.dtype == dtype
        _check(out, ref, b, dtype)


def test_fp8_pages_need_their_scales():
    q = jnp.zeros((4, 4, 32), jnp.bfloat16)
    pages = jnp.zeros((4, 8, 2, 32), jnp.float8_e4m3fn)
    scales = jnp.zeros((4, 8, 2), jnp.float32)
    check_gqa_supported(q, pages, pages, scales, scales)
    with pytest.raises(ValueError, match="per-row scales"):
        check_gqa_supported(q, pages, pages)
    with pytest.raises(ValueError, match=r"expected float32 \(4, 8, 2\)"):
        check_gqa_supported(q, pages, pages, scales[..., :1], scales)
    with pytest.raises(ValueError, match="scales given for"):
        check_gqa_supported(q, pages.astype(q.dtype), pages.astype(q.dtype), scales, scales)


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_fp8_pages_under_float16_queries_keep_a_diffuse_tail(kind, interpret):
    """One decode over 2,000 keys: one key scores 9 above the rest, whose probabilities
    (~6e-6 each, with a row scale ~1.5e-4) sum to a tenth of the output. float16 is normal
    only above 6e-5: p times the scale, formed in float16, rounded the tail away (9% of
    the output lost); the kernel agrees with its `_ref` to float16's own rounding."""
    _skip_unless_runnable(interpret)
    rng = np.random.default_rng(0)
    page_size, kv_len = 16, 2000
    num_pages = kv_len // page_size
    table = jnp.arange(num_pages, dtype=jnp.int32)[None]
    meta = (
        jnp.array([0, 1], jnp.int32),
        jnp.array([kv_len - 1], jnp.int32),
        jnp.array([kv_len], jnp.int32),
        table,
    )
    values = 0.05 + 0.02 * rng.standard_normal((num_pages * page_size, 64))
    if kind == "gqa":
        scale = 64**-0.5
        k = 0.01 * rng.standard_normal((num_pages * page_size, 64))
        k[0, 0] = 9.0 / scale / 8.0  # with q = 8 e_0: key 0 scores 9, the rest ~0
        k, v = (
            kv_quant.quantize_rows(jnp.asarray(x.reshape(num_pages, page_size, 1, 64), jnp.float32))
            for x in (k, values)
        )
        q = jnp.zeros((1, 1, 64), jnp.float16).at[0, 0, 0].set(8.0)
        args = (q, k.data, v.data, *meta)
        scales = dict(k_scales=k.scale, v_scales=v.scale)
        kernel, ref = ragged_paged_attention, gqa_ref
    else:
        rank, rope = 64, 16
        scale = (rank + rope) ** -0.5
        latent = np.concatenate(
            [values, 0.01 * rng.standard_normal((num_pages * page_size, rope))], axis=1
        )
        latent[0, rank] = 0.1  # with q_pe = (9 / scale / 0.1) e_0: key 0 scores 9
        lat = kv_quant.quantize_rows(
            jnp.asarray(latent.reshape(num_pages, page_size, rank + rope), jnp.float32)
        )
        q_pe = jnp.zeros((1, 4, rope), jnp.float16).at[:, :, 0].set(9.0 / scale / 0.1)
        args = (jnp.zeros((1, 4, rank), jnp.float16), q_pe, lat.data, *meta)
        scales = dict(latent_scales=lat.scale)
        kernel, ref = mla_paged_attention, mla_ref
    out = kernel(*args, scale=scale, interpret=interpret, **scales)
    want = np.asarray(ref(*args, scale=scale, **scales), np.float32)
    tail_share = 1 - 1 / (1 + (kv_len - 1) * np.exp(-9.0))  # of the softmax mass
    assert 0.1 < tail_share < 0.3
    np.testing.assert_allclose(np.asarray(out, np.float32), want, atol=2e-3 * np.abs(want).max())
