"""Gemma 3n's decoder stack (transformers' gemma3n_text, the language model of gemma3n;
ModelConfig.altup_num_inputs > 0), run in place of models/transformer.py's.

AltUp (arXiv:2301.13310) keeps N streams of the residual, [N, T, D]: the embedded token and
N - 1 projections of it, each rescaled to the token's root mean square. Each layer

  predicts   p_i = s_i + sum_j R_ij s_j, R [T, N, N] from the router's modalities m =
             tanh(router(norm(s_0) / D)) of the first stream;
  runs       its block on p_0 alone: h = norm(p_0); a LAuReL term l = h + norm(h W_l W_r);
             y = (p_0 + norm(attn(h)) + l) / sqrt(2); y + norm(mlp(norm(y))), the MLP's gate
             Gaussian top-k'd on its sparse layers (activation_sparsity: gate - (mean + std *
             Phi^-1(sparsity)), ReLU'd, before its GeLU);
  corrects   s_i = p_i + (out - p_0) * (C m + 1)_i;
  and adds   norm(W_o (gelu(W_g (s_0 * scale)) * ple_i)) to streams 1..N-1 (ple_i: the
             layer's per-layer input, models.layers.per_layer_inputs).

After the last layer streams 1..N-1 are projected back (each rescaled to stream 0's root mean
square) and the N averaged: the hidden state before the final norm. Attention is Gemma 4's
(q/k norms, a weightless v norm, scale 1, RoPE per layer kind) through the backend's
`attend`, KV sharing included (ModelConfig.kv_source_layers). Scalars multiply as
transformers' do: its buffers in their own dtype, Python floats in float32, rounded once.
"""

from __future__ import annotations

import math
import statistics

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.attention import attn_output, gqa_inputs, kv_arrays_in, kv_arrays_kept
from models.layers import embed, gelu_tanh, model_norm, per_layer_inputs
from models.reductions import row_mean

F32 = jnp.float32


def forward_hidden(params: dict, cfg: ModelConfig, token_ids, positions, kv: list, attend, pin):
    """models.transformer.forward_hidden for Gemma 3n: (hidden [T, D] before the final norm,
    kv); kv[i] as the backend caches it, () for a layer reading an earlier one's."""
    x = embed(params, token_ids) * jnp.asarray(cfg.embedding_multiplier, params["embed"].dtype)
    ple = per_layer_inputs(params, cfg, token_ids, x)  # [T, L, P]
    spread = [_rescaled(x @ w, x) for w in params["altup_proj"]]
    streams = pin(jnp.stack([x, *spread]), (None, "batch", "embed"))  # [N, T, D]
    new_kv = []
    for i, layer in enumerate(params["layers"]):
        kv_in = kv_arrays_in(cfg, i, kv, new_kv)
        streams, kv_i = _layer(layer, cfg, i, streams, positions, kv_in, attend, ple[:, i])
        streams = pin(streams, (None, "batch", "embed"))
        new_kv.append(kv_arrays_kept(cfg, i, kv_i))
    top = streams[0]
    back = [
        _rescaled(s @ w, top) for s, w in zip(streams[1:], params["altup_unembed"], strict=True)
    ]
    mean = jnp.mean(jnp.stack([top, *back]).astype(F32), axis=0)  # (torch's: f32 sums)
    return pin(mean.astype(top.dtype), ("batch", "embed")), new_kv


def _mean_square(y: jax.Array) -> jax.Array:
    """mean(y^2) over the last axis, kept ([..., 1], float32)."""
    yf = y.astype(F32)
    return row_mean(yf * yf)[..., None]


def _rescaled(y: jax.Array, like: jax.Array) -> jax.Array:
    """y times rms(like) / rms(y) (the latter at least sqrt(1e-5)), in y's dtype as
    transformers takes each step."""
    target = jnp.sqrt(_mean_square(like)).astype(y.dtype)
    magnitude = jnp.sqrt(jnp.maximum(_mean_square(y), 1e-5)).astype(y.dtype)
    return y * target / magnitude


