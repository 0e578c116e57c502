"""Zhipu's GLM-4 dense HF config (transformers' glm4: GLM-4-9B-0414, GLM-4-32B-0414,
GLM-Z1): GQA with biases on q, k and v, RoPE on interleaved pairs of each head's leading
half (partial_rotary_factor, default 0.5), the gate and up projections fused, and each
block's output RMS-normed before it joins the stream (sandwich norms: post_self_attn_layernorm
and post_mlp_layernorm beside the usual two). No window.

GLM-4 (glm: GLM-4-9B-chat-hf, its first release in transformers' layout) is the same model
without the norms after each block."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads
from configs.hf_rope import partial_rotary_factor

GLM4, GLM = "glm4", "glm"
TYPES, ALIASES = (GLM4, GLM), {}
# Defaults of transformers 5.25's Glm4Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    GLM4: dict(
        vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=2, head_dim=128, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1.5625e-07, bos_token_id=None,
        eos_token_id=[151329, 151336, 151338], tie_word_embeddings=False,
        attention_bias=True, partial_rotary_factor=0.5,
    )
}  # fmt: skip
# transformers 5.25's GlmConfig: the same defaults (GLM-4-9B-chat's shapes)
DEFAULTS[GLM] = DEFAULTS[GLM4]


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and window fields of a GLM-4 config; `f` is
    hf_config._Fields."""
    return dict(
        **silu_gqa_heads(f),
        attention_bias=bool(f.get("attention_bias")),
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        sandwich_norms=model_type == GLM4,
        sliding_window=None,
        full_attention_layers=(),
    )
