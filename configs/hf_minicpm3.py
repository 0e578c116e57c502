"""Dense MLA HF configs: OpenBMB's MiniCPM3 and Tencent's Youtu-LLM.

MiniCPM3 (transformers' minicpm3: MiniCPM3-4B): DeepSeek-V2's latent
attention (MLA: q and kv LoRAs, the shared rope key) with plain RoPE on the rope channels'
halves, a SwiGLU MLP on every layer, and three scalings: the embeddings times `scale_emb`,
each block's output times scale_depth / sqrt(num_hidden_layers) before it joins the stream,
the logits divided by hidden_size / dim_model_base (ModelConfig's embedding_multiplier,
residual_multiplier, logits_scaling: Granite's). A null v_head_dim, scale_depth or
dim_model_base takes the class's fallback (hidden / heads, sqrt(num_hidden_layers),
hidden_size).

Youtu-LLM (youtu: Youtu-LLM 2B): DeepSeek-V3's latent attention (RoPE on interleaved pairs
unless rope_interleave is false) with a SwiGLU MLP on every layer, tied embeddings.

Refused with a ValueError naming the field: biases."""

from __future__ import annotations

import math
from typing import Any

MINICPM3, YOUTU = "minicpm3", "youtu"
TYPES, ALIASES = (MINICPM3, YOUTU), {}
# Defaults of transformers 5.25's MiniCPM3Config (MiniCPM3-4B's shapes) for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    MINICPM3: dict(
        vocab_size=73448, hidden_size=2560, intermediate_size=6400, num_hidden_layers=62,
        num_attention_heads=40, num_key_value_heads=40, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False,
        kv_lora_rank=256, q_lora_rank=768, qk_nope_head_dim=64, qk_rope_head_dim=32,
        v_head_dim=None, scale_emb=12, scale_depth=1.4, dim_model_base=256,
        rope_theta=10000.0,
    ),
    # transformers 5.25's YoutuConfig (Youtu-LLM 2B's shapes)
    YOUTU: dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=6144, num_hidden_layers=32,
        num_attention_heads=16, num_key_value_heads=16, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=128000, eos_token_id=128001, attention_bias=False, kv_lora_rank=512,
        q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        rope_interleave=True, rope_theta=10000.0,
    ),
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and scaling fields of a MiniCPM3 config; `f` is
    hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: biases are not supported here")
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    layers = f.required("num_hidden_layers")
    minicpm3 = model_type == MINICPM3
    depth = f.get("scale_depth") if minicpm3 else None
    depth = math.sqrt(layers) if depth is None else depth
    base = (f.get("dim_model_base") if minicpm3 else None) or hidden
    return dict(
        attention_type="mla",
        num_kv_heads=heads,
        head_dim=f.required("qk_rope_head_dim"),
        q_lora_rank=f.get("q_lora_rank") or 0,
        kv_lora_rank=f.required("kv_lora_rank"),
        qk_nope_head_dim=f.required("qk_nope_head_dim"),
        qk_rope_head_dim=f.required("qk_rope_head_dim"),
        v_head_dim=f.get("v_head_dim") or hidden // heads,
        rope_interleave=not minicpm3 and bool(f.get("rope_interleave")),
        embedding_multiplier=float(f.required("scale_emb")) if minicpm3 else 1.0,
        residual_multiplier=float(depth) / math.sqrt(layers),
        logits_scaling=hidden / base,
        sliding_window=None,
        full_attention_layers=(),
    )
