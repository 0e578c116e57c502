"""Paged attention in plain jnp (the `xla` backend): GQA and absorbed MLA over a paged KV cache.

Used on CPU and as the GPU fallback. Keys are visited in fixed-size blocks of
`kv_block_pages` pages aligned to absolute position 0, with an online softmax (FlashAttention,
Dao et al. 2022), so no score matrix larger than one block per token is ever materialized.
Every token reduces only over its own sequence's keys in a fixed block order with
fixed-order sums, so its output is bitwise the same whatever else shares the batch and
whatever the padded token count (needed by batch-invariant mode).

Cache layout (PLAN.md): GQA layer `k_pages, v_pages: [N, P, K, Dh]`; MLA layer
`latent_pages: [N, P, R + Dr]` holding `[c_kv | k_pe]`. A slot id is `page * P + offset`;
slot -1 means padding.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


class AttnMetadata(NamedTuple):
    """Per-step addressing for paged attention (all arrays, so it can be built inside jit)."""

    positions: jax.Array  # [T] int32, absolute position of each query token
    seq_ids: jax.Array  # [T] int32, row of kv_lens / page_table the token belongs to
    kv_lens: jax.Array  # [S] int32, KV length after this step's writes (0 = padding sequence)
    page_table: jax.Array  # [S, Pmax] int32, page ids of each sequence in position order


def write_kv(pages: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> jax.Array:
    """Scatters `new: [T, ...]` into `pages: [N, P, ...]` at `slot_mapping: [T]`; -1 = skip."""
    num_pages, page_size = pages.shape[:2]
    if new.shape[1:] != pages.shape[2:]:
        raise ValueError(
            f"new row shape {new.shape[1:]} does not match the page row shape {pages.shape[2:]}"
        )
    num_slots = num_pages * page_size
    flat = jnp.asarray(pages).reshape(num_slots, *pages.shape[2:])
    # A negative index would wrap around to the last slot, so padding is sent out of range
    # and dropped instead.
    slots = jnp.where(slot_mapping < 0, num_slots, slot_mapping)
    flat = flat.at[slots].set(new.astype(pages.dtype), mode="drop")
    return flat.reshape(pages.shape)


def build_metadata(
    cu_q_lens: jax.Array,  # [S + 1] int32, cu_q_lens[0] == 0
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32
    page_table: jax.Array,  # [S, Pmax] int32
    num_tokens_padded: int | None = None,
) -> AttnMetadata:
    """Maps each flattened token to its sequence; traceable, so the step can call it in jit.

    Tokens at or past `cu_q_lens[S]` (bucket padding) are assigned to an extra padding
    sequence appended at index S with kv_len 0, so the returned `kv_lens` is `[S + 1]` and
    `page_table` is `[S + 1, Pmax]`.
    """
    num_tokens = positions.shape[0]
    if num_tokens_padded is not None and num_tokens_padded != num_tokens:
        raise ValueError(
            f"num_tokens_padded={num_tokens_padded} does not match positions length {num_tokens}"
        )
    tokens = jnp.arange(num_tokens, dtype=cu_q_lens.dtype)
    # side="right" skips zero-length spans: token t belongs to the last s with cu[s] <= t.
    # compare_all is a [T, S + 1] comparison: S is small, and it avoids a serial search loop.
    seq_ids = jnp.searchsorted(cu_q_lens, tokens, side="right", method="compare_all") - 1
    kv_lens = jnp.concatenate([kv_lens, jnp.zeros((1,), kv_lens.dtype)])
    page_table = jnp.concatenate(
        [page_table, jnp.zeros((1, page_table.shape[1]), page_table.dtype)]
    )
    return AttnMetadata(
        positions=positions.astype(jnp.int32),
        seq_ids=seq_ids.astype(jnp.int32),
        kv_lens=kv_lens.astype(jnp.int32),
        page_table=page_table.astype(jnp.int32),
    )


def _fixed_order_sum(x: jax.Array) -> jax.Array:  # [..., L] -> [...]
    """Sums the last axis in an order fixed by L alone.

    XLA:CPU's reduce sums a row in a different order when there are few rows (an attention
    output differed in the last bit between T <= 8 and T >= 16 with jnp.sum here, measured on
    jax 0.11.2); a pairwise tree of elementwise adds cannot change with T.
    """
    n = x.shape[-1]
    width = 1 << (n - 1).bit_length()
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - n)])
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x[..., 0]


# gather_block(page_ids: [T, B]) -> (keys: [T, L, K, Dk], values: [T, L, K, Dv]), L = B * P.
GatherBlock = Callable[[jax.Array], tuple[jax.Array, jax.Array]]


def _blocked_attention(
    q: jax.Array,  # [T, K, G, Dk] f32, already multiplied by the softmax scale
    meta: AttnMetadata,
    num_pages: int,
    page_size: int,
    kv_block_pages: int,
    gather_block: GatherBlock,
    value_dim: int,
) -> jax.Array:  # [T, K, G, Dv] f32
    """Online-softmax attention of each token over its sequence's keys, one KV block per step."""
    num_tokens, num_kv_heads, group, _ = q.shape
    block_len = kv_block_pages * page_size

    # A token sees keys j < min(position + 1, kv_len): causal inside a prefill chunk, and
    # nothing for padding tokens (their padding sequence has kv_len 0).
    limit = jnp.minimum(meta.positions + 1, meta.kv_lens[meta.seq_ids])  # [T]

    # Garbage ids in unused page-table columns are clipped so the gather stays in bounds;
    # their keys are masked anyway. Columns are padded to whole blocks so a block's slice
    # never gets shifted back by dynamic_slice's start-index clamping.
    token_pages = jnp.clip(meta.page_table[meta.seq_ids], 0, num_pages - 1)  # [T, Pmax]
    max_pages = token_pages.shape[1]
    padded_pages = -(-max_pages // kv_block_pages) * kv_block_pages
    token_pages = jnp.pad(token_pages, ((0, 0), (0, padded_pages - max_pages)))
    num_blocks = jnp.minimum(
        (jnp.max(limit) + block_len - 1) // block_len, padded_pages // kv_block_pages
    )

    def body(b, carry):
        m, denom, acc = carry  # [T, K, G], [T, K, G], [T, K, G, Dv]
        ids = lax.dynamic_slice_in_dim(token_pages, b * kv_block_pages, kv_block_pages, axis=1)
        keys, values = gather_block(ids)
        valid = (b * block_len + jnp.arange(block_len))[None, :] < limit[:, None]  # [T, L]
        s = jnp.einsum("tkgd,tlkd->tkgl", q, keys, preferred_element_type=jnp.float32)
        s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        # While a token has seen no valid key its max is -inf; shifting by 0 instead keeps
        # exp() at exactly 0 rather than NaN from (-inf) - (-inf).
        m_shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        alpha = jnp.exp(m - m_shift)
        p = jnp.exp(s - m_shift[..., None])
        # p is 0 at masked keys, but stale rows may hold inf/NaN and 0 * inf = NaN.
        values = jnp.where(valid[:, :, None, None], values, 0)
        denom = alpha * denom + _fixed_order_sum(p)
        pv = jnp.einsum("tkgl,tlkd->tkgd", p, values, preferred_element_type=jnp.float32)
        acc = alpha[..., None] * acc + pv
        return m_new, denom, acc

    stats_shape = (num_tokens, num_kv_heads, group)
    init = (
        jnp.full(stats_shape, -jnp.inf, jnp.float32),
        jnp.zeros(stats_shape, jnp.float32),
        jnp.zeros((*stats_shape, value_dim), jnp.float32),
    )
    _, denom, acc = lax.fori_loop(0, num_blocks, body, init)
    # Tokens without any valid key (padding) get zeros, not 0 / 0.
    seen = denom > 0
    return jnp.where(seen[..., None], acc / jnp.where(seen, denom, 1.0)[..., None], 0.0)


def _check_block_pages(kv_block_pages: int) -> None:
    if kv_block_pages < 1:
        raise ValueError(f"kv_block_pages must be >= 1, got {kv_block_pages}")


def paged_attention_gqa(
    q: jax.Array,  # [T, H, Dh]
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dh]
    meta: AttnMetadata,
    scale: float,
    kv_block_pages: int,
) -> jax.Array:  # [T, H, Dh]
    """Grouped-query attention of ragged query tokens over their sequences' paged K/V.

    The step's own K/V must already be written to the pages.
    """
    _check_block_pages(kv_block_pages)
    q, k_pages, v_pages = jnp.asarray(q), jnp.asarray(k_pages), jnp.asarray(v_pages)
    num_tokens, num_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_pages.shape
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num query heads {num_heads} is not a multiple of num kv heads {num_kv_heads}"
        )
    group = num_heads // num_kv_heads
    block_len = kv_block_pages * page_size

    def gather_block(ids):  # ids: [T, B]
        keys = k_pages[ids].reshape(num_tokens, block_len, num_kv_heads, head_dim)
        values = v_pages[ids].reshape(num_tokens, block_len, num_kv_heads, head_dim)
        return keys, values

    # Query head h uses KV head h // G (HF repeat_kv order), so the G heads of one KV head
    # share each gathered block.
    q_grouped = (q.astype(jnp.float32) * scale).reshape(num_tokens, num_kv_heads, group, head_dim)
    o = _blocked_attention(
        q_grouped, meta, num_pages, page_size, kv_block_pages, gather_block, head_dim
    )
    return o.reshape(num_tokens, num_heads, head_dim).astype(q.dtype)


