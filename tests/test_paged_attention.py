"""engine/paged_attention.py against dense per-sequence attention in float64 numpy."""

import functools
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.mla_expanded import mla_expanded_cost, mla_split, paged_attention_mla_expanded
from engine.paged_attention import (
    DECODE_BATCH_MAX_TOKENS,
    DENSE_GATHER_BYTES,
    INVARIANT_OPTIONS,
    QUERY_TILE,
    build_metadata,
    paged_attention_gqa,
    paged_attention_mla,
    write_kv,
)
from tests.paged_cases import (
    NUM_PAGES,
    NUM_SEQS,
    NUM_TOKENS,
    fill_step,
    make_batch,
)

TOL = 1e-5


def dense_reference(
    q,
    seqs,
    positions,
    rows_k,
    rows_v,
    scale,
    window=None,
    sinks=None,
    chunked=False,
    softcap=0,
    alibi=None,
):
    """o[t] = softmax(q[t] . K[:pos+1]) V over the token's own contiguous sequence, float64;
    with a sliding window only the last `window` of those keys (`chunked`: those from the
    start of its chunk of `window`, Llama 4's); with `sinks` ([K, G]) the softmax also
    takes exp(sink) in its denominator (gpt-oss); with a `softcap` the scaled scores are
    softcap * tanh(s / softcap) (Gemma 2); with `alibi` ([K, G] slopes) each (capped) score
    plus slope * (key position - query position) (BLOOM, MPT).

    q: [T, K, G, Dk]; rows_k[s]: [L_s, K, Dk]; rows_v[s]: [L_s, K, Dv]. Padding -> zeros.
    """
    out = np.zeros((*q.shape[:3], rows_v[0].shape[-1] if rows_v else 1))
    t = 0
    for (q_len, _, _), k, v in zip(seqs, rows_k, rows_v, strict=True):
        for _ in range(q_len):
            n = positions[t] + 1
            lo = 0 if window is None else max(0, n - window)
            if chunked:
                lo = (n - 1) // window * window
            s = np.einsum("kgd,lkd->kgl", q[t].astype(np.float64), k[lo:n]) * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if alibi is not None:
                s = s + alibi[..., None] * (np.arange(lo, n) - (n - 1))
            top = s.max(-1, keepdims=True)
            if sinks is not None:
                top = np.maximum(top, sinks[..., None])
            p = np.exp(s - top)
            denom = p.sum(-1, keepdims=True)
            if sinks is not None:
                denom = denom + np.exp(sinks[..., None] - top)
            p /= denom
            out[t] = np.einsum("kgl,lkd->kgd", p, v[lo:n])
            t += 1
    return out


@functools.partial(
    jax.jit, static_argnames=("scale", "block", "tile", "split", "window", "chunked", "softcap")
)  # (alibi: traced, like sinks)
def _gqa_step(
    q,
    k_pages,
    v_pages,
    new_k,
    new_v,
    slots,
    cu,
    positions,
    kv_lens,
    pt,
    scale,
    block,
    window=None,
    sinks=None,
    chunked=False,
    softcap=0.0,
    alibi=None,
    **opts,
):
    k_pages = write_kv(k_pages, new_k, slots)
    v_pages = write_kv(v_pages, new_v, slots)
    meta = build_metadata(cu, positions, kv_lens, pt, q.shape[0])
    options = _options(**opts)
    return paged_attention_gqa(
        q,
        k_pages,
        v_pages,
        meta,
        scale,
        block,
        *options,
        window=window,
        sinks=sinks,
        chunked=chunked,
        softcap=softcap,
        alibi=alibi,
    )


@functools.partial(jax.jit, static_argnames=("scale", "block", "tile", "split"))
def _mla_step(q_lat, q_pe, pages, new, slots, cu, positions, kv_lens, pt, scale, block, **opts):
    pages = write_kv(pages, new, slots)
    meta = build_metadata(cu, positions, kv_lens, pt, q_lat.shape[0])
    return paged_attention_mla(q_lat, q_pe, pages, meta, scale, block, *_options(**opts))


