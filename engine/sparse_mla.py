"""DeepSeek Sparse Attention (DSA, DeepSeek-V3.2-Exp) over the paged cache: each layer's
lightning indexer picks a query's `index_topk` best keys, and MLA attends to those alone.

Indexer (transformers' DeepseekV32Indexer; models/attention.py makes its inputs): a query t
scores each key j it sees (j <= its position) as

    I(t, j) = sum_h w[t, h] * relu(q[t, h] . k[j])

with the head weights w already scaled by index_n_heads^-0.5 and index_head_dim^-0.5, and
keeps the index_topk highest (every key, when it sees no more). The keys k (one per token,
shared by the index heads) are cached beside the MLA latent: a DSA layer's cache is
(latent pages, index key pages).

`select_keys` ranks the keys of each query tile (rows of one sequence's span, cut as the
prefill tiles of engine/paged_attention.py) block by block, keeping a running top-k, so a
tile reads each index-key block once for all its rows and no score array grows with the
context. `sparse_mla_attention` then gathers each query's chosen latent rows and attends
in absorbed form (score = q_lat . c_kv + q_pe . k_pe, output sum_j p_j c_kv_j; W_UV after,
as engine/step.py's dense MLA): work per query grows with index_topk, not with the context.
The chosen keys are attended in position order, so the output depends on which keys were
chosen and not on their ranks.

This is the XLA path on every backend (the Pallas and Mosaic MLA kernels attend densely).
By default a query's index scores come from a tile whose row count follows its span, and
its attention from a gather chunk whose size follows the step's, and XLA:CPU's last bits
can follow a matmul's row count. The batch-invariant mode (`batch_invariant=True`) makes
every indexer tile INVARIANT_TILE rows and every attention chunk INVARIANT_CHUNK tokens,
whatever the step, so a token's bits depend on its own query and keys alone (a decode and
the prefill of the same position agree).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from engine import kv_quant
from engine.paged_attention import (
    REMAINDER_TILES,
    AttnMetadata,
    _tile_tables,
    as_pages,
    check_latent_rows,
    gather_pages,
)
from models.attention import mla_absorb_q, mla_latent_to_v

# Query rows per indexer tile (the last rows of a span, or a short span, take a remainder
# tile of REMAINDER_TILES rows; a step of fewer tokens, tiles of that many), and the keys
# one loop step scores for a tile.
INDEX_QUERY_TILE = 64
INDEX_BLOCK_TOKENS = 2048
# Sparse attention gathers each token's chosen latent rows, this many bytes (float32) at a
# time: a chunk's size follows the model's shapes and the step's size alone.
SPARSE_GATHER_BYTES = 16 << 20
# Batch-invariant mode: indexer tiles of this many rows (no remainder tiles), attention
# chunks of this many tokens (a step's tokens padded to a multiple).
INVARIANT_TILE = 8
INVARIANT_CHUNK = 8


def selects(cfg, max_keys: int) -> bool:
    """Whether a DSA model's indexer leaves out keys for some query that sees up to
    `max_keys` (a step's page table width in tokens): not where index_topk >= max_keys,
    as transformers' topk = min(index_topk, keys) keeps them all."""
    return cfg.sparse_attention and max_keys > cfg.index_topk


def select_keys(
    idx_q: jax.Array,  # [T, Hi, Di] indexer queries, roped
    idx_w: jax.Array,  # [T, Hi] head weights, scales folded in
    index_pages,  # [N, P, Di] cached indexer keys (or fp8 QuantizedPages)
    meta: AttnMetadata,
    topk: int,
    tile_sizes: tuple[int, ...] | None = None,
    block_tokens: int = INDEX_BLOCK_TOKENS,
) -> jax.Array:  # [T, topk] int32 key positions, ascending; -1 past a query's keys
    """Each query's `topk` highest-scored visible keys (DeepseekV32Indexer's top-k).

    `tile_sizes`: the rows of a span's tiles, then (smaller, descending) those of the
    remainder tiles a span's last rows may take instead; None: INDEX_QUERY_TILE rows (or
    the step's tokens, when fewer) and REMAINDER_TILES. Keys are scored `block_tokens` at
    a time (at most the page table's width)."""
    if tile_sizes is None:
        tile = min(INDEX_QUERY_TILE, idx_q.shape[0])
        tile_sizes = (tile, *(c for c in REMAINDER_TILES if c < tile))
    if topk < 1 or min(tile_sizes) < 1 or list(tile_sizes) != sorted(tile_sizes, reverse=True):
        raise ValueError(f"topk={topk}, tile_sizes={tile_sizes}: must be >= 1, descending")
    index_pages = as_pages(index_pages)
    num_tokens = idx_q.shape[0]
    num_pages, page_size, _ = index_pages.shape
    max_pages = meta.page_table.shape[1]
    block_pages = max(1, min(block_tokens // page_size, max_pages))
    block_len = block_pages * page_size
    padded = -(-max_pages // block_pages) * block_pages
    page_table = jnp.pad(
        jnp.clip(meta.page_table, 0, num_pages - 1), ((0, 0), (0, padded - max_pages))
    )
    tile, classes = tile_sizes[0], tuple(tile_sizes[1:])
    q_lens = meta.cu_q_lens[1:] - meta.cu_q_lens[:-1]
    tiled = (q_lens > 0) & (meta.kv_lens > 0)
    tables = _tile_tables(meta, tiled, num_tokens, tile, classes)
    # Rows past T give every tile a full slice (dynamic_slice would shift a short one back).
    q_pad = jnp.pad(idx_q.astype(jnp.float32), ((0, tile), (0, 0), (0, 0)))
    w_pad = jnp.pad(idx_w.astype(jnp.float32), ((0, tile), (0, 0)))
    pos_pad = jnp.pad(meta.positions, (0, tile))
    out = jnp.full((num_tokens + tile, topk), -1, jnp.int32)

    def attend_tiles(out, tiles, size):
        def tile_body(i, out):
            seq, first, n = tiles.seq[i], tiles.first[i], tiles.rows[i]
            in_tile = jnp.arange(size) < n
            pos = lax.dynamic_slice_in_dim(pos_pad, first, size)
            limit = jnp.where(in_tile, jnp.minimum(pos + 1, meta.kv_lens[seq]), 0)  # [Q]
            q = lax.dynamic_slice_in_dim(q_pad, first, size)  # [Q, Hi, Di]
            w = lax.dynamic_slice_in_dim(w_pad, first, size)  # [Q, Hi]
            pages = page_table[seq]

            def body(b, carry):
                best, ids = carry  # [Q, k] scores (descending), positions
                block = lax.dynamic_slice_in_dim(pages, b * block_pages, block_pages)
                keys = gather_pages(index_pages, block).reshape(block_len, -1)
                s = jnp.einsum(
                    "qhd,ld->qhl", q, keys.astype(jnp.float32), preferred_element_type=jnp.float32
                )
                s = jnp.einsum("qh,qhl->ql", w, jax.nn.relu(s))
                key_pos = b * block_len + jnp.arange(block_len, dtype=jnp.int32)
                s = jnp.where(key_pos[None, :] < limit[:, None], s, -jnp.inf)
                both = jnp.concatenate([best, s], axis=1)
                best, take = lax.top_k(both, topk)
                where = jnp.concatenate([ids, jnp.broadcast_to(key_pos, s.shape)], axis=1)
                return best, jnp.take_along_axis(where, take, axis=1)

            init = (jnp.full((size, topk), -jnp.inf), jnp.full((size, topk), -1, jnp.int32))
            num_blocks = (jnp.max(limit) + block_len - 1) // block_len
            best, ids = lax.fori_loop(0, num_blocks, body, init)
            # Unseen keys (-inf) are none; the rest in position order, -1 last.
            ids = jnp.where(best > -jnp.inf, ids, jnp.iinfo(jnp.int32).max)
            ids = jnp.sort(ids, axis=1)
            ids = jnp.where(ids == jnp.iinfo(jnp.int32).max, -1, ids)
            old = lax.dynamic_slice_in_dim(out, first, size)
            new = jnp.where(in_tile[:, None], ids, old)
            return lax.dynamic_update_slice_in_dim(out, new, first, axis=0)

        return lax.fori_loop(0, tiles.count, tile_body, out)

    for tiles, size in zip(tables, (tile, *classes), strict=True):
        out = attend_tiles(out, tiles, size)
    return out[:num_tokens]


def _gather_rows(pages, page_ids: jax.Array, offsets: jax.Array) -> jax.Array:
    """pages[page_ids, offsets] as float32 (fp8 pages dequantized)."""
    if kv_quant.is_quantized(pages):
        rows = kv_quant.QuantizedPages(
            pages.data[page_ids, offsets], pages.scale[page_ids, offsets]
        )
        return kv_quant.dequantize(rows)
    return pages[page_ids, offsets].astype(jnp.float32)


def sparse_mla_attention(
    q_lat: jax.Array,  # [T, H, R], W_UK already folded in
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages,  # [N, P, R + Dr], rows [c_kv | k_pe]
    meta: AttnMetadata,
    selected: jax.Array,  # [T, K] key positions (select_keys), -1 = none
    scale: float,
    chunk: int | None = None,
) -> jax.Array:  # [T, H, R]
    """Absorbed MLA of each query over its selected keys only, `chunk` tokens at a time
    (None: as many as SPARSE_GATHER_BYTES of gathered rows hold, at most the step's)."""
    latent_pages = as_pages(latent_pages)
    num_tokens, num_heads, rank = q_lat.shape
    num_pages, page_size, row_dim = latent_pages.shape
    check_latent_rows(row_dim, rank, q_pe.shape[-1])
    q_cat = jnp.concatenate([q_lat, q_pe], axis=-1).astype(jnp.float32) * scale
    page_table = jnp.clip(meta.page_table, 0, num_pages - 1)
    num_keys = selected.shape[1]
    # A given chunk runs every step's tokens through the same loop body, one chunk or many.
    looped = chunk is not None
    if chunk is None:
        per_token = num_keys * (row_dim + num_heads) * 4
        chunk = max(1, min(num_tokens, SPARSE_GATHER_BYTES // per_token))
    elif chunk < 1:
        raise ValueError(f"chunk={chunk}: must be >= 1")

    def attend(q, seq_ids, keys):  # one chunk: [C, H, W], [C], [C, K]
        chosen = keys >= 0
        at = jnp.maximum(keys, 0)
        page_ids = jnp.take_along_axis(page_table[seq_ids], at // page_size, axis=1)
        rows = _gather_rows(latent_pages, page_ids, at % page_size)  # [C, K, W]
        s = jnp.einsum("chw,ckw->chk", q, rows, preferred_element_type=jnp.float32)
        s = jnp.where(chosen[:, None, :], s, -jnp.inf)
        m = jnp.max(s, axis=-1, keepdims=True)
        p = jnp.exp(s - jnp.where(m == -jnp.inf, 0.0, m))
        denom = jnp.sum(p, axis=-1, keepdims=True)
        # Rows of unchosen slots may be stale pages (inf/NaN): 0 * inf = NaN.
        values = jnp.where(chosen[:, :, None], rows[..., :rank], 0.0)
        o = jnp.einsum("chk,ckr->chr", p, values, preferred_element_type=jnp.float32)
        return jnp.where(denom > 0, o / jnp.where(denom > 0, denom, 1.0), 0.0)

    parts = (q_cat, meta.seq_ids, selected)
    if not looped and chunk == num_tokens:
        o = attend(*parts)
    else:
        num_chunks = -(-num_tokens // chunk)
        pad = num_chunks * chunk - num_tokens
        # Padding rows choose no key, so they attend to nothing.
        parts = [
            jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1), constant_values=c)
            for a, c in zip(parts, (0, 0, -1), strict=True)
        ]
        chunks = [a.reshape(num_chunks, chunk, *a.shape[1:]) for a in parts]
        o = lax.map(lambda c: attend(*c), chunks)
        o = o.reshape(num_chunks * chunk, *o.shape[2:])[:num_tokens]
    return o.astype(q_lat.dtype)


def select(cfg, x, index_pages, meta: AttnMetadata, batch_invariant=False) -> jax.Array:
    """A DSA layer's indexer choice ([T, index_topk] key positions, select_keys) over its
    written index-key pages."""
    tiles = (INVARIANT_TILE,) if batch_invariant else None
    return select_keys(x.idx_q, x.idx_w, index_pages, meta, cfg.index_topk, tiles)


def attention(
    p_attn: dict, cfg, x, latent_pages, selected, meta: AttnMetadata, batch_invariant=False
) -> jax.Array:
    """One DSA layer's attention over its written latent pages, before the output
    projection: absorbed MLA over `selected` (its own indexer's choice, `select`, or a
    shared-indexer layer's earlier one), W_UV applied ([T, H, Dv])."""
    chunk = INVARIANT_CHUNK if batch_invariant else None
    q_lat = mla_absorb_q(p_attn, x.q_nope, cfg)
    o_lat = sparse_mla_attention(q_lat, x.q_pe, latent_pages, meta, selected, x.scale, chunk)
    return mla_latent_to_v(p_attn, o_lat, cfg)
