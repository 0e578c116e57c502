"""Attention inputs and outputs for GQA and MLA; the attention core itself is a backend callback.

The layer code computes projected, normed and roped q/k/v (GQA) or the MLA query parts and the
compressed latent, hands them to a backend (`attend`, see models/transformer.py) that owns the
KV cache and the softmax, and applies the output projection to what comes back.

MLA (DeepSeek-V2, arXiv:2405.04434): the cache holds c_kv (after kv_a_norm) and the shared roped
key k_pe per token. With W_UK, W_UV the two halves of wkv_b,
    q.k = q_nope . (c_kv W_UK) + q_pe . k_pe = (q_nope W_UK^T) . c_kv + q_pe . k_pe
so a backend may either expand the latent (mla_expand_kv) or fold W_UK into the query
(mla_absorb_q), attend in latent space, and apply W_UV afterwards (mla_latent_to_v).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from configs.model_config import ModelConfig, RopeScaling
from models.layers import model_norm, rms_norm
from models.lora import add
from models.reductions import narrow_product
from models.rope import (
    apply_rope,
    gemma4_frequencies,
    rope_dim,
    rope_frequencies,
    rope_layout,
    yarn_get_mscale,
)

# HF builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps,
# and DeepSeek-V3.2's indexer k_norm (a LayerNorm) with this eps too.
MLA_LATENT_NORM_EPS = 1e-6


class AttnInputs(NamedTuple):
    """What a backend needs for one layer. GQA fills q/k/v; MLA fills q_nope/q_pe/c_kv/k_pe."""

    q: jax.Array | None = None  # GQA [T, H, Dh], qk-normed and roped
    k: jax.Array | None = None  # GQA [T, K, Dh], qk-normed and roped
    v: jax.Array | None = None  # GQA [T, K, Dv] (Dv: the layer's value width)
    q_nope: jax.Array | None = None  # MLA [T, H, Dn]
    q_pe: jax.Array | None = None  # MLA [T, H, Dr], roped
    c_kv: jax.Array | None = None  # MLA [T, R], after kv_a_norm (None: kv_source_layers)
    k_pe: jax.Array | None = None  # MLA [T, Dr], roped, shared by all heads
    scale: float = 1.0  # softmax scale applied to q.k
    # DeepSeek sparse attention's indexer (ModelConfig.sparse_attention; engine/sparse_mla.py)
    idx_q: jax.Array | None = None  # [T, Hi, Di], roped
    idx_k: jax.Array | None = None  # [T, Di], roped, shared by the index heads
    idx_w: jax.Array | None = None  # [T, Hi] float32 head weights, both scales folded in
    # [T, H, Dh] attn_output_gate (head_gate: [T, H, 1]): o * sigmoid(gate) first
    gate: jax.Array | None = None


def kv_arrays_in(cfg: ModelConfig, i: int, kv: list, new_kv: list) -> tuple:
    """Layer i's cache arrays as its backend sees them: its own (kv[i]), or, where it reads
    an earlier layer's (kv_source_layers), that layer's latent (MLA) or K and V (GQA) as that
    layer left them this step (new_kv), before its own (an indexer's keys)."""
    source = cfg.kv_source(i)
    return kv[i] if source == i else (*new_kv[source][: _read_arrays(cfg)], *kv[i])


def kv_arrays_kept(cfg: ModelConfig, i: int, kv_i: tuple) -> tuple:
    """What layer i keeps of the arrays its backend returns (kv_arrays_in's, updated)."""
    return kv_i if cfg.kv_source(i) == i else tuple(kv_i[_read_arrays(cfg) :])


def _read_arrays(cfg: ModelConfig) -> int:
    return 1 if cfg.is_mla else 2  # (MLA's latent; GQA's K and V)


def _frequencies(cfg: ModelConfig, p: dict) -> tuple:
    """(inv_freq [rope_dim // 2], attention_factor): the config's, times exp(rope_alpha)
    under LeRoPE (Mistral Large 4's rotary: the learned alpha scales each frequency)."""
    inv_freq, attention_factor = rope_frequencies(cfg.rope_theta, rope_dim(cfg), cfg.rope_scaling)
    if cfg.learned_rope_scale:
        inv_freq = jnp.asarray(inv_freq) * jnp.exp(p["rope_alpha"].astype(jnp.float32))
    return inv_freq, attention_factor


def _rope(cfg: ModelConfig, x: jax.Array, positions: jax.Array, p: dict | None = None, layer=0):
    """Rotate the leading rope_dim(cfg) channels of x [T, ..., Dx]; the others (a partial
    rotary factor, HF GLM-4.5's apply_rotary_pos_emb) pass through unchanged. `p`: the
    layer's attention params (LeRoPE's alpha). Gemma 4: its layer's own RoPE, whole;
    MiMo-V2-Flash: plain RoPE at sliding_rope_theta on its windowed layers."""
    if cfg.rope_proportional:
        return apply_rope(x, positions, gemma4_frequencies(cfg, layer, x.shape[-1]))
    dim = rope_dim(cfg)
    windowed = cfg.attention_window(layer) is not None
    if windowed and (cfg.rope_scaling_full_only or cfg.sliding_rope_theta):  # (OLMo 3, MiMo)
        theta = cfg.sliding_rope_theta or cfg.rope_theta
        dim = x.shape[-1] if cfg.sliding_full_rotary else dim  # (Laguna: the whole head)
        inv_freq, attention_factor = rope_frequencies(theta, dim, RopeScaling())
    else:
        inv_freq, attention_factor = _frequencies(cfg, p or {})
    if dim == x.shape[-1]:
        return apply_rope(x, positions, inv_freq, attention_factor, rope_layout(cfg))
    rotated = apply_rope(x[..., :dim], positions, inv_freq, attention_factor, rope_layout(cfg))
    return jnp.concatenate([rotated, x[..., dim:]], axis=-1)


def output_gate(gate: jax.Array, cfg: ModelConfig) -> jax.Array:
    """What the attention's output is multiplied by: sigmoid(gate), or with attn_gate_act
    "softplus" (Laguna) softplus(gate) taken in float32 and cast back, as transformers; A.X
    K2's (mla_query_gate) sigmoid left in float32, the product taken there (transformers')."""
    if cfg.attn_gate_act == "softplus":
        return jax.nn.softplus(gate.astype(jnp.float32)).astype(gate.dtype)
    if cfg.mla_query_gate:
        return jax.nn.sigmoid(gate.astype(jnp.float32))
    return jax.nn.sigmoid(gate)


def _no_delta(name: str, x: jax.Array) -> None:
    return None


def gqa_inputs(
    p: dict, x: jax.Array, positions: jax.Array, cfg: ModelConfig, delta=_no_delta, layer=0
) -> AttnInputs:
    """x: [T, D] -> q [T, H, Dh], k [T, K, Dh], v [T, K, Dv]; optional bias; qk-norm (per
    head, or over all heads: OLMoE) and OLMoE's clip before rope (HF; Hunyuan's qk-norm
    after it); MiMo-V2-Flash's values scaled.
    `delta(leaf, x)`: a LoRA term to add to a projection (models/lora.py), or None."""
    q = add(jnp.einsum("td,dhk->thk", x, p["wq"]), delta("wq", x))
    if "wk" not in p:  # (it reads an earlier layer's K and V: kv_source_layers)
        return _shared_kv_query(p, x, q, positions, cfg, delta, layer)
    k = add(jnp.einsum("td,dhk->thk", x, p["wk"]), delta("wk", x))
    if "wv" in p:
        v = add(jnp.einsum("td,dhk->thk", x, p["wv"]), delta("wv", x))
    else:  # Gemma 4's attention_k_eq_v: the keys' projection, before their norm and RoPE
        v = k
    if cfg.v_norm:  # Gemma 4: RMS-normed without a weight (scaled in float32, as it)
        v = rms_norm(v, jnp.ones((v.shape[-1],), jnp.float32), cfg.rms_norm_eps, True)
    if cfg.attention_bias:
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]
    if cfg.attention_value_scale != 1.0:  # MiMo-V2-Flash (after the bias, as transformers)
        v = v * cfg.attention_value_scale
    if cfg.qk_norm_full:  # OLMoE: over all heads' channels at once
        q = rms_norm(q.reshape(q.shape[0], -1), p["q_norm"].reshape(-1), cfg.rms_norm_eps)
        k = rms_norm(k.reshape(k.shape[0], -1), p["k_norm"].reshape(-1), cfg.rms_norm_eps)
        q, k = (y.reshape(y.shape[0], -1, cfg.head_dim) for y in (q, k))
    elif cfg.qk_norm and not cfg.qk_norm_after_rope:  # (Persimmon's LayerNorms: biased too)
        q = model_norm(q, p["q_norm"], cfg, p.get("q_norm_bias"))
        k = model_norm(k, p["k_norm"], cfg, p.get("k_norm_bias"))
    if cfg.clip_qkv is not None:
        c = cfg.clip_qkv
        q, k, v = jnp.clip(q, -c, c), jnp.clip(k, -c, c), jnp.clip(v, -c, c)
    if layer not in cfg.nope_layers:  # (Llama 4's NoPE layers take no rotation)
        q, k = _rope(cfg, q, positions, layer=layer), _rope(cfg, k, positions, layer=layer)
        if cfg.qk_l2_norm:  # Llama 4: weightless, on its RoPE layers only
            ones = jnp.ones((cfg.head_dim,), q.dtype)
            q, k = rms_norm(q, ones, cfg.rms_norm_eps), rms_norm(k, ones, cfg.rms_norm_eps)
    if cfg.qk_norm_after_rope:  # Hunyuan
        q, k = model_norm(q, p["q_norm"], cfg), model_norm(k, p["k_norm"], cfg)
    return _query_done(p, x, q, k, v, positions, cfg, delta, layer)


