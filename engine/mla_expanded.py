"""MLA prefill in expanded form: multi-head attention over per-head keys and values expanded
from each KV block's latents (DeepSeek-V2 eq. 9-11, what HF computes), for the prefill spans
long enough to pay for the expansion; decodes and short spans stay absorbed
(engine/paged_attention.py). Which spans: `mla_split`, called once per step by engine/step.py.

At DeepSeek-V3's heads this needs ~2-3x fewer multiply-adds than the absorbed form for
chunks of 512 tokens and more. The batch-invariant mode keeps the absorbed form everywhere.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from engine.paged_attention import (
    PREFILL_KV_BLOCK_TOKENS,
    AttnMetadata,
    _blocked_attention,
    _check_sizes,
    as_pages,
    check_latent_rows,
    gather_pages,
)

# MLA prefill spans attended in expanded form (paged_attention_mla_expanded) are cut into
# tiles of this many rows: each tile expands every KV block it reads, so a longer tile
# spreads that cost over more rows (at DeepSeek-V3's heads 128 + 320 multiply-adds per key,
# head and row against 1,088 absorbed), and its scores are [H, tile, block].
EXPANDED_QUERY_TILE = 1024
# ... and their KV blocks are shortened (to whole pages) so that one block's scores,
# [H, tile, block], stay within this many elements: at 128 heads, 256 keys (128 MiB in f32).
EXPANDED_SCORE_ELEMENTS = 1 << 25


def mla_expanded_cost(
    q_lens, tile: int, rank: int, nope_dim: int, rope_dim: int, value_dim: int
) -> tuple:
    """Multiply-adds per key per head of a span of `q_lens` query tokens in each MLA form.

    Absorbed: every query row dots the whole latent row and sums latents, 2R + Dr. Expanded:
    each tile of `tile` rows first expands the key's latent to a per-head key and value,
    R (Dn + Dv), then each row dots Dn + Dr and sums Dv. (The absorb and W_UV products are
    per query row, not per key, so they are left out.) Works on ints and on arrays.
    """
    tiles = (q_lens + tile - 1) // tile
    absorbed = q_lens * (2 * rank + rope_dim)
    expanded = tiles * rank * (nope_dim + value_dim) + q_lens * (nope_dim + rope_dim + value_dim)
    return absorbed, expanded


def mla_expansion_may_pay(
    num_tokens: int, num_seqs: int, rank: int, nope_dim: int, rope_dim: int, value_dim: int
) -> bool:
    """Static: whether any span of a step bucket could be cheaper expanded (a span of the
    whole step, in tiles of EXPANDED_QUERY_TILE). No for buckets of decodes only (no more
    tokens than sequences, as the Pallas MLA config assumes) and for head shapes where a
    key's expansion costs more than the latent form saves (2R <= Dn + Dv)."""
    if num_tokens <= num_seqs:
        return False
    tile = min(EXPANDED_QUERY_TILE, num_tokens)
    absorbed, expanded = mla_expanded_cost(num_tokens, tile, rank, nope_dim, rope_dim, value_dim)
    return expanded < absorbed


class MlaSplit(NamedTuple):
    """A step's MLA tokens split between the two forms (`mla_split`), built once per step."""

    rows: jax.Array  # [T] bool, tokens attended in expanded form
    expanded: AttnMetadata  # only the expanded sequences (the others made padding)
    absorbed: AttnMetadata  # only the rest


def mla_split(
    meta: AttnMetadata, rank: int, nope_dim: int, rope_dim: int, value_dim: int
) -> MlaSplit:
    """Sends each sequence whose span is cheaper expanded (mla_expanded_cost) to the
    expanded form, the rest (decodes, short spans, padding) to the absorbed one. A sequence
    left out of a metadata has kv_len 0, so that call skips its tokens and leaves their
    output rows zero."""
    q_lens = meta.cu_q_lens[1:] - meta.cu_q_lens[:-1]
    tile = min(EXPANDED_QUERY_TILE, meta.positions.shape[0])
    absorbed, expanded = mla_expanded_cost(q_lens, tile, rank, nope_dim, rope_dim, value_dim)
    take = (q_lens > 1) & (meta.kv_lens > 0) & (expanded < absorbed)  # [S + 1]
    return MlaSplit(
        rows=take[meta.seq_ids],
        expanded=meta._replace(kv_lens=jnp.where(take, meta.kv_lens, 0)),
        absorbed=meta._replace(kv_lens=jnp.where(take, 0, meta.kv_lens)),
    )


def paged_attention_mla_expanded(
    q_nope: jax.Array,  # [T, H, Dn]
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages: jax.Array,  # [N, P, R + Dr], rows [c_kv | k_pe]
    w_kv_b: jax.Array,  # [R, H, Dn + Dv]: W_UK | W_UV (the checkpoint's kv_b_proj)
    meta: AttnMetadata,
    scale: float,
    kv_block_pages: int,
    query_tile: int = EXPANDED_QUERY_TILE,
    prefill_block_tokens: int = PREFILL_KV_BLOCK_TOKENS,
) -> jax.Array:  # [T, H, Dv]
    """MLA prefill in expanded form (DeepSeek-V2 eq. 9-11, what HF computes): each KV block's
    latents are expanded to per-head keys [k_nope | k_pe] and values, once per query tile,
    and every head attends like multi-head attention.

    For prefill spans only (`mla_split`; decodes are left to the absorbed form):
    a tile of Q rows pays R (Dn + Dv) per key per head for the expansion, so with Q well
    above R (Dn + Dv) / (2R - Dn - Dv) it needs less work than the absorbed form, ~2.8x less
    at DeepSeek-V3's heads (R 512, Dn 128, Dr 64, Dv 128) for a 2048-token chunk.
    """
    _check_sizes(kv_block_pages, query_tile)
    latent_pages = as_pages(latent_pages)
    num_tokens, num_heads, nope_dim = q_nope.shape
    num_pages, page_size, row_dim = latent_pages.shape
    rank = w_kv_b.shape[0]
    check_latent_rows(row_dim, rank, q_pe.shape[-1])
    value_dim = w_kv_b.shape[-1] - nope_dim
    # A tile of n < query_tile rows reads blocks query_tile / n times longer (_blocked_attention),
    # so every tile's scores are bounded by those of a full one.
    fits = EXPANDED_SCORE_ELEMENTS // (num_heads * query_tile) // page_size * page_size
    prefill_block_tokens = max(page_size, min(prefill_block_tokens, fits))

    def gather_block(ids):  # ids: [..., Bp]
        shape = (*ids.shape[:-1], ids.shape[-1] * page_size, row_dim)
        rows = gather_pages(latent_pages, ids).reshape(shape)  # [..., L, R + Dr]
        kv = jnp.einsum(
            "...lr,rhk->...lhk", rows[..., :rank], w_kv_b, preferred_element_type=jnp.float32
        )
        k_pe = jnp.broadcast_to(
            rows[..., None, rank:].astype(jnp.float32), (*shape[:-1], num_heads, row_dim - rank)
        )
        return jnp.concatenate([kv[..., :nope_dim], k_pe], axis=-1), kv[..., nope_dim:]

    # Every head is its own KV head here (group 1).
    q_cat = jnp.concatenate([q_nope, q_pe], axis=-1).astype(jnp.float32) * scale
    o = _blocked_attention(
        q_cat[:, :, None],
        meta,
        num_pages,
        page_size,
        kv_block_pages,
        query_tile,
        True,
        prefill_block_tokens,
        gather_block,
        value_dim,
        decodes=False,
        remainder_tiles=(),
    )
    return o[:, :, 0].astype(q_nope.dtype)
