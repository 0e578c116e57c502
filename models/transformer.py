"""The decoder stack over flattened ragged tokens; the attention core is a backend callback.

    attend(i, p_attn, kv_i, inputs: AttnInputs) -> (o, kv_i)
        GQA: o [T, H, Dh];  MLA: o [T, H, Dv] (value space, W_UV already applied)

so the same layer code serves the contiguous reference (models/reference.py) and the paged
engine (engine/step.py). Pre-norm residual blocks as in HF Llama / DeepSeek:
x + attn(norm(x)), then x + mlp_or_moe(norm(x)) (with sandwich_norms each block's output
normed too; FlexOlmo's, OLMo 2's, norm the outputs alone: x + norm(attn(x)), ...).

Two optional hooks let a caller run the same layers over a device mesh without the model
naming any device: `routed` replaces the routed-expert compute of every MoE layer (the
expert-parallel all-to-all in sharding/expert_parallel.py), and `constrain(x, logical_axes)`
pins the residual stream at each layer boundary (sharding/rules.py maps the names).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models import deepseek_v4, gemma3n, zamba2
from models.attention import (
    AttnInputs,
    attn_output,
    gqa_inputs,
    kv_arrays_in,
    kv_arrays_kept,
    mla_inputs,
    output_gate,
)
from models.layers import (
    embed,
    final_logits,
    gate_activation,
    model_norm,
    per_layer_inputs,
    sinusoids,
    swiglu_mlp,
)
from models.linear_attention import Segments, gated_delta_net, lightning, mamba1, short_conv
from models.lora import make_delta, slot_mask
from models.moe import RoutedFn, moe_block, routed_for
from models.quantization import dequantize_tree

__all__ = ["Attend", "Constrain", "decoder_layer", "final_logits", "forward_hidden"]

Attend = Callable[[int, dict, Any, AttnInputs], tuple[jax.Array, Any]]
# constrain(x, logical_axes) -> x, e.g. a sharding constraint; identity when absent.
Constrain = Callable[[jax.Array, tuple[str | None, ...]], jax.Array]


def forward_hidden(
    params: dict,
    cfg: ModelConfig,
    token_ids: jax.Array,  # [T] int32
    positions: jax.Array,  # [T] int32
    kv: list,
    attend: Attend,
    routed: RoutedFn | None = None,
    constrain: Constrain | None = None,
    lora_slots: jax.Array | None = None,
    segments: Segments | None = None,
) -> tuple[jax.Array, list]:  # (hidden [T, D] before the final norm, kv)
    """Run all decoder layers; kv[i] is whatever the backend caches for layer i. An MLA
    layer's attend sees (latent, index keys) with the index keys absent where the layer has
    no indexer of its own, and the latent another layer's where it reads that one's.

    LoRA (models/lora.py): `params["lora"]`, when present, holds each layer's stacked
    adapters ({leaf: (A [S, K, R], B [S, R, N])}), and `lora_slots` [T] each token's slot.

    A gated DeltaNet layer (ModelConfig.linear_attention_layers) runs here, not through
    `attend`: kv[i] is its state arrays, `segments` the step's rows by sequence."""
    pin = constrain or (lambda x, axes: x)
    routed = routed or routed_for(cfg)
    if cfg.is_dsv4:  # (hyper-connection streams: its own stack)
        return deepseek_v4.forward_hidden(
            params, cfg, token_ids, positions, kv, attend, routed, pin
        )
    if cfg.altup_num_inputs:  # (Gemma 3n's AltUp streams: its own stack)
        return gemma3n.forward_hidden(params, cfg, token_ids, positions, kv, attend, pin)
    if cfg.shared_blocks:  # (Zamba2's shared blocks before its Mamba-2 mixers: the same)
        return zamba2.forward_hidden(params, cfg, token_ids, positions, kv, attend, pin, segments)
    x = embed(params, token_ids)  # [T, D]
    if cfg.embedding_multiplier != 1.0:  # (Granite; BioGPT's, before its positions)
        x = x * jnp.asarray(cfg.embedding_multiplier, x.dtype)
    if "pos_embed" in params:  # (GPT-BigCode: its learned position embedding added)
        x = x + jnp.take(params["pos_embed"], positions + cfg.position_offset, axis=0)
    if cfg.sinusoidal_positions:  # (XGLM: fairseq's table, computed)
        x = x + sinusoids(positions + cfg.position_offset, x.shape[-1]).astype(x.dtype)
    if cfg.embed_norm:  # (BLOOM: word_embeddings_layernorm; NanoChat's holds no weight)
        x = model_norm(x, params.get("embed_norm"), cfg, params.get("embed_norm_bias"))
    if cfg.residual_in_float32:  # (Mamba's: its blocks' inputs rounded back, decoder_layer)
        x = x.astype(jnp.float32)
    ple = per_layer_inputs(params, cfg, token_ids, x) if cfg.per_layer_input_dim else None
    x = pin(x, ("batch", "embed"))
    new_kv = []
    shortcut: dict = {}  # (LongCat-Flash: an even layer's MoE output, for the odd one)
    lora = params.get("lora")
    mask = slot_mask(lora, lora_slots)
    for i, layer in enumerate(params["layers"]):
        delta = make_delta(lora[i] if lora else None, mask)
        # (Mistral Large 4's layers reading an earlier one's latent, Gemma 4's K and V)
        kv_in = kv_arrays_in(cfg, i, kv, new_kv)
        if cfg.is_linear_layer(i):  # (no LoRA for these models: engine/linear_state.py)
            attend_i = functools.partial(_linear_attend, cfg=cfg, segments=segments)
        else:
            attend_i = attend
        ple_i = None if ple is None else ple[:, i]
        x, kv_i = decoder_layer(
            layer, cfg, i, x, positions, kv_in, attend_i, routed, pin, delta, shortcut, ple_i
        )
        new_kv.append(kv_arrays_kept(cfg, i, kv_i))
    return x, new_kv


