"""Paged attention in plain jnp (the `xla` backend): GQA and absorbed MLA over a paged KV cache.

Used on CPU and as the GPU fallback. Keys are visited in fixed-size blocks aligned to
absolute position 0, with an online softmax (FlashAttention, Dao et al. 2022), so no score
matrix larger than one KV block by one query tile is ever materialized, and the memory a
step needs does not grow with the context. Every token reduces only over its own sequence's
keys in a fixed block order with fixed-order sums.

Three paths share that per-token math:
- a step whose page table is no wider than one decode KV block (max_model_len up to
  `kv_block_pages` pages, 128 tokens at the engine's default) attends every token over
  that one block directly, DENSE_GATHER_BYTES of gathered keys at a time, without the loops
  below: the same math as a decode over one block, and a program that compiles ~2x faster
  (the loops' bodies were most of a small model's step to compile on XLA:CPU);
- decodes (a sequence with one query token this step) are batched across sequences, each
  gathering its own KV blocks of `kv_block_pages`, up to the longest decode context (up to
  DECODE_BATCH_MAX_TOKENS: longer ones take the tile path);
- prefill chunks are cut into query tiles aligned to the start of each sequence's span; a
  loop visits the tiles one after another and each tile gathers every KV block of its
  sequence once for all its rows, up to its own last position. So a chunk of C tokens over
  context L reads about C / query_tile * L keys (not C * L, as one copy per token would),
  and a short sequence never pays for a long neighbour's context.
Bitwise: a decode's output does not depend on the batch around it; a prefill token's does
not depend on its chunk or neighbours for a given padded step size T (its tile is
min(QUERY_TILE, T)); on the dense path no token's output depends on anything but its own
query and keys. With `split_decodes=False` (batch-invariant mode, INVARIANT_OPTIONS)
every token, decodes included, goes through tiles of one fixed size and block, so decode and
prefill of the same position agree bitwise whatever the step.

MLA is absorbed (attention in latent space) for decodes and short spans. A prefill span
long enough to pay for it can instead be attended in expanded form, multi-head attention
over per-head keys and values expanded from each KV block's latents
(engine/mla_expanded.py; which spans: its mla_split, called by engine/step.py),
which needs ~2-3x fewer multiply-adds at DeepSeek-V3's heads for chunks of 512 tokens and
more. The batch-invariant mode keeps the absorbed form everywhere.

Cache layout (PLAN.md): GQA layer `k_pages, v_pages: [N, P, K, Dh]`; MLA layer
`latent_pages: [N, P, R + Dr]` holding `[c_kv | k_pe]`. A slot id is `page * P + offset`;
slot -1 means padding. Any of these may be fp8 pages with per-row scales (engine/kv_quant.py):
writes quantize, and every gathered block is dequantized to float32.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from engine import kv_quant
from models.reductions import row_sum

# Query tokens that share one gathered KV block in a prefill chunk, and the KV block of those
# tiles (decodes use the engine's `kv_block_pages`). Measured: docs/benchmarks.md, "Long
# context". In the default mode a step with T < QUERY_TILE padded tokens uses tiles of T.
QUERY_TILE = 256
PREFILL_KV_BLOCK_TOKENS = 512
# The last rows of a span (or a whole short span), when this few, get a tile of the smallest
# of these sizes that holds them instead of a whole QUERY_TILE: short prompts, and a long
# prefill sharing steps with decodes that runs chunks of a few tokens.
REMAINDER_TILES = (32, 8)
SMALL_TILE = REMAINDER_TILES[-1]
# A tile whose keys end within this many of the engine's (decode) KV blocks reads those
# small blocks instead of its long-context block (whose size is set for 128k prefills).
SHORT_CONTEXT_BLOCKS = 8
# Decodes are batched and loop together up to the longest of them, so a decode over a longer
# context than this goes through the tiles instead, paying for its own context alone (a 128k
# request decoding next to short ones would otherwise make every decode scan 128k keys).
DECODE_BATCH_MAX_TOKENS = 8192
# The dense path (page tables of one decode block) gathers every token's block for itself:
# the step's tokens are taken this many bytes of gathered keys and values at a time (a
# chunk's size is set by the model's head shape alone, never by the step).
DENSE_GATHER_BYTES = 16 << 20
# Batch-invariant mode: decodes run this many sequences at a time (see _decode_attention).
DECODE_GROUP = 16
# Batch-invariant mode: every query token's scores and p.v are rows of one matmul shape,
# [query_tile * G, Dk] x [Dk, L] per KV head, whether it is decoded or recomputed inside a
# prefill chunk: prefill spans are cut into tiles of query_tile rows and a decode is the first
# row of such a tile (_decode_attention). XLA:CPU picks its dot kernel by shape and a row's
# last bits can follow the row count (measured: decode rows [G, Dk] vs tile rows [Q * G, Dk]
# differed for most head shapes, while every chunking through fixed-size tiles agreed). A
# decode computes a whole tile, so the tile is small: 8 rows measured 0.89x the default
# mode's decode throughput at batch 64 (bench-llama-20m), 16 rows 0.73x, 4 rows 0.95x but
# 0.77x (against 0.84x for 16) on 256-token prompts.
INVARIANT_OPTIONS = {"query_tile": 8, "split_decodes": False}


class AttnMetadata(NamedTuple):
    """Per-step addressing for paged attention (all arrays, so it can be built inside jit)."""

    positions: jax.Array  # [T] int32, absolute position of each query token
    seq_ids: jax.Array  # [T] int32, row of kv_lens / page_table the token belongs to
    kv_lens: jax.Array  # [S] int32, KV length after this step's writes (0 = padding sequence)
    page_table: jax.Array  # [S, Pmax] int32, page ids of each sequence in position order
    cu_q_lens: jax.Array  # [S + 1] int32, token span of each sequence (last one ends at T)


def write_kv(pages, new: jax.Array, slot_mapping: jax.Array):
    """Scatters `new: [T, ...]` into `pages: [N, P, ...]` at `slot_mapping: [T]`; -1 = skip.

    fp8 pages (kv_quant.QuantizedPages) get each new row quantized with its own scale.
    """
    if new.shape[1:] != pages.shape[2:]:
        raise ValueError(
            f"new row shape {new.shape[1:]} does not match the page row shape {pages.shape[2:]}"
        )
    if kv_quant.is_quantized(pages):
        rows = kv_quant.quantize_rows(new)
        return kv_quant.QuantizedPages(
            _scatter_rows(pages.data, rows.data, slot_mapping),
            _scatter_rows(pages.scale, rows.scale, slot_mapping),
        )
    return _scatter_rows(jnp.asarray(pages), new, slot_mapping)


def _scatter_rows(pages: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> jax.Array:
    num_pages, page_size = pages.shape[:2]
    # Indexed by (page, offset), not through a flat [N * P, ...] view of the pool: XLA turns
    # a one-token scatter into a dynamic-update-slice, and behind the view's reshape it
    # copied the whole donated pool instead of updating it in place. With a page table of
    # one KV block (max_model_len <= 128) those copies ran every step: a batch-1 decode
    # took 88 ms a token with 1,536 pages and 423 ms with 8,192, against ~4 ms
    # (docs/benchmarks.md). A negative index would wrap around, so padding (-1) is sent to
    # a page out of range and dropped.
    page = jnp.where(slot_mapping < 0, num_pages, slot_mapping // page_size)
    return pages.at[page, slot_mapping % page_size].set(new.astype(pages.dtype), mode="drop")


def as_pages(pages):
    """A page array as a jax array; fp8 pages (QuantizedPages) as they are."""
    return pages if kv_quant.is_quantized(pages) else jnp.asarray(pages)


def gather_pages(pages, ids: jax.Array) -> jax.Array:
    """pages[ids]: [..., Bp, P, ...] rows of the listed pages, fp8 pages dequantized (f32)."""
    if kv_quant.is_quantized(pages):
        return kv_quant.dequantize(kv_quant.QuantizedPages(pages.data[ids], pages.scale[ids]))
    return pages[ids]


def build_metadata(
    cu_q_lens: jax.Array,  # [S + 1] int32, cu_q_lens[0] == 0
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32
    page_table: jax.Array,  # [S, Pmax] int32
    num_tokens_padded: int | None = None,
) -> AttnMetadata:
    """Maps each flattened token to its sequence; traceable, so the step can call it in jit.

    Tokens at or past `cu_q_lens[S]` (bucket padding) are assigned to an extra padding
    sequence appended at index S with kv_len 0, so the returned `kv_lens` is `[S + 1]`,
    `page_table` is `[S + 1, Pmax]` and `cu_q_lens` is `[S + 2]`.
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
    cu_q_lens = jnp.concatenate([cu_q_lens, jnp.full((1,), num_tokens, cu_q_lens.dtype)])
    return AttnMetadata(
        positions=positions.astype(jnp.int32),
        seq_ids=seq_ids.astype(jnp.int32),
        kv_lens=kv_lens.astype(jnp.int32),
        page_table=_padded_table(page_table),
        cu_q_lens=cu_q_lens.astype(jnp.int32),
    )