def _shared_kv_query(p, x, q, positions, cfg: ModelConfig, delta, layer: int) -> AttnInputs:
    """gqa_inputs of a layer reading an earlier layer's K and V (Gemma 4's KV sharing): its
    query alone, projected (q), normed and roped as gqa_inputs does; k and v None."""
    # (qk_norm_full, attention_bias, clip_qkv: refused beside it, model_checks)
    if cfg.qk_norm and not cfg.qk_norm_after_rope:
        q = model_norm(q, p["q_norm"], cfg, p.get("q_norm_bias"))
    if layer not in cfg.nope_layers:
        q = _rope(cfg, q, positions, layer=layer)
        if cfg.qk_l2_norm:
            q = rms_norm(q, jnp.ones((q.shape[-1],), q.dtype), cfg.rms_norm_eps)
    if cfg.qk_norm_after_rope:
        q = model_norm(q, p["q_norm"], cfg)
    return _query_done(p, x, q, None, None, positions, cfg, delta, layer)


def _query_done(p, x, q, k, v, positions, cfg: ModelConfig, delta, layer: int) -> AttnInputs:
    """gqa_inputs' last steps: the query's temperature, the output gate, the scale."""
    q = _temperature(cfg, q, positions, layer)
    gate = None
    if cfg.attn_output_gate:  # Qwen3-Next: q_proj's other half, per output channel
        gate = add(jnp.einsum("td,dhk->thk", x, p["wq_gate"]), delta("wq_gate", x))
        if cfg.attn_gate_bias:  # (Beam: a bias per head)
            gate = gate + p["gate_bias"][None, :, None].astype(gate.dtype)
    elif cfg.head_gate:  # LFM3: one per head ([T, H, 1])
        gate = narrow_product(jnp.matmul, x, p["w_head_gate"])[..., None]
    scale = cfg.attention_multiplier or cfg.head_dim**-0.5  # (Granite's multiplier)
    return AttnInputs(q=q, k=k, v=v, scale=scale, gate=gate)


