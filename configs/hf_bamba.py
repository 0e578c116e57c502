"""IBM's Bamba HF config (transformers' bamba: Bamba-9B), read whole: Granite 4.0's hybrid
before it, Mamba-2 layers (ModelConfig's linear_attention_kind "mamba2", as Nemotron-H's and
Granite 4.0's) with attention layers at attn_layer_indices (Llama's attention: GQA, RoPE on
each head's leading half, which transformers' BambaConfig fixes at 0.5 whatever the config
says), a SwiGLU MLP after every layer's mixer (Jamba's names: pre_ff_layernorm,
feed_forward), RMSNorms, untied embeddings, the final norm final_layernorm
(models/release_names.py). Refused with a ValueError naming the field: biases
(attention_bias, mlp_bias, mamba_proj_bias), another activation, another rotary fraction,
attention layers outside the model or none."""

from __future__ import annotations

from typing import Any

from configs.hf_granite import mamba2_fields
from configs.hf_rope import rope_params

BAMBA = "bamba"
TYPES = (BAMBA,)
ALIASES: dict = {}
# Defaults of transformers 5.25's BambaConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    BAMBA: dict(
        vocab_size=128000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", rms_norm_eps=1e-5,
        max_position_embeddings=262144, tie_word_embeddings=False, attn_layer_indices=None,
        mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=256,
        mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True, mamba_proj_bias=False,
        time_step_limit=(0.0, float("inf")), attention_bias=False, mlp_bias=False,
        rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's mixer, attention and MLP fields of a Bamba config; `f` is
    hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias", "mamba_proj_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}=True: biases are not supported for {BAMBA}")
    if f.get("hidden_act") not in ("silu", "swish"):
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    partial = rope_params(f).get("partial_rotary_factor", f.hf.get("partial_rotary_factor"))
    if partial not in (None, 0.5):
        raise ValueError(
            f"HF config partial_rotary_factor={partial!r}: transformers' Bamba rotates half of "
            "each head (0.5) whatever the config says; another is not supported"
        )
    num_layers = f.required("num_hidden_layers")
    attention = tuple(sorted(set(f.get("attn_layer_indices") or ())))
    if not attention:
        raise ValueError(
            f"HF config attn_layer_indices={f.get('attn_layer_indices')!r}: a model of Mamba-2 "
            "layers alone (no attention layer) is not supported"
        )
    if any(not isinstance(i, int) or not 0 <= i < num_layers for i in attention):
        raise ValueError(
            f"HF config attn_layer_indices={f.get('attn_layer_indices')!r}: layers in "
            f"[0, num_hidden_layers={num_layers})"
        )
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        partial_rotary_factor=0.5,
        **mamba2_fields(f, attention),
        sliding_window=None,
        full_attention_layers=(),
    )