class _GqaBatch(NamedTuple):
    """A random GQA step (make_batch; fill_step for K, then V; queries): `args` for _gqa_step,
    the rest for dense_reference."""

    seqs: list
    seq_pages: list
    positions: np.ndarray  # [T]
    rows_k: list  # per sequence [L_s, K, Dh]
    rows_v: list
    q4: np.ndarray  # [T, K, G, Dh]
    args: tuple  # (q, k_pages, v_pages, new_k, new_v, slots, cu, positions, kv_lens, pt)

    def forget_rows(self, page_size: int, rows_before) -> None:
        """NaN in each sequence's first `rows_before(q_len, kv_len)` cache rows (pages given
        back to the pool), in place."""
        for (q_len, kv_len, _), pages in zip(self.seqs, self.seq_pages, strict=True):
            for j in range(rows_before(q_len, kv_len)):
                for cache in self.args[1:3]:
                    cache[pages[j // page_size], j % page_size] = np.nan


def _gqa_batch(rng, page_size: int, group: int, num_kv_heads: int = 2, head_dim: int = 40):
    seqs, seq_pages, cu, kv_lens, pt = make_batch(rng, page_size)
    row = (num_kv_heads, head_dim)
    k_pages, new_k, slots, positions, rows_k = fill_step(rng, page_size, row, seqs, seq_pages)
    v_rng = np.random.default_rng(rng.integers(1 << 31))
    v_pages, new_v, _, _, rows_v = fill_step(v_rng, page_size, row, seqs, seq_pages)
    q = rng.standard_normal((NUM_TOKENS, num_kv_heads * group, head_dim)).astype(np.float32)
    q4 = q.reshape(NUM_TOKENS, num_kv_heads, group, head_dim)
    args = (q, k_pages, v_pages, new_k, new_v, slots, cu, positions, kv_lens, pt)
    return _GqaBatch(seqs, seq_pages, positions, rows_k, rows_v, q4, args)


def _options(tile: int = QUERY_TILE, split: bool = True) -> tuple[int, bool]:
    return tile, split


# Every page size, block size and GQA group size appears once; one compilation per row. Query
# tiles of 3..5 rows cut the prefill spans (up to 14 tokens) into several tiles, some
# ending mid-span; split=False sends decodes through one-row tiles too. Sliding windows of
# one key, part of a page, about a page and several pages, with blocks of one and two pages,
# so whole blocks before a window are skipped (on the decode path and on the tiles).
# With sinks (gpt-oss): decodes batched (split) and as tile rows (not split), with a window.
# Blocks as wide as the table (9 columns of 8, 5 of 16) or wider take the dense path.
# Scores soft-capped at 1.5 (Gemma 2; the scores here are about 1, so the cap bends them) on
# the dense path, the batched decodes, tiles of both kinds, with a window and with sinks.
@pytest.mark.parametrize(
    "page_size,block,group,tile,split,window,with_sinks,softcap",
    [
        (8, 9, 2, 4, True, 30, True, 1.5),
        (16, 6, 3, 3, False, None, False, 0.0),
        (8, 1, 1, 4, True, None, False, 0.0),
        (8, 2, 3, 3, False, None, False, 0.0),
        (16, 1, 4, QUERY_TILE, True, None, False, 0.0),
        (16, 2, 8, 5, False, None, False, 1.5),
        (8, 1, 2, 4, True, 1, False, 0.0),
        (8, 2, 3, 3, False, 7, False, 0.0),
        (16, 1, 4, 5, True, 16, False, 1.5),
        (8, 1, 1, 3, True, 30, False, 0.0),
        (8, 1, 2, 4, True, None, True, 1.5),
        (8, 2, 3, 3, False, 7, True, 0.0),
    ],
)
def test_gqa_matches_dense_reference(
    page_size, block, group, tile, split, window, with_sinks, softcap
):
    num_kv_heads, head_dim = 2, 40
    scale = head_dim**-0.5
    for n in range(3):
        rng = np.random.default_rng(
            100 * page_size + 10 * block + group + 1000 * n + 7 * (window or 0)
        )
        b = _gqa_batch(rng, page_size, group, num_kv_heads, head_dim)
        if window is not None:  # (rows before every query's window: NaN)
            b.forget_rows(page_size, lambda q_len, kv_len: max(0, kv_len - q_len + 1 - window))

        sinks = None
        if with_sinks:  # about the scores' scale, so some rows are mostly sink
            sinks = (2 * rng.standard_normal(num_kv_heads * group)).astype(np.float32)
        o = _gqa_step(*b.args, scale, block, window, sinks, tile=tile, split=split, softcap=softcap)
        o = np.asarray(o)

        sinks4 = None if sinks is None else sinks.reshape(num_kv_heads, group)
        ref_args = (b.q4, b.seqs, b.positions, b.rows_k, b.rows_v, scale, window)
        ref = dense_reference(*ref_args, sinks4, softcap=softcap)
        if with_sinks:
            plain = dense_reference(*ref_args, softcap=softcap)
            assert np.abs(plain - ref).max() > 0.1  # the sinks changed the result
        if softcap:
            uncapped = dense_reference(*ref_args, sinks4)
            assert np.abs(uncapped - ref).max() > 0.1  # the cap changed the result
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref.reshape(o.shape), atol=TOL, rtol=TOL)
        if window is not None:
            full = dense_reference(*ref_args[:-1])
            assert np.abs(full - ref).max() > 0.1  # the window changed the result


# ALiBi (BLOOM, MPT, Falcon-RW): slopes of 0.5 .. 2^-8 over 72-key contexts, so near keys
# dominate some heads and not others; on the dense path (a 9-page block), the batched decodes
# (split) and tiles of both kinds, with a window and with a cap and sinks.
@pytest.mark.parametrize(
    "page_size,block,group,tile,split,window,softcap,with_sinks",
    [
        (8, 9, 2, 4, True, None, 0.0, False),
        (8, 1, 3, 3, True, None, 0.0, False),
        (16, 2, 4, 5, False, 16, 1.5, True),
        (8, 2, 1, 4, False, None, 0.0, False),
    ],
)
def test_gqa_alibi_matches_dense_reference(
    page_size, block, group, tile, split, window, softcap, with_sinks
):
    num_kv_heads, head_dim = 2, 40
    scale = head_dim**-0.5
    rng = np.random.default_rng(300 + 10 * page_size + block + 7 * group)
    b = _gqa_batch(rng, page_size, group, num_kv_heads, head_dim)
    heads = num_kv_heads * group
    alibi = (2.0 ** -(8.0 * np.arange(1, heads + 1) / heads)).astype(np.float32)  # BLOOM's
    sinks = (2 * rng.standard_normal(heads)).astype(np.float32) if with_sinks else None
    args = b.args
    o = _gqa_step(
        *args, scale, block, window, sinks, tile=tile, split=split, softcap=softcap, alibi=alibi
    )
    sinks4 = None if sinks is None else sinks.reshape(num_kv_heads, group)
    ref_args = (b.q4, b.seqs, b.positions, b.rows_k, b.rows_v, scale, window, sinks4)
    ref = dense_reference(*ref_args, softcap=softcap, alibi=alibi.reshape(num_kv_heads, group))
    assert np.abs(dense_reference(*ref_args, softcap=softcap) - ref).max() > 0.1  # it matters
    np.testing.assert_allclose(np.asarray(o), ref.reshape(o.shape), atol=TOL, rtol=TOL)
    with pytest.raises(ValueError, match=rf"alibi \({heads - 1},\): expected \[H\] = \[{heads}\]"):
        _gqa_step(*args, scale, block, alibi=alibi[:-1])


# Llama 4's attention chunks (a query sees keys from floor(pos / C) * C): chunks of a few keys
# and of more than a page, on the decode path (split), on tile rows (not split) and dense.
@pytest.mark.parametrize(
    "page_size,block,group,tile,split,chunk",
    [(8, 1, 2, 4, True, 5), (8, 2, 3, 3, False, 12), (16, 6, 2, 3, True, 20)],
)
def test_gqa_attention_chunks_match_dense_reference(page_size, block, group, tile, split, chunk):
    num_kv_heads, head_dim = 2, 40
    scale = head_dim**-0.5
    for n in range(2):
        rng = np.random.default_rng(200 * page_size + 10 * block + group + 1000 * n + chunk)
        b = _gqa_batch(rng, page_size, group, num_kv_heads, head_dim)
        # (rows before every query's chunk: NaN)
        b.forget_rows(page_size, lambda q_len, kv_len: max(0, kv_len - q_len) // chunk * chunk)
        o = np.asarray(_gqa_step(*b.args, scale, block, chunk, None, True, tile=tile, split=split))
        ref_args = (b.q4, b.seqs, b.positions, b.rows_k, b.rows_v, scale, chunk)
        ref = dense_reference(*ref_args, chunked=True)
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref.reshape(o.shape), atol=TOL, rtol=TOL)
        window = dense_reference(*ref_args)
        assert np.abs(window - ref).max() > 0.1  # chunks are not a sliding window


def _latent_step(rng, page_size, row_dim):
    """make_batch and fill_step for MLA latent rows of `row_dim`: (seqs, cu, kv_lens, page
    table, pages, new rows, slot_mapping, positions, rows per sequence)."""
    seqs, seq_pages, cu, kv_lens, pt = make_batch(rng, page_size)
    filled = fill_step(rng, page_size, (row_dim,), seqs, seq_pages)
    return (seqs, cu, kv_lens, pt, *filled)


@pytest.mark.parametrize(
    "page_size,block,tile,split", [(8, 1, 4, False), (16, 2, QUERY_TILE, True), (8, 9, 4, True)]
)
def test_mla_matches_dense_reference(page_size, block, tile, split):
    num_heads, rank, rope_dim = 4, 32, 8
    scale = (rank + rope_dim) ** -0.5
    for seed in range(3):
        rng = np.random.default_rng(7 * page_size + block + 1000 * seed)
        seqs, cu, kv_lens, pt, pages, new, slots, positions, rows = _latent_step(
            rng, page_size, rank + rope_dim
        )
        q_lat = rng.standard_normal((NUM_TOKENS, num_heads, rank)).astype(np.float32)
        q_pe = rng.standard_normal((NUM_TOKENS, num_heads, rope_dim)).astype(np.float32)

        args = (q_lat, q_pe, pages, new, slots, cu, positions, kv_lens, pt)
        o = np.asarray(_mla_step(*args, scale, block, tile=tile, split=split))

        # Absorbed MLA is MQA with key = the whole row and value = its c_kv part.
        q_cat = np.concatenate([q_lat, q_pe], -1)[:, None]
        rows_k = [r[:, None] for r in rows]
        rows_v = [r[:, None, :rank] for r in rows]
        ref = dense_reference(q_cat, seqs, positions, rows_k, rows_v, scale)[:, 0]
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref, atol=TOL, rtol=TOL)


