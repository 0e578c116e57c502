"""DeepSeek-V4 (transformers' deepseek_v4, DeepSeek-V4-Flash / -Pro) over paged caches.

What differs from the other families (ModelConfig attention_type "dsv4"):

* Residual streams. Each token carries hc_mult streams [T, N, D]. Before a block, a
  hyper-connection (mHC) reads the RMS-normed flattened streams and makes three mixes: `pre`
  collapses the streams into the block's input, `post` spreads the block's output back over
  them, and `comb` (made doubly stochastic by Sinkhorn-Knopp) mixes the old streams into the
  new: new[k] = post[k] * out + sum_j comb[j, k] * old[j]. A last head collapses them before
  the final norm.
* Attention. One key=value head (head_dim wide, RMS-normed, its last rotary_dim channels
  roped in interleaved pairs) shared by every query head. A query at position p attends to
  the keys of its window (p - sliding_window + 1 .. p) and, in a compressed layer, to the
  layer's compressed entries it may see, with a learned sink per head in the softmax. As
  keys are values, the output's rope channels are rotated back by -p; a grouped output
  projection (o_groups groups of heads, each to o_lora_rank) then one matmul to D.
* Compressed entries. Entry w of an hca layer pools tokens w*m .. w*m + m - 1 (m =
  hca_ratio): sum_j softmax_j(gate_j + bias[j]) * kv_j per channel, then an RMSNorm and
  RoPE at position w*m. A csa layer (m = csa_ratio) pools 2m tokens: window w-1's first
  series and window w's second (the first entry has no earlier window). A query at p sees
  entry w once its window closed, w < (p + 1) // m; in a csa layer only the index_topk
  entries its lightning indexer scores highest, sum_h w_h relu(q_h . k) over the indexer's
  own compressed keys (pooled the same way at index_head_dim).
* MoE. Router scores sqrt(softplus(logit)); the hash layers (hash_moe_layers) take their
  experts from a token-id table (tid2eid) instead of the top-k, the rest top-k with the
  correction bias; gate and up clamped at swiglu_limit (experts and shared expert).

The cache of layer i (ModelConfig.layer_kv_widths, v4_entry_widths): per token, the window's
key=value row and (compressed layers) the compressor's raw inputs (kv | gate; csa:
two series each, and the indexer's); per page, page_size // ratio entries (at least one),
entry w of a sequence in the page holding its window's last token, (w*m + m - 1) //
page_size, at ((w*m + m - 1) % page_size) // m: a step writes entries only into the pages
it writes tokens to (never into a full page a prefix-cache hit shares). Entries are
pooled in the step where their window closes, from the raw rows in the pages, so all a
sequence's cache holds is a function of its pages: prefix caching, preemption and
rejected drafts need nothing more. The window's keys are all kept (no page is given back
behind it).

`attention` runs one layer over the paged arrays for a ragged batch (engine/step.py); the
contiguous reference (models/reference.py) calls it with one page per sequence.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from configs.model_config import ModelConfig, RopeScaling
from models.layers import embed, model_norm, rms_norm
from models.quantization import dequantize_tree
from models.reductions import narrow_product, precise_matmul, row_mean, row_sum
from models.rope import apply_rope, rope_frequencies

__all__ = ["Rows", "V4Inputs", "attention", "forward_hidden", "init_layer_cache", "route"]

# Query rows whose gathered keys one loop step holds (float32 bytes): a chunk's size follows
# the shapes and the step's size alone; in the batch-invariant mode INVARIANT_CHUNK rows,
# whatever the step. (Every sum over a row is a row_sum: fixed-order there, models/reductions.py.)
GATHER_BYTES = 16 << 20
INVARIANT_CHUNK = 8
# Entries one loop step reads for a chunk of rows (an hca layer's attention; a csa layer's
# indexer, INDEX_BLOCK): the loops run to the chunk's furthest row, not to the page table's
# end. The indexer's blocks are wider: each merges into the running top-k with a sort, which
# at 256 entries took 45% of a 32k-token prefill (one csa layer, CPU).
ENTRY_BLOCK = 256
INDEX_BLOCK = 1024


class V4Inputs(NamedTuple):
    """One layer's attention inputs for T rows."""

    q: jax.Array  # [T, H, Dh] roped
    kv: jax.Array  # [T, Dh] roped: the window's key (= value)
    comp: jax.Array | None  # [T, 2cDh] the compressor's kv | gate (c: 2 for csa)
    idx: jax.Array | None  # [T, 4Di] the indexer's, likewise (csa)
    idx_q: jax.Array | None  # [T, Hi, Di] roped indexer queries (csa)
    idx_w: jax.Array | None  # [T, Hi] f32 indexer head weights, both scales folded in
    positions: jax.Array  # [T]


