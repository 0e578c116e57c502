"""engine/paged_attention.py against dense per-sequence attention in float64 numpy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.paged_attention import (
    build_metadata,
    paged_attention_gqa,
    paged_attention_mla,
    write_kv,
)

NUM_PAGES = 48
NUM_TOKENS = 40  # padded T
NUM_SEQS = 6  # padded S
MAX_LEN = 72
GARBAGE = 1e4  # stale rows: large but finite, like a previous request's K/V
TOL = 1e-5


def make_batch(rng, page_size):
    """A random ragged step: decodes, prefill chunks, empty spans and padding, shuffled pages.

    Returns host arrays plus, per real sequence, (q_len, kv_len, page ids).
    """
    # An odd number of columns (9 or 5), so a block of 2 pages overhangs the table's end.
    max_pages = -(-MAX_LEN // page_size)
    # Lengths on, just before and just after page boundaries, plus random ones.
    boundary = [page_size * m + d for m in range(1, 5) for d in (-1, 0, 1)]
    seqs = []
    tokens_left, pages_left = NUM_TOKENS - 3, NUM_PAGES  # keep a few padding tokens
    for _ in range(rng.integers(3, NUM_SEQS + 1)):
        kind = rng.choice(["decode", "prefill", "empty"], p=[0.4, 0.45, 0.15])
        kv_len = int(rng.choice(boundary) if rng.random() < 0.5 else rng.integers(1, MAX_LEN + 1))
        if not seqs:
            kv_len = MAX_LEN  # reaches the table's last column
        if kind == "decode":
            q_len = 1
        elif kind == "prefill":
            q_len = int(rng.integers(1, min(kv_len, 14) + 1))
        else:
            q_len = 0
        q_len = min(q_len, tokens_left)
        if -(-kv_len // page_size) > pages_left:
            kv_len, q_len = 0, 0
        n_pages = -(-kv_len // page_size)
        tokens_left -= q_len
        pages_left -= n_pages
        seqs.append((q_len, kv_len, n_pages))
    perm = rng.permutation(NUM_PAGES)
    # Unused columns hold garbage, including out-of-range ids, which must be harmless.
    page_table = rng.integers(-2, NUM_PAGES + 3, size=(NUM_SEQS, max_pages)).astype(np.int32)
    kv_lens = np.zeros(NUM_SEQS, np.int32)
    cu = [0]
    used = 0
    seq_pages = []
    for s, (q_len, kv_len, n_pages) in enumerate(seqs):
        pages = perm[used : used + n_pages]
        used += n_pages
        page_table[s, :n_pages] = pages
        kv_lens[s] = kv_len
        cu.append(cu[-1] + q_len)
        seq_pages.append(pages)
    cu += [cu[-1]] * (NUM_SEQS - len(seqs))  # padding sequences: no tokens, kv_len 0
    return seqs, seq_pages, np.array(cu, np.int32), kv_lens, page_table


def fill_step(rng, page_size, row_shape, seqs, seq_pages):
    """Contiguous per-sequence cache rows; context rows pre-written, step rows left to write_kv.

    Returns (pages with garbage everywhere else, new rows [T, ...], slot_mapping, positions,
    contiguous rows per sequence).
    """
    pages = rng.uniform(-GARBAGE, GARBAGE, size=(NUM_PAGES, page_size, *row_shape))
    new = rng.uniform(-GARBAGE, GARBAGE, size=(NUM_TOKENS, *row_shape))  # padding rows: garbage
    slots = np.full(NUM_TOKENS, -1, np.int32)
    positions = rng.integers(0, MAX_LEN, NUM_TOKENS).astype(np.int32)  # padding: garbage
    rows = []
    t = 0
    for (q_len, kv_len, _), pg in zip(seqs, seq_pages, strict=True):
        seq_rows = rng.standard_normal((kv_len, *row_shape))
        rows.append(seq_rows)
        ctx = kv_len - q_len
        for j in range(ctx):
            pages[pg[j // page_size], j % page_size] = seq_rows[j]
        for j in range(ctx, kv_len):
            new[t] = seq_rows[j]
            slots[t] = pg[j // page_size] * page_size + j % page_size
            positions[t] = j
            t += 1
    return pages.astype(np.float32), new.astype(np.float32), slots, positions, rows


def dense_reference(q, seqs, positions, rows_k, rows_v, scale):
    """o[t] = softmax(q[t] . K[:pos+1]) V over the token's own contiguous sequence, float64.

    q: [T, K, G, Dk]; rows_k[s]: [L_s, K, Dk]; rows_v[s]: [L_s, K, Dv]. Padding -> zeros.
    """
    out = np.zeros((*q.shape[:3], rows_v[0].shape[-1] if rows_v else 1))
    t = 0
    for (q_len, _, _), k, v in zip(seqs, rows_k, rows_v, strict=True):
        for _ in range(q_len):
            n = positions[t] + 1
            s = np.einsum("kgd,lkd->kgl", q[t].astype(np.float64), k[:n]) * scale
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            out[t] = np.einsum("kgl,lkd->kgd", p, v[:n])
            t += 1
    return out


@functools.partial(jax.jit, static_argnames=("scale", "block"))
def _gqa_step(q, k_pages, v_pages, new_k, new_v, slots, cu, positions, kv_lens, pt, scale, block):
    k_pages = write_kv(k_pages, new_k, slots)
    v_pages = write_kv(v_pages, new_v, slots)
    meta = build_metadata(cu, positions, kv_lens, pt, q.shape[0])
    return paged_attention_gqa(q, k_pages, v_pages, meta, scale, block)


@functools.partial(jax.jit, static_argnames=("scale", "block"))
def _mla_step(q_lat, q_pe, pages, new, slots, cu, positions, kv_lens, pt, scale, block):
    pages = write_kv(pages, new, slots)
    meta = build_metadata(cu, positions, kv_lens, pt, q_lat.shape[0])
    return paged_attention_mla(q_lat, q_pe, pages, meta, scale, block)


# Every page size, block size and GQA group size appears once; one compilation per row.
@pytest.mark.parametrize("page_size,block,group", [(8, 1, 1), (8, 2, 3), (16, 1, 4), (16, 2, 8)])
def test_gqa_matches_dense_reference(page_size, block, group):
    num_kv_heads, head_dim = 2, 40
    scale = head_dim**-0.5
    for seed in range(3):
        rng = np.random.default_rng(100 * page_size + 10 * block + group + 1000 * seed)
        seqs, seq_pages, cu, kv_lens, pt = make_batch(rng, page_size)
        row = (num_kv_heads, head_dim)
        k_pages, new_k, slots, positions, rows_k = fill_step(rng, page_size, row, seqs, seq_pages)
        v_rng = np.random.default_rng(rng.integers(1 << 31))
        v_pages, new_v, _, _, rows_v = fill_step(v_rng, page_size, row, seqs, seq_pages)
        q = rng.standard_normal((NUM_TOKENS, num_kv_heads * group, head_dim)).astype(np.float32)

        o = _gqa_step(
            q, k_pages, v_pages, new_k, new_v, slots, cu, positions, kv_lens, pt, scale, block
        )
        o = np.asarray(o)

        q4 = q.reshape(NUM_TOKENS, num_kv_heads, group, head_dim)
        ref = dense_reference(q4, seqs, positions, rows_k, rows_v, scale)
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref.reshape(o.shape), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("page_size,block", [(8, 1), (16, 2)])
def test_mla_matches_dense_reference(page_size, block):
    num_heads, rank, rope_dim = 4, 32, 8
    scale = (rank + rope_dim) ** -0.5
    for seed in range(3):
        rng = np.random.default_rng(7 * page_size + block + 1000 * seed)
        seqs, seq_pages, cu, kv_lens, pt = make_batch(rng, page_size)
        pages, new, slots, positions, rows = fill_step(
            rng, page_size, (rank + rope_dim,), seqs, seq_pages
        )
        q_lat = rng.standard_normal((NUM_TOKENS, num_heads, rank)).astype(np.float32)
        q_pe = rng.standard_normal((NUM_TOKENS, num_heads, rope_dim)).astype(np.float32)

        o = np.asarray(
            _mla_step(q_lat, q_pe, pages, new, slots, cu, positions, kv_lens, pt, scale, block)
        )

        # Absorbed MLA is MQA with key = the whole row and value = its c_kv part.
        q_cat = np.concatenate([q_lat, q_pe], -1)[:, None]
        rows_k = [r[:, None] for r in rows]
        rows_v = [r[:, None, :rank] for r in rows]
        ref = dense_reference(q_cat, seqs, positions, rows_k, rows_v, scale)[:, 0]
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref, atol=TOL, rtol=TOL)


def test_token_output_independent_of_batch():
    """A decode token's output is bitwise equal whatever its place, neighbours and padded T."""
    page_size, block, num_kv_heads, group, head_dim = 8, 2, 2, 4, 40
    rng = np.random.default_rng(5)
    k_pages = rng.standard_normal((NUM_PAGES, page_size, num_kv_heads, head_dim), np.float32)
    v_pages = rng.standard_normal((NUM_PAGES, page_size, num_kv_heads, head_dim), np.float32)
    q_tok = rng.standard_normal((num_kv_heads * group, head_dim), np.float32)
    pt_row = rng.permutation(NUM_PAGES)[:9].astype(np.int32)
    kv_len = 37
    outs = []
    # (tokens of a neighbouring prefill chunk placed before it, padded T)
    for lead, num_tokens in ((0, NUM_TOKENS), (5, NUM_TOKENS), (17, NUM_TOKENS), (0, 1), (2, 3)):
        q = rng.standard_normal((num_tokens, num_kv_heads * group, head_dim)).astype(np.float32)
        q[lead] = q_tok
        pt = rng.integers(0, NUM_PAGES, (NUM_SEQS, 9)).astype(np.int32)
        cu = np.full(NUM_SEQS + 1, lead + 1, np.int32)
        cu[0], cu[1] = 0, lead
        pt[1] = pt_row
        kv_lens = np.zeros(NUM_SEQS, np.int32)
        kv_lens[0], kv_lens[1] = max(lead, 1) + 30, kv_len
        positions = np.zeros(num_tokens, np.int32)
        positions[:lead] = np.arange(lead) + 30
        positions[lead] = kv_len - 1
        slots = np.full(num_tokens, -1, np.int32)  # nothing to write: compare reads only
        new_rows = q[:, :num_kv_heads]
        args = (q, k_pages, v_pages, new_rows, new_rows, slots, cu, positions, kv_lens, pt)
        o = _gqa_step(*args, head_dim**-0.5, block)
        outs.append(np.asarray(o)[lead])
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_write_kv_skips_padding_slots():
    rng = np.random.default_rng(0)
    pages = rng.standard_normal((4, 8, 2, 3)).astype(np.float32)
    new = rng.standard_normal((5, 2, 3)).astype(np.float32)
    slots = np.array([-1, 9, -1, 31, 17], np.int32)
    out = np.asarray(jax.jit(write_kv)(pages, new, slots))

    expected = pages.reshape(32, 2, 3).copy()
    expected[[9, 31, 17]] = new[[1, 3, 4]]
    # Slots 0 (clamped index) and 31 (wrapped -1) would catch a padding write; 0 must be intact.
    np.testing.assert_array_equal(out.reshape(32, 2, 3), expected)

    latent = rng.standard_normal((4, 8, 5)).astype(np.float32)  # MLA rank-3 pages
    out = np.asarray(write_kv(latent, new.reshape(5, 6)[:, :5], np.full(5, -1, np.int32)))
    np.testing.assert_array_equal(out, latent)