@functools.partial(jax.jit, static_argnames=("scale", "block", "tile"))
def _mla_expanded_step(
    q_nope, q_pe, pages, w_kv_b, new, slots, cu, positions, kv_lens, pt, scale, block, tile
):
    pages = write_kv(pages, new, slots)
    meta = build_metadata(cu, positions, kv_lens, pt, q_nope.shape[0])
    return paged_attention_mla_expanded(q_nope, q_pe, pages, w_kv_b, meta, scale, block, tile)


@pytest.mark.parametrize("page_size,block,tile", [(8, 1, 3), (16, 2, 1024)])
def test_mla_expanded_matches_dense_multi_head_reference(page_size, block, tile):
    """Expanded MLA is multi-head attention over keys [c_kv W_UK | k_pe] and values c_kv W_UV
    (the reference expands each sequence's rows in numpy). Every span, one-token ones too,
    goes through tiles here; tiles of 3 rows cut spans mid-way."""
    num_heads, rank, rope_dim, nope_dim, value_dim = 4, 32, 8, 16, 12
    scale = (nope_dim + rope_dim) ** -0.5
    for seed in range(3):
        rng = np.random.default_rng(11 * page_size + block + 1000 * seed)
        seqs, cu, kv_lens, pt, pages, new, slots, positions, rows = _latent_step(
            rng, page_size, rank + rope_dim
        )
        q_nope = rng.standard_normal((NUM_TOKENS, num_heads, nope_dim)).astype(np.float32)
        q_pe = rng.standard_normal((NUM_TOKENS, num_heads, rope_dim)).astype(np.float32)
        w_kv_b = (rng.standard_normal((rank, num_heads, nope_dim + value_dim)) / 4).astype(
            np.float32
        )

        args = (q_nope, q_pe, pages, w_kv_b, new, slots, cu, positions, kv_lens, pt)
        o = np.asarray(_mla_expanded_step(*args, scale, block, tile))

        w = w_kv_b.astype(np.float64)
        rows_k, rows_v = [], []
        for r in rows:
            kv = np.einsum("lr,rhk->lhk", r[:, :rank], w)
            k_pe = np.broadcast_to(r[:, None, rank:], (len(r), num_heads, rope_dim))
            rows_k.append(np.concatenate([kv[..., :nope_dim], k_pe], -1))
            rows_v.append(kv[..., nope_dim:])
        q_cat = np.concatenate([q_nope, q_pe], -1)[:, :, None]  # every head its own KV head
        ref = dense_reference(q_cat, seqs, positions, rows_k, rows_v, scale)[:, :, 0]
        assert np.all(np.isfinite(o))
        np.testing.assert_allclose(o, ref, atol=TOL, rtol=TOL)