def _linear_attend(i, p, kv_i, h, *, cfg, segments):
    """`attend` of a gated DeltaNet layer: given the normed stream h [T, D] (not
    AttnInputs), its whole token mixer, output projection included."""
    if segments is None:
        raise ValueError(f"layer {i}: a linear-attention layer needs the step's segments")
    if cfg.linear_attention_kind == "lightning":  # (its decays: the layer's)
        return lightning(p, h, cfg, kv_i, segments, i)
    mixer = {"short_conv": short_conv, "mamba1": mamba1}.get(cfg.linear_attention_kind)
    return (mixer or gated_delta_net)(p, h, cfg, kv_i, segments)


def decoder_layer(
    layer: dict,
    cfg: ModelConfig,
    i: int,
    x: jax.Array,  # [T, D] the residual stream
    positions: jax.Array,
    kv_i,
    attend: Attend,
    routed: RoutedFn,
    pin: Constrain,
    delta=None,
    shortcut: dict | None = None,
    ple: jax.Array | None = None,  # [T, P] the layer's per-layer input (Gemma 4 E2B / E4B)
) -> tuple[jax.Array, Any]:
    """Decoder layer `i` (its KV at `kv_i`; the MTP module's layer is i = cfg.num_layers):
    x + attn(norm(x)), then x + mlp_or_moe(norm(x)). With ModelConfig.shortcut_moe
    (LongCat-Flash) an even layer runs its dense MLP and leaves its MoE's output in
    `shortcut` ({"moe": [T, D]}), which the odd layer after it adds last."""
    # fp8 weights (ModelConfig.quantization) come back to the model dtype one layer at a
    # time, inside the step; a no-op for float weights.
    # (A float32 stream, ModelConfig.residual_in_float32: the block reads it in the model
    # dtype, its norm's.)
    dtype = x.dtype
    if cfg.residual_in_float32:
        dtype = layer["attn_norm"].dtype if "attn_norm" in layer else jnp.dtype(cfg.dtype)
    layer = dequantize_tree(layer, dtype)
    delta = delta or make_delta(None, None)
    bias = layer.get("attn_norm_bias")  # (Phi-3.5-MoE's LayerNorms)
    x_in = x  # (GPT-NeoX's MLP reads its own norm of the layer's input)
    normed = "attn_norm" in layer or cfg.norm_weightless  # (OLMo 1: norms without weights)
    h = model_norm(x.astype(dtype), layer.get("attn_norm"), cfg, bias) if normed else x
    h = _norm_gated(h, layer, "attn_norm")
    pair = cfg.parallel_hybrid and shortcut is not None  # (Falcon-H1: attention, Mamba-2)
    if pair and "linear" in layer:  # (the pair's second: the first's normed input, no norm)
        h = shortcut.pop("h")
    if "linear" in layer:  # a gated DeltaNet: its own output projection
        # Every row of the step on each device (dp splits the stream by rows, and a
        # sequence's recurrence needs all of its rows, in order): gathered once here.
        mixed, kv_i = attend(i, layer["linear"], kv_i, pin(h, (None, "embed")))
    else:
        attn_inputs = mla_inputs if cfg.is_mla else gqa_inputs
        inputs = attn_inputs(layer["attn"], h, positions, cfg, delta, i)
        o, kv_i = attend(i, layer["attn"], kv_i, inputs)
        if inputs.gate is not None:  # Qwen3-Next's gated attention (Laguna's: softplus)
            o = (o * output_gate(inputs.gate, cfg)).astype(o.dtype)
        mixed = attn_output(layer["attn"], o, delta)
    if pair:
        if "linear" not in layer:  # (its output and input wait for the next layer)
            shortcut.update(attn=mixed, h=h)
            return x, kv_i
        mixed = mixed + shortcut.pop("attn")
    kind = 1 if "linear" in layer else 0
    x = pin(
        _joined(x, h, _scaled(mixed, layer.get("attn_post_norm"), cfg), cfg, kind, i),
        ("batch", "embed"),
    )
    if "mlp" not in layer and "moe" not in layer:  # (Nemotron-H: a mixer alone)
        return x, kv_i
    if not cfg.parallel_block or cfg.parallel_norms:  # (Cohere: the attention's input)
        bias, source = layer.get("mlp_norm_bias"), x_in if cfg.parallel_block else x
        normed = "mlp_norm" in layer or cfg.norm_weightless
        h = model_norm(source, layer.get("mlp_norm"), cfg, bias) if normed else source
        h = _norm_gated(h, layer, "mlp_norm")
    if cfg.shortcut_moe and shortcut is not None:  # LongCat-Flash
        out = swiglu_mlp(layer["mlp"], h, delta, gate_activation(cfg))
        if "moe" in layer:  # (an even layer: its MoE's output joins after the next layer's)
            shortcut["moe"] = moe_block(layer["moe"], h, cfg, routed, delta, layer=i)
            return pin(x + out, ("batch", "embed")), kv_i
        return pin(x + out + shortcut.pop("moe"), ("batch", "embed")), kv_i
    if "moe" in layer and "mlp" in layer:  # Gemma 4: both, each output normed, summed
        dense = model_norm(
            swiglu_mlp(layer["mlp"], h, delta, gate_activation(cfg)), layer["mlp_out_norm"], cfg
        )
        h = model_norm(x, layer["moe_norm"], cfg)
        routed_out = moe_block(layer["moe"], h, cfg, routed, delta, router_x=x, layer=i)
        out = dense + model_norm(routed_out, layer["moe_out_norm"], cfg)
    elif "moe" in layer:
        out = moe_block(layer["moe"], h, cfg, routed, delta, layer=i)
    else:  # (Step 3.7's clipped as its shared expert: shared_clip_limits)
        out = swiglu_mlp(layer["mlp"], h, delta, gate_activation(cfg), cfg.clip_limit(i, True))
    x = _joined(x, h, _scaled(out, layer.get("mlp_post_norm"), cfg), cfg, 2, i)
    if ple is not None:  # Gemma 4 E2B / E4B: its per-layer input gated in
        gated = gate_activation(cfg)(x @ layer["ple_gate"]) * ple
        x = x + model_norm(gated @ layer["ple_out"], layer["ple_post_norm"], cfg)
    if "layer_scalar" in layer:  # Gemma 4: the layer's output scaled
        x = x * layer["layer_scalar"]
    return pin(x, ("batch", "embed")), kv_i