def _temperature(cfg: ModelConfig, q: jax.Array, positions: jax.Array, layer: int) -> jax.Array:
    """Llama 4's query temperature: q [T, H, ...] times 1 + beta * log(1 + floor((position +
    attn_scale_offset) / attn_scale_positions)), made in float32. Mistral 4 and Ministral 3
    (transformers' get_llama_4_attn_scale, offset 0) cast it to q's dtype first; Llama 4
    (its attn_temperature_tuning, offset 1, NoPE layers only) multiplies in float32 and casts
    the product. Beam's (attn_scale_power p, NoPE layers only): (1 + (position + offset) /
    positions) ** p, as exp(p * log1p(...)), times q in float32. q itself where the model (or
    layer) has none."""
    power = cfg.attn_scale_power
    if not (cfg.attn_scale_beta or power) or (
        cfg.attn_scale_nope_only and layer not in cfg.nope_layers
    ):
        return q
    pos = positions.astype(jnp.float32) + cfg.attn_scale_offset
    if power:
        scale = jnp.exp(power * jnp.log1p(pos / cfg.attn_scale_positions))
    else:
        scale = 1.0 + cfg.attn_scale_beta * jnp.log(1.0 + jnp.floor(pos / cfg.attn_scale_positions))
    scale = scale.reshape((-1,) + (1,) * (q.ndim - 1))
    if cfg.attn_scale_nope_only:
        return (q.astype(jnp.float32) * scale).astype(q.dtype)
    return q * scale.astype(q.dtype)