def _modalities(alt: dict, y: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The AltUp router's [T, N]: tanh(router(norm(y) / D)), the tanh in float32."""
    r = model_norm(y, alt["router_norm"], cfg)
    r = (r.astype(F32) * (1.0 / cfg.hidden_size)).astype(y.dtype)  # (its float32 buffer)
    return jnp.tanh((r @ alt["router"]).astype(F32)).astype(y.dtype)


def _predict(alt: dict, s: jax.Array, cfg: ModelConfig) -> jax.Array:
    """p_i = s_i + sum_j R_ij s_j, R [T, N, N] the prediction coefficients of the first
    stream's modalities."""
    n = s.shape[0]
    coefs = (_modalities(alt, s[0], cfg) @ alt["prediction_coefs"]).reshape(-1, n, n)
    return (jnp.einsum("tij,jtd->itd", coefs, s) + s).astype(s.dtype)


def _correct(alt: dict, p: jax.Array, out: jax.Array, cfg: ModelConfig) -> jax.Array:
    """s_i = p_i + (out - p_0) * (C m + 1)_i, m the modalities of the block's output."""
    coefs = _modalities(alt, out, cfg) @ alt["correction_coefs"]  # [T, N]
    coefs = (coefs.astype(F32) + 1.0).astype(out.dtype)
    return p + (out - p[0])[None] * coefs.T[:, :, None]


def _mlp(p: dict, h: jax.Array, sparsity: float) -> jax.Array:
    """down(gelu(gate) * up); with `sparsity` > 0 the gate first Gaussian top-k'd: relu(gate
    - (mean + std * Phi^-1(sparsity))) per token, the statistics over its channels
    (transformers' _gaussian_topk, its multiplier cast to the model dtype)."""
    gate = h @ p["w_gate"]
    if sparsity > 0:
        times = jnp.asarray(statistics.NormalDist().inv_cdf(sparsity), gate.dtype)
        gf = gate.astype(F32)
        mean = row_mean(gf)[..., None]
        std = jnp.sqrt(row_mean(jnp.square(gf - mean)))[..., None]
        cutoff = mean.astype(gate.dtype) + std.astype(gate.dtype) * times
        gate = jax.nn.relu(gate - cutoff)
    return (gelu_tanh(gate) * (h @ p["w_up"])) @ p["w_down"]


def _layer(layer: dict, cfg: ModelConfig, i: int, s, positions, kv_i, attend, ple):
    """Decoder layer i over the streams s [N, T, D] (module docstring)."""
    alt = layer["altup"]
    p = _predict(alt, s, cfg)
    active = p[0]
    h = model_norm(active, layer["attn_norm"], cfg)
    low = (h @ layer["laurel_left"]) @ layer["laurel_right"]
    laurel = h + model_norm(low, layer["laurel_norm"], cfg)
    inputs = gqa_inputs(layer["attn"], h, positions, cfg, layer=i)
    o, kv_i = attend(i, layer["attn"], kv_i, inputs)
    attn = model_norm(attn_output(layer["attn"], o), layer["attn_post_norm"], cfg)
    y = ((active + attn + laurel).astype(F32) / math.sqrt(2)).astype(h.dtype)
    sparsity = cfg.activation_sparsity[i] if cfg.activation_sparsity else 0.0
    ff = _mlp(layer["mlp"], model_norm(y, layer["mlp_norm"], cfg), sparsity)
    corrected = _correct(alt, p, y + model_norm(ff, layer["mlp_post_norm"], cfg), cfg)
    first = corrected[0] * alt["correct_scale"]
    gated = gelu_tanh(first @ layer["ple_gate"]) * ple
    added = model_norm(gated @ layer["ple_out"], layer["ple_post_norm"], cfg)
    return corrected.at[1:].add(added[None]), kv_i