def test_mla_expansion_takes_the_long_spans_and_matches_the_absorbed_form():
    """The step's split: spans the cost model sends to the expanded form are those where
    it needs fewer multiply-adds, and expanded rows + absorbed rows (W_UV applied) equal the
    absorbed form everywhere."""
    page_size, num_heads, rank, rope_dim, nope_dim, value_dim = 8, 4, 32, 8, 16, 12
    dims = (rank, nope_dim, rope_dim, value_dim)
    # One tile of q rows: 32 * 28 + 36 q against 72 q, so 25 rows and more pay.
    absorbed, expanded = mla_expanded_cost(np.arange(1, 40), 64, *dims)
    assert list(np.flatnonzero(expanded < absorbed) + 1) == list(range(25, 40))
    lens = [(30, 50), (1, 20), (24, 24), (25, 60), (0, 9), (2, 2)]  # (q_len, kv_len)
    num_tokens = 96
    cu = np.concatenate([[0], np.cumsum([q for q, _ in lens])]).astype(np.int32)
    kv_lens = np.array([k for _, k in lens], np.int32)
    rng = np.random.default_rng(3)
    max_pages = 8
    pt = rng.permutation(6 * max_pages).reshape(6, max_pages).astype(np.int32)
    positions = np.zeros(num_tokens, np.int32)
    for s, (q, k) in enumerate(lens):
        positions[cu[s] : cu[s + 1]] = np.arange(k - q, k)
    pages = rng.standard_normal((6 * max_pages, page_size, rank + rope_dim)).astype(np.float32)
    q_nope = rng.standard_normal((num_tokens, num_heads, nope_dim)).astype(np.float32)
    q_pe = rng.standard_normal((num_tokens, num_heads, rope_dim)).astype(np.float32)
    w = (rng.standard_normal((rank, num_heads, nope_dim + value_dim)) / 4).astype(np.float32)
    w_uk, w_uv = w[..., :nope_dim], w[..., nope_dim:]
    scale = 0.2

    @jax.jit
    def split_and_whole(q_nope, q_pe, pages, w, cu, positions, kv_lens, pt):
        meta = build_metadata(cu, positions, kv_lens, pt, num_tokens)
        split = mla_split(meta, *dims)
        q_lat = jnp.einsum("thn,rhn->thr", q_nope, w_uk)
        o_exp = paged_attention_mla_expanded(q_nope, q_pe, pages, w, split.expanded, scale, 2)
        o_lat = paged_attention_mla(q_lat, q_pe, pages, split.absorbed, scale, 2)
        o_rest = jnp.einsum("thr,rhv->thv", o_lat, w_uv)
        whole = jnp.einsum(
            "thr,rhv->thv", paged_attention_mla(q_lat, q_pe, pages, meta, scale, 2), w_uv
        )
        return split.rows, split.expanded.kv_lens, split.absorbed.kv_lens, o_exp, o_rest, whole

    rows, kv_exp, kv_abs, o_exp, o_rest, whole = map(
        np.asarray, split_and_whole(q_nope, q_pe, pages, w, cu, positions, kv_lens, pt)
    )
    # Sequences 0 and 3 (30 and 25 rows) expanded, the rest absorbed; the padding sequence
    # appended by build_metadata (kv_len 0) in neither.
    assert list(kv_exp) == [50, 0, 0, 60, 0, 0, 0]
    assert list(kv_abs) == [0, 20, 24, 0, 9, 2, 0]
    rows_exp = np.isin(np.arange(num_tokens), np.r_[0:30, 55:80])
    assert list(rows) == list(rows_exp)
    # Each form leaves the other's rows (and padding) zero.
    assert np.all(o_exp[~rows_exp] == 0) and np.all(np.abs(o_exp[rows_exp]).sum(-1) > 0)
    assert np.all(o_rest[rows_exp] == 0)
    np.testing.assert_allclose(
        np.where(rows_exp[:, None, None], o_exp, o_rest), whole, atol=TOL, rtol=TOL
    )


