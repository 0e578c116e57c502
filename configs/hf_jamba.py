"""AI21's Jamba HF config (transformers' jamba: Jamba 1.5 / 1.7 Mini and Large).

Its layers: attention where i % attn_layer_period == attn_layer_offset (GQA without
positions: ModelConfig.nope_layers), Mamba elsewhere (linear_attention_kind "mamba1":
mamba_expand x hidden channels, mamba_d_state state channels, a mamba_d_conv-tap conv with
mamba_conv_bias, dt of rank mamba_dt_rank, "auto" ceil(hidden / 16)); an MoE where
i % expert_layer_period == expert_layer_offset (a softmax router's top-k, not
renormalized, experts intermediate_size wide), a dense MLP elsewhere."""

from __future__ import annotations

import math
from typing import Any

JAMBA = "jamba"
TYPES, ALIASES = (JAMBA,), {}

# Defaults of transformers 5.25's JambaConfig for the fields read.
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {JAMBA: dict(
    vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
    rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, max_position_embeddings=262144,
    num_experts_per_tok=2, num_experts=16, expert_layer_period=2, expert_layer_offset=1,
    attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4,
    mamba_expand=2, mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False,
)}
# fmt: on


def _period(f: Any, what: str) -> tuple[int, int]:
    period, offset = f.required(f"{what}_layer_period"), f.required(f"{what}_layer_offset")
    if not 0 <= offset < period:
        raise ValueError(
            f"HF config {what}_layer_offset={offset}: must be in [0, {what}_layer_period={period})"
        )
    return period, offset


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer, Mamba and MoE fields of a Jamba config; `f` is
    hf_config._Fields."""
    if f.get("mamba_proj_bias"):
        raise ValueError("HF config mamba_proj_bias=True: not supported for jamba")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    num_layers, hidden = f.required("num_hidden_layers"), f.required("hidden_size")
    period, offset = _period(f, "attn")
    attention = tuple(i for i in range(num_layers) if i % period == offset)
    if not attention:
        raise ValueError(f"HF config attn_layer_offset={offset}: no attention layer")
    rank = f.get("mamba_dt_rank")
    rank = math.ceil(hidden / 16) if rank == "auto" else int(rank)
    heads = f.required("num_attention_heads")
    expert_period, expert_offset = _period(f, "expert")
    experts = f.required("num_experts")
    moe = dict(
        num_experts=experts,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        first_k_dense_replace=expert_offset,
        moe_layer_freq=expert_period,
    )
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=hidden // heads,
        nope_layers=attention,
        linear_attention_layers=tuple(i for i in range(num_layers) if i not in attention),
        linear_attention_kind="mamba1",
        linear_num_key_heads=1,
        linear_key_head_dim=f.required("mamba_d_state"),
        linear_num_value_heads=f.required("mamba_expand") * hidden,
        linear_value_head_dim=1,
        linear_conv_kernel=f.required("mamba_d_conv"),
        linear_conv_bias=bool(f.get("mamba_conv_bias")),
        mamba_dt_rank=rank,
        **(moe if experts > 1 else {}),
    )
