"""Small building blocks shared by every architecture: RMSNorm, SwiGLU MLP, embed, logits."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.lora import add
from models.reductions import row_mean


def rms_norm(
    x: jax.Array,
    weight: jax.Array | None,
    eps: float,
    scale_in_float32: bool = False,
    offset: float = 0.0,
) -> jax.Array:
    """RMSNorm over the last axis. x: [..., D], weight: [D].

    Like HF (LlamaRMSNorm and kin): statistics in float32, cast back to x's dtype, then scaled.
    `scale_in_float32` (GptOssRMSNorm, ModelConfig.norm_scale_in_float32): scaled in float32,
    then cast once. `offset` (ModelConfig.norm_offset): added to the weight in float32
    first (Qwen3-Next's zero-centred norms scale by 1 + weight). `weight` None: no scale
    (NanoChat's norms hold no weight).
    """
    xf = x.astype(jnp.float32)
    # row_mean: in the batch-invariant step a row's statistics must not depend on the batch
    # (fixed-order there, models/reductions.py).
    variance = row_mean(xf * xf)[..., None]
    normed = xf * jax.lax.rsqrt(variance + eps)
    if weight is None:
        return normed.astype(x.dtype)
    if scale_in_float32:
        return ((weight.astype(jnp.float32) + offset) * normed).astype(x.dtype)
    return weight * normed.astype(x.dtype)


def model_norm(
    x: jax.Array, weight: jax.Array | None, cfg: ModelConfig, bias: jax.Array | None = None
) -> jax.Array:
    """The model's own norm (its decoder, final and q/k norms): rms_norm as its family
    scales (ModelConfig.norm_scale_in_float32, norm_offset), or a LayerNorm (norm_kind
    "layer"; with `bias`, Phi-3.5-MoE's nn.LayerNorm; weight None: OLMo 1's LayerNorm, none)."""
    if cfg.norm_kind == "layer":  # (Nemotron's LayerNorm1P: 1 + weight, in its dtype)
        if weight is not None and cfg.norm_offset:
            weight = weight + jnp.asarray(cfg.norm_offset, weight.dtype)
        return layer_norm(x, weight, cfg.rms_norm_eps, bias)
    return rms_norm(x, weight, cfg.rms_norm_eps, cfg.norm_scale_in_float32, cfg.norm_offset)


def layer_norm(
    x: jax.Array, weight: jax.Array | None, eps: float, bias: jax.Array | None = None
) -> jax.Array:
    """A LayerNorm over the last axis (transformers' CohereLayerNorm; with `bias`,
    nn.LayerNorm's): x minus its mean over the root of their variance, times the weight
    (None: OLMo 1's, none), plus the bias, all in float32, cast back once."""
    xf = x.astype(jnp.float32)
    centered = xf - row_mean(xf)[..., None]
    normed = centered * jax.lax.rsqrt(row_mean(centered * centered)[..., None] + eps)
    if weight is not None:
        normed = weight.astype(jnp.float32) * normed
    return (normed if bias is None else normed + bias.astype(jnp.float32)).astype(x.dtype)


def gelu_exact(x: jax.Array) -> jax.Array:
    """The erf GELU, x * Phi(x) (transformers' "gelu", torch's default)."""
    return jax.nn.gelu(x, approximate=False)


def xielu(x: jax.Array, p: dict) -> jax.Array:
    """Apertus' xIELU (transformers' XIELUActivation, its Python form), in x's dtype: with
    a_p = softplus(act_alpha_p), a_n = beta + softplus(act_alpha_n), a_p x^2 + beta x where
    x > 0, else (expm1(min(x, eps)) - x) a_n + beta x."""
    beta, eps = p["act_beta"].astype(x.dtype), p["act_eps"].astype(x.dtype)
    alpha_p = jax.nn.softplus(p["act_alpha_p"]).astype(x.dtype)
    alpha_n = beta + jax.nn.softplus(p["act_alpha_n"]).astype(x.dtype)
    negative = (jnp.expm1(jnp.minimum(x, eps)) - x) * alpha_n + beta * x
    return jnp.where(x > 0, alpha_p * x * x + beta * x, negative)


def relu2(x: jax.Array) -> jax.Array:
    """relu(x)^2 (transformers' ReLUSquaredActivation, Nemotron-H's MLPs)."""
    return jnp.square(jax.nn.relu(x))


def clipped(act, limit: float):
    """(gate, up) -> min(act(gate), limit) * clip(up, -limit, limit): SwiGLU clipped after
    the activation (Ling 2.5's and Step 3.7's, transformers' limit_after_act)."""
    return lambda gate, up: jnp.minimum(act(gate), limit) * jnp.clip(up, -limit, limit)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """transformers' gelu_pytorch_tanh (Gemma 4's MLPs and experts)."""
    return jax.nn.gelu(x, approximate=True)


def gate_activation(cfg: ModelConfig):
    """The dense MLPs' activation (ModelConfig.mlp_act): SiLU on the gate, GeLU (tanh) on it
    for geglu, GeLU (tanh) on up for gelu (no gate); a relu2 MLP has no gate either and takes
    ReLU² whatever this returns (swiglu_mlp)."""
    if cfg.mlp_act == "gelu_exact":  # (GPT-NeoX's: the erf GELU)
        return gelu_exact
    if cfg.mlp_act == "relu":  # (OPT's, on up: no gate)
        return jax.nn.relu
    return gelu_tanh if cfg.mlp_act in ("geglu", "gelu") else jax.nn.silu


def swiglu_mlp(p: dict, x: jax.Array, delta=None, act=jax.nn.silu, limit=None) -> jax.Array:
    """down(act(x @ gate) * (x @ up)), act SiLU (or gate_activation's); x: [T, D], w_gate/w_up
    [D, F], w_down [F, D] -> [T, D]. Without w_gate (ModelConfig.mlp_act "relu2", "gelu"):
    down(relu(x @ up)^2), or with act GeLU (tanh) down(gelu(x @ up)); b_up / b_down
    (ModelConfig.mlp_bias) added where present. `delta(leaf, x)`: a LoRA term to add to a
    projection (models/lora.py), or None. `limit` (ModelConfig.clip_limit): act(gate) <= limit
    and |up| <= limit."""
    delta = delta or (lambda name, x: None)
    up = add(x @ p["w_up"], delta("w_up", x))  # [T, F]
    if "b_up" in p:
        up = up + p["b_up"]
    if "w_gate" in p:
        gate = add(x @ p["w_gate"], delta("w_gate", x))  # [T, F]
        h = clipped(act, limit)(gate, up) if limit else act(gate) * up
    elif "act_alpha_p" in p:  # (Apertus)
        h = xielu(up, p)
    else:
        h = act(up) if act in (gelu_tanh, gelu_exact, jax.nn.relu) else relu2(up)
    out = add(h @ p["w_down"], delta("w_down", h))
    return out + p["b_down"] if "b_down" in p else out


def sinusoids(positions: jax.Array, dim: int) -> jax.Array:  # [T] int32 -> [T, dim] f32
    """fairseq's sinusoidal position embeddings (transformers' XGLM): for i < h = dim // 2,
    sin(p x f_i) in channel i and cos(p x f_i) in channel h + i, f_i = exp(-i ln(10000) /
    (h - 1)), in float32 as transformers builds its table; a zero channel past them where dim
    is odd."""
    half = dim // 2
    freq = jnp.exp(jnp.arange(half, dtype=jnp.float32) * -(math.log(10000) / (half - 1)))
    angle = positions.astype(jnp.float32)[:, None] * freq[None, :]
    out = jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)
    return jnp.pad(out, ((0, 0), (0, dim % 2)))


def embed(params: dict, token_ids: jax.Array) -> jax.Array:
    """Embedding rows. token_ids: [T] int32 -> [T, D]."""
    return jnp.take(params["embed"], token_ids, axis=0)


def final_logits(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """Final norm, then lm_head (or the tied embedding), then the config's soft cap (cap *
    tanh(logits / cap), Mistral Large 4); a pruned head's logits (ModelConfig.
    output_vocab_size) -inf past its rows. hidden: [S, D] -> [S, V] float32."""
    h = model_norm(hidden, params.get("final_norm"), cfg, params.get("final_norm_bias"))
    if cfg.residual_in_float32:  # (a float32 stream's norm, rounded as transformers' Mamba)
        h = h.astype(params["final_norm"].dtype)
    if cfg.tie_word_embeddings:
        logits = h @ params["embed"].T  # [S, V]
    else:
        logits = h @ params["lm_head"]  # [S, V]
    if "lm_head_bias" in params:  # (Phi-3.5-MoE)
        logits = logits + params["lm_head_bias"]
    if cfg.logits_scaling != 1.0:  # (Granite: divided, in the model dtype)
        logits = logits / jnp.asarray(cfg.logits_scaling, logits.dtype)
    if cfg.logit_scale != 1.0:  # (Cohere: times a Python float, rounded once)
        logits = (logits.astype(jnp.float32) * cfg.logit_scale).astype(logits.dtype)
    logits = logits.astype(jnp.float32)
    if cfg.final_logit_softcapping:
        cap = cfg.final_logit_softcapping
        logits = jnp.tanh(logits / cap) * cap
    if logits.shape[-1] < cfg.vocab_size:  # (a pruned head: the other ids never come)
        pad = ((0, 0),) * (logits.ndim - 1) + ((0, cfg.vocab_size - logits.shape[-1]),)
        logits = jnp.pad(logits, pad, constant_values=-jnp.inf)
    return logits


def per_layer_inputs(params: dict, cfg: ModelConfig, token_ids: jax.Array, x: jax.Array):
    """Gemma 4's per-layer embeddings ([T, L, P], ModelConfig.per_layer_input_dim): each
    token's rows of ple_embed times sqrt(P), joined with the embedded token x [T, D]
    projected (times D^-0.5) and RMS-normed per layer, the sum times 2^-0.5: the scalars
    taken in float32 and the products rounded once, as torch takes a tensor times a Python
    float (Gemma 3n's scales: tensors of the model dtype, the products in it). Ids past
    per_layer_vocab_size read row 0 (Gemma 3n's rule)."""
    n, p, dt = cfg.num_layers, cfg.per_layer_input_dim, x.dtype
    ids = jnp.where(token_ids < params["ple_embed"].shape[0], token_ids, 0)
    rows = jnp.take(params["ple_embed"], ids, axis=0).reshape(-1, n, p)
    rows = rows * jnp.asarray(math.sqrt(p), dt)

    def times(y: jax.Array, scale: float) -> jax.Array:
        if cfg.altup_num_inputs:
            return y * jnp.asarray(scale, dt)
        return (y.astype(jnp.float32) * scale).astype(dt)

    projected = times(x @ params["ple_proj"], cfg.hidden_size**-0.5).reshape(-1, n, p)
    projected = model_norm(projected, params["ple_norm"], cfg)
    return times(projected + rows, 2**-0.5)
