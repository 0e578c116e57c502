"""AllenAI's Molmo2 language model HF config (transformers 5.25's molmo2_text, served from the
molmo2 wrapper's text_config), read whole.

Llama's pre-norm layers with OLMo 2's attention: q/k RMSNorms per head (qk_norm_type "qwen3")
or over all heads at once ("olmo"), q/k/v biased with attention_bias (o_proj never); a
SwiGLU MLP; an embedding of vocab_size + additional_vocab_size rows (the image tokens' after
the text's: only the text rows are read). Its releases' names (models/release_names.py):
transformer.wte (embedding, new_embedding), blocks with attn_norm / ff_norm, q, k and v rows
fused as att_proj, up and gate rows (in that order) as ff_proj, attn_out, ff_out, ln_f.
Refused with a ValueError naming the field: norms after the blocks (norm_after), scaled RoPE
on only some layers (rope_scaling_layers), another activation."""

from __future__ import annotations

from typing import Any

MOLMO2 = "molmo2_text"
TYPES = (MOLMO2,)
ALIASES = {MOLMO2: {"attention_bias": ("qkv_bias",), "rms_norm_eps": ("layer_norm_eps",)}}
# Defaults of transformers 5.25's Molmo2TextConfig for the fields read (Molmo2-8B's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    MOLMO2: dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=36864, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False, qk_norm_type="qwen3", additional_vocab_size=128,
        rope_scaling_layers=None, norm_after=False, rope_theta=10000.0, bos_token_id=None,
        eos_token_id=None,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention fields of a Molmo2 text config; `f` is hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    if f.get("norm_after"):
        raise ValueError("HF config norm_after=True: norms after the blocks are not supported")
    num_layers = f.required("num_hidden_layers")
    scaled = f.get("rope_scaling_layers")
    rope = f.get("rope_parameters") or {}
    plain = rope.get("rope_type", rope.get("type", "default")) == "default"
    if scaled is not None and not plain and sorted(scaled) != list(range(num_layers)):
        raise ValueError(
            f"HF config rope_scaling_layers={scaled!r}: scaled RoPE on every layer or none"
        )
    norm = f.get("qk_norm_type")
    if norm not in ("qwen3", "olmo"):
        raise ValueError(f"HF config qk_norm_type={norm!r}: expected 'qwen3' or 'olmo'")
    extra = f.get("additional_vocab_size")
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
        raise ValueError(f"HF config additional_vocab_size={extra!r}: an int >= 0")
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        attention_bias=bool(f.get("attention_bias")),
        qk_norm=True,
        qk_norm_full=norm == "olmo",
        sliding_window=None,
        full_attention_layers=(),
    )
