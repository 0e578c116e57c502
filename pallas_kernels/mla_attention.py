"""MLA paged attention over the latent cache with absorbed queries (DeepSeek-V2 sec. 2.1.2).

The cache row of a token is [c_kv (R) | k_pe (Dr)], shared by every head. With W_UK folded
into the query, score = q_lat . c_kv + q_pe . k_pe and the output o = sum_j p_j c_kv_j stays
in latent space (the caller applies W_UV). The kernel is the ragged one of ragged_flash.py
with a single "KV head": the heads of a sequence (up to `max_heads_per_program` of them) share
each latent row loaded from a page, and c_kv is loaded once and used as key and value. It
serves decode spans and prefill chunks alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pallas_kernels.ragged_flash import (
    MLA_CONFIG,
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

MAX_RANK = 512  # the [rows, R] f32 accumulator of a program must fit in registers
MAX_ROPE_DIM = 128


def check_mla_supported(
    q_lat: jax.Array,
    q_pe: jax.Array,
    latent_pages: jax.Array,
    latent_scales: jax.Array | None = None,
) -> None:
    """Raises UnsupportedShapeError for shapes the kernel does not take (callers fall back)."""
    rank, rope_dim = q_lat.shape[-1], q_pe.shape[-1]
    if latent_pages.ndim != 3 or rank + rope_dim != latent_pages.shape[-1]:
        raise ValueError(
            f"latent_pages {latent_pages.shape}: expected [N, P, R + Dr] with kv_lora_rank "
            f"{rank} + rope dim {rope_dim}"
        )
    if q_lat.shape[:2] != q_pe.shape[:2]:
        raise ValueError(f"q_lat {q_lat.shape} and q_pe {q_pe.shape}: token/head dims differ")
    if rank > MAX_RANK or rope_dim > MAX_ROPE_DIM:
        raise UnsupportedShapeError(
            f"kv_lora_rank={rank}, rope dim={rope_dim}: the kernel takes at most "
            f"{MAX_RANK} and {MAX_ROPE_DIM}"
        )
    check_dtypes([q_lat, q_pe], [latent_pages], () if latent_scales is None else (latent_scales,))


def mla_paged_attention(
    q_lat: jax.Array,  # [T, H, R], W_UK folded in
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages: jax.Array,  # [N, P, R + Dr], rows [c_kv | k_pe]
    cu_q_lens: jax.Array,  # [S + 1] int32; tokens at or past cu_q_lens[S] are padding
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32
    page_table: jax.Array,  # [S, Pmax] int32
    *,
    scale: float,
    latent_scales: jax.Array | None = None,  # [N, P] f32 with fp8 pages (float8_e4m3fn / uint8)
    config: KernelConfig = MLA_CONFIG,
    interpret: bool = False,
) -> jax.Array:  # [T, H, R]
    """Absorbed MLA of ragged query spans over their paged latents (already written).

    fp8 pages (float8_e4m3fn or its bits as uint8, one float32 scale per token's latent row)
    are read as `rows * scale`; the row's scale multiplies both score terms and the
    probabilities.
    """
    check_mla_supported(q_lat, q_pe, latent_pages, latent_scales)
    quantized = latent_scales is not None
    num_tokens, num_heads, rank = q_lat.shape
    rope_dim = q_pe.shape[-1]
    num_pages, page_size, _ = latent_pages.shape
    heads = min(next_pow2(num_heads), config.max_heads_per_program)
    head_blocks = -(-num_heads // heads)
    block_q = max(1, config.block_rows // heads)
    r_pad, dr_pad = padded_dim(rank), padded_dim(rope_dim)
    if positions.shape != (num_tokens,):
        raise ValueError(f"positions {positions.shape}: expected [T] = [{num_tokens}]")
    plan = plan_tiles(cu_q_lens, positions, kv_lens, page_table, block_q)
    t_pad = plan.num_tokens_padded

    def rows(x, width):  # [T, H, w] -> [head_blocks, T_pad * heads, width]
        x = jnp.pad(
            x,
            (
                (0, t_pad - num_tokens),
                (0, head_blocks * heads - num_heads),
                (0, width - x.shape[-1]),
            ),
        )
        x = x.reshape(t_pad, head_blocks, heads, width).transpose(1, 0, 2, 3)
        return x.reshape(head_blocks, t_pad * heads, width)

    def load_kv(kv_refs, kv_head, pages, offsets):
        latent_ref, lead = kv_refs[0], (pages, offsets)
        c_kv = load_rows(latent_ref, lead, column_index(rank, r_pad), q_lat.dtype)
        k_pe = load_rows(latent_ref, lead, column_index(rope_dim, dr_pad, rank), q_lat.dtype)
        if not quantized:
            return KVBlock([c_kv, k_pe], c_kv)
        row_scale = kv_refs[1][lead]
        return KVBlock([c_kv, k_pe], c_kv, row_scale, row_scale)

    o = ragged_flash(
        [rows(q_lat, r_pad), rows(q_pe, dr_pad)],
        [latent_pages, latent_scales] if quantized else [latent_pages],
        load_kv,
        plan,
        page_table,
        value_dim=r_pad,
        heads_per_program=heads,
        head_blocks=head_blocks,
        block_q=block_q,
        page_size=page_size,
        num_pages=num_pages,
        scale=scale,
        config=config,
        interpret=interpret,
        name="mla_paged_attention",
    )  # [head_blocks, T_pad * heads, r_pad]
    o = o.reshape(head_blocks, t_pad, heads, r_pad).transpose(1, 0, 2, 3)
    o = o.reshape(t_pad, head_blocks * heads, r_pad)[:num_tokens, :num_heads, :rank]
    valid = jnp.arange(num_tokens) < cu_q_lens[-1]
    return jnp.where(valid[:, None, None], o, 0.0).astype(q_lat.dtype)


def mla_paged_attention_ref(
    q_lat: jax.Array,  # [T, H, R]
    q_pe: jax.Array,  # [T, H, Dr]
    latent_pages: jax.Array,  # [N, P, R + Dr]
    cu_q_lens: jax.Array,  # [S + 1]
    positions: jax.Array,  # [T]
    kv_lens: jax.Array,  # [S]
    page_table: jax.Array,  # [S, Pmax]
    *,
    scale: float,
    latent_scales: jax.Array | None = None,  # [N, P] f32 with fp8 pages (float8_e4m3fn / uint8)
) -> jax.Array:  # [T, H, R]
    """Plain jnp twin: each token gathers its sequence's latents and takes a masked softmax."""
    if latent_scales is not None:  # fp8 pages: dequantize them whole
        latent_pages = dequantize_pages(latent_pages, latent_scales)
    num_tokens, _, rank = q_lat.shape
    num_pages, page_size, row_dim = latent_pages.shape
    num_seqs, max_pages = page_table.shape
    token = jnp.arange(num_tokens)
    seq = jnp.clip(jnp.searchsorted(cu_q_lens, token, side="right") - 1, 0, num_seqs - 1)
    limit = jnp.where(token < cu_q_lens[-1], jnp.minimum(positions + 1, kv_lens[seq]), 0)
    pages = jnp.clip(page_table[seq], 0, num_pages - 1)
    length = max_pages * page_size
    latent = latent_pages[pages].reshape(num_tokens, length, row_dim).astype(jnp.float32)
    visible = jnp.arange(length)[None, :] < limit[:, None]  # [T, L]
    q_cat = jnp.concatenate([q_lat, q_pe], axis=-1).astype(jnp.float32)
    s = jnp.einsum("thc,tlc->thl", q_cat, latent, precision=lax.Precision.HIGHEST)
    s = jnp.where(visible[:, None, :], s * scale, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - jnp.where(m == -jnp.inf, 0.0, m))
    denom = jnp.sum(p, axis=-1, keepdims=True)
    p = jnp.where(denom > 0, p / jnp.where(denom > 0, denom, 1.0), 0.0)
    c_kv = jnp.where(visible[:, :, None], latent[..., :rank], 0.0)
    o = jnp.einsum("thl,tlr->thr", p, c_kv, precision=lax.Precision.HIGHEST)
    return o.astype(q_lat.dtype)
