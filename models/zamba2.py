"""Zamba2's decoder stack (transformers' zamba2: Zyphra's Zamba2 1.2B / 2.7B / 7B;
ModelConfig.shared_blocks > 0), run in place of models/transformer.py's.

Its layers are Mamba-2 mixers (x + mamba(norm(x))); a hybrid layer first runs one of
`shared_blocks` transformer blocks, in turn, on [x, e] (the stream beside the token's
embedding, 2D wide): t = mlp(norm(attn(norm([x, e])))), no residual inside, the attention's
heads 2D / H wide and scaled by (head_width / 2)^-0.5, its q / k / v (attention_adapters)
and the MLP's gate and up each plus a low-rank adapter of this run's own; then t, projected
by the layer's own [D, D], joins the mixer's input only: x + mamba(norm(x + t W)).

Here a hybrid layer is two layers (ModelConfig's layer list): an attention layer (the shared
block's run, its KV pages; its params the run's adapters and projection, the block's in
params["shared"]) and the Mamba-2 layer after it (a linear-attention layer, its state).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from models.attention import attn_output, gqa_inputs
from models.layers import embed, gate_activation, model_norm, swiglu_mlp
from models.linear_attention import gated_delta_net


def forward_hidden(
    params: dict, cfg: ModelConfig, token_ids, positions, kv: list, attend, pin, segments
):
    """models.transformer.forward_hidden for Zamba2: (hidden [T, D] before the final norm,
    kv), kv[i] an attention layer's pages or a Mamba-2 layer's state."""
    if segments is None:
        raise ValueError("Zamba2's Mamba-2 layers need the step's segments")
    e = embed(params, token_ids)
    x, joined, new_kv, run = e, None, [], 0
    for i, layer in enumerate(params["layers"]):
        if not cfg.is_linear_layer(i):  # a shared block's run: its output waits for the mixer
            block = params["shared"][run % cfg.shared_blocks]
            t, kv_i = _shared_block(block, layer, cfg, i, x, e, positions, kv[i], attend)
            joined, run = t @ layer["linear_out"], run + 1
            new_kv.append(kv_i)
            continue
        h = x if joined is None else x + joined
        h = pin(model_norm(h, layer["attn_norm"], cfg), (None, "embed"))
        mixed, kv_i = gated_delta_net(layer["linear"], h, cfg, kv[i], segments)
        x, joined = pin(x + mixed, ("batch", "embed")), None
        new_kv.append(kv_i)
    return x, new_kv


def _adapters(layer: dict):
    """This run's adapters as a `delta(leaf, x)` (models/lora.py's form, so gqa_inputs and
    swiglu_mlp add them): x @ A @ B on wq / wk / wv, and gate_up's columns split between
    w_gate and w_up (made once for both)."""
    made: dict = {}

    def delta(leaf: str, x: jax.Array) -> jax.Array | None:
        name = {"wq": "q", "wk": "k", "wv": "v", "w_gate": "gate_up", "w_up": "gate_up"}.get(leaf)
        if name is None or f"{name}_a" not in layer:
            return None
        if name not in made:
            made[name] = (x @ layer[f"{name}_a"]) @ layer[f"{name}_b"]
        extra = made[name]
        if name != "gate_up":
            return extra
        half = extra.shape[-1] // 2  # (its gate's columns, then its up's)
        return extra[:, :half] if leaf == "w_gate" else extra[:, half:]

    return delta


def _shared_block(
    block: dict, layer: dict, cfg: ModelConfig, i: int, x, e, positions, kv_i, attend
):
    """One run of a shared transformer block (the module docstring): ([T, D], kv_i)."""
    h = model_norm(jnp.concatenate([x, e], axis=-1), block["attn_norm"], cfg)  # [T, 2D]
    delta = _adapters(layer)
    inputs = gqa_inputs(block["attn"], h, positions, cfg, delta, layer=i)  # (RoPE: use_mem_rope)
    o, kv_i = attend(i, block["attn"], kv_i, inputs)
    h = model_norm(attn_output(block["attn"], o), block["mlp_norm"], cfg)
    return swiglu_mlp(block["mlp"], h, delta, gate_activation(cfg)), kv_i