def _padded_table(page_table: jax.Array) -> jax.Array:
    """`page_table` [S, Pmax] with the padding sequence's row (zeros) appended, int32."""
    pad = jnp.zeros((1, page_table.shape[1]), page_table.dtype)
    return jnp.concatenate([page_table, pad]).astype(jnp.int32)


def with_page_table(meta: AttnMetadata, page_table: jax.Array) -> AttnMetadata:
    """`meta` addressing another pool: the same tokens and spans through `page_table`
    [S, Pmax] (a hybrid model's windowed layers, ModelConfig.hybrid_window)."""
    return meta._replace(page_table=_padded_table(page_table))


# gather_block(page_ids: [..., Bp]) -> (keys [..., L, K, Dk], values [..., L, K, Dv]),
# L = Bp * page_size: the rows of those pages in order.
GatherBlock = Callable[[jax.Array], tuple[jax.Array, jax.Array]]


def _softmax_step(m, denom, s, valid):
    """Online-softmax statistics for one KV block.

    m, denom: [R...] running max and sum per query row; s: scores [R..., L]; valid
    broadcastable to s. Returns (new max, rescale factor for the old sums, p [R..., L],
    new denom).
    """
    s = jnp.where(valid, s, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    # While a row has seen no valid key its max is -inf; shifting by 0 instead keeps
    # exp() at exactly 0 rather than NaN from (-inf) - (-inf).
    m_shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    alpha = jnp.exp(m - m_shift)
    p = jnp.exp(s - m_shift[..., None])
    # row_sum: fixed-order in the batch-invariant step (XLA:CPU's reduce changed a row's sum
    # between T <= 8 and T >= 16).
    return m_new, alpha, p, alpha * denom + row_sum(p)


def _capped(s: jax.Array, softcap: float) -> jax.Array:
    """Scores squashed to softcap * tanh(s / softcap) (Gemma 2's attention logits), or as
    they are with softcap 0."""
    return softcap * jnp.tanh(s / softcap) if softcap else s


def _with_alibi(s: jax.Array, alibi: jax.Array | None, rel: jax.Array) -> jax.Array:
    """s plus ALiBi's bias, slope * (key position - query position), or s as it is without
    slopes; `alibi` (f32 slopes) and `rel` (int32 offsets) come shaped to broadcast to s."""
    return s if alibi is None else s + alibi * rel.astype(jnp.float32)


def _init_carry(shape: tuple[int, ...], value_dim: int):
    return (
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros((*shape, value_dim), jnp.float32),
    )


def _normalize(
    denom: jax.Array, acc: jax.Array, m: jax.Array | None = None, sinks: jax.Array | None = None
) -> jax.Array:
    """acc / denom; with `sinks` (a logit per row, broadcastable to denom) each joins its
    row's softmax as one more key whose value is dropped (gpt-oss): the carry, taken at
    the running max `m`, is rescaled to max(m, sink) and the sink's exp added to denom."""
    if sinks is not None:
        m_new = jnp.maximum(m, sinks)
        scale = jnp.exp(m - m_new)  # 0 where no key was seen (m = -inf)
        denom = denom * scale + jnp.exp(sinks - m_new)
        acc = acc * scale[..., None]
    # Rows without any valid key (padding) get zeros, not 0 / 0.
    seen = denom > 0
    return jnp.where(seen[..., None], acc / jnp.where(seen, denom, 1.0)[..., None], 0.0)


def _decode_attention(
    q,
    meta,
    page_table,
    is_decode,
    block_pages,
    block_len,
    gather,
    value_dim,
    query_rows,
    window,
    sinks=None,
    chunked=False,
    softcap=0.0,
    alibi=None,
):
    """Sequences with one query token (`is_decode` [S]), batched: each gathers its own blocks.

    q: [T, K, G, Dk]. Returns (the token row of each sequence's decode [S], -1 where the
    sequence has no decode here, outputs [S, K, G, Dv]).

    With query_rows > 1 (batch-invariant mode) each decode query is the first of
    `query_rows` rows (the rest zeros), so its scores and p.v are rows of the same
    per-KV-head matmul shape, [query_rows * G, Dk] x [Dk, L], as a token inside a prefill
    tile of that size; as that multiplies the work, the decodes are then gathered to the
    front and run DECODE_GROUP at a time, as many groups as there are decodes, instead of
    computing every (padded) sequence slot.
    """
    num_tokens, num_seqs = q.shape[0], is_decode.shape[0]
    first_row = jnp.clip(meta.cu_q_lens[:-1], 0, num_tokens - 1)  # [S]
    q_pos = meta.positions[first_row]  # [S]
    limit = jnp.where(is_decode, jnp.minimum(q_pos + 1, meta.kv_lens), 0)
    # First key each decode sees (a sliding window), or 0; past every key where none decodes.
    first = _first_key(q_pos, window, limit > 0, chunked)
    # Other sequences' slots are computed and masked; reading page 0 for them stays in cache.
    page_table = jnp.where(is_decode[:, None], page_table, 0)

    # Scores [n, K, (Q,) G, L]: the Q axis only when decodes are padded to tile rows.
    qa, lead = ("q", 3) if query_rows > 1 else ("", 2)

    def attend(seqs):  # [n] sequence ids (None: all) -> [n, K, G, Dv]
        if seqs is None:
            q_dec, lim, lo, pages = q[first_row], limit, first, page_table  # [S, K, G, Dk]
            at = q_pos
        else:
            q_dec, lim, lo, pages = q[first_row[seqs]], limit[seqs], first[seqs], page_table[seqs]
            at = q_pos[seqs]
        if query_rows > 1:
            q_dec = jnp.pad(
                q_dec[:, :, None], ((0, 0), (0, 0), (0, query_rows - 1), (0, 0), (0, 0))
            )
        expand = (slice(None),) + (None,) * lead  # [n, L] -> like the scores
        slopes = None  # [K, G] -> [1, K, (1,) G, 1], like the scores
        if alibi is not None:
            slopes = (alibi[None, :, None] if query_rows > 1 else alibi[None])[..., None]

        def body(b, carry):
            m, denom, acc = carry  # [n, K, (Q,) G], same, [n, K, (Q,) G, Dv]
            ids = lax.dynamic_slice_in_dim(pages, b * block_pages, block_pages, axis=1)
            keys, values = gather(ids)  # [n, L, K, Dk], [n, L, K, Dv]
            key_pos = (b * block_len + jnp.arange(block_len))[None, :]
            valid = key_pos < lim[:, None]  # [n, L]
            if window is not None:
                valid &= key_pos >= lo[:, None]
            s = jnp.einsum(
                f"sk{qa}gd,slkd->sk{qa}gl", q_dec, keys, preferred_element_type=jnp.float32
            )
            s = _with_alibi(_capped(s, softcap), slopes, (key_pos - at[:, None])[expand])
            m, alpha, p, denom = _softmax_step(m, denom, s, valid[expand])
            # p is 0 at masked keys, but stale rows (past the context, or before a window:
            # pages given back to the pool) may hold inf/NaN and 0 * inf = NaN.
            values = jnp.where(valid[:, :, None, None], values, 0)
            pv = jnp.einsum(
                f"sk{qa}gl,slkd->sk{qa}gd", p, values, preferred_element_type=jnp.float32
            )
            return m, denom, alpha[..., None] * acc + pv

        num_blocks = (jnp.max(lim) + block_len - 1) // block_len
        init = _init_carry(q_dec.shape[: lead + 1], value_dim)
        # Blocks before every row's first key would leave the carry exactly as it is.
        start = 0 if window is None else jnp.min(lo) // block_len
        m, denom, acc = lax.fori_loop(start, num_blocks, body, init)
        row_sinks = None if sinks is None or query_rows == 1 else sinks[:, None, :]
        out = _normalize(denom, acc, m, sinks if query_rows == 1 else row_sinks)
        return out[:, :, 0] if query_rows > 1 else out

    rows = jnp.where(is_decode, first_row, -1)
    if query_rows == 1:
        return rows, attend(None)
    group = min(DECODE_GROUP, num_seqs)
    num_groups = -(-num_seqs // group)
    order = jnp.argsort(~is_decode, stable=True).astype(jnp.int32)  # decodes first
    order = jnp.pad(order, (0, num_groups * group - num_seqs), constant_values=num_seqs - 1)
    out = jnp.zeros((num_seqs + 1, *q.shape[1:3], value_dim), jnp.float32)

    def group_body(i, out):
        seqs = lax.dynamic_slice_in_dim(order, i * group, group)
        dest = jnp.where(is_decode[seqs], seqs, num_seqs)  # non-decode slots land on a spare row
        return out.at[dest].set(attend(seqs))

    used = (jnp.sum(is_decode.astype(jnp.int32)) + group - 1) // group
    return rows, lax.fori_loop(0, used, group_body, out)[:num_seqs]


class _Tiles(NamedTuple):
    """Query tiles of one size: `count` used, then per tile (bounded by a static NT)."""

    count: jax.Array  # [] int32
    seq: jax.Array  # [NT] int32, the tile's sequence
    first: jax.Array  # [NT] int32, token row of its first query
    rows: jax.Array  # [NT] int32, queries in it (<= the tile size)


def _dense_attention(
    q, meta, page_table, page_size, gather, value_dim, window, sinks, chunked, softcap, alibi
):
    """Every token over its sequence's keys in one block: `page_table` [S, Bp] holds whole
    contexts. q: [T, K, G, Dk]. Returns [T, K, G, Dv].

    A token's math is a decode's over one block of Bp pages (_decode_attention): per KV
    head [G, Dk] x [Dk, L] scores, one online-softmax step from the initial carry, and
    [G, L] x [L, Dv]. Tokens go through in chunks whose size depends only on the head shape
    (DENSE_GATHER_BYTES), so neither a step's size nor its other tokens change a bit.
    """
    num_tokens, num_kv_heads, _, key_dim = q.shape
    block_len = page_table.shape[1] * page_size
    per_token = block_len * num_kv_heads * (key_dim + value_dim) * 4
    chunk = max(1, min(num_tokens, DENSE_GATHER_BYTES // per_token))
    limit = jnp.minimum(meta.positions + 1, meta.kv_lens[meta.seq_ids])  # [T]; padding: 0
    key_pos = jnp.arange(block_len)

    def attend(q, seq_ids, positions, limit):  # one chunk: [C, ...]
        keys, values = gather(page_table[seq_ids])  # [C, L, K, Dk], [C, L, K, Dv]
        valid = key_pos[None, :] < limit[:, None]  # [C, L]
        if window is not None:
            valid &= key_pos[None, :] >= _first_key(positions, window, limit > 0, chunked)[:, None]
        s = _capped(
            jnp.einsum("tkgd,tlkd->tkgl", q, keys, preferred_element_type=jnp.float32), softcap
        )
        rel = (key_pos[None, :] - positions[:, None])[:, None, None, :]  # [C, 1, 1, L]
        s = _with_alibi(s, None if alibi is None else alibi[None, :, :, None], rel)
        m, denom, acc = _init_carry(q.shape[:3], value_dim)
        m, alpha, p, denom = _softmax_step(m, denom, s, valid[:, None, None, :])
        # p is 0 at masked keys, but stale rows may hold inf/NaN (0 * inf = NaN).
        values = jnp.where(valid[:, :, None, None], values, 0)
        pv = jnp.einsum("tkgl,tlkd->tkgd", p, values, preferred_element_type=jnp.float32)
        return _normalize(denom, alpha[..., None] * acc + pv, m, sinks)

    per_chunk = (q, meta.seq_ids, meta.positions, limit)
    if chunk == num_tokens:
        return attend(*per_chunk)
    num_chunks = -(-num_tokens // chunk)
    # Padding rows: sequence 0 with limit 0, so they attend to nothing.
    padded = [
        jnp.pad(a, ((0, num_chunks * chunk - num_tokens),) + ((0, 0),) * (a.ndim - 1))
        for a in per_chunk
    ]
    chunks = [a.reshape(num_chunks, chunk, *a.shape[1:]) for a in padded]
    out = lax.map(lambda c: attend(*c), chunks)
    return out.reshape(num_chunks * chunk, *out.shape[2:])[:num_tokens]


def _first_key(
    positions: jax.Array, window: int | None, attends: jax.Array, chunked: bool = False
) -> jax.Array:
    """The first key a query at `positions` sees: 0, or with a sliding window the window's
    start, or with a `chunked` one (Llama 4's attention chunks of `window` keys) its chunk's;
    rows that attend to nothing (`attends` False) get int32 max, so that the min over a tile
    or a batch is the first block any of its rows needs."""
    if window is None:
        first = jnp.zeros_like(positions)
    elif chunked:
        first = positions // window * window
    else:
        first = jnp.maximum(positions + 1 - window, 0)
    return jnp.where(attends, first, jnp.iinfo(jnp.int32).max)


def _tile_tables(
    meta: AttnMetadata, tiled: jax.Array, num_tokens: int, tile: int, classes: tuple[int, ...]
) -> list[_Tiles]:
    """Cut the span of each sequence with `tiled` set into tiles of `tile` rows from its
    first token (so which rows share a tile depends on the sequence alone). A last tile of
    at most classes[0] rows goes instead to the table of the smallest class that holds it
    (classes descending, each < tile). Returns the `tile` table, then one per class."""
    q_lens = meta.cu_q_lens[1:] - meta.cu_q_lens[:-1]  # [S]
    num_seqs = q_lens.shape[0]
    full, rest = q_lens // tile, q_lens % tile
    to_class = tiled & (rest > 0) & (rest <= (classes[0] if classes else 0))
    per_seq = jnp.where(tiled, full + ((rest > 0) & ~to_class), 0)  # [S] `tile` tiles
    ends = jnp.cumsum(per_seq)
    ids = jnp.arange(num_tokens // tile + num_seqs, dtype=jnp.int32)
    seq = jnp.searchsorted(ends, ids, side="right", method="compare_all")
    seq = jnp.minimum(seq, num_seqs - 1).astype(jnp.int32)
    j = ids - (ends[seq] - per_seq[seq])  # tile index inside its sequence
    tables = [
        _Tiles(
            ends[-1], seq, meta.cu_q_lens[seq] + j * tile, jnp.clip(q_lens[seq] - j * tile, 0, tile)
        )
    ]
    for c, smaller in zip(classes, (*classes[1:], 0)[: len(classes)], strict=True):
        mine = to_class & (rest > smaller) & (rest <= c)
        # At most one per sequence, so a stable sort lists them in sequence order.
        order = jnp.argsort(~mine, stable=True).astype(jnp.int32)  # [S]
        tables.append(
            _Tiles(
                jnp.sum(mine.astype(jnp.int32)),
                order,
                meta.cu_q_lens[order] + full[order] * tile,
                jnp.where(mine[order], rest[order], 0),
            )
        )
    return tables


def _blocked_attention(
    q: jax.Array,  # [T, K, G, Dk] f32, already multiplied by the softmax scale
    meta: AttnMetadata,
    num_pages: int,
    page_size: int,
    kv_block_pages: int,
    query_tile: int,
    split_decodes: bool,
    prefill_block_tokens: int,
    gather_block: GatherBlock,
    value_dim: int,
    decodes: bool = True,
    remainder_tiles: tuple[int, ...] = REMAINDER_TILES,
    window: int | None = None,
    sinks: jax.Array | None = None,  # [K, G] f32: per query head, joins every softmax
    chunked: bool = False,
    softcap: float = 0.0,  # > 0: scores squashed to softcap * tanh(s / softcap) (Gemma 2)
    alibi: jax.Array | None = None,  # [K, G] f32: ALiBi's slope per query head
) -> jax.Array:  # [T, K, G, Dv] f32
    """Online-softmax attention of each token over its sequence's keys, one KV block per step.

    With a sliding `window` a token at position p sees keys p - window + 1 .. p (`chunked`:
    Llama 4's chunks, floor(p / window) * window .. p, never more keys); the blocks
    before a tile's (or decode batch's) first visible key are skipped, which changes no bit
    of a result (such a block leaves the online-softmax carry exactly as it was).

    A page table no wider than one decode block takes the dense path (_dense_attention).
    `decodes=False` leaves out the batched decode path and the dense one (the caller sends
    no decodes, and its expanded keys cost too much to gather per token; a span of one
    token would take a tile), and `remainder_tiles=()` cuts every span into tiles of
    the full size only.
    """
    num_tokens, num_kv_heads, group, _ = q.shape
    block_len = kv_block_pages * page_size
    max_pages = meta.page_table.shape[1]
    # Which keys each path masks, and how it shapes a score: the same on every path.
    shaping = dict(window=window, sinks=sinks, chunked=chunked, softcap=softcap, alibi=alibi)
    if decodes and max_pages <= kv_block_pages:
        # Whole contexts fit one decode block. Unused columns (padded to the whole block, so
        # a token's math is that of a decode over one block) are clipped into range and
        # masked like any key past a context.
        page_table = jnp.pad(
            jnp.clip(meta.page_table, 0, num_pages - 1), ((0, 0), (0, kv_block_pages - max_pages))
        )
        return _dense_attention(q, meta, page_table, page_size, gather_block, value_dim, **shaping)
    if split_decodes:
        # Per-token math only has to be fixed within a path here (decodes already take
        # their own shape), so a short step uses a short tile, the last few rows of a span
        # a remainder tile, and a tile that much shorter that much longer KV blocks: each
        # loop iteration keeps about query_tile * prefill_block_tokens scores, so its fixed
        # cost is spread over as much work, while few-row chunks (a long prefill sharing a
        # step with decodes) do not pay for a whole tile. Tiles over short contexts read
        # the small decode blocks instead (`short`).
        tile = min(query_tile, num_tokens)
        sizes = (tile, *(c for c in remainder_tiles if c < tile))
        block_pages = [
            max(kv_block_pages, prefill_block_tokens * max(1, query_tile // n) // page_size)
            for n in sizes
        ]
        short = kv_block_pages
        if window is not None:
            # A tile's keys span at most its rows plus the window: a longer block would
            # read keys no row sees (a one-row tile's 16k-key block, against a 4k window).
            # Whole small blocks, a power of two of them, so the table's padding stays small.
            blocks = -(-window // (short * page_size))
            cap = short * (1 << (blocks - 1).bit_length())
            block_pages = [min(b, cap) for b in block_pages]
        # A page table no wider than SHORT_CONTEXT_BLOCKS small blocks holds no context long
        # enough for a long block: the choice below would always pick the small ones, so
        # the long-block loops are not built (same results, a smaller program to compile).
        if meta.page_table.shape[1] <= SHORT_CONTEXT_BLOCKS * short:
            block_pages = [short] * len(sizes)
    else:
        sizes, block_pages, short = (query_tile,), [kv_block_pages], kv_block_pages
    tile = sizes[0]
    # Garbage ids in unused page-table columns are clipped so the gather stays in bounds;
    # their keys are masked anyway. Columns are padded to whole blocks so a block's slice
    # never gets shifted back by dynamic_slice's start-index clamping.
    page_table = jnp.clip(meta.page_table, 0, num_pages - 1)  # [S, Pmax]
    widest = math.lcm(kv_block_pages, *block_pages)
    padded_pages = -(-max_pages // widest) * widest
    page_table = jnp.pad(page_table, ((0, 0), (0, padded_pages - max_pages)))
    q_lens = meta.cu_q_lens[1:] - meta.cu_q_lens[:-1]  # [S]
    tiled = (q_lens > 0) & (meta.kv_lens > 0)

    # Rows past T give every tile a full slice (dynamic_slice would shift a short one back).
    out = jnp.zeros((num_tokens + tile, num_kv_heads, group, value_dim), jnp.float32)
    # Decodes are batched across sequences; in batch-invariant mode (not split_decodes) each
    # computes a whole tile's rows so its math is that of a tile row (see _decode_attention).
    if decodes:
        is_decode = tiled & (q_lens == 1) & (meta.kv_lens <= DECODE_BATCH_MAX_TOKENS)
        rows, o_dec = _decode_attention(
            q,
            meta,
            page_table,
            is_decode,
            kv_block_pages,
            block_len,
            gather_block,
            value_dim,
            query_rows=1 if split_decodes else tile,
            **shaping,
        )
        out = out.at[jnp.where(rows < 0, out.shape[0], rows)].set(o_dec, mode="drop")
        tiled = tiled & ~is_decode
    q_pad = jnp.pad(q, ((0, tile), (0, 0), (0, 0), (0, 0)))
    tile_slopes = None if alibi is None else alibi[:, None, :, None]  # [K, 1, G, 1]
    pos_pad = jnp.pad(meta.positions, (0, tile))
    tables = _tile_tables(meta, tiled, num_tokens, tile, sizes[1:])

    def attend_tiles(out, tiles: _Tiles, size: int, long_pages: int):
        """Each tile in turn: its `size` query rows over its sequence's blocks."""

        def tile_body(i, out):
            seq, first, n = tiles.seq[i], tiles.first[i], tiles.rows[i]
            in_tile = jnp.arange(size) < n
            # Causal inside the chunk: row r sees keys j < min(position + 1, kv_len).
            pos = lax.dynamic_slice_in_dim(pos_pad, first, size)
            limit = jnp.where(in_tile, jnp.minimum(pos + 1, meta.kv_lens[seq]), 0)  # [Q]
            key_from = _first_key(pos, window, limit > 0, chunked)  # [Q]
            tile_limit = jnp.max(limit)
            q_tile = lax.dynamic_slice_in_dim(q_pad, first, size).transpose(1, 0, 2, 3)
            pages = page_table[seq]  # [Ppad]

            def over_blocks(block_pages):
                block_tokens = block_pages * page_size

                def body(b, carry):
                    m, denom, acc = carry  # [K, Q, G], [K, Q, G], [K, Q, G, Dv]
                    ids = lax.dynamic_slice_in_dim(pages, b * block_pages, block_pages)
                    keys, values = gather_block(ids)  # [L, K, Dk], [L, K, Dv]
                    key_pos = b * block_tokens + jnp.arange(block_tokens)
                    valid = key_pos[None, :] < limit[:, None]  # [Q, L]
                    if window is not None:
                        valid &= key_pos[None, :] >= key_from[:, None]
                    s = jnp.einsum(
                        "kqgd,lkd->kqgl", q_tile, keys, preferred_element_type=jnp.float32
                    )
                    rel = (key_pos[None, :] - pos[:, None])[None, :, None, :]  # [1, Q, 1, L]
                    s = _with_alibi(_capped(s, softcap), tile_slopes, rel)
                    m, alpha, p, denom = _softmax_step(m, denom, s, valid[None, :, None, :])
                    # Keys below the tile's last limit are real rows of this sequence; only
                    # stale rows past it may hold inf/NaN (0 * inf = NaN), and with a window
                    # the rows before every row's window (pages given back to the pool).
                    live = key_pos < tile_limit
                    if window is not None:
                        live &= key_pos >= jnp.min(key_from)
                    values = jnp.where(live[:, None, None], values, 0)
                    pv = jnp.einsum("kqgl,lkd->kqgd", p, values, preferred_element_type=jnp.float32)
                    return m, denom, alpha[..., None] * acc + pv

                init = _init_carry((num_kv_heads, size, group), value_dim)
                num_blocks = (tile_limit + block_tokens - 1) // block_tokens
                start = 0 if window is None else jnp.min(key_from) // block_tokens
                return lax.fori_loop(start, num_blocks, body, init)

            if long_pages == short:
                m, denom, acc = over_blocks(short)
            else:
                is_short = tile_limit <= SHORT_CONTEXT_BLOCKS * short * page_size
                m, denom, acc = lax.cond(
                    is_short, lambda: over_blocks(short), lambda: over_blocks(long_pages)
                )
            tile_sinks = None if sinks is None else sinks[:, None, :]  # [K, 1, G]
            o = _normalize(denom, acc, m, tile_sinks).transpose(1, 0, 2, 3)  # [Q, K, G, Dv]
            old = lax.dynamic_slice_in_dim(out, first, size)
            new = jnp.where(in_tile[:, None, None, None], o, old)
            return lax.dynamic_update_slice_in_dim(out, new, first, axis=0)

        return lax.fori_loop(0, tiles.count, tile_body, out)

    for tiles, size, long_pages in zip(tables, sizes, block_pages, strict=True):
        out = attend_tiles(out, tiles, size, long_pages)
    return out[:num_tokens]


def check_latent_rows(row_dim: int, rank: int, rope_dim: int) -> None:
    """MLA latent pages' rows must hold [c_kv (rank) | k_pe (rope_dim)]."""
    if rank + rope_dim != row_dim:
        raise ValueError(f"latent row dim {row_dim} != kv_lora_rank {rank} + rope dim {rope_dim}")


def _check_window(window: int | None) -> None:
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window={window!r}: must be an integer >= 1 or None")


def check_softcap(softcap: float) -> None:
    """A score cap (paged attention's, the Pallas kernel's): a finite number >= 0, 0 none."""
    if (
        isinstance(softcap, bool)
        or not isinstance(softcap, int | float)
        or not 0 <= softcap < math.inf
    ):
        raise ValueError(f"softcap={softcap!r}: must be a finite number >= 0 (0: no capping)")


def check_alibi(alibi: jax.Array | None, num_heads: int) -> None:
    """ALiBi's slopes (paged attention's, the Pallas kernel's): None, or [H], one per query
    head; finite (checked where the values are concrete, not under a trace)."""
    if alibi is None:
        return
    if np.shape(alibi) != (num_heads,):
        raise ValueError(
            f"alibi {np.shape(alibi)}: expected [H] = [{num_heads}], a slope per query head"
        )
    if not isinstance(alibi, jax.core.Tracer) and not np.isfinite(np.asarray(alibi)).all():
        raise ValueError(f"alibi={np.asarray(alibi)}: slopes must be finite")


def _check_sizes(kv_block_pages: int, query_tile: int) -> None:
    if kv_block_pages < 1:
        raise ValueError(f"kv_block_pages must be >= 1, got {kv_block_pages}")
    if query_tile < 1:
        raise ValueError(f"query_tile must be >= 1, got {query_tile}")


def paged_attention_gqa(
    q: jax.Array,  # [T, H, Dh]
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dv]
    meta: AttnMetadata,
    scale: float,
    kv_block_pages: int,
    query_tile: int = QUERY_TILE,
    split_decodes: bool = True,
    prefill_block_tokens: int = PREFILL_KV_BLOCK_TOKENS,
    window: int | None = None,
    sinks: jax.Array | None = None,  # [H]: gpt-oss's per-head sink logits
    chunked: bool = False,
    softcap: float = 0.0,
    alibi: jax.Array | None = None,  # [H] f32: ALiBi's slope per query head
) -> jax.Array:  # [T, H, Dv]
    """Grouped-query attention of ragged query tokens over their sequences' paged K/V.

    The step's own K/V must already be written to the pages. Decodes reduce over blocks of
    `kv_block_pages`; prefill tiles of `query_tile` over blocks of `prefill_block_tokens`
    (or, with `split_decodes=False`, everything over tiles of `query_tile` and blocks of
    `kv_block_pages`). `window`: a sliding window (ModelConfig.attention_window), or None;
    `chunked`: that window is Llama 4's attention chunk (ModelConfig.layer_chunked).
    `sinks`: a logit per query head that joins every query's softmax as a key without a
    value (ModelConfig.attention_sinks), or None. `softcap` > 0: each scaled score s
    becomes softcap * tanh(s / softcap) before the softmax
    (ModelConfig.attn_logit_softcapping). `alibi`: a slope per query head, each (scaled,
    capped) score plus slope * (key position - query position) (ModelConfig.alibi_slopes).
    """
    _check_window(window)
    check_softcap(softcap)
    _check_sizes(kv_block_pages, query_tile)
    q, k_pages, v_pages = jnp.asarray(q), as_pages(k_pages), as_pages(v_pages)
    num_tokens, num_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_pages.shape
    value_dim = v_pages.shape[-1]  # (MiMo-V2-Flash: narrower than the keys)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num query heads {num_heads} is not a multiple of num kv heads {num_kv_heads}"
        )
    group = num_heads // num_kv_heads
    check_alibi(alibi, num_heads)

    def gather_block(ids):  # ids: [..., Bp]
        rows = (*ids.shape[:-1], ids.shape[-1] * page_size, num_kv_heads)
        k = gather_pages(k_pages, ids).reshape(*rows, head_dim)
        return k, gather_pages(v_pages, ids).reshape(*rows, value_dim)

    # Query head h uses KV head h // G (HF repeat_kv order), so the G heads of one KV head
    # share each gathered block.
    q_grouped = (q.astype(jnp.float32) * scale).reshape(num_tokens, num_kv_heads, group, head_dim)
    o = _blocked_attention(
        q_grouped,
        meta,
        num_pages,
        page_size,
        kv_block_pages,
        query_tile,
        split_decodes,
        prefill_block_tokens,
        gather_block,
        value_dim,
        window=window,
        sinks=None if sinks is None else sinks.astype(jnp.float32).reshape(num_kv_heads, group),
        chunked=chunked,
        softcap=float(softcap),
        alibi=None if alibi is None else alibi.astype(jnp.float32).reshape(num_kv_heads, group),
    )
    return o.reshape(num_tokens, num_heads, value_dim).astype(q.dtype)


def paged_attention_mla(
    q_lat: jax.Array,  # [T, H, R], W_UK already folded in
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages: jax.Array,  # [N, P, R + Dr], rows [c_kv | k_pe]
    meta: AttnMetadata,
    scale: float,
    kv_block_pages: int,
    query_tile: int = QUERY_TILE,
    split_decodes: bool = True,
    prefill_block_tokens: int = PREFILL_KV_BLOCK_TOKENS,
) -> jax.Array:  # [T, H, R]
    """Absorbed MLA (DeepSeek-V2 sec. 2.1.2): attention in latent space over paged latents.

    score = q_lat . c_kv + q_pe . k_pe, output = sum_j p_j c_kv_j; the caller applies W_UV.
    """
    _check_sizes(kv_block_pages, query_tile)
    latent_pages = as_pages(latent_pages)
    num_tokens, num_heads, rank = q_lat.shape
    num_pages, page_size, row_dim = latent_pages.shape
    check_latent_rows(row_dim, rank, q_pe.shape[-1])

    def gather_block(ids):  # ids: [..., Bp]
        # One latent row serves as key (all of it) and value (its c_kv part) for every head.
        shape = (*ids.shape[:-1], ids.shape[-1] * page_size, 1, row_dim)
        rows = gather_pages(latent_pages, ids).reshape(shape)
        return rows, rows[..., :rank]

    # Concatenating [q_lat | q_pe] turns the two score terms into one dot with the full row.
    q_cat = jnp.concatenate([q_lat, q_pe], axis=-1).astype(jnp.float32) * scale
    o = _blocked_attention(
        q_cat[:, None],
        meta,
        num_pages,
        page_size,
        kv_block_pages,
        query_tile,
        split_decodes,
        prefill_block_tokens,
        gather_block,
        rank,
    )
    return o[:, 0].astype(q_lat.dtype)
