"""Mixture-of-experts: routing (softmax top-k, DeepSeek greedy / group-limited / noaux_tc) and a
dropless expert block (sort token copies by expert, grouped matmuls: `grouped_swiglu`).

Routing follows Hugging Face 5.24: MixtralTopKRouter, Qwen2MoeTopKRouter, Qwen3MoeTopKRouter,
DeepseekV2TopkRouter, DeepseekV3TopkRouter and Glm4MoeTopkRouter (the same rule as V3's). The
router runs in float32 whatever the model dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.layers import clipped, gelu_tanh, relu2, rms_norm, swiglu_mlp
from models.reductions import narrow_product, precise_matmul, row_sum


def _softmax(logits: jax.Array) -> jax.Array:  # [T, E] f32 -> [T, E]
    """Softmax whose denominator is a row_sum (fixed-order in the batch-invariant step, where
    a row's weights must not depend on the batch; models/reductions.py)."""
    e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    return e / row_sum(e)[:, None]


def _group_mask(
    choice: jax.Array,  # [T, E]
    cfg: ModelConfig,
) -> jax.Array:  # [T, E] bool: expert lies in one of the topk_group best groups
    t, e = choice.shape
    grouped = choice.reshape(t, cfg.n_group, e // cfg.n_group)  # [T, G, E/G]
    if cfg.topk_method in ("noaux_tc", "group_top2"):
        # DeepSeek-V3 (and Mistral 4): a group scores the sum of its two best experts.
        group_scores = row_sum(jax.lax.top_k(grouped, 2)[0])  # [T, G]
    else:
        # DeepSeek-V2 group_limited_greedy: a group scores its best expert.
        group_scores = jnp.max(grouped, axis=-1)  # [T, G]
    _, top_groups = jax.lax.top_k(group_scores, cfg.topk_group)  # [T, topk_group]
    keep = jnp.zeros((t, cfg.n_group), bool).at[jnp.arange(t)[:, None], top_groups].set(True)
    return jnp.repeat(keep, e // cfg.n_group, axis=1)  # [T, E]


def _sparsemixer(logits: jax.Array, eps: float) -> tuple[jax.Array, jax.Array]:
    """Phi-3.5-MoE's router at inference (transformers' sparsemixer, not training): the best
    expert, weighed by a softmax over the logits within 2 eps of it, relatively (their gap
    to it over max(|logit|, its logit)); then the best of the others, weighed the same way
    among the others. logits [T, E] float32 -> (weights [T, 2], experts [T, 2])."""
    weights, experts, scores = [], [], logits
    for _ in range(2):
        best = jnp.argmax(scores, axis=-1)
        top = jnp.take_along_axis(scores, best[:, None], axis=-1)
        far = (top - logits) / jnp.maximum(jnp.abs(logits), top) > 2 * eps
        gates = _softmax(jnp.where(far, -jnp.inf, scores))
        weights.append(jnp.take_along_axis(gates, best[:, None], axis=-1)[:, 0])
        experts.append(best)
        scores = jnp.where(jnp.arange(scores.shape[-1]) == best[:, None], -jnp.inf, scores)
    return jnp.stack(weights, -1).astype(jnp.float32), jnp.stack(experts, -1).astype(jnp.int32)


def route(p_moe: dict, x: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """Pick top-k experts per token. x: [T, D] -> (weights [T, k] f32, experts [T, k] int32).

    softmax + greedy: Mixtral / Qwen3-MoE (renormalized when norm_topk_prob) and DeepSeek-V2
    greedy. group_limited_greedy: DeepSeek-V2, non-kept groups' scores zeroed. noaux_tc:
    DeepSeek-V3, the correction bias steers the choice only; weights are the unbiased scores
    (router_bias_on_logits, Kolibri-1: the choice the top-k of logits + bias).
    group_top2: Mistral 4's softmax router, V3's groups without a bias.
    Weights are renormalized when norm_topk_prob (never for DeepSeek-V2, as in HF 5.24), then
    multiplied by routed_scaling_factor (1 for Mixtral and Qwen).
    """
    if "router_scale" in p_moe:  # Gemma 4: the token RMS-normed, times scale / sqrt(D)
        ones = jnp.ones((x.shape[-1],), jnp.float32)
        scale = p_moe["router_scale"] * jnp.asarray(x.shape[-1] ** -0.5, x.dtype)
        x = rms_norm(x, ones, cfg.rms_norm_eps, True) * scale
    router = p_moe["router"].astype(jnp.float32)
    logits = narrow_product(precise_matmul, x.astype(jnp.float32), router)  # [T, E]
    if "router_logit_bias" in p_moe:
        logits = logits + p_moe["router_logit_bias"].astype(jnp.float32)[None, :]
    if cfg.router_logit_softcapping:  # Laguna: cap * tanh(logits / cap)
        cap = cfg.router_logit_softcapping
        logits = cap * jnp.tanh(logits / cap)
    k = cfg.num_experts_per_tok
    if cfg.scoring_func == "sparsemixer":
        return _sparsemixer(logits, cfg.sparsemixer_eps)
    if cfg.scoring_func == "softmax_topk":
        # gpt-oss (GptOssTopKRouter): the k largest logits, softmaxed among themselves.
        top, experts = jax.lax.top_k(logits, k)
        return _softmax(top) * cfg.routed_scaling_factor, experts.astype(jnp.int32)
    if cfg.scoring_func == "sigmoid":
        scores = jax.nn.sigmoid(logits)
    else:
        scores = _softmax(logits)
    if cfg.topk_method in ("noaux_tc", "group_top2"):
        choice = scores
        if cfg.topk_method == "noaux_tc":  # (Kolibri-1: the bias on the logits)
            base = logits if cfg.router_bias_on_logits else scores
            choice = base + p_moe["router_bias"].astype(jnp.float32)[None, :]
        choice = jnp.where(_group_mask(choice, cfg), choice, -jnp.inf)
        _, experts = jax.lax.top_k(choice, k)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
        if cfg.norm_topk_prob:
            weights = weights / (row_sum(weights)[:, None] + 1e-20)
    else:
        if cfg.topk_method == "group_limited_greedy":
            scores = jnp.where(_group_mask(scores, cfg), scores, 0.0)
        weights, experts = jax.lax.top_k(scores, k)
        # HF 5.24's DeepseekV2TopkRouter ignores norm_topk_prob (False in every released V2).
        if cfg.norm_topk_prob and cfg.model_type != "deepseek_v2":
            weights = weights / row_sum(weights)[:, None]
    weights = weights * cfg.routed_scaling_factor
    if "expert_scale" in p_moe:  # Gemma 4: each chosen expert's learned scale
        weights = weights * p_moe["expert_scale"].astype(jnp.float32)[experts]
    return weights.astype(jnp.float32), experts.astype(jnp.int32)


# Rows of one matmul in the CPU expert block: every expert's rows are cut into tiles of this
# many, each a [GROUP_TILE, D] x [D, F] product. Fixed, so a row's result never depends on how
# many other rows its expert got (see grouped_swiglu).
GROUP_TILE = 16


# (gate [..., F], up [..., F]) -> [..., F]: the expert MLP's activation (expert_activation).
ExpertAct = Callable[[jax.Array, jax.Array], jax.Array]


def swiglu(gate: jax.Array, up: jax.Array) -> jax.Array:
    return jax.nn.silu(gate) * up


def expert_activation(cfg: ModelConfig, limit: float | None = None) -> ExpertAct:
    """The experts' activation: SwiGLU, or gpt-oss's clamped form (HF GptOssExperts._apply_gate:
    gate <= limit, -limit <= up <= limit, (up + 1) * gate * sigmoid(alpha * gate)). `limit`:
    a layer's clip after the activation (ModelConfig.clip_limit: SwiGLU, clipped)."""
    if limit:
        return clipped(jax.nn.silu, limit)
    if cfg.expert_act == "swiglu":
        return swiglu
    if cfg.expert_act == "relu2":  # no gate projection: act(None, up)
        return lambda gate, up: relu2(up)
    if cfg.expert_act == "geglu":  # Gemma 4
        return lambda gate, up: gelu_tanh(gate) * up
    limit, alpha = cfg.swiglu_limit, cfg.swiglu_alpha
    if cfg.expert_act == "limited_swiglu":  # DeepSeek-V4 (DeepseekV4Experts._apply_gate)
        return lambda gate, up: jax.nn.silu(jnp.minimum(gate, limit)) * jnp.clip(up, -limit, limit)

    def clamped_swiglu(gate: jax.Array, up: jax.Array) -> jax.Array:
        gate = jnp.minimum(gate, limit)
        up = jnp.clip(up, -limit, limit)
        return (up + 1) * (gate * jax.nn.sigmoid(gate * alpha))

    return clamped_swiglu


def grouped_swiglu(
    xs: jax.Array,  # [M, D], rows grouped by expert in order
    w_gate: jax.Array | None,  # [E, D, F]; None: act(None, up) (relu2 experts)
    w_up: jax.Array,  # [E, D, F]
    w_down: jax.Array,  # [E, F, D]
    group_sizes: jax.Array,  # [E] int32, sum <= M
    act: ExpertAct = swiglu,
    b_gate: jax.Array | None = None,  # [E, F] (gpt-oss), added to x @ gate
    b_up: jax.Array | None = None,  # [E, F], added to x @ up
    ragged: bool | None = None,  # ragged_dot products; None: off CPU (tests set it)
) -> jax.Array:  # [M, D], zeros past sum(group_sizes)
    """Each row through its group's expert MLP: down(act(x @ gate + b_gate, x @ up + b_up)),
    with `jax.lax.ragged_dot` grouping: rows [start_e, start_e + group_sizes[e]) use expert
    e. The down projection's bias is not added here (moe_block adds it once, after the
    tensor-parallel partial sums).

    On accelerators these are three ragged_dot calls (a grouped kernel). XLA:CPU's ragged_dot
    computes every group over all M rows (E times the work), so on CPU the rows of each
    expert are laid out in tiles of GROUP_TILE rows (a group's last tile padded) once, and a
    loop runs a used tile's three products back to back. Measured on jax 0.11.2 CPU for one
    product (D=512, F=256, E=16): 0.15 ms at M=2, 14 ms at M=4096, against 1.2 ms and 128 ms
    for ragged_dot; the three products in one loop instead of three: docs/benchmarks.md. Every
    tile is the same dot shape and a row's result was bitwise the same at every row position
    of a tile and for any tile count, so a token copy's expert output does not depend on the
    batch (the property batch-invariant mode and the expert-parallel layouts rely on).
    """
    biased = b_gate is not None
    if ragged is None:
        ragged = jax.default_backend() != "cpu"
    gated = w_gate is not None
    if ragged:
        gate = jax.lax.ragged_dot(xs, w_gate, group_sizes) if gated else None
        up = jax.lax.ragged_dot(xs, w_up, group_sizes)
        if biased:
            rows = jnp.arange(xs.shape[0], dtype=jnp.int32)
            group = jnp.searchsorted(jnp.cumsum(group_sizes), rows, side="right")
            group = jnp.minimum(group, w_gate.shape[0] - 1)  # rows past the groups: dropped
            gate, up = gate + b_gate[group], up + b_up[group]
        return jax.lax.ragged_dot(act(gate, up), w_down, group_sizes)

    if not gated:

        def expert_tile(x_i, e):
            return act(None, x_i @ w_up[e]) @ w_down[e]

        weights = (w_up, w_down)
    elif biased:

        def expert_tile(x_i, e):
            h = act(x_i @ w_gate[e] + b_gate[e], x_i @ w_up[e] + b_up[e])
            return h @ w_down[e]

        weights = (w_gate, w_up, b_gate, b_up, w_down)
    else:

        def expert_tile(x_i, e):
            return act(x_i @ w_gate[e], x_i @ w_up[e]) @ w_down[e]

        weights = (w_gate, w_up, w_down)
    return _tiled_grouped(xs, group_sizes, weights, expert_tile)


def _tiled_grouped(
    xs: jax.Array,  # [M, D], rows grouped by expert in order
    group_sizes: jax.Array,  # [E] int32
    weights: tuple,  # the stacked [E, ...] weights expert_tile reads; the last gives the width
    expert_tile: Callable[[jax.Array, jax.Array], jax.Array],  # ([TILE, D], e) -> [TILE, F]
) -> jax.Array:  # [M, F], zeros past sum(group_sizes)
    """The CPU grouped products: each group's rows in tiles of GROUP_TILE, one call per used
    tile."""
    tile = GROUP_TILE
    m, d = xs.shape
    e = weights[0].shape[0]
    num_tiles = -(-m // tile) + e  # each group adds at most one partial tile
    gs = group_sizes.astype(jnp.int32)
    tiles_per = (gs + tile - 1) // tile  # [E]
    tile_end = jnp.cumsum(tiles_per)  # [E]
    row_end = jnp.cumsum(gs)  # [E]
    rows = jnp.arange(m, dtype=jnp.int32)
    # Both searches compare against every group end at once ([M, E]): the default binary
    # search compiles to log2(E) unrolled steps, ~5% of a tiny MoE step's XLA:CPU compile.
    group = jnp.searchsorted(row_end, rows, side="right", method="compare_all")  # [M]
    g = jnp.minimum(group, e - 1)  # (E: a row past the groups)
    dest = (tile_end - tiles_per)[g] * tile + rows - (row_end - gs)[g]  # row in the tile layout
    dest = jnp.where(group < e, dest, num_tiles * tile)  # rows past the groups: dropped
    tile_ids = jnp.arange(num_tiles, dtype=jnp.int32)
    tile_expert = jnp.searchsorted(tile_end, tile_ids, side="right", method="compare_all")
    tile_expert = jnp.minimum(tile_expert, e - 1)
    x_tiles = jnp.zeros((num_tiles * tile, d), xs.dtype).at[dest].set(xs, mode="drop")

    def body(i, y):
        x_i = jax.lax.dynamic_slice_in_dim(x_tiles, i * tile, tile)  # [tile, D]
        return jax.lax.dynamic_update_slice_in_dim(y, expert_tile(x_i, tile_expert[i]), i * tile, 0)

    # Zeros typed like the products (inside shard_map they vary over the axes xs and the
    # weights vary over; a loop carry must keep its type).
    typed = x_tiles[:, :1]
    for w in weights:
        typed = typed * w[0].reshape(-1)[:1]
    y = jnp.zeros_like(jnp.broadcast_to(typed, (typed.shape[0], weights[-1].shape[-1])))
    y = jax.lax.fori_loop(0, tile_end[-1], body, y)
    return jnp.take(y, dest, axis=0, mode="fill", fill_value=0)


def routed_experts(
    p_moe: dict,
    x: jax.Array,  # [T, D]
    weights: jax.Array,  # [T, k] f32
    experts: jax.Array,  # [T, k] int32
    act: ExpertAct = swiglu,
    limit: float | None = None,
) -> jax.Array:  # [T, D]
    """Dropless expert compute: every (token, slot) copy is processed, none is dropped.

    The T*k copies are stably sorted by expert so each expert's rows are contiguous, run through
    grouped matmuls over the stacked [E, D, F] weights, unsorted, and the k outputs of a token
    are summed in slot order 0..k-1 in float32, a fixed order whatever the batch.
    `limit`: the layer's clip of the SwiGLU after its activation (ModelConfig.clip_limit).
    """
    if limit:
        act = clipped(jax.nn.silu, limit)
    t, k = experts.shape
    e = p_moe["w_up"].shape[0]
    flat = experts.reshape(-1)  # [T*k]
    order = jnp.argsort(flat, stable=True)  # [T*k]
    group_sizes = jnp.bincount(flat, length=e).astype(jnp.int32)  # [E]
    xs = jnp.take(x, order // k, axis=0)  # [T*k, D], grouped by expert
    ys = grouped_swiglu(
        xs,
        p_moe.get("w_gate"),
        p_moe["w_up"],
        p_moe["w_down"],
        group_sizes,
        act,
        p_moe.get("b_gate"),
        p_moe.get("b_up"),
    )
    y = jnp.zeros_like(ys).at[order].set(ys).reshape(t, k, -1)  # [T, k, D], slot order
    out = jnp.zeros((t, x.shape[-1]), jnp.float32)
    for j in range(k):
        out = out + weights[:, j, None] * y[:, j].astype(jnp.float32)
    return out.astype(x.dtype)


# (p_moe, x [T, D], weights [T, k] f32, experts [T, k] int32) -> [T, D]: the routed-expert
# compute. `routed_for(cfg)` on one device; sharding/expert_parallel.py builds the
# expert-parallel one with the same signature.
RoutedFn = Callable[[dict, jax.Array, jax.Array, jax.Array], jax.Array]


def routed_for(cfg: ModelConfig) -> RoutedFn:
    """The single-device routed-expert compute with the model's expert activation."""
    if cfg.expert_act == "swiglu":
        return routed_experts
    return functools.partial(routed_experts, act=expert_activation(cfg))


def moe_block(
    p_moe: dict,
    x: jax.Array,
    cfg: ModelConfig,
    routed: RoutedFn | None = None,
    delta=None,
    router_x: jax.Array | None = None,
    layer: int = 0,
) -> jax.Array:
    """Routed experts plus always-on shared experts (DeepSeek, GLM-4.5), the latter gated per
    token by sigmoid(x @ shared_gate) where the model has the gate (Qwen2-MoE).
    `routed`: the routed-expert compute; None: `routed_for(cfg)` (the model's activation).
    `delta(leaf, x)`: LoRA terms of the shared experts' projections, as "shared_w_up" etc.
    (models/lora.py). x: [T, D] -> [T, D]; `router_x`: the router's input where it is not
    x (Gemma 4's router reads the stream before the experts' norm). `layer`: the decoder
    layer, for its SwiGLU clips (ModelConfig.clip_limit: passed to `routed` as `limit`)."""
    routed = routed or routed_for(cfg)
    if (limit := cfg.clip_limit(layer)) is not None:
        routed = functools.partial(routed, limit=limit)
    weights, experts = route(p_moe, x if router_x is None else router_x, cfg)
    identity = None
    if cfg.zero_experts:  # LongCat-Flash: the chosen zero-computation experts' share of x
        weights, experts, identity = _zero_experts(x, weights, experts, cfg)
    if cfg.router_weight_on_input:
        # Llama 4 (top-1): the expert sees the token times its router weight (cast to the
        # activations' dtype, as transformers' Llama4TextMoe scales routed_in), unweighted after.
        x_in = x * weights.astype(x.dtype)
        out = routed(p_moe, x_in, jnp.ones_like(weights), experts)
    elif "latent_in" in p_moe:  # Nemotron-H's latent MoE: experts at the latent width
        out = routed(p_moe, x @ p_moe["latent_in"], weights, experts) @ p_moe["latent_out"]
    else:
        out = routed(p_moe, x, weights, experts)
    if "b_down" in p_moe:
        # Each copy's down-projection bias, weighted like its output: sum_j w_j b_down[e_j]
        # (HF adds it before the weighting), in slot order as routed_experts sums.
        bias = jnp.zeros(out.shape, jnp.float32)
        for j in range(experts.shape[1]):
            bias = bias + weights[:, j, None] * p_moe["b_down"][experts[:, j]].astype(jnp.float32)
        out = (out.astype(jnp.float32) + bias).astype(out.dtype)
    if "shared" in p_moe:
        shared_delta = None if delta is None else (lambda name, h: delta("shared_" + name, h))
        shared_limit = cfg.clip_limit(layer, shared=True)
        shared = swiglu_mlp(p_moe["shared"], x, shared_delta, limit=shared_limit)
        if "shared_gate" in p_moe:
            gate = narrow_product(jnp.matmul, x, p_moe["shared_gate"])
            shared = jax.nn.sigmoid(gate)[:, None] * shared
        out = out + shared
        if cfg.shared_expert_average:  # (Cohere's "average": the two outputs' mean)
            out = out / jnp.asarray(2, out.dtype)
    if identity is not None:
        out = out + identity.astype(out.dtype)
    return out


def _zero_experts(x: jax.Array, weights: jax.Array, experts: jax.Array, cfg: ModelConfig):
    """LongCat-Flash's zero-computation experts (ids num_experts and up): (weights [T, k]
    with theirs 0, experts [T, k] with theirs spread over the routed ones as transformers'
    LongcatFlashMoE does, x times the sum of their weights [T, D] float32). The spread
    copies weigh nothing; they keep every copy's shape (a fixed k a token)."""
    e = cfg.num_experts
    zero = experts >= e
    identity = x.astype(jnp.float32) * row_sum(jnp.where(zero, weights, 0.0))[:, None]
    dummy = (experts - e) * e // cfg.zero_experts
    return jnp.where(zero, 0.0, weights), jnp.where(zero, dummy, experts), identity


def expert_load(
    experts: jax.Array,  # [T, k] int32
    valid: jax.Array,  # [T] bool, False for padding tokens
    num_experts: int,
) -> jax.Array:  # [E] int32
    """Token copies each expert receives (padding tokens not counted)."""
    flat = jnp.where(valid[:, None], experts, num_experts).reshape(-1)
    return jnp.bincount(flat, length=num_experts).astype(jnp.int32)