@pytest.mark.parametrize("block", [2, 9])  # 9: the table's width, the dense path
def test_token_output_independent_of_batch(block):
    """A decode token's output is bitwise equal whatever its place, neighbours and padded T."""
    page_size, num_kv_heads, group, head_dim = 8, 2, 4, 40
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


def _pool_copies(step, pool, *args) -> list[str]:
    """Instructions of the compiled `step` (pool donated) that copy a pool-sized array."""
    txt = jax.jit(step, donate_argnums=0).lower(pool, *args).compile().as_text()
    n = jax.tree_util.tree_leaves(pool)[0].shape[0]
    sizes = rf"({n}|{n * 8})"  # [N, P, ...] pages or a flat [N * P, ...] view (P = 8)
    return [line for line in txt.splitlines() if re.search(rf"= \w+\[{sizes}[,\]].* copy\(", line)]


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_a_one_token_step_writes_the_donated_pool_in_place(kind):
    # A batch-1 decode (T = 1): XLA turns the write into a dynamic-update-slice, which once
    # copied the whole pool each step (88 ms a token in a 1,536-page engine whose page table
    # is one KV block) because it wrote through a flattened view. The pool is donated, as in
    # the engine's step; this small case had two pool copies before the fix.
    num_pages, t = 512, 1
    meta_args = (
        jnp.array([0, t], jnp.int32),
        jnp.array([9], jnp.int32),  # position
        jnp.array([10], jnp.int32),  # kv_len
        jnp.array([[3, 1, 2, 0]], jnp.int32),
    )
    slots = jnp.array([3 * 8 + 1], jnp.int32)
    if kind == "gqa":
        pool = (jnp.zeros((num_pages, 8, 2, 16)), jnp.zeros((num_pages, 8, 2, 16)))

        def step(pool, q, k, v, *meta_args):
            k_pages, v_pages = write_kv(pool[0], k, slots), write_kv(pool[1], v, slots)
            meta = build_metadata(*meta_args)
            return (k_pages, v_pages), paged_attention_gqa(q, k_pages, v_pages, meta, 0.1, 2)

        args = (jnp.ones((t, 4, 16)), jnp.ones((t, 2, 16)), jnp.ones((t, 2, 16)))
    else:
        pool = jnp.zeros((num_pages, 8, 20))

        def step(pool, q_lat, q_pe, row, *meta_args):
            pool = write_kv(pool, row, slots)
            meta = build_metadata(*meta_args)
            return pool, paged_attention_mla(q_lat, q_pe, pool, meta, 0.1, 2)

        args = (jnp.ones((t, 4, 16)), jnp.ones((t, 4, 4)), jnp.ones((t, 20)))
    assert _pool_copies(step, pool, *args, *meta_args) == []


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
    for cap in (-1.0, float("inf"), True):
        with pytest.raises(ValueError, match=f"softcap={cap!r}: must be a finite number >= 0"):
            paged_attention_gqa(jnp.ones((3, 2, 8)), k, k, meta, 1.0, 1, softcap=cap)