def test_build_metadata_seq_ids():
    cu = jnp.array([0, 3, 3, 4, 4], jnp.int32)  # spans of 3, 0, 1 tokens, then a padding seq
    kv_lens = jnp.array([10, 5, 7, 0], jnp.int32)
    pt = jnp.arange(8, dtype=jnp.int32).reshape(4, 2)
    meta = build_metadata(cu, jnp.arange(6, dtype=jnp.int32), kv_lens, pt, 6)
    np.testing.assert_array_equal(meta.seq_ids, [0, 0, 0, 2, 4, 4])
    np.testing.assert_array_equal(meta.kv_lens, [10, 5, 7, 0, 0])
    assert meta.page_table.shape == (5, 2)
    with pytest.raises(ValueError, match="num_tokens_padded"):
        build_metadata(cu, jnp.arange(6, dtype=jnp.int32), kv_lens, pt, 8)


def test_padding_tokens_and_stale_non_finite_rows():
    """Padding tokens give zeros; inf/NaN in unused slots of a used page is never read."""
    k = np.ones((2, 4, 1, 8), np.float32)
    v = np.tile(np.arange(4, dtype=np.float32)[None, :, None, None], (2, 1, 1, 8))
    k[0, 3], v[0, 3] = np.inf, np.nan  # slot past kv_len 3 of sequence 0
    k[1], v[1] = np.nan, np.nan  # an unused page
    meta = build_metadata(
        jnp.array([0, 1], jnp.int32),
        jnp.array([2, 0, 0], jnp.int32),  # one decode token at position 2, two padding tokens
        jnp.array([3], jnp.int32),
        jnp.array([[0, 1]], jnp.int32),
    )
    o = np.asarray(paged_attention_gqa(jnp.ones((3, 2, 8)), k, v, meta, 1.0, 2))
    np.testing.assert_allclose(o[0], np.ones((2, 8)), rtol=1e-6)  # mean of values 0, 1, 2
    np.testing.assert_array_equal(o[1:], np.zeros((2, 2, 8)))


def test_bad_args():
    k = jnp.zeros((2, 4, 1, 8))
    meta = build_metadata(
        jnp.zeros(2, jnp.int32),
        jnp.zeros(3, jnp.int32),
        jnp.zeros(1, jnp.int32),
        jnp.zeros((1, 1), jnp.int32),
    )
    with pytest.raises(ValueError, match="kv_block_pages"):
        paged_attention_gqa(jnp.ones((3, 2, 8)), k, k, meta, 1.0, 0)
    with pytest.raises(ValueError, match="multiple of num kv heads"):
        paged_attention_gqa(jnp.ones((3, 3, 8)), jnp.ones((2, 4, 2, 8)), k, meta, 1.0, 1)
    with pytest.raises(ValueError, match="kv_lora_rank"):
        paged_attention_mla(jnp.ones((3, 2, 6)), jnp.ones((3, 2, 4)), k[..., 0], meta, 1.0, 1)
