"""Microsoft's Phi-3 HF config (transformers' phi3: Phi-3 / Phi-3.5-mini, Phi-4-mini): Llama's
layers with q, k and v in one qkv_proj and the MLP's gate and up in one gate_up_proj; RoPE on
partial_rotary_factor of each head (Phi-4-mini's 0.75), LongRoPE where the rope dict says so
(configs/hf_rope.py; its short or long factors chosen once per engine, models/rope.py
for_max_model_len); a sliding window on every layer where sliding_window is set."""

from __future__ import annotations

from typing import Any

from configs.hf_rope import rope_params

PHI3 = "phi3"
TYPES, ALIASES = (PHI3,), {}
# Defaults of transformers 5.25's Phi3Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    PHI3: dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
        max_position_embeddings=4096, original_max_position_embeddings=4096,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000,
        sliding_window=None, rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window and rotary fields of a Phi-3 config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    heads = f.required("num_attention_heads")
    partial = rope_params(f).get("partial_rotary_factor", f.get("partial_rotary_factor"))
    partial = 1.0 if partial is None else partial
    if isinstance(partial, bool) or not isinstance(partial, int | float) or not 0 < partial <= 1:
        raise ValueError(f"HF config partial_rotary_factor={partial!r}: must be in (0, 1]")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        partial_rotary_factor=float(partial),
        sliding_window=f.get("sliding_window"),
        full_attention_layers=(),
    )