def _chunk_of_one_sequence(q_seq, pt_row, start, n, lead, num_tokens, neighbour_kv=40):
    """Step arrays where the sequence's tokens [start, start + n) follow `lead` tokens of a
    neighbouring prefill; q_seq: [L, ...] the sequence's queries. Nothing is written."""
    q = np.zeros((num_tokens, *q_seq.shape[1:]), np.float32)
    q[:lead] = 7.0  # the neighbour's queries
    q[lead : lead + n] = q_seq[start : start + n]
    positions = np.zeros(num_tokens, np.int32)
    positions[:lead] = np.arange(neighbour_kv - lead, neighbour_kv)
    positions[lead : lead + n] = np.arange(start, start + n)
    cu = np.array([0, lead, lead + n, lead + n], np.int32)
    kv_lens = np.array([neighbour_kv, start + n, 0], np.int32)
    pt = np.zeros((3, len(pt_row)), np.int32)
    pt[0, :3], pt[1] = [1, 2, 3], pt_row
    return q, cu, positions, kv_lens, pt, np.full(num_tokens, -1, np.int32)


# (start, chunk length, neighbour tokens before it, padded T); the probe token is at 250.
# Three padded sizes keep the compilations few.
CHUNKINGS = [(250, 1, 0, 8), (250, 1, 5, 64), (249, 2, 0, 8), (200, 51, 3, 64), (0, 256, 0, 256)]
CHUNKINGS += [(247, 9, 17, 64), (235, 16, 0, 64), (128, 128, 1, 256), (250, 3, 0, 8)]


