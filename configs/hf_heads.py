"""What the plain GQA families' readers share (configs/hf_seed_oss.py, configs/hf_glm4.py)."""

from __future__ import annotations

from typing import Any


def silu_gqa_heads(f: Any) -> dict:
    """num_kv_heads and head_dim as transformers' Llama-style classes read them (the KV heads
    default to the query heads, head_dim to hidden_size / heads), after refusing a hidden_act
    other than SiLU (SwiGLU). `f` is hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    heads, kv_heads = f.required("num_attention_heads"), f.get("num_key_value_heads")
    head_dim = f.get("head_dim")
    return dict(
        num_kv_heads=heads if kv_heads is None else kv_heads,
        head_dim=f.required("hidden_size") // heads if head_dim is None else head_dim,
    )