def mla_softmax_scale(cfg: ModelConfig) -> float:
    """qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 for scaled rope (HF
    `yarn_apply_mscale`, which applies to any non-default rope type with mscale_all_dim set)."""
    scale = cfg.qk_head_dim**-0.5
    rs = cfg.rope_scaling
    if rs.rope_type != "default" and rs.mscale_all_dim:
        m = yarn_get_mscale(rs.factor, rs.mscale_all_dim)
        scale = scale * m * m
    return scale


def mla_inputs(
    p: dict, x: jax.Array, positions: jax.Array, cfg: ModelConfig, delta=_no_delta, layer=0
) -> AttnInputs:
    """x: [T, D] -> MLA query parts and the per-token latent (c_kv normed, k_pe roped) of
    decoder layer `layer`; a nope layer's (Mistral Large 4) q_pe and k_pe are zeros, so the
    cache and the attention backends see every layer alike. A layer reading an earlier
    layer's latent (kv_source_layers) has c_kv and k_pe None, one without an indexer of
    its own (shared_indexer_layers) idx_* None. `delta(leaf, x)`: a LoRA term for wq /
    wq_a / wq_b / wkv_a (models/lora.py), or None."""
    dn, r, dr = cfg.layer_nope_dim(layer), cfg.kv_lora_rank, cfg.qk_rope_head_dim
    q_a = gate = None
    if cfg.q_lora_rank:
        raw = add(x @ p["wq_a"], delta("wq_a", x))
        q_a = rms_norm(raw, p["q_a_norm"], MLA_LATENT_NORM_EPS)  # [T, Rq]
        q_in = jnp.concatenate([q_a, raw], axis=-1) if cfg.mla_query_gate else q_a
        q = add(jnp.einsum("tr,rhk->thk", q_in, p["wq_b"]), delta("wq_b", q_in))  # [T, H, Dq]
        if cfg.mla_query_gate:  # A.X K2: a gate per value channel ([T, H, Dv])
            gate = jnp.einsum("tr,rhk->thk", q_in, p["wq_gate"])
        if cfg.mla_lora_scales:  # LongCat-Flash: its queries scaled (before RoPE)
            q = q * jnp.asarray((cfg.hidden_size / cfg.q_lora_rank) ** 0.5, q.dtype)
    else:
        q = add(jnp.einsum("td,dhk->thk", x, p["wq"]), delta("wq", x))  # [T, H, Dn + Dr]
    c_kv = k_pe = None  # (a layer reading an earlier layer's latent makes none)
    if cfg.kv_source(layer) == layer:
        kv_a = add(x @ p["wkv_a"], delta("wkv_a", x))  # [T, R + Dr]
        c_kv = rms_norm(kv_a[:, :r], p["kv_a_norm"], cfg.latent_norm_eps)  # [T, R]
        k_pe = kv_a[:, r:]
        if cfg.mla_lora_scales:  # LongCat-Flash: the normed latent scaled (keys and values)
            c_kv = c_kv * jnp.asarray((cfg.hidden_size / r) ** 0.5, c_kv.dtype)
    if cfg.mla_unrotated:  # Kimi-Linear: the rope channels as they are (NoPE)
        q_pe = q[..., dn:]
    elif cfg.layer_rope_dim(layer):
        q_pe = _rope(cfg, q[..., dn:], positions, p)
        k_pe = None if k_pe is None else _rope(cfg, k_pe, positions, p)
    else:
        q_pe = jnp.zeros(q.shape[:2] + (dr,), q.dtype)
        k_pe = None if k_pe is None else jnp.zeros((x.shape[0], dr), x.dtype)
    q_nope = q[..., :dn]
    if cfg.query_log_scale:
        scale = _log_scale(p["q_scale"], p["q_scale_bias"], positions, q.dtype)
        q_nope, q_pe = q_nope * scale, q_pe * scale
    inputs = AttnInputs(
        q_nope=_temperature(cfg, q_nope, positions, layer),
        q_pe=_temperature(cfg, q_pe, positions, layer),
        c_kv=c_kv,
        k_pe=k_pe,
        scale=mla_softmax_scale(cfg),
        # Ling 2.5: the output per head times sigmoid(x @ w_head_gate) ([T, H, 1])
        gate=narrow_product(jnp.matmul, x, p["w_head_gate"])[..., None] if cfg.head_gate else gate,
    )
    if cfg.indexes(layer):
        inputs = inputs._replace(**_indexer_inputs(p, x, q_a, positions, cfg, layer))
    return inputs


