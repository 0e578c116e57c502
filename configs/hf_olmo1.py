"""AllenAI's first OLMo HF config (transformers' olmo: OLMo-1B, OLMo-7B and their 0424 / 0724
releases): Llama's layers whose LayerNorms hold no weight nor bias (mean-subtracted, eps
1e-5, in float32: ModelConfig.norm_weightless), q, k and v clamped to [-clip_qkv, clip_qkv]
when it is set. Refused with a ValueError naming the field: attention biases (Llama's
layers put them on o_proj too), an MLP activation other than SiLU."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads

OLMO = "olmo"
TYPES, ALIASES = (OLMO,), {}
# Defaults of transformers 5.25's OlmoConfig for the fields read (OLMo-7B's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    OLMO: dict(
        vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
        max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
        clip_qkv=None, rope_theta=10000.0, bos_token_id=None, eos_token_id=50279,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and norm fields of an OLMo config; `f` is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    clip = f.get("clip_qkv")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise ValueError(f"HF config clip_qkv={clip!r}: a number > 0, or null")
    return dict(
        **silu_gqa_heads(f),
        clip_qkv=None if clip is None else float(clip),
        norm_kind="layer",
        norm_weightless=True,
        rms_norm_eps=1e-5,  # (OlmoLayerNorm's, fixed)
        sliding_window=None,
        full_attention_layers=(),
    )
