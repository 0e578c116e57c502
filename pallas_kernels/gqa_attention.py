"""Ragged paged attention for GQA/MHA: prefill chunks and decodes in one kernel call.

Every query head of a KV head shares one program, so each K/V row gathered from a page is
read once per KV head and serves the whole group. See ragged_flash.py for the tiling.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from engine.paged_attention import check_alibi, check_softcap
from pallas_kernels.ragged_flash import (
    GQA_CONFIG,
    KernelConfig,
    KVBlock,
    UnsupportedShapeError,
    check_dtypes,
    column_index,
    dequantize_pages,
    load_rows,
    next_pow2,
    padded_dim,
    plan_tiles,
    ragged_flash,
)

MAX_HEAD_DIM = 256  # a [rows, head_dim] f32 accumulator per program must fit in registers


def check_gqa_supported(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    k_scales: jax.Array | None = None,
    v_scales: jax.Array | None = None,
) -> None:
    """Raises UnsupportedShapeError for shapes the kernel does not take (callers fall back)."""
    if q.ndim != 3:
        raise ValueError(f"q {q.shape}: expected [T, H, Dh]")
    num_heads, head_dim = q.shape[1:]
    if k_pages.ndim != 4 or k_pages.shape[:3] != v_pages.shape[:3] or v_pages.ndim != 4:
        raise ValueError(
            f"k_pages {k_pages.shape} and v_pages {v_pages.shape}: expected [N, P, K, Dh] "
            "and [N, P, K, Dv]"
        )
    if v_pages.shape[3] != k_pages.shape[3]:  # (MiMo-V2-Flash's values: the XLA path)
        raise UnsupportedShapeError(
            f"v_pages head dim {v_pages.shape[3]} != k_pages head dim {k_pages.shape[3]}: "
            "the kernel takes values as wide as the keys"
        )
    if k_pages.shape[3] != head_dim:
        raise ValueError(f"k_pages head dim {k_pages.shape[3]} != q head dim {head_dim}")
    if num_heads % k_pages.shape[2]:
        raise ValueError(
            f"num query heads {num_heads} is not a multiple of num kv heads {k_pages.shape[2]}"
        )
    if head_dim > MAX_HEAD_DIM:
        raise UnsupportedShapeError(f"head_dim={head_dim}: the kernel takes at most {MAX_HEAD_DIM}")
    scales = () if k_scales is None and v_scales is None else (k_scales, v_scales)
    check_dtypes([q], [k_pages, v_pages], scales)


def ragged_paged_attention(
    q: jax.Array,  # [T, H, Dh]
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dh]
    cu_q_lens: jax.Array,  # [S + 1] int32; tokens at or past cu_q_lens[S] are padding
    positions: jax.Array,  # [T] int32, absolute position of each query token
    kv_lens: jax.Array,  # [S] int32, KV length including this step's tokens
    page_table: jax.Array,  # [S, Pmax] int32
    *,
    scale: float,
    window: int | None = None,  # sliding window: keys p - window + 1 .. p; None: all keys
    k_scales: jax.Array | None = None,  # [N, P, K] f32 with fp8 pages (float8_e4m3fn / uint8)
    v_scales: jax.Array | None = None,  # [N, P, K] f32
    config: KernelConfig = GQA_CONFIG,
    interpret: bool = False,
    sinks: jax.Array | None = None,  # [H]: a logit per head joining every softmax (gpt-oss)
    softcap: float = 0.0,  # > 0: scores squashed to softcap * tanh(s / softcap) (Gemma 2)
    alibi: jax.Array | None = None,  # [H] f32: a slope per query head (ALiBi)
) -> jax.Array:  # [T, H, Dh]
    """Causal GQA of ragged query spans over their paged K/V (already written), or with a
    sliding `window` (a token at position p sees keys p - window + 1 .. p). `sinks` are
    merged with the kernel's per-split results (ragged_flash.combine_splits). With
    `softcap` each scaled score s is softcap * tanh(s / softcap) (Gemma 2's attention).
    With `alibi` the score of head h at position p against key j then gains
    alibi[h] * (j - p) (ALiBi, Press et al. 2022), inside the kernel's softmax.

    fp8 pages (float8_e4m3fn or its bits as uint8, a float32 scale per (token, KV head) row)
    are read as `rows * scales`: the block is upcast to q's dtype and the scales are applied
    to the score columns and to the probabilities before p.v.
    """
    check_gqa_supported(q, k_pages, v_pages, k_scales, v_scales)
    check_softcap(softcap)
    check_alibi(alibi, q.shape[1])
    quantized = k_scales is not None
    num_tokens, num_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_pages.shape
    group = num_heads // num_kv_heads
    heads = min(next_pow2(group), config.max_heads_per_program)  # heads per program
    head_blocks = -(-group // heads)
    block_q = max(1, config.block_rows // heads)
    d_pad = padded_dim(head_dim)
    if positions.shape != (num_tokens,):
        raise ValueError(f"positions {positions.shape}: expected [T] = [{num_tokens}]")
    plan = plan_tiles(cu_q_lens, positions, kv_lens, page_table, block_q, window)
    t_pad = plan.num_tokens_padded

    # Rows of a program: (token, head) for `heads` heads of one KV head. Query head h uses
    # KV head h // group (HF repeat_kv order).
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim)
    qg = jnp.pad(
        qg,
        ((0, t_pad - num_tokens), (0, 0), (0, head_blocks * heads - group), (0, d_pad - head_dim)),
    )
    qg = qg.reshape(t_pad, num_kv_heads * head_blocks, heads, d_pad).transpose(1, 0, 2, 3)
    qg = qg.reshape(num_kv_heads * head_blocks, t_pad * heads, d_pad)

    row_sinks = None
    if sinks is not None:  # [H] -> the rows' layout: [K * head_blocks, T_pad * heads]
        sg = jnp.pad(
            sinks.astype(jnp.float32).reshape(num_kv_heads, group),
            ((0, 0), (0, head_blocks * heads - group)),
        ).reshape(num_kv_heads * head_blocks, 1, heads)
        row_sinks = jnp.broadcast_to(sg, (sg.shape[0], t_pad, heads)).reshape(sg.shape[0], -1)
    slopes = None
    if alibi is not None:  # [H] -> [K * head_blocks, heads]; padded head slots get 0
        slopes = jnp.pad(
            alibi.astype(jnp.float32).reshape(num_kv_heads, group),
            ((0, 0), (0, head_blocks * heads - group)),
        ).reshape(num_kv_heads * head_blocks, heads)

    def load_kv(kv_refs, kv_head, pages, offsets):
        cols = column_index(head_dim, d_pad)
        lead = (pages, offsets, kv_head)
        keys = load_rows(kv_refs[0], lead, cols, q.dtype)
        values = load_rows(kv_refs[1], lead, cols, q.dtype)
        if not quantized:
            return KVBlock([keys], values)
        k_scale_ref, v_scale_ref = kv_refs[2:]
        return KVBlock([keys], values, k_scale_ref[lead], v_scale_ref[lead])

    o = ragged_flash(
        [qg],
        [k_pages, v_pages, k_scales, v_scales] if quantized else [k_pages, v_pages],
        load_kv,
        plan,
        page_table,
        value_dim=d_pad,
        heads_per_program=heads,
        head_blocks=head_blocks,
        block_q=block_q,
        page_size=page_size,
        num_pages=num_pages,
        scale=scale,
        config=config,
        interpret=interpret,
        name="ragged_paged_attention_gqa",
        sinks=row_sinks,
        softcap=softcap,
        alibi=slopes,
    )  # [K * head_blocks, T_pad * heads, d_pad]
    o = o.reshape(num_kv_heads, head_blocks, t_pad, heads, d_pad).transpose(2, 0, 1, 3, 4)
    o = o.reshape(t_pad, num_kv_heads, head_blocks * heads, d_pad)[:num_tokens, :, :group]
    o = o[..., :head_dim].reshape(num_tokens, num_heads, head_dim)
    # Padding tokens belong to no tile; their rows were never written.
    valid = jnp.arange(num_tokens) < cu_q_lens[-1]
    return jnp.where(valid[:, None, None], o, 0.0).astype(q.dtype)


def ragged_paged_attention_ref(
    q: jax.Array,  # [T, H, Dh]
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dh]
    cu_q_lens: jax.Array,  # [S + 1]
    positions: jax.Array,  # [T]
    kv_lens: jax.Array,  # [S]
    page_table: jax.Array,  # [S, Pmax]
    *,
    scale: float,
    window: int | None = None,
    k_scales: jax.Array | None = None,  # [N, P, K] f32 with fp8 pages (float8_e4m3fn / uint8)
    v_scales: jax.Array | None = None,
    sinks: jax.Array | None = None,  # [H]
    softcap: float = 0.0,
    alibi: jax.Array | None = None,  # [H] f32
) -> jax.Array:  # [T, H, Dh]
    """Plain jnp twin: each token gathers its sequence's whole K/V and takes a masked softmax
    (over [keys, sink] when sinks are given, the sink's share dropped; of the capped scores
    with a softcap, plus alibi[h] * (key position - query position) with ALiBi)."""
    check_alibi(alibi, q.shape[1])
    if k_scales is not None:  # fp8 pages: dequantize them whole
        k_pages = dequantize_pages(k_pages, k_scales)
        v_pages = dequantize_pages(v_pages, v_scales)
    num_tokens, num_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_pages.shape
    group = num_heads // num_kv_heads
    num_seqs, max_pages = page_table.shape
    token = jnp.arange(num_tokens)
    seq = jnp.clip(jnp.searchsorted(cu_q_lens, token, side="right") - 1, 0, num_seqs - 1)
    limit = jnp.where(token < cu_q_lens[-1], jnp.minimum(positions + 1, kv_lens[seq]), 0)
    pages = jnp.clip(page_table[seq], 0, num_pages - 1)  # [T, Pmax]
    length = max_pages * page_size
    keys = k_pages[pages].reshape(num_tokens, length, num_kv_heads, head_dim)
    values = v_pages[pages].reshape(num_tokens, length, num_kv_heads, head_dim)
    visible = jnp.arange(length)[None, :] < limit[:, None]  # [T, L]
    if window is not None:
        visible &= jnp.arange(length)[None, :] > positions[:, None] - window
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim).astype(jnp.float32)
    s = jnp.einsum("tkgd,tlkd->tkgl", qg, keys.astype(jnp.float32), precision=lax.Precision.HIGHEST)
    s = s * scale
    if softcap:
        s = softcap * jnp.tanh(s / softcap)
    if alibi is not None:
        distance = (jnp.arange(length)[None, :] - positions[:, None]).astype(jnp.float32)
        slopes = alibi.astype(jnp.float32).reshape(1, num_kv_heads, group, 1)
        s = s + slopes * distance[:, None, None, :]
    s = jnp.where(visible[:, None, None, :], s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    if sinks is not None:
        sink = sinks.astype(jnp.float32).reshape(1, num_kv_heads, group, 1)
        m = jnp.maximum(m, sink)
    p = jnp.exp(s - jnp.where(m == -jnp.inf, 0.0, m))
    denom = jnp.sum(p, axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + jnp.exp(sink - m)
    p = jnp.where(denom > 0, p / jnp.where(denom > 0, denom, 1.0), 0.0)
    values = jnp.where(visible[:, :, None, None], values.astype(jnp.float32), 0.0)
    o = jnp.einsum("tkgl,tlkd->tkgd", p, values, precision=lax.Precision.HIGHEST)
    return o.reshape(num_tokens, num_heads, head_dim).astype(q.dtype)
