"""Mixture-of-experts: routing (softmax top-k, DeepSeek greedy / group-limited / noaux_tc) and a
dropless expert block (sort token copies by expert, grouped matmul with jax.lax.ragged_dot).

Routing follows Hugging Face 5.24: MixtralTopKRouter, Qwen3MoeTopKRouter, DeepseekV2TopkRouter,
DeepseekV3TopkRouter. The router runs in float32 whatever the model dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.layers import swiglu_mlp


def _group_mask(
    choice: jax.Array,  # [T, E]
    cfg: ModelConfig,
) -> jax.Array:  # [T, E] bool: expert lies in one of the topk_group best groups
    t, e = choice.shape
    grouped = choice.reshape(t, cfg.n_group, e // cfg.n_group)  # [T, G, E/G]
    if cfg.topk_method == "noaux_tc":
        # DeepSeek-V3: a group scores the sum of its two best experts.
        group_scores = jnp.sum(jax.lax.top_k(grouped, 2)[0], axis=-1)  # [T, G]
    else:
        # DeepSeek-V2 group_limited_greedy: a group scores its best expert.
        group_scores = jnp.max(grouped, axis=-1)  # [T, G]
    _, top_groups = jax.lax.top_k(group_scores, cfg.topk_group)  # [T, topk_group]
    keep = jnp.zeros((t, cfg.n_group), bool).at[jnp.arange(t)[:, None], top_groups].set(True)
    return jnp.repeat(keep, e // cfg.n_group, axis=1)  # [T, E]


def route(p_moe: dict, x: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """Pick top-k experts per token. x: [T, D] -> (weights [T, k] f32, experts [T, k] int32).

    softmax + greedy: Mixtral / Qwen3-MoE (renormalized when norm_topk_prob) and DeepSeek-V2
    greedy. group_limited_greedy: DeepSeek-V2, non-kept groups' scores zeroed. noaux_tc:
    DeepSeek-V3, the correction bias steers the choice only; weights are the unbiased scores.
    Weights are renormalized when norm_topk_prob (never for DeepSeek-V2, as in HF 5.24), then
    multiplied by routed_scaling_factor (1 for Mixtral and Qwen).
    """
    logits = x.astype(jnp.float32) @ p_moe["router"].astype(jnp.float32)  # [T, E]
    if cfg.scoring_func == "sigmoid":
        scores = jax.nn.sigmoid(logits)
    else:
        scores = jax.nn.softmax(logits, axis=-1)
    k = cfg.num_experts_per_tok
    if cfg.topk_method == "noaux_tc":
        choice = scores + p_moe["router_bias"].astype(jnp.float32)[None, :]
        choice = jnp.where(_group_mask(choice, cfg), choice, -jnp.inf)
        _, experts = jax.lax.top_k(choice, k)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
        if cfg.norm_topk_prob:
            weights = weights / (jnp.sum(weights, axis=-1, keepdims=True) + 1e-20)
    else:
        if cfg.topk_method == "group_limited_greedy":
            scores = jnp.where(_group_mask(scores, cfg), scores, 0.0)
        weights, experts = jax.lax.top_k(scores, k)
        # HF 5.24's DeepseekV2TopkRouter ignores norm_topk_prob (False in every released V2).
        if cfg.norm_topk_prob and cfg.model_type != "deepseek_v2":
            weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    weights = weights * cfg.routed_scaling_factor
    return weights.astype(jnp.float32), experts.astype(jnp.int32)


def routed_experts(
    p_moe: dict,
    x: jax.Array,  # [T, D]
    weights: jax.Array,  # [T, k] f32
    experts: jax.Array,  # [T, k] int32
) -> jax.Array:  # [T, D]
    """Dropless expert compute: every (token, slot) copy is processed, none is dropped.

    The T*k copies are stably sorted by expert so each expert's rows are contiguous, run through
    grouped matmuls (ragged_dot) over the stacked [E, D, F] weights, unsorted, and the k outputs
    of a token are summed in slot order 0..k-1 in float32, a fixed order whatever the batch.
    """
    t, k = experts.shape
    e = p_moe["w_gate"].shape[0]
    flat = experts.reshape(-1)  # [T*k]
    order = jnp.argsort(flat, stable=True)  # [T*k]
    group_sizes = jnp.bincount(flat, length=e).astype(jnp.int32)  # [E]
    xs = jnp.take(x, order // k, axis=0)  # [T*k, D], grouped by expert
    gate = jax.lax.ragged_dot(xs, p_moe["w_gate"], group_sizes)  # [T*k, F]
    up = jax.lax.ragged_dot(xs, p_moe["w_up"], group_sizes)  # [T*k, F]
    ys = jax.lax.ragged_dot(jax.nn.silu(gate) * up, p_moe["w_down"], group_sizes)  # [T*k, D]
    y = jnp.zeros_like(ys).at[order].set(ys).reshape(t, k, -1)  # [T, k, D], slot order
    out = jnp.zeros((t, x.shape[-1]), jnp.float32)
    for j in range(k):
        out = out + weights[:, j, None] * y[:, j].astype(jnp.float32)
    return out.astype(x.dtype)


def moe_block(p_moe: dict, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Routed experts plus (DeepSeek) always-on shared experts. x: [T, D] -> [T, D]."""
    weights, experts = route(p_moe, x, cfg)
    out = routed_experts(p_moe, x, weights, experts)
    if "shared" in p_moe:
        out = out + swiglu_mlp(p_moe["shared"], x)
    return out
