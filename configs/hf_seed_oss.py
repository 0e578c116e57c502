"""ByteDance Seed's Seed-OSS HF config (transformers' seed_oss: Seed-OSS-36B): Llama's layers
with biases on q, k and v (attention_bias, on by default) and on o_proj only with
attention_out_bias; no window. Its dropouts act in training alone."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads

SEED_OSS = "seed_oss"
TYPES, ALIASES = (SEED_OSS,), {}
# Defaults of transformers 5.25's SeedOssConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    SEED_OSS: dict(
        vocab_size=155136, hidden_size=4096, intermediate_size=27648, num_hidden_layers=64,
        num_attention_heads=80, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=524288, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=2,
        tie_word_embeddings=False, attention_bias=True, attention_out_bias=False,
        mlp_bias=False,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and window fields of a Seed-OSS config; `f` is
    hf_config._Fields."""
    if f.get("mlp_bias"):
        raise ValueError("HF config mlp_bias=True: not supported for seed_oss")
    return dict(
        **silu_gqa_heads(f),
        attention_bias=bool(f.get("attention_bias")),
        o_proj_bias=bool(f.get("attention_out_bias")),
        sliding_window=None,
        full_attention_layers=(),
    )
