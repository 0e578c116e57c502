"""Contiguous-cache reference forward: the plain computation the paged engine is checked against.

One sequence, a cache of max_len positions per layer, causal softmax attention over the whole
cache with a position mask. MLA is computed in EXPANDED form (latent -> per-head k_nope and v),
so the engine's absorbed MLA path is checked against a different computation.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from configs.model_config import ModelConfig
from models import deepseek_v4
from models.attention import AttnInputs, mla_expand_kv
from models.linear_attention import segments_from_spans, zero_state
from models.reductions import native_row_sums
from models.transformer import final_logits, forward_hidden


def init_cache(cfg: ModelConfig, max_len: int) -> list:
    """Per layer: GQA (k [L, K, Dh], v [L, K, Dv]); MLA (latent [L, R + Dr],), with sparse
    attention (latent, index keys [L, Di]); a gated DeltaNet's state (one row); zeros."""
    dt = jnp.dtype(cfg.dtype)

    def layer(i: int) -> tuple:
        if cfg.is_linear_layer(i):
            return zero_state(cfg, 1)
        if cfg.is_dsv4:  # (one page of max_len rows: models/deepseek_v4.py)
            return deepseek_v4.init_layer_cache(cfg, i, 1, max_len, lambda s: jnp.zeros(s, dt))
        if cfg.is_mla:
            return tuple(jnp.zeros((max_len, w), dt) for w in cfg.layer_kv_widths(i))
        k = cfg.layer_num_kv_heads(i)
        if cfg.kv_source(i) != i:  # (it reads an earlier layer's K and V)
            return ()
        return tuple(
            jnp.zeros((max_len, k, dim), dt)
            for dim in (cfg.layer_head_dim(i), cfg.layer_v_head_dim(i))
        )

    return [layer(i) for i in range(cfg.num_layers)]


def _causal_softmax(
    scores: jax.Array,  # [T, ..., L] f32
    positions: jax.Array,  # [T]
    window: int | None = None,
    sinks: jax.Array | None = None,  # [...] f32, one logit per head (gpt-oss)
    chosen: jax.Array | None = None,  # [T, L] bool: the keys sparse attention keeps
    chunked: bool = False,  # the window is Llama 4's attention chunk
) -> jax.Array:
    """Softmax over each query's visible keys (those `chosen`, too, when given); with
    `sinks`, over [keys, sink] with the sink's share dropped (HF gpt-oss
    eager_attention_forward)."""
    max_len = scores.shape[-1]
    keys = jnp.arange(max_len)[None, :]
    visible = keys <= positions[:, None]  # [T, L]
    if window is not None and chunked:  # (HF's chunked mask: the same chunk, causal)
        visible &= keys // window == positions[:, None] // window
    elif window is not None:
        visible &= keys > positions[:, None] - window
    if chosen is not None:
        visible &= chosen
    visible = visible.reshape(visible.shape[:1] + (1,) * (scores.ndim - 2) + visible.shape[1:])
    scores = jnp.where(visible, scores, -jnp.inf)
    if sinks is None:
        return jax.nn.softmax(scores, axis=-1)
    sink = jnp.broadcast_to(sinks[..., None], scores.shape[:-1] + (1,))
    return jax.nn.softmax(jnp.concatenate([scores, sink], axis=-1), axis=-1)[..., :-1]