class Rows(NamedTuple):
    """Where a step's rows live (engine.paged_attention.AttnMetadata has these fields)."""

    positions: jax.Array  # [T] int32
    seq_ids: jax.Array  # [T] int32, row of page_table
    page_table: jax.Array  # [S, Pmax] int32


def _f32_scaled(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """DeepseekV4RMSNorm: scaled in float32, cast once."""
    return rms_norm(x, weight, eps, scale_in_float32=True)


def _unweighted_rms(x: jax.Array, eps: float) -> jax.Array:
    """transformers' DeepseekV4UnweightedRMSNorm: x * rsqrt(mean(x^2) + eps), in x's dtype."""
    var = row_mean(jnp.square(x.astype(jnp.float32)))[..., None]
    return x * lax.rsqrt(var + eps).astype(x.dtype)


def _rope_freqs(cfg: ModelConfig, compressed: bool) -> tuple[np.ndarray, float]:
    """(inv_freq, attention factor): a compressed layer's (compress_rope_theta with the
    config's scaling; transformers forces a YaRN attention factor of 1) or a sliding one's
    (rope_theta, unscaled)."""
    if not compressed:
        return rope_frequencies(cfg.rope_theta, cfg.rotary_dim, RopeScaling())
    rs = cfg.rope_scaling
    if rs.rope_type == "yarn" and rs.attention_factor is None:
        rs = RopeScaling(**{**rs.__dict__, "attention_factor": 1.0})
    inv_freq, _ = rope_frequencies(cfg.compress_rope_theta, cfg.rotary_dim, rs)
    return inv_freq, 1.0


def _rope_tail(x: jax.Array, positions: jax.Array, freqs) -> jax.Array:
    """Rotate the last rotary channels of x [T, ..., W] as interleaved pairs."""
    inv_freq, factor = freqs
    dim = 2 * len(inv_freq)
    rotated = apply_rope(x[..., -dim:], positions, inv_freq, factor, "pairs")
    return jnp.concatenate([x[..., :-dim], rotated.astype(x.dtype)], axis=-1)


# -- hyper-connections --------------------------------------------------------------------


def _hc_logits(p: dict, streams: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The RMS-normed flattened streams [T, N * D] through the connection's fn, float32."""
    t, n, d = streams.shape
    flat = _unweighted_rms(streams.reshape(t, n * d).astype(jnp.float32), cfg.rms_norm_eps)
    return narrow_product(precise_matmul, flat, p["fn"].astype(jnp.float32))


def _hc_mix(p: dict, streams: jax.Array, cfg: ModelConfig):
    """(pre [T, N], post [T, N], comb [T, N, N]) f32 of a hyper-connection."""
    t, n, _ = streams.shape
    mix = _hc_logits(p, streams, cfg)
    base, scale, eps = p["base"].astype(jnp.float32), p["scale"].astype(jnp.float32), cfg.hc_eps
    pre = jax.nn.sigmoid(mix[:, :n] * scale[0] + base[:n]) + eps
    post = 2 * jax.nn.sigmoid(mix[:, n : 2 * n] * scale[1] + base[n : 2 * n])
    comb = mix[:, 2 * n :].reshape(t, n, n) * scale[2] + base[2 * n :].reshape(n, n)
    comb = _softmax(comb) + eps

    def rows(c):  # sum over the last axis, kept
        return row_sum(c)[..., None]

    def cols(c):  # over the one before it
        return row_sum(jnp.swapaxes(c, -1, -2))[..., None, :]

    def sinkhorn(_, c):
        c = c / (rows(c) + eps)
        return c / (cols(c) + eps)

    # (A loop, not unrolled: 20 iterations in each of 2 hyper-connections per layer took
    # 40% of the tiny model's compile time.)
    comb = lax.fori_loop(0, cfg.hc_sinkhorn_iters - 1, sinkhorn, comb / (cols(comb) + eps))
    return pre, post, comb


def _softmax(s: jax.Array) -> jax.Array:
    """Softmax over the last axis, its denominator a row_sum (-inf entries weigh 0)."""
    m = jnp.max(s, axis=-1, keepdims=True)
    e = jnp.exp(s - jnp.where(m == -jnp.inf, 0.0, m))
    return e / row_sum(e)[..., None]


def _collapse(weights: jax.Array, streams: jax.Array) -> jax.Array:
    """sum_j weights[:, j] * streams[:, j] in float32 (stream order), cast back."""
    out = weights[:, 0, None] * streams[:, 0].astype(jnp.float32)
    for j in range(1, streams.shape[1]):
        out = out + weights[:, j, None] * streams[:, j].astype(jnp.float32)
    return out.astype(streams.dtype)


def _expand(streams: jax.Array, out: jax.Array, post: jax.Array, comb: jax.Array) -> jax.Array:
    """new[k] = post[k] * out + sum_j comb[j, k] * old[j], in the streams' dtype."""
    dt = streams.dtype
    post, comb = post.astype(dt), comb.astype(dt)
    mixed = comb[:, 0, :, None] * streams[:, 0, None, :]
    for j in range(1, streams.shape[1]):
        mixed = mixed + comb[:, j, :, None] * streams[:, j, None, :]
    return post[:, :, None] * out[:, None, :] + mixed


def _hc_head(p: dict, streams: jax.Array, cfg: ModelConfig) -> jax.Array:
    mix = _hc_logits(p, streams, cfg)
    pre = jax.nn.sigmoid(mix * p["scale"].astype(jnp.float32) + p["base"].astype(jnp.float32))
    return _collapse(pre + cfg.hc_eps, streams)


# -- attention ----------------------------------------------------------------------------


def attn_inputs(p: dict, h: jax.Array, positions: jax.Array, cfg: ModelConfig, layer: int):
    """V4Inputs of decoder layer `layer` from its normed input h [T, D]."""
    eps, ratio = cfg.rms_norm_eps, cfg.v4_ratio(layer)
    freqs = _rope_freqs(cfg, bool(ratio))
    q_res = _f32_scaled(h @ p["wq_a"], p["q_a_norm"], eps)  # [T, Rq]
    q = jnp.einsum("tr,rhd->thd", q_res, p["wq_b"])
    q = _rope_tail(_unweighted_rms(q, eps), positions, freqs)
    kv = _rope_tail(_f32_scaled(h @ p["wkv"], p["kv_norm"], eps), positions, freqs)
    comp = idx = idx_q = idx_w = None
    if ratio:  # (the gates' biases are added when a window is pooled: _pool)
        comp = jnp.concatenate([h @ p["c_wkv"], h @ p["c_wgate"]], axis=-1)
    if cfg.v4_layer_kinds[layer] == "csa":
        idx = jnp.concatenate([h @ p["i_wkv"], h @ p["i_wgate"]], axis=-1)
        idx_q = _rope_tail(jnp.einsum("tr,rhd->thd", q_res, p["i_wq"]), positions, freqs)
        scale = (cfg.index_n_heads * cfg.index_head_dim) ** -0.5
        idx_w = narrow_product(jnp.matmul, h, p["i_w"]).astype(jnp.float32) * scale
    return V4Inputs(q, kv, comp, idx, idx_q, idx_w, positions)


def attn_output(p: dict, o: jax.Array, positions: jax.Array, cfg: ModelConfig, layer: int):
    """o [T, H, Dh] -> [T, D]: the rope channels rotated back by -position, then the grouped
    projection (heads in o_groups groups, each to o_lora_rank) and wo_b."""
    freqs = _rope_freqs(cfg, bool(cfg.v4_ratio(layer)))
    o = _rope_tail(o, -positions, freqs)
    t, g = o.shape[0], cfg.o_groups
    grouped = jnp.einsum("tgi,igr->tgr", o.reshape(t, g, -1), p["wo_a"])
    return grouped.reshape(t, -1) @ p["wo_b"]


def init_layer_cache(
    cfg: ModelConfig,
    layer: int,
    num_pages: int,
    page_size: int,
    zeros,
    token_pages: int | None = None,
):
    """Layer `layer`'s arrays: per-token rows (layer_kv_widths; `token_pages` of them when
    they have a pool of their own, ModelConfig.v4_window_pool) and its entry pages."""
    rows = num_pages if token_pages is None else token_pages
    per_token = tuple(zeros((rows, page_size, w)) for w in cfg.layer_kv_widths(layer))
    ratio = cfg.v4_ratio(layer)
    if not ratio:
        return per_token
    rows = max(1, page_size // ratio)
    return per_token + tuple(zeros((num_pages, rows, w)) for w in cfg.v4_entry_widths(layer))


def pool_bytes(
    cfg: ModelConfig, num_pages: int, token_pages: int | None, page_size: int, item: int
):
    """Bytes of init_layer_cache's arrays over every layer (token_pages None: one pool)."""
    tokens = sum(sum(cfg.layer_kv_widths(i)) for i in range(cfg.num_layers)) * page_size * item
    entries = sum(
        max(1, page_size // cfg.v4_ratio(i)) * sum(cfg.v4_entry_widths(i)) * item
        for i in range(cfg.num_layers)
        if cfg.v4_ratio(i)
    )
    return num_pages * entries + (num_pages if token_pages is None else token_pages) * tokens


def _scatter(pages: jax.Array, page: jax.Array, offset: jax.Array, rows: jax.Array):
    """pages[page, offset] = rows; page -1 drops the row."""
    page = jnp.where(page < 0, pages.shape[0], page)
    return pages.at[page, offset].set(rows.astype(pages.dtype), mode="drop")


def _gather(pages: jax.Array, table: jax.Array, pos: jax.Array) -> jax.Array:
    """Rows at token positions `pos` [..., R] of the sequences whose page rows `table`
    [..., P] lists (clamped into the table), as float32: [..., R, W]."""
    page_size = pages.shape[1]
    col = jnp.clip(pos // page_size, 0, table.shape[-1] - 1)
    ids = jnp.take_along_axis(table, col, axis=-1)
    return pages[jnp.clip(ids, 0, pages.shape[0] - 1), pos % page_size].astype(jnp.float32)


def _entry_slot(table: jax.Array, w: jax.Array, ratio: int, page_size: int):
    """(page, row) of entry w in its sequence's entry pages; table [..., P], w [...]."""
    last = w * ratio + ratio - 1
    col = jnp.clip(last // page_size, 0, table.shape[-1] - 1)
    flat = col.reshape(col.shape[0], -1)
    page = jnp.take_along_axis(table, flat, axis=-1).reshape(col.shape)
    return page, (last % page_size) // ratio


def _pool(
    raw_pages: jax.Array,  # [N, P, 2cW]: kv | gate per token
    table: jax.Array,  # [C, Pmax] each closing row's sequence's pages
    w: jax.Array,  # [C] entries to pool
    ratio: int,
    width: int,
    overlap: bool,
    bias: jax.Array,  # [m, cW] float32: the gate's bias by place in the window
    norm: jax.Array,
    eps: float,
    freqs,
    dtype,
) -> jax.Array:  # [C, width]
    """Entries w: softmax(gate + bias)-weighted sums of their windows' kv rows per channel,
    normed and roped at w * ratio (module docstring). The bias is added in float32 to the
    stored gate, as transformers adds its float32 position_bias."""
    bias = bias.astype(jnp.float32)
    if overlap:  # window w-1's first series, then window w's second
        pos = (w[:, None] - 1) * ratio + jnp.arange(2 * ratio)[None, :]
        rows = _gather(raw_pages, table, jnp.maximum(pos, 0))  # [C, 2m, 4W]
        kv = jnp.concatenate([rows[:, :ratio, :width], rows[:, ratio:, width : 2 * width]], 1)
        gate = jnp.concatenate(
            [
                rows[:, :ratio, 2 * width : 3 * width] + bias[:, :width],
                rows[:, ratio:, 3 * width :] + bias[:, width:],
            ],
            axis=1,
        )
        # (The first entry has no earlier window: its half weighs nothing.)
        has_prior = (jnp.arange(2 * ratio)[None, :] >= ratio) | (w[:, None] > 0)
        gate = jnp.where(has_prior[..., None], gate, -jnp.inf)
    else:
        pos = w[:, None] * ratio + jnp.arange(ratio)[None, :]
        rows = _gather(raw_pages, table, pos)  # [C, m, 2W]
        kv, gate = rows[..., :width], rows[..., width:] + bias
    weights = jnp.swapaxes(_softmax(jnp.swapaxes(gate, 1, 2)), 1, 2)  # over the rows
    weights = weights.astype(dtype).astype(jnp.float32)
    terms = kv.astype(dtype).astype(jnp.float32) * weights
    pooled = row_sum(jnp.swapaxes(terms, 1, 2)).astype(dtype)
    return _rope_tail(_f32_scaled(pooled, norm, eps), w * ratio, freqs)


def _emit(raw_pages, entry_pages, meta, rows_meta, slots, ratio, width, overlap, p, cfg, freqs):
    """Pool and write the entries whose windows close at this step's rows (their raw rows
    through rows_meta's page table, the entries through meta's)."""
    num_tokens = meta.positions.shape[0]
    closing = (slots >= 0) & ((meta.positions + 1) % ratio == 0)
    most = min(num_tokens, num_tokens // ratio + meta.page_table.shape[0])
    (rows,) = jnp.nonzero(closing, size=most, fill_value=num_tokens)
    real = rows < num_tokens
    rows = jnp.minimum(rows, num_tokens - 1)
    seq = meta.seq_ids[rows]
    w = meta.positions[rows] // ratio
    table = rows_meta.page_table[seq]
    (bias, norm), eps = p, cfg.rms_norm_eps  # (the compressor's or the indexer's)
    pooled = _pool(
        raw_pages, table, w, ratio, width, overlap, bias, norm, eps, freqs, entry_pages.dtype
    )
    page, row = _entry_slot(meta.page_table[seq], w, ratio, raw_pages.shape[1])
    return _scatter(entry_pages, jnp.where(real, page, -1), row, pooled)


def _entry_rows(pages, table, ids, ratio: int, page_size: int) -> jax.Array:
    """Entries `ids` [C, B] of each row's sequence (table [C, Pmax]) as float32 [C, B, W]."""
    page, row = _entry_slot(table, ids, ratio, page_size)
    return pages[jnp.clip(page, 0, pages.shape[0] - 1), row].astype(jnp.float32)


def _blocks(limit: jax.Array, block: int) -> jax.Array:
    """Entry blocks a chunk of rows reads: up to its largest `limit` (entries it may see)."""
    return (jnp.max(limit) + block - 1) // block


def _select(
    idx_q, idx_w, pages, table, limit, topk: int, ratio: int, page_size: int, block: int, shared
):
    """The indexer's top-k entries per query row ([C, topk], ascending, -1 where fewer are
    visible): every entry it sees, `block` at a time, scored sum_h w_h relu(q_h . k)
    and merged into a running top-k. `shared` (a traced bool, or None: never): every row is
    of one sequence (a prefill chunk), whose block of keys is read once for all rows."""
    rows = idx_q.shape[0]
    q = idx_q.astype(jnp.float32)

    def per_row(ids_b):
        keys = _entry_rows(pages, table, ids_b, ratio, page_size)  # [C, B, Di]
        return jnp.einsum("chd,ced->che", q, keys, precision="highest")

    def once(ids_b):
        keys = _entry_rows(pages, table[:1], ids_b[:1], ratio, page_size)[0]  # [B, Di]
        return jnp.einsum("chd,ed->che", q, keys, precision="highest")

    def body(b, carry):
        best, ids = carry
        ids_b = jnp.broadcast_to(b * block + jnp.arange(block), (rows, block))
        if shared is None:
            scores = per_row(ids_b)
        else:
            scores = lax.cond(shared, once, per_row, ids_b)
        scores = jnp.einsum("ch,che->ce", idx_w, jax.nn.relu(scores), precision="highest")
        scores = jnp.where(ids_b < limit[:, None], scores, -jnp.inf)
        best, take = lax.top_k(jnp.concatenate([best, scores], axis=1), topk)
        return best, jnp.take_along_axis(jnp.concatenate([ids, ids_b], axis=1), take, axis=1)

    init = (jnp.full((rows, topk), -jnp.inf), jnp.full((rows, topk), -1, jnp.int32))
    best, ids = lax.fori_loop(0, _blocks(limit, block), body, init)
    top = jnp.iinfo(jnp.int32).max  # (the chosen attended in entry order, -1 last)
    ids = jnp.sort(jnp.where(best > -jnp.inf, ids, top), axis=1)
    return jnp.where(ids == top, -1, ids)


def attention(
    p: dict,
    cfg: ModelConfig,
    layer: int,
    x: V4Inputs,
    cache: tuple,
    meta: Rows,  # (or an engine.paged_attention.AttnMetadata): the entries' pages
    rows_meta: Rows,  # the per-token rows' (meta itself without a pool of their own)
    slots: jax.Array,  # [T] page * page_size + offset of each row there; -1 = padding
    invariant: bool = False,
) -> tuple[jax.Array, tuple]:  # (o [T, H, Dh] before attn_output, the layer's cache)
    """Write this step's rows, pool the entries their windows close, and attend
    (`invariant`: in chunks of INVARIANT_CHUNK rows, the batch-invariant mode's)."""
    ratio, kind = cfg.v4_ratio(layer), cfg.v4_layer_kinds[layer]
    page_size = cache[0].shape[1]
    page = jnp.where(slots < 0, -1, slots // page_size)
    offset = slots % page_size
    cache = list(cache)
    cache[0] = _scatter(cache[0], page, offset, x.kv)
    freqs = _rope_freqs(cfg, bool(ratio))
    pools = (meta, rows_meta, slots, ratio)
    if ratio:
        cache[1] = _scatter(cache[1], page, offset, x.comp)
        ent = 2 if kind == "hca" else 3
        own = (p["c_bias"], p["c_norm"])
        cache[ent] = _emit(
            cache[1], cache[ent], *pools, cfg.head_dim, kind == "csa", own, cfg, freqs
        )
    if kind == "csa":
        cache[2] = _scatter(cache[2], page, offset, x.idx)
        own = (p["i_bias"], p["i_norm"])
        cache[4] = _emit(cache[2], cache[4], *pools, cfg.index_head_dim, True, own, cfg, freqs)
    o = _attend(p, cfg, x, cache, meta, rows_meta, ratio, kind, invariant)
    return o.astype(x.kv.dtype), tuple(cache)


def _attend(p, cfg: ModelConfig, x: V4Inputs, cache, meta, rows_meta, ratio, kind, invariant):
    """Each query over its window's rows and its visible entries (csa: the chosen ones; hca:
    all, ENTRY_BLOCK at a time up to the chunk's furthest row), with the head's sink: an
    online softmax, in chunks of rows."""
    num_tokens, num_heads, dh = x.q.shape
    window, page_size = cfg.sliding_window, cache[0].shape[1]
    # (No more than the page table holds: a short max_model_len reads and keeps fewer.)
    most = meta.page_table.shape[1] * page_size // max(ratio, 1)
    topk, block = min(cfg.index_topk, most), max(1, min(ENTRY_BLOCK, most))
    index_block = max(1, min(INDEX_BLOCK, most))
    keys = window + (topk if kind == "csa" else block if ratio else 0)
    per_row = keys * (dh + num_heads) * 4 + index_block * cfg.index_head_dim * 4
    chunk = INVARIANT_CHUNK if invariant else max(1, min(num_tokens, GATHER_BYTES // per_row))
    sinks = p["sinks"].astype(jnp.float32)
    scale = dh**-0.5

    def scores(q, rows, seen):  # [C, H, K], unseen -inf
        s = jnp.einsum("chd,ckd->chk", q, rows, precision="highest") * scale
        return jnp.where(seen[:, None, :], s, -jnp.inf)

    def fold(carry, s, rows, seen):
        """The online softmax's (max, denominator, sum of weighted values) with more keys."""
        m, denom, acc = carry
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        e = jnp.exp(s - m_new[..., None])
        # (Unseen rows may hold stale values: zero them so 0 * inf cannot appear.)
        values = jnp.where(seen[..., None], rows, 0.0)
        grow = jnp.exp(m - m_new)
        acc = acc * grow[..., None] + jnp.einsum("chk,ckd->chd", e, values, precision="highest")
        return m_new, denom * grow + row_sum(e), acc

    def one(q, pos, seq, idx_q, idx_w):  # a chunk of C rows
        table = meta.page_table[seq]  # [C, Pmax]: the entries' pages
        near = pos[:, None] - window + 1 + jnp.arange(window)[None, :]  # [C, W]
        rows = _gather(cache[0], rows_meta.page_table[seq], jnp.maximum(near, 0))  # [C, W, Dh]
        seen = near >= 0
        limit = (pos + 1) // max(ratio, 1)  # entries whose window closed
        if kind == "csa":  # the chosen entries beside the window's keys
            # (Not in the batch-invariant mode: a row's scores would follow its chunk.)
            shared = None
            if not invariant:  # (padding rows, at a step's end, follow the others)
                kv_lens = getattr(meta, "kv_lens", None)
                pad = jnp.zeros_like(seq, bool) if kv_lens is None else kv_lens[seq] == 0
                shared = jnp.all((seq == seq[0]) | pad)
            args = (topk, ratio, page_size, index_block, shared)
            chosen = _select(idx_q, idx_w, cache[4], table, limit, *args)
            ent = _entry_rows(cache[3], table, jnp.maximum(chosen, 0), ratio, page_size)
            rows = jnp.concatenate([rows, ent], axis=1)
            seen = jnp.concatenate([seen, chosen >= 0], axis=1)
        qf = q.astype(jnp.float32)
        start = jnp.broadcast_to(sinks[None, :], (q.shape[0], num_heads))  # (the sink first)
        carry = (start, jnp.ones_like(start), jnp.zeros(q.shape, jnp.float32))
        carry = fold(carry, scores(qf, rows, seen), rows, seen)
        if kind == "hca":  # every entry it sees, a block at a time

            def body(b, carry):
                ids = jnp.broadcast_to(b * block + jnp.arange(block), (q.shape[0], block))
                ent = _entry_rows(cache[2], table, ids, ratio, page_size)
                visible = ids < limit[:, None]
                return fold(carry, scores(qf, ent, visible), ent, visible)

            carry = lax.fori_loop(0, _blocks(limit, block), body, carry)
        _, denom, acc = carry
        return acc / denom[..., None]

    parts = [x.q, x.positions, meta.seq_ids]
    if kind == "csa":
        parts += [x.idx_q, x.idx_w]
    else:
        parts += [jnp.zeros((num_tokens, 1, 1)), jnp.zeros((num_tokens, 1))]
    if chunk >= num_tokens and not invariant:
        return one(*parts)
    count = -(-num_tokens // chunk)
    pad = count * chunk - num_tokens
    parts = [jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1)) for a in parts]
    parts = [a.reshape(count, chunk, *a.shape[1:]) for a in parts]
    o = lax.map(lambda c: one(*c), parts)
    return o.reshape(count * chunk, *o.shape[2:])[:num_tokens]


# -- MoE ---------------------------------------------------------------------------------


def route(p_moe: dict, x: jax.Array, token_ids: jax.Array, cfg: ModelConfig, layer: int):
    """(weights [T, k] f32, experts [T, k] int32): sqrt(softplus) scores; a hash layer's
    experts from tid2eid[token], the others' top-k of score + correction bias; weights the
    chosen scores, renormalized (norm_topk_prob), times routed_scaling_factor."""
    router = p_moe["router"].astype(jnp.float32)
    logits = narrow_product(precise_matmul, x.astype(jnp.float32), router)
    scores = jnp.sqrt(jax.nn.softplus(logits))
    if layer in cfg.hash_moe_layers:
        experts = p_moe["tid2eid"][token_ids].astype(jnp.int32)
    else:
        _, experts = lax.top_k(
            scores + p_moe["router_bias"].astype(jnp.float32)[None], cfg.num_experts_per_tok
        )
    weights = jnp.take_along_axis(scores, experts, axis=-1)
    if cfg.norm_topk_prob:
        total = weights[:, 0]
        for j in range(1, weights.shape[1]):
            total = total + weights[:, j]
        weights = weights / (total[:, None] + 1e-20)
    return weights * cfg.routed_scaling_factor, experts.astype(jnp.int32)


def _limited_mlp(p: dict, x: jax.Array, limit: float) -> jax.Array:
    gate = jnp.minimum(x @ p["w_gate"], limit)
    up = jnp.clip(x @ p["w_up"], -limit, limit)
    return (jax.nn.silu(gate) * up) @ p["w_down"]


# -- the stack ----------------------------------------------------------------------------


def forward_hidden(
    params: dict,
    cfg: ModelConfig,
    token_ids: jax.Array,  # [T]
    positions: jax.Array,  # [T]
    kv: list,
    attend,  # (i, p_attn, kv_i, V4Inputs) -> (o [T, H, Dh], kv_i)
    routed,  # models.moe.RoutedFn
    pin,
) -> tuple[jax.Array, list]:  # (hidden [T, D] before the final norm, kv)
    """Every decoder layer over hc_mult streams, then the head's collapse."""
    x = embed(params, token_ids)
    streams = jnp.broadcast_to(x[:, None, :], (x.shape[0], cfg.hc_mult, x.shape[1]))
    new_kv = []
    for i, layer in enumerate(params["layers"]):
        # Weights held fp8 / int4 (ModelConfig.quantization: wq_a, wq_b, the experts and the
        # shared expert) back to the model dtype one layer at a time; a no-op for floats.
        layer = dequantize_tree(layer, x.dtype)
        pre, post, comb = _hc_mix(layer["attn_hc"], streams, cfg)
        h = model_norm(_collapse(pre, streams), layer["attn_norm"], cfg)
        inputs = attn_inputs(layer["attn"], h, positions, cfg, i)
        o, kv_i = attend(i, layer["attn"], kv[i], inputs)
        streams = _expand(streams, attn_output(layer["attn"], o, positions, cfg, i), post, comb)
        new_kv.append(kv_i)
        pre, post, comb = _hc_mix(layer["mlp_hc"], streams, cfg)
        h = model_norm(_collapse(pre, streams), layer["mlp_norm"], cfg)
        p_moe = layer["moe"]
        weights, experts = route(p_moe, h, token_ids, cfg, i)
        out = routed(p_moe, h, weights, experts)
        if "shared" in p_moe:
            out = out + _limited_mlp(p_moe["shared"], h, cfg.swiglu_limit)
        streams = pin(_expand(streams, out, post, comb), ("batch", None, "embed"))
    return _hc_head(params["hc_head"], streams, cfg), new_kv
