"""Mixture-of-experts: routing (softmax top-k, DeepSeek greedy / group-limited / noaux_tc) and a
dropless expert block (sort token copies by expert, grouped matmul with jax.lax.ragged_dot).

Routing follows Hugging Face 5.24: MixtralTopKRouter, Qwen3MoeTopKRouter, DeepseekV2TopkRouter,
DeepseekV3TopkRouter. The router runs in float32 whatever the model dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.layers import swiglu_mlp
from models.reductions import fixed_order_sum


def _softmax(logits: jax.Array) -> jax.Array:  # [T, E] f32 -> [T, E]
    """Softmax whose denominator is a fixed-order sum (a row's weights must not depend on
    the batch; see models/reductions.py)."""
    e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    return e / fixed_order_sum(e)[:, None]


def _group_mask(
    choice: jax.Array,  # [T, E]
    cfg: ModelConfig,
) -> jax.Array:  # [T, E] bool: expert lies in one of the topk_group best groups
    t, e = choice.shape
    grouped = choice.reshape(t, cfg.n_group, e // cfg.n_group)  # [T, G, E/G]
    if cfg.topk_method == "noaux_tc":
        # DeepSeek-V3: a group scores the sum of its two best experts.
        group_scores = fixed_order_sum(jax.lax.top_k(grouped, 2)[0])  # [T, G]
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
        scores = _softmax(logits)
    k = cfg.num_experts_per_tok
    if cfg.topk_method == "noaux_tc":
        choice = scores + p_moe["router_bias"].astype(jnp.float32)[None, :]
        choice = jnp.where(_group_mask(choice, cfg), choice, -jnp.inf)
        _, experts = jax.lax.top_k(choice, k)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
        if cfg.norm_topk_prob:
            weights = weights / (fixed_order_sum(weights)[:, None] + 1e-20)
    else:
        if cfg.topk_method == "group_limited_greedy":
            scores = jnp.where(_group_mask(scores, cfg), scores, 0.0)
        weights, experts = jax.lax.top_k(scores, k)
        # HF 5.24's DeepseekV2TopkRouter ignores norm_topk_prob (False in every released V2).
        if cfg.norm_topk_prob and cfg.model_type != "deepseek_v2":
            weights = weights / fixed_order_sum(weights)[:, None]
    weights = weights * cfg.routed_scaling_factor
    return weights.astype(jnp.float32), experts.astype(jnp.int32)


_GATHER_MAX_TOKENS = 64  # == engine.batch_invariant.MIN_ROWS: invariant mode never gathers


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
    if jax.default_backend() == "cpu" and t < _GATHER_MAX_TOKENS and t * k <= 8 * e:
        # Small decode batches on CPU: XLA:CPU's ragged_dot computes every group densely
        # (E times the work), so multiplying each copy by its own gathered expert weights is
        # far cheaper. Static per shape; batch-invariant mode pads T to >= 64 rows, so it
        # always takes ragged_dot. On accelerators ragged_dot is grouped and always wins.
        return _gathered_experts(p_moe, x, weights, experts)
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


def _gathered_experts(p_moe, x, weights, experts):  # x [T, D], weights/experts [T, k]
    """Each copy multiplies by its own expert's gathered weights: reads k experts per token."""
    t, k = experts.shape
    xs = jnp.repeat(x, k, axis=0)  # [T*k, D], copy j of token t at row t*k + j
    flat = experts.reshape(-1)
    gate = jnp.einsum("md,mdf->mf", xs, p_moe["w_gate"][flat])
    up = jnp.einsum("md,mdf->mf", xs, p_moe["w_up"][flat])
    ys = jnp.einsum("mf,mfd->md", jax.nn.silu(gate) * up, p_moe["w_down"][flat]).reshape(t, k, -1)
    out = jnp.zeros((t, x.shape[-1]), jnp.float32)
    for j in range(k):
        out = out + weights[:, j, None] * ys[:, j].astype(jnp.float32)
    return out.astype(x.dtype)


# (p_moe, x [T, D], weights [T, k] f32, experts [T, k] int32) -> [T, D]: the routed-expert
# compute. `routed_experts` on one device; sharding/expert_parallel.py builds the
# expert-parallel one with the same signature.
RoutedFn = Callable[[dict, jax.Array, jax.Array, jax.Array], jax.Array]


def moe_block(
    p_moe: dict, x: jax.Array, cfg: ModelConfig, routed: RoutedFn = routed_experts
) -> jax.Array:
    """Routed experts plus (DeepSeek) always-on shared experts. x: [T, D] -> [T, D]."""
    weights, experts = route(p_moe, x, cfg)
    out = routed(p_moe, x, weights, experts)
    if "shared" in p_moe:
        out = out + swiglu_mlp(p_moe["shared"], x)
    return out


def expert_load(
    experts: jax.Array,  # [T, k] int32
    valid: jax.Array,  # [T] bool, False for padding tokens
    num_experts: int,
) -> jax.Array:  # [E] int32
    """Token copies each expert receives (padding tokens not counted)."""
    flat = jnp.where(valid[:, None], experts, num_experts).reshape(-1)
    return jnp.bincount(flat, length=num_experts).astype(jnp.int32)
