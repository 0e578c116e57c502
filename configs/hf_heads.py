"""What the plain GQA families' readers share (configs/hf_seed_oss.py, configs/hf_glm4.py), and
the GELU names of the gateless-MLP families' (Phi-2, GPT-J, GPT-NeoX, GPT-BigCode, GPT-2)."""

from __future__ import annotations

from typing import Any

# transformers' ACT2FN names of the tanh GELU (gelu_new: the same formula), and every GELU
# name -> ModelConfig.mlp_act of an MLP without a gate ("gelu": the erf one).
GELU_TANH = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
GELU_MLP_ACTS = {**dict.fromkeys(GELU_TANH, "gelu"), "gelu": "gelu_exact"}


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