def contiguous_attend(cfg: ModelConfig, positions: jax.Array):
    """Backend for forward_hidden: write the new tokens at `positions` ([T]) of the contiguous
    cache, then attend causally over it (query at position p sees cache rows 0..p, or its
    layer's sliding window of them)."""

    chosen_by = {}  # the latest indexer's choice, for the shared-indexer layers after it
    if cfg.is_dsv4:  # its paged attention, the cache one page (slot = position)
        rows = deepseek_v4.Rows(positions, jnp.zeros_like(positions), jnp.zeros((1, 1), jnp.int32))
        return lambda i, p, kv_i, inp: deepseek_v4.attention(
            p, cfg, i, inp, kv_i, rows, rows, positions
        )

    def attend(i: int, p_attn: dict, kv_i: tuple, inp: AttnInputs):
        if cfg.is_mla:
            latent, own = kv_i[0], ()  # [L, R + Dr]
            if inp.c_kv is not None:  # (None: an earlier layer's latent, read as written)
                new = jnp.concatenate([inp.c_kv, inp.k_pe], axis=-1).astype(latent.dtype)
                latent = latent.at[positions].set(new)
            chosen = None
            if cfg.sparse_attention:
                if inp.idx_k is not None:
                    own = (kv_i[1].at[positions].set(inp.idx_k.astype(kv_i[1].dtype)),)
                    chosen_by["mask"] = _index_mask(inp, own[0], positions, cfg.index_topk)
                chosen = chosen_by["mask"]
            kv_i = (latent, *own)
            r = cfg.kv_lora_rank
            k_nope, v = mla_expand_kv(p_attn, latent[:, :r], cfg)  # [L, H, Dn], [L, H, Dv]
            scores = jnp.einsum("thn,lhn->thl", inp.q_nope, k_nope) + jnp.einsum(
                "thr,lr->thl", inp.q_pe, latent[:, r:]
            )  # [T, H, L]
            probs = _causal_softmax(
                scores.astype(jnp.float32) * inp.scale, positions, chosen=chosen
            )
            o = jnp.einsum("thl,lhv->thv", probs.astype(v.dtype), v)  # [T, H, Dv]
            return o, kv_i
        k_cache, v_cache = kv_i  # [L, K, Dh], [L, K, Dv]
        if inp.k is not None:  # (None: an earlier layer's K and V, read as written)
            k_cache = k_cache.at[positions].set(inp.k.astype(k_cache.dtype))
            v_cache = v_cache.at[positions].set(inp.v.astype(v_cache.dtype))
        t, h, dh = inp.q.shape
        kh = k_cache.shape[1]
        q = inp.q.reshape(t, kh, h // kh, dh)  # [T, K, G, Dh]: head h uses kv head h // G
        scores = jnp.einsum("tkgd,lkd->tkgl", q, k_cache).astype(jnp.float32) * inp.scale
        if cfg.attn_logit_softcapping:  # Gemma 2: cap * tanh(s / cap), before the mask
            cap = cfg.attn_logit_softcapping
            scores = cap * jnp.tanh(scores / cap)
        if cfg.alibi_slopes:  # ALiBi: slope * (key position - query position)
            slopes = jnp.asarray(cfg.alibi_slopes, jnp.float32).reshape(kh, h // kh)
            rel = jnp.arange(k_cache.shape[0])[None, :] - positions[:, None]  # [T, L]
            scores = scores + slopes[None, :, :, None] * rel[:, None, None, :].astype(jnp.float32)
        window = cfg.attention_window(i)
        sinks = p_attn.get("sinks")
        if sinks is not None:
            sinks = sinks.astype(jnp.float32).reshape(kh, h // kh)  # [K, G]
        probs = _causal_softmax(
            scores,
            positions,
            window,
            sinks,
            chunked=cfg.layer_chunked(i),
        )
        o = jnp.einsum("tkgl,lkd->tkgd", probs.astype(v_cache.dtype), v_cache)
        return o.reshape(t, h, v_cache.shape[-1]), (k_cache, v_cache)

    return attend


def _index_mask(inp: AttnInputs, index_keys: jax.Array, positions: jax.Array, topk: int):
    """DeepSeek-V3.2's indexer as transformers computes it: every cache row scored, the
    rows past a query masked, the top min(topk, L) taken ([T, L] bool; masked rows it takes
    stay out through the causal mask)."""
    scores = jnp.einsum(
        "thd,ld->thl", inp.idx_q.astype(jnp.float32), index_keys.astype(jnp.float32)
    )
    scores = jnp.einsum("th,thl->tl", inp.idx_w, jax.nn.relu(scores))
    visible = jnp.arange(index_keys.shape[0])[None, :] <= positions[:, None]
    scores = jnp.where(visible, scores, -jnp.inf)
    _, top = jax.lax.top_k(scores, min(topk, index_keys.shape[0]))
    rows = jnp.arange(scores.shape[0])[:, None]
    return jnp.zeros(scores.shape, bool).at[rows, top].set(True)


@functools.partial(jax.jit, static_argnames=("cfg",))
def reference_forward(
    params: dict,
    cfg: ModelConfig,
    token_ids: jax.Array,  # [T] int32, the tokens at positions start_pos .. start_pos + T - 1
    start_pos: jax.Array,  # [] int32
    cache: list,
    num_tokens: jax.Array | None = None,  # [] int32: rows that are tokens (None: all)
) -> tuple[jax.Array, list]:  # (logits [T, V] f32, cache)
    """Forward T consecutive tokens of one sequence through the contiguous cache. Rows past
    `num_tokens` are padding: a gated DeltaNet's state takes only the tokens. One sequence,
    no batch to be invariant to: its row sums are XLA's reduce (models/reductions.py)."""
    with native_row_sums():
        t = token_ids.shape[0]
        positions = (start_pos + jnp.arange(t)).astype(jnp.int32)
        n = jnp.int32(t) if num_tokens is None else num_tokens
        segments = segments_from_spans(
            jnp.stack([jnp.int32(0), n]), (start_pos + n)[None], jnp.zeros((1,), jnp.int32), t
        )
        hidden, cache = forward_hidden(
            params,
            cfg,
            token_ids,
            positions,
            cache,
            contiguous_attend(cfg, positions),
            segments=segments,
        )
        return final_logits(params, cfg, hidden), cache


def prefill_bucket(n: int) -> int:
    """Prefill length for an n-token prompt: a power of two, at least 64, so prompts of
    different lengths share one compilation. Padding rows write cache positions past the
    prompt; each decode step overwrites its own position before reading it, and rows past a
    query's position are masked, so padding never changes a result."""
    return max(64, 1 << (n - 1).bit_length())


def cache_len(prompt_len: int, max_new: int) -> int:
    """greedy_generate's default cache length: its prefill bucket or the whole sequence,
    rounded up to 128 (so most prompts share one compilation)."""
    return -(-max(prefill_bucket(prompt_len), prompt_len + max_new) // 128) * 128


def _log_softmax_at(logits: np.ndarray, token: int) -> float:
    logits = logits.astype(np.float32)
    m = logits.max()
    lse = m + np.log(np.sum(np.exp(logits - m), dtype=np.float32))
    return float(logits[token] - lse)


def greedy_generate(
    params: dict,
    cfg: ModelConfig,
    prompt: list[int],
    max_new: int,
    max_len: int | None = None,
    decode_rows: int = 1,
) -> tuple[list[int], list[float]]:
    """One prefill, then one-token decodes; (tokens, logprob of each chosen token, f32).

    `decode_rows`: each decode's token padded to that many rows. The prefill bucket's size
    makes the whole generation one compiled program (the prefill's): its padding rows
    write cache positions past the token, which each later decode overwrites before any
    query reads them (as the prefill's own padding)."""
    if not prompt:
        raise ValueError("prompt: must hold at least one token")
    padded = prefill_bucket(len(prompt))
    # The last decode's padding rows, like its token, stay inside the cache.
    need = max(padded, len(prompt) + max_new - 1 + decode_rows)
    if max_len is None:
        max_len = cache_len(len(prompt), need - len(prompt))
    if max_len < need:
        raise ValueError(
            f"max_len={max_len}: needs >= {need} (prompt {len(prompt)} padded to {padded}, "
            f"plus max_new={max_new} decoded {decode_rows} rows at a time)"
        )
    ids = np.zeros(padded, np.int32)
    ids[: len(prompt)] = prompt
    logits, cache = reference_forward(
        params,
        cfg,
        jnp.asarray(ids),
        jnp.int32(0),
        init_cache(cfg, max_len),
        jnp.int32(len(prompt)),
    )
    row = np.asarray(logits[len(prompt) - 1])
    tokens, logprobs = [], []
    one = None if decode_rows == 1 else jnp.int32(1)
    for step in range(max_new):
        tok = int(np.argmax(row))
        tokens.append(tok)
        logprobs.append(_log_softmax_at(row, tok))
        if step + 1 == max_new:
            break
        ids = np.zeros(decode_rows, np.int32)
        ids[0] = tok
        start = jnp.int32(len(prompt) + step)
        logits, cache = reference_forward(params, cfg, jnp.asarray(ids), start, cache, one)
        row = np.asarray(logits[0])
    return tokens, logprobs
