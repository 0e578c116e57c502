"""Beam's HF config (transformers 5.25's beam), read whole, its window too.

Qwen3-MoE's attention (q/k RMSNorms per head) whose output is times sigmoid of its own
projection `gate_proj` plus a bias per head (`gate_bias`); "sliding_attention" layers
windowed and rotated (rope_parameters.sliding_attention), "full_attention" layers global
without positions (rope_parameters.full_attention null), their queries times the scalable
softmax's (1 + (position + 1) / 2048) ** 0.1; default layer kinds every sixth layer global,
and the last. Each block's input and output RMS-normed (OLMo's scaled norms, Gemma 2's
names: post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm), the
stream after the n-th block out / sqrt(n + 1) + x * sqrt(n / (n + 1)). Layers
`mlp_layer_types` calls "dense" (default: the first three) a SwiGLU MLP, the "sparse" ones
DeepSeek-V3's router (sigmoid scores, the correction bias for the choice, group-limited,
renormalized, times routed_scaling_factor) over experts alone; the logits soft-capped at
final_logit_softcapping (default 30).

Refused with a ValueError naming the field: attention biases, a RoPE on the global layers,
a windowed layers' RoPE other than plain."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads
from configs.hf_moe import v3_router_fields

BEAM = "beam"
TYPES, ALIASES = (BEAM,), {}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's BeamConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    BEAM: dict(
        vocab_size=151936, hidden_size=5120, intermediate_size=20480, num_hidden_layers=52,
        num_attention_heads=48, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=False,
        sliding_window=512, attention_bias=False, layer_types=None, mlp_layer_types=None,
        num_experts=256, num_experts_per_tok=8, moe_intermediate_size=2560,
        norm_topk_prob=True, n_group=8, topk_group=4, routed_scaling_factor=2.5,
        final_logit_softcapping=30.0, rope_parameters=None,
        bos_token_id=None, eos_token_id=None,
    )
}  # fmt: skip
# BeamConfig's default RoPE (its default_theta on the windowed layers, none on the others).
_DEFAULT_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
# The scalable softmax of the global layers: (1 + (position + 1) / 2048) ** 0.1.
SSMAX = dict(attn_scale_power=0.1, attn_scale_positions=2048, attn_scale_offset=1)


def rope_source(f: Any) -> dict:
    """The HF config with the windowed layers' RoPE as the model's (the global layers have
    none), checked."""
    params = f.get("rope_parameters") or _DEFAULT_ROPE
    if not isinstance(params, dict) or set(params) - set(_KINDS):
        raise ValueError(
            f"HF config rope_parameters={params!r}: Beam's has an entry per layer type {_KINDS}"
        )
    if params.get("full_attention") is not None:
        raise ValueError(
            "HF config rope_parameters.full_attention: Beam's global layers take no positions "
            "(null; a RoPE there is not supported)"
        )
    sliding = params.get("sliding_attention") or _DEFAULT_ROPE["sliding_attention"]
    if sliding.get("rope_type", "default") != "default":
        raise ValueError(
            f"HF config rope_parameters.sliding_attention.rope_type={sliding['rope_type']!r}: "
            "only 'default' (plain RoPE)"
        )
    return {**f.hf, "rope_parameters": {"rope_type": "default", **sliding}, "rope_scaling": None}


def _kinds(f: Any, num_layers: int) -> list:
    kinds = f.get("layer_types")
    if kinds is None:
        kinds = [_KINDS[(i + 1) % 6 == 0] for i in range(num_layers)]
        kinds[-1] = _KINDS[1]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return kinds


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, norm, residual and MoE fields of a Beam config; `f`
    is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    num_layers = f.required("num_hidden_layers")
    kinds = _kinds(f, num_layers)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < num_layers
    window = f.get("sliding_window")
    if windowed and not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
        raise ValueError(
            f"HF config sliding_window={window!r}: sliding_attention layers need one (an int > 0)"
        )
    mlps = f.get("mlp_layer_types")
    if mlps is None:
        mlps = ["dense"] * min(3, num_layers) + ["sparse"] * max(num_layers - 3, 0)
    if not isinstance(mlps, list) or len(mlps) != num_layers or set(mlps) - {"dense", "sparse"}:
        raise ValueError(f"HF config mlp_layer_types: expected {num_layers} of dense / sparse")
    dense = tuple(i for i, k in enumerate(mlps) if k == "dense")
    cap = f.get("final_logit_softcapping")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int | float) or cap <= 0):
        raise ValueError(f"HF config final_logit_softcapping={cap!r}: a number > 0, or null")
    return dict(
        **silu_gqa_heads(f),
        qk_norm=True,
        attn_output_gate=True,
        attn_gate_bias=True,
        sliding_window=window if windowed else None,
        full_attention_layers=full if windowed else (),
        nope_layers=full,
        attn_scale_nope_only=True,
        **SSMAX,
        sandwich_norms=True,
        depth_scaled_residual=True,
        final_logit_softcapping=float(cap or 0.0),
        num_experts=f.required("num_experts") if len(dense) < num_layers else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        mlp_only_layers=dense,
        **v3_router_fields(f),
    )
