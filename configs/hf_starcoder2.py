"""BigCode's StarCoder2 HF config (transformers' starcoder2: StarCoder2 3B / 7B / 15B): Mistral's
attention with biases on q, k, v and o_proj (`use_bias`), a window on every layer when
`sliding_window` is set, LayerNorms with biases (eps `norm_epsilon`), an MLP without a gate,
c_proj(gelu_tanh(c_fc(x))) with biases (ModelConfig's mlp_act "gelu", mlp_bias), tied
embeddings. Refused with a ValueError naming the field: another MLP activation."""

from __future__ import annotations

from typing import Any

STARCODER2 = "starcoder2"
TYPES = (STARCODER2,)
ALIASES = {STARCODER2: {"rms_norm_eps": ("norm_epsilon",)}}
# Defaults of transformers 5.25's Starcoder2Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    STARCODER2: dict(
        vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
        num_attention_heads=24, num_key_value_heads=2, hidden_act="gelu_pytorch_tanh",
        max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=50256,
        eos_token_id=50256, sliding_window=None, use_bias=True, tie_word_embeddings=True,
        rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm, window and MLP fields of a StarCoder2 config; `f` is
    hf_config._Fields."""
    act = f.get("hidden_act")
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"HF config hidden_act={act!r}: only 'gelu_pytorch_tanh'")
    heads = f.required("num_attention_heads")
    biased = bool(f.get("use_bias"))
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.required("hidden_size") // heads,
        attention_bias=biased,
        o_proj_bias=biased,
        mlp_bias=biased,
        norm_kind="layer",
        norm_bias=True,
        mlp_act="gelu",
        sliding_window=f.get("sliding_window"),
        full_attention_layers=(),
    )
