"""Microsoft's Phi-3 HF config (transformers' phi3: Phi-3 / Phi-3.5-mini, Phi-4-mini): Llama's
layers with q, k and v in one qkv_proj and the MLP's gate and up in one gate_up_proj; RoPE on
partial_rotary_factor of each head (Phi-4-mini's 0.75), LongRoPE where the rope dict says so
(configs/hf_rope.py; its short or long factors chosen once per engine, models/rope.py
for_max_model_len); a sliding window on every layer where sliding_window is set.

Phi-3.5-MoE (phimoe): Llama's attention (biases on q, k, v and o with attention_bias),
LayerNorms with biases, Mixtral's experts under the sparsemixer router (its
router_jitter_noise the relative gap it keeps), a bias on lm_head with lm_head_bias;
LongRoPE with the dict's short_mscale / long_mscale. transformers' PhimoeRotaryEmbedding
keeps the short factors for every length (switching only the mscale); an engine longer than
original_max_position_embeddings takes the long ones, as vLLM and Phi-3 do."""

from __future__ import annotations

from typing import Any

from configs.hf_rope import partial_rotary_factor

PHI3, PHIMOE = "phi3", "phimoe"
TYPES, ALIASES = (PHI3, PHIMOE), {PHIMOE: {"num_local_experts": ("num_experts",)}}
# Defaults of transformers 5.25's Phi3Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    PHI3: dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
        max_position_embeddings=4096, original_max_position_embeddings=4096,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000,
        sliding_window=None, rope_theta=10000.0, partial_rotary_factor=1.0,
    ),
    PHIMOE: dict(
        vocab_size=32064, hidden_size=4096, intermediate_size=6400, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, sliding_window=None, num_experts_per_tok=2,
        num_local_experts=16, router_jitter_noise=0.01, attention_bias=False,
        lm_head_bias=False, rope_theta=1000000.0,
    ),
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window and rotary fields of a Phi-3 config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    heads = f.required("num_attention_heads")
    out = dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        sliding_window=f.get("sliding_window"),
        full_attention_layers=(),
    )
    if model_type == PHI3:
        out["head_dim"] = f.required("hidden_size") // heads  # (Phi3Attention's, always)
        return out
    eps = f.get("router_jitter_noise") or 0.0
    bias = bool(f.get("attention_bias"))
    return dict(
        out,
        attention_bias=bias,
        o_proj_bias=bias,
        norm_kind="layer",
        norm_bias=True,
        lm_head_bias=bool(f.get("lm_head_bias")),
        num_experts=f.required("num_local_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        scoring_func="sparsemixer",
        sparsemixer_eps=float(eps),
    )
