"""Microsoft's Phi-2 HF config (transformers' phi: Phi-1, Phi-1.5, Phi-2): attention and MLP side
by side on one LayerNorm'd input (ModelConfig.parallel_block, Cohere's), LayerNorms with
biases, RoPE on the leading partial_rotary_factor of each head, biases on q, k, v, the
output projection (`dense`), the MLP (fc2(gelu_tanh(fc1(x))), no gate) and lm_head; the
final norm named final_layernorm (models/release_names.py). Refused with a ValueError
naming the field: q/k LayerNorms, another MLP activation."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import GELU_TANH
from configs.hf_rope import partial_rotary_factor

PHI = "phi"
TYPES = (PHI,)
ALIASES = {PHI: {"rms_norm_eps": ("layer_norm_eps",)}}
# Defaults of transformers 5.25's PhiConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    PHI: dict(
        vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
        num_attention_heads=32, num_key_value_heads=None, hidden_act="gelu_new",
        max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, qk_layernorm=False, partial_rotary_factor=0.5,
        rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and MLP fields of a Phi config; `f` is
    hf_config._Fields."""
    if f.get("qk_layernorm"):
        raise ValueError("HF config qk_layernorm=True: q/k LayerNorms are not supported")
    act = f.get("hidden_act")
    if act not in GELU_TANH:
        raise ValueError(f"HF config hidden_act={act!r}: only the tanh GELU {GELU_TANH}")
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        attention_bias=True,
        o_proj_bias=True,
        mlp_bias=True,
        lm_head_bias=True,
        norm_kind="layer",
        norm_bias=True,
        parallel_block=True,
        mlp_act="gelu",
        sliding_window=None,
        full_attention_layers=(),
    )
