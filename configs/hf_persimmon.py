"""Adept's Persimmon HF config (transformers' persimmon: Persimmon-8B; Fuyu-8B's language
model, served from its text_config), read whole.

LayerNorms with biases (eps layer_norm_eps); attention with a KV head per query head, q, k
and v from one biased projection whose rows come per head q | k | v (query_key_value), q and
k then LayerNormed over each head's channels (qk_layernorm: one weight and bias shared by
the heads), RoPE on each head's leading partial_rotary_factor (0.5) of channels, a biased
output projection (dense); an MLP without a gate (dense_h_to_4h, ReLU squared, dense_4h_to_h,
biased); untied embeddings; the final norm final_layernorm (models/release_names.py).
Refused with a ValueError naming the field: another activation."""

from __future__ import annotations

from typing import Any

from configs.hf_rope import partial_rotary_factor

PERSIMMON = "persimmon"
TYPES = (PERSIMMON,)
ALIASES = {PERSIMMON: {"rms_norm_eps": ("layer_norm_eps",)}}
# Defaults of transformers 5.25's PersimmonConfig for the fields read (Persimmon-8B's shapes;
# its release's RoPE base, 25,000, is in its config.json, the class's is 10,000).
DEFAULTS: dict[str, dict[str, Any]] = {
    PERSIMMON: dict(
        vocab_size=262144, hidden_size=4096, intermediate_size=16384, num_hidden_layers=36,
        num_attention_heads=64, hidden_act="relu2", max_position_embeddings=16384,
        rms_norm_eps=1e-5, tie_word_embeddings=False, qk_layernorm=True,
        rope_theta=10000.0, partial_rotary_factor=0.5, bos_token_id=1, eos_token_id=2,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and MLP fields of a Persimmon config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "relu2":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'relu2'")
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=heads,
        head_dim=f.required("hidden_size") // heads,
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        qk_norm=bool(f.get("qk_layernorm")),
        attention_bias=True,
        o_proj_bias=True,
        mlp_bias=True,
        norm_kind="layer",
        norm_bias=True,
        mlp_act="relu2",
        sliding_window=None,
        full_attention_layers=(),
    )
