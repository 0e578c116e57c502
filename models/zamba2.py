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
from models.attention import AttnInputs, _rope
from models.layers import embed, gate_activation, gelu_exact, model_norm
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


def _low_rank(layer: dict, name: str, x: jax.Array) -> jax.Array | None:
    """This run's adapter `name` on x (x @ A @ B), or None where the run has none."""
    a = layer.get(f"{name}_a")
    return None if a is None else (x @ a) @ layer[f"{name}_b"]


def _shared_block(
    block: dict, layer: dict, cfg: ModelConfig, i: int, x, e, positions, kv_i, attend
):
    """One run of a shared transformer block (the module docstring): ([T, D], kv_i)."""
    h = model_norm(jnp.concatenate([x, e], axis=-1), block["attn_norm"], cfg)  # [T, 2D]
    p = block["attn"]
    projected = {}
    for name in ("q", "k", "v"):
        w = p[f"w{name}"]  # [2D, heads, dh]
        y = jnp.einsum("td,dhk->thk", h, w)
        extra = _low_rank(layer, name, h)
        projected[name] = y if extra is None else y + extra.reshape(y.shape)
    q, k, v = projected["q"], projected["k"], projected["v"]
    if i not in cfg.nope_layers:  # (use_mem_rope)
        q, k = _rope(cfg, q, positions, layer=i), _rope(cfg, k, positions, layer=i)
    o, kv_i = attend(i, p, kv_i, AttnInputs(q=q, k=k, v=v, scale=cfg.attention_multiplier))
    out = jnp.einsum("thk,hkd->td", o, p["wo"])
    h = model_norm(out, block["mlp_norm"], cfg)
    mlp = block["mlp"]
    gate, up = h @ mlp["w_gate"], h @ mlp["w_up"]
    extra = _low_rank(layer, "gate_up", h)  # (its gate's columns, then its up's)
    if extra is not None:
        gate, up = gate + extra[:, : gate.shape[-1]], up + extra[:, gate.shape[-1] :]
    act = gelu_exact if cfg.mlp_act == "gelu_exact" else gate_activation(cfg)
    return (act(gate) * up) @ mlp["w_down"], kv_i