def _log_scale(scale, bias, positions: jax.Array, dtype) -> jax.Array:
    """Mistral Large 4's query scale per head, s_h * log(position + 1) + b_h ([T, H, 1]),
    computed in the queries' dtype as transformers' MistralLarge4TextSoftmaxScaling."""
    log_pos = jnp.log(positions.astype(jnp.float32) + 1.0).astype(dtype)
    return (scale.astype(dtype)[None, :] * log_pos[:, None] + bias.astype(dtype)[None, :])[
        ..., None
    ]


def _layer_norm(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    """torch's LayerNorm over the last axis (eps MLA_LATENT_NORM_EPS), in float32."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    normed = (x32 - mean) * lax.rsqrt(jnp.var(x32, axis=-1, keepdims=True) + MLA_LATENT_NORM_EPS)
    return (normed * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _indexer_inputs(
    p: dict, x: jax.Array, q_a: jax.Array | None, positions, cfg: ModelConfig, layer: int
) -> dict:
    """DeepSeek-V3.2's lightning indexer (transformers' DeepseekV32Indexer): queries from the
    normed q LoRA, one LayerNormed key per token, both roped on their first Dr channels
    with rotate-half pairs (GLM-5: interleaved pairs; the MLA rope's frequencies), and a
    float32 weight per index head times index_n_heads^-0.5, here also times the score
    scale index_head_dim^-0.5 (relu(a * s) = s * relu(a) for s > 0). Mistral Large 4's
    (no q LoRA): queries from the LayerNormed hidden state, times the query log scale,
    interleaved rope, none in a nope layer."""
    heads, dim, dr = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
    if q_a is None:
        q_in = _layer_norm(x, p["idx_q_norm"], p["idx_q_bias"])
        q = jnp.einsum("td,dhk->thk", q_in, p["idx_wq"])  # [T, Hi, Di]
    else:
        q = jnp.einsum("tr,rhk->thk", q_a, p["idx_wq"])  # [T, Hi, Di]
    if cfg.query_log_scale:
        q = q * _log_scale(p["idx_q_scale"], p["idx_q_scale_bias"], positions, q.dtype)
    k = _layer_norm(x @ p["idx_wk"], p["idx_k_norm"], p["idx_k_bias"])  # [T, Di]
    inv_freq, attention_factor = _frequencies(cfg, p)
    layout = "pairs_to_half" if cfg.index_rope_interleave else "half"

    def rope(y):
        if not cfg.layer_rope_dim(layer):
            return y
        rotated = apply_rope(y[..., :dr], positions, inv_freq, attention_factor, layout)
        return jnp.concatenate([rotated, y[..., dr:]], axis=-1)

    w = narrow_product(jnp.matmul, x.astype(jnp.float32), p["idx_w"].astype(jnp.float32))
    return dict(idx_q=rope(q), idx_k=rope(k), idx_w=w * (heads**-0.5 * dim**-0.5))


def mla_absorb_q(p: dict, q_nope: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Fold W_UK into the query: q_nope [T, H, Dn] -> q_lat [T, H, R] (Dn: the layer's)."""
    w_uk = p["wkv_b"][..., : q_nope.shape[-1]]  # [R, H, Dn]
    return jnp.einsum("thn,rhn->thr", q_nope, w_uk)


def mla_latent_to_v(p: dict, o_lat: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Apply W_UV after latent attention: o_lat [T, H, R] -> [T, H, Dv]."""
    w_uv = p["wkv_b"][..., -cfg.v_head_dim :]  # [R, H, Dv]
    return jnp.einsum("thr,rhv->thv", o_lat, w_uv)


def mla_expand_kv(p: dict, c_kv: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """Expand cached latents: c_kv [L, R] -> (k_nope [L, H, Dn], v [L, H, Dv])."""
    kv = jnp.einsum("lr,rhk->lhk", c_kv, p["wkv_b"])  # [L, H, Dn + Dv]
    return kv[..., : -cfg.v_head_dim], kv[..., -cfg.v_head_dim :]


def attn_output(p: dict, o: jax.Array, delta=_no_delta) -> jax.Array:
    """Output projection: o [T, H, Dv] -> [T, D] (plus its bias, gpt-oss; and a LoRA term)."""
    out = add(jnp.einsum("thk,hkd->td", o, p["wo"]), delta("wo", o))
    return out + p["bo"] if "bo" in p else out