def paged_attention_mla(
    q_lat: jax.Array,  # [T, H, R], W_UK already folded in
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages: jax.Array,  # [N, P, R + Dr], rows [c_kv | k_pe]
    meta: AttnMetadata,
    scale: float,
    kv_block_pages: int,
) -> jax.Array:  # [T, H, R]
    """Absorbed MLA (DeepSeek-V2 sec. 2.1.2): attention in latent space over paged latents.

    score = q_lat . c_kv + q_pe . k_pe, output = sum_j p_j c_kv_j; the caller applies W_UV.
    """
    _check_block_pages(kv_block_pages)
    latent_pages = jnp.asarray(latent_pages)
    num_tokens, num_heads, rank = q_lat.shape
    num_pages, page_size, row_dim = latent_pages.shape
    if rank + q_pe.shape[-1] != row_dim:
        raise ValueError(
            f"latent row dim {row_dim} != kv_lora_rank {rank} + rope dim {q_pe.shape[-1]}"
        )
    block_len = kv_block_pages * page_size

    def gather_block(ids):  # ids: [T, B]
        # One latent row serves as key (all of it) and value (its c_kv part) for every head.
        rows = latent_pages[ids].reshape(num_tokens, block_len, 1, row_dim)
        return rows, rows[..., :rank]

    # Concatenating [q_lat | q_pe] turns the two score terms into one dot with the full row.
    q_cat = jnp.concatenate([q_lat, q_pe], axis=-1).astype(jnp.float32) * scale
    o = _blocked_attention(
        q_cat[:, None], meta, num_pages, page_size, kv_block_pages, gather_block, rank
    )
    return o[:, 0].astype(q_lat.dtype)
