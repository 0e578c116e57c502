"""Arcee's AFMoE HF config (transformers' afmoe: the Trinity models): Llama-style attention with
q/k RMSNorms per head and a sigmoid output gate from its own projection (ModelConfig's
attn_output_gate, leaf wq_gate); "sliding_attention" layers windowed and rotated, the
"full_attention" ones global and without positions; RMSNorms before and after each block
(sandwich_norms; OLMo 2's, scaled in float32); after `num_dense_layers` dense layers, a
sigmoid router choosing by score + expert_bias and weighing by the scores renormalized
times `route_scale` (DeepSeek-V3's rule with one group) beside shared experts; with
`mup_enabled`, the embeddings times sqrt(hidden_size).

The layer kinds: `layer_types`, else every `global_attn_every_n_layers`-th layer global."""

from __future__ import annotations

import math
from typing import Any

from configs.hf_moe import v3_router_fields

AFMOE = "afmoe"

# Defaults of transformers 5.25's AfmoeConfig for the fields read.
# fmt: off
AFMOE_DEFAULTS: dict[str, dict[str, Any]] = {AFMOE: dict(
    vocab_size=200192, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=1408,
    num_hidden_layers=32, num_dense_layers=1, num_attention_heads=16,
    num_key_value_heads=None, head_dim=128, hidden_act="silu", max_position_embeddings=16384,
    rms_norm_eps=1e-5, tie_word_embeddings=False, num_experts=64, num_experts_per_tok=6,
    num_shared_experts=2, route_scale=1.0, global_attn_every_n_layers=4, sliding_window=1024,
    layer_types=None, mup_enabled=False, bos_token_id=None, eos_token_id=None,
)}
# fmt: on
_KINDS = ("sliding_attention", "full_attention")


def afmoe_fields(f: Any) -> dict:
    """ModelConfig's attention, window and MoE fields of an AFMoE config (its window too);
    `f` is hf_config._Fields."""
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    if kinds is None:
        every = f.required("global_attn_every_n_layers")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"HF config global_attn_every_n_layers={every!r}: must be >= 1")
        kinds = [_KINDS[1] if (i + 1) % every == 0 else _KINDS[0] for i in range(num_layers)]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < num_layers
    window = f.get("sliding_window")
    if windowed and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    heads = f.required("num_attention_heads")
    dense = f.get("num_dense_layers") or 0
    hidden = f.required("hidden_size")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or hidden // heads,
        qk_norm=True,
        attn_output_gate=True,
        sandwich_norms=True,
        sliding_window=window if windowed else None,
        full_attention_layers=full if windowed else (),
        nope_layers=full,  # (only the windowed layers rotate)
        embedding_multiplier=math.sqrt(hidden) if f.get("mup_enabled") else 1.0,
        num_experts=f.required("num_experts") if dense < num_layers else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("num_shared_experts") or 0,
        first_k_dense_replace=dense,
        **{**v3_router_fields(f, "route_scale"), "norm_topk_prob": True},
    )