def _norm_gated(h: jax.Array, layer: dict, norm: str) -> jax.Array:
    """A.X K2's gated norm (ModelConfig.gated_norm_rank): the normed h times
    sigmoid(silu(h @ gate_a) @ gate_b), the sigmoid in float32 as transformers; h itself
    where the layer has no such gate."""
    if f"{norm}_gate_a" not in layer:
        return h
    gate = jax.nn.silu(h @ layer[f"{norm}_gate_a"]) @ layer[f"{norm}_gate_b"]
    return (h * jax.nn.sigmoid(gate.astype(jnp.float32))).astype(h.dtype)


def _joined(x: jax.Array, h: jax.Array, out: jax.Array, cfg: ModelConfig, kind: int, i: int):
    """The stream after a block: x + out, or MiniMax-01's alpha * h + beta * out with h the
    block's normed input (ModelConfig.residual_normed; alpha and beta of block `kind`: 0
    full attention, 1 linear attention, 2 MLP), each product in float32 as torch takes a
    Python float times a tensor, rounded once; Beam's (depth_scaled_residual) the same with
    x for h and the scales of layer i's block (its n-th: 2 * i + 1 + (kind == 2))."""
    if cfg.depth_scaled_residual:
        n = 2 * (i + 1) + (kind == 2)  # (this block's 1-based count, plus 1)
        alpha, beta = math.sqrt((n - 1) / n), 1.0 / math.sqrt(n)
        h = x
    elif not cfg.residual_normed:
        return x + out
    else:
        alpha, beta = cfg.residual_alphas[kind], cfg.residual_betas[kind]
    return (h.astype(jnp.float32) * alpha).astype(x.dtype) + (
        out.astype(jnp.float32) * beta
    ).astype(x.dtype)


def _scaled(out: jax.Array, post_norm: jax.Array | None, cfg: ModelConfig) -> jax.Array:
    """A block's output as it joins the stream: RMS-normed (sandwich_norms, AFMoE), times
    residual_multiplier (Granite)."""
    if post_norm is not None:
        out = model_norm(out, post_norm, cfg)
    if cfg.residual_multiplier == 1.0:
        return out
    return out * jnp.asarray(cfg.residual_multiplier, out.dtype)