@pytest.mark.parametrize("kind", ["gqa", "gqa_window", "mla", "gqa_dense"])
def test_chunking_and_decode_leave_a_token_bitwise_unchanged(kind):
    """Tiles start at each span's first token, so a token's tile-mates change with the chunk.
    With INVARIANT_OPTIONS its output must not change at all: any chunk, any padded size, or
    decoded (a one-row tile). With a 37-key window (keys 214..250 for the probe) the blocks
    before it are skipped, from a start that follows the tile's or decode batch's rows.
    gqa_dense: one block as wide as the table (the dense path, with the window), where no
    token's output depends on its step in either mode; the 256-token steps take it in
    chunks of DENSE_GATHER_BYTES (86 tokens here), the others at once."""
    window = 37 if kind in ("gqa_window", "gqa_dense") else None
    page_size, block, seq_len, target = 16, 2, 300, 250
    rng = np.random.default_rng(9)
    pt_row = rng.permutation(NUM_PAGES)[: -(-seq_len // page_size)].astype(np.int32)
    if kind == "gqa_dense":
        block = len(pt_row)
        # Tokens per chunk: K/V rows of 2 heads x (40 + 40) float32 values per key.
        assert 64 < DENSE_GATHER_BYTES // (block * page_size * 2 * 80 * 4) < 256
    if kind != "mla":
        k_pages, v_pages = rng.standard_normal((2, NUM_PAGES, page_size, 2, 40), np.float32)
        q_seq = rng.standard_normal((seq_len, 6, 40), np.float32)
    else:
        pages = rng.standard_normal((NUM_PAGES, page_size, 40), np.float32)
        q_seq = rng.standard_normal((seq_len, 4, 40), np.float32)
    outs = {True: [], False: []}
    for split in (True, False):
        tile = QUERY_TILE if split else INVARIANT_OPTIONS["query_tile"]
        for start, n, lead, num_tokens in CHUNKINGS:
            q, cu, pos, kv_lens, pt, slots = _chunk_of_one_sequence(
                q_seq, pt_row, start, n, lead, num_tokens
            )
            if kind != "mla":
                args = (q, k_pages, v_pages, q[:, :2], q[:, :2], slots, cu, pos, kv_lens, pt)
                o = _gqa_step(*args, 0.15, block, window, tile=tile, split=split)
            else:
                args = (q[..., :32], q[..., 32:], pages, q[:, 0], slots, cu, pos, kv_lens, pt)
                o = _mla_step(*args, 0.15, block, tile=tile, split=split)
            outs[split].append(np.asarray(o)[lead + target - start])
    for o in outs[False][1:]:  # batch-invariant mode: every chunking and the decode
        np.testing.assert_array_equal(o, outs[False][0])
    # Default mode: a decode is bitwise the same whatever its neighbours and padded size;
    # a chunk token's tile follows the step's padded size, so it is only close.
    decodes = [o for o, c in zip(outs[True], CHUNKINGS, strict=True) if c[1] == 1]
    assert len(decodes) == 2
    np.testing.assert_array_equal(decodes[1], decodes[0])
    for o in outs[True]:
        np.testing.assert_allclose(o, outs[False][0], rtol=1e-5, atol=1e-6)
    if kind == "gqa_dense":
        for o in outs[True]:
            np.testing.assert_array_equal(o, outs[False][0])
        j = np.arange(target + 1)
        rows_k, rows_v = (c[pt_row[j // page_size], j % page_size] for c in (k_pages, v_pages))
        q4 = q_seq[target].reshape(1, 2, 3, 40)
        ref = dense_reference(q4, [(1, 0, 0)], [target], [rows_k], [rows_v], 0.15, window)
        np.testing.assert_allclose(outs[True][0], ref[0].reshape(6, 40), atol=TOL, rtol=TOL)


def test_long_context_chunk_over_many_blocks_and_tiles():
    """A 260-token chunk at positions 2840..3099 (2 tiles over 7 blocks of 512 keys, the
    last ones partly masked, and its last 4 rows as a small tile) next to a decode (blocks
    of 32 keys)."""
    page_size, block, num_kv_heads, group, head_dim = 16, 2, 2, 2, 32
    seq_len, start = 3100, 2840
    rng = np.random.default_rng(4)
    num_pages = -(-seq_len // page_size) + 4
    rows_k = rng.standard_normal((seq_len, num_kv_heads, head_dim)).astype(np.float32)
    rows_v = rng.standard_normal((seq_len, num_kv_heads, head_dim)).astype(np.float32)
    perm = rng.permutation(num_pages)
    seq_pages, dec_pages = perm[: num_pages - 4], perm[num_pages - 4 :]
    k_pages = np.full((num_pages, page_size, num_kv_heads, head_dim), np.nan, np.float32)
    v_pages = np.full_like(k_pages, np.inf)
    for j in range(seq_len):
        k_pages[seq_pages[j // page_size], j % page_size] = rows_k[j]
        v_pages[seq_pages[j // page_size], j % page_size] = rows_v[j]
    dec_k = rng.standard_normal((50, num_kv_heads, head_dim)).astype(np.float32)
    dec_v = rng.standard_normal((50, num_kv_heads, head_dim)).astype(np.float32)
    for j in range(50):
        k_pages[dec_pages[j // page_size], j % page_size] = dec_k[j]
        v_pages[dec_pages[j // page_size], j % page_size] = dec_v[j]
    n = seq_len - start
    q = rng.standard_normal((1 + n + 7, num_kv_heads * group, head_dim)).astype(np.float32)
    positions = np.concatenate([[49], np.arange(start, seq_len), np.zeros(7)]).astype(np.int32)
    cu = np.array([0, 1, 1 + n], np.int32)
    kv_lens = np.array([50, seq_len], np.int32)
    pt = np.zeros((2, num_pages - 4), np.int32)
    pt[0, :4], pt[1] = dec_pages, seq_pages
    slots = np.full(len(q), -1, np.int32)
    scale = head_dim**-0.5
    args = (q, k_pages, v_pages, q[:, :2], q[:, :2], slots, cu, positions, kv_lens, pt)
    o = np.asarray(_gqa_step(*args, scale, block))
    q4 = q.reshape(len(q), num_kv_heads, group, head_dim)
    seqs = [(1, 50, 0), (n, seq_len, 0)]
    ref = dense_reference(q4, seqs, positions, [dec_k, rows_k], [dec_v, rows_v], scale)
    np.testing.assert_allclose(o, ref.reshape(o.shape), atol=TOL, rtol=TOL)
    assert not o[1 + n :].any()


def pages_holding(rng, lens, page_size, row_shape):
    """Each sequence's random K and V rows [len, *row_shape] in shuffled pages; every other
    slot NaN (K) or inf (V). Returns (k_pages, v_pages, page_table, rows_k, rows_v)."""
    pages_per = [-(-n // page_size) for n in lens]
    perm = rng.permutation(sum(pages_per)).astype(np.int32)
    shape = (len(perm), page_size, *row_shape)
    k_pages, v_pages = np.full(shape, np.nan, np.float32), np.full(shape, np.inf, np.float32)
    pt = np.zeros((len(lens), max(pages_per)), np.int32)
    rows_k, rows_v, used = [], [], 0
    for s, n in enumerate(lens):
        ids = perm[used : used + pages_per[s]]
        used += pages_per[s]
        pt[s, : len(ids)] = ids
        rk, rv = rng.standard_normal((2, n, *row_shape)).astype(np.float32)
        for j in range(n):
            k_pages[ids[j // page_size], j % page_size] = rk[j]
            v_pages[ids[j // page_size], j % page_size] = rv[j]
        rows_k.append(rk)
        rows_v.append(rv)
    return k_pages, v_pages, pt, rows_k, rows_v


def test_a_decode_over_a_long_context_takes_the_tiles_and_matches():
    """A decode over more than DECODE_BATCH_MAX_TOKENS keys leaves the batched decodes (which
    would all scan its context) for a tile of its own; both kinds stay exact."""
    page_size, num_kv_heads, group, head_dim = 16, 1, 4, 32
    lens = [DECODE_BATCH_MAX_TOKENS + 900, 40, 300]
    rng = np.random.default_rng(12)
    k_pages, v_pages, pt, rows_k, rows_v = pages_holding(
        rng, lens, page_size, (num_kv_heads, head_dim)
    )
    q = rng.standard_normal((4, num_kv_heads * group, head_dim)).astype(np.float32)
    positions = np.array([n - 1 for n in lens] + [0], np.int32)
    cu, kv_lens = np.array([0, 1, 2, 3], np.int32), np.array(lens, np.int32)
    slots = np.full(4, -1, np.int32)
    scale = head_dim**-0.5
    args = (q, k_pages, v_pages, q[:, :1], q[:, :1], slots, cu, positions, kv_lens, pt)
    o = np.asarray(_gqa_step(*args, scale, 2))
    seqs = [(1, n, 0) for n in lens]
    q4 = q.reshape(4, num_kv_heads, group, head_dim)
    ref = dense_reference(q4, seqs, positions, rows_k, rows_v, scale)
    np.testing.assert_allclose(o, ref.reshape(o.shape), atol=TOL, rtol=TOL)
    assert not o[3].any()


def test_short_spans_take_remainder_tiles_and_short_blocks():
    """Spans of 3..40 rows (remainder tiles of 8 and 32; 40 rows take a whole tile) over short
    contexts (the small decode blocks) and a 20-row span at 1500 keys (a 32-row tile over the
    long-context blocks), in one step: all match the dense reference."""
    page_size, block, num_kv_heads, group, head_dim = 16, 2, 2, 3, 24
    spans = [(3, 3), (20, 90), (31, 31), (33, 200), (40, 40), (20, 1500), (1, 77)]
    rng = np.random.default_rng(21)
    k_pages, v_pages, pt, rows_k, rows_v = pages_holding(
        rng, [kv for _, kv in spans], page_size, (num_kv_heads, head_dim)
    )
    positions = [p for q_len, kv in spans for p in range(kv - q_len, kv)]
    num_tokens = 256  # a padded step: tiles of 256 rows, remainders of 32 and 8
    real = len(positions)
    positions = np.array(positions + [0] * (num_tokens - real), np.int32)
    q = rng.standard_normal((num_tokens, num_kv_heads * group, head_dim)).astype(np.float32)
    cu = np.concatenate([[0], np.cumsum([q_len for q_len, _ in spans])]).astype(np.int32)
    kv_lens = np.array([kv for _, kv in spans], np.int32)
    slots = np.full(num_tokens, -1, np.int32)
    scale = head_dim**-0.5
    args = (q, k_pages, v_pages, q[:, :2], q[:, :2], slots, cu, positions, kv_lens, pt)
    o = np.asarray(_gqa_step(*args, scale, block))
    q4 = q.reshape(num_tokens, num_kv_heads, group, head_dim)
    seqs = [(q_len, kv, 0) for q_len, kv in spans]
    ref = dense_reference(q4, seqs, positions, rows_k, rows_v, scale)
    np.testing.assert_allclose(o[:real], ref.reshape(o.shape)[:real], atol=TOL, rtol=TOL)
    assert not o[real:].any()
