"""Lara Mini's HF config (transformers 5.25's lara_mini), read whole, its window too.

Three layer kinds (`layer_types`; default the release's period of five: linear, windowed,
linear, global, windowed): Qwen3.5's gated DeltaNet layers (their input projections stored
fused as `in_proj`, rows q | k | v | z | b | a, their gated norm `out_norm`, weighed in
float32), Qwen3's attention (q/k RMSNorms per head, no output gate) windowed and rotated on
"sliding_attention" layers, global without positions on "full_attention" ones; Helium's
norms (weights applied in float32). An MoE on every layer: a float32 softmax router's top-k,
renormalized when norm_topk_prob, beside one ungated shared expert (`shared_expert`).
Refused with a ValueError naming the field: attention biases, a partial rotation."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads

LARA_MINI = "lara_mini"
TYPES, ALIASES = (LARA_MINI,), {}
_KINDS = ("linear_attention", "sliding_attention", "full_attention")
# Defaults of transformers 5.25's LaraMiniConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    LARA_MINI: dict(
        vocab_size=151936, hidden_size=1024, num_hidden_layers=34, num_attention_heads=16,
        num_key_value_heads=4, head_dim=128, hidden_act="silu", max_position_embeddings=131072,
        rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, sliding_window=512,
        layer_types=None, linear_conv_kernel_dim=4, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_num_key_heads=8, linear_num_value_heads=16,
        num_experts=128, num_experts_per_tok=4, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, norm_topk_prob=True,
        bos_token_id=None, eos_token_id=151643,
    )
}  # fmt: skip
_PATTERN = (_KINDS[0], _KINDS[1], _KINDS[0], _KINDS[2], _KINDS[1])


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer kinds, attention, window, linear-attention and MoE fields of a
    Lara Mini config; `f` is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    rope = f.get("rope_parameters") or {}
    if isinstance(rope, dict) and rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(
            f"HF config rope_parameters.partial_rotary_factor={rope['partial_rotary_factor']!r}:"
            " Lara Mini rotates whole heads (only 1)"
        )
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    kinds = [_PATTERN[i % 5] for i in range(num_layers)] if kinds is None else kinds
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    window = f.get("sliding_window")
    if _KINDS[1] in kinds and not (
        isinstance(window, int) and not isinstance(window, bool) and window > 0
    ):
        raise ValueError(
            f"HF config sliding_window={window!r}: sliding_attention layers need one (an int > 0)"
        )
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[2])
    return dict(
        **silu_gqa_heads(f),
        qk_norm=True,
        sliding_window=window if _KINDS[1] in kinds else None,
        full_attention_layers=full if _KINDS[1] in kinds else (),
        nope_layers=full,
        linear_attention_layers=tuple(i for i, k in enumerate(kinds) if k == _KINDS[0]),
        linear_num_key_heads=f.required("linear_num_key_heads"),
        linear_num_value_heads=f.required("linear_num_value_heads"),
        linear_key_head_dim=f.required("linear_key_head_dim"),
        linear_value_head_dim=f.required("linear_value_head_dim"),
        linear_conv_kernel=f.required("linear_conv_kernel_dim"),
        # (no dense layer: intermediate_size only fills the field)
        intermediate_size=f.required("shared_expert_intermediate_size"),
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=f.required("shared_expert_intermediate_size"),
        norm_topk_prob=bool(f.get("norm_topk_prob")),
    )
