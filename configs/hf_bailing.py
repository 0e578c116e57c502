"""inclusionAI's Ling 2.5 / Ring 2.5 HF config (transformers' bailing_hybrid, whose config.json
names fields through its class's attribute_map: num_experts, num_experts_per_token,
moe_renormalize, num_expert_group, model_max_length ...): KDA layers (ModelConfig's
linear_attention_kind "kimi_delta" with full-rank forget and output gates, the forget gate
bounded by `kda_lower_bound` when `kda_safe_gate`) beside MLA layers with RoPE on
interleaved pairs and a sigmoid gate per head on their output; DeepSeek-V3's MoE with
shared experts, each layer's routed and shared SwiGLU clipped after the activation by
`expert_swiglu_limit_list` / `share_expert_swiglu_limit_list` (0: none).

The layer kinds: `layer_types`, else every `layer_group_size`-th layer MLA; the dense
layers: `mlp_layer_types`, else the first `first_k_dense_replace`. The KDA heads: the saved
`linear_num_heads` / `linear_head_dim` / `linear_conv_kernel_dim` (transformers writes
them, and head_dim as the rope width), else num_attention_heads / head_dim /
short_conv_kernel_size as a release spells them. Its MTP layers are not read."""

from __future__ import annotations

from typing import Any

from configs.hf_kimi_linear import dense_layers, kda_mla_fields
from configs.hf_qwen3_next import LAYER_KINDS, check_layer_kinds

BAILING = "bailing_hybrid"

# Defaults of transformers 5.25's BailingHybridConfig for the fields read.
# fmt: off
BAILING_DEFAULTS: dict[str, dict[str, Any]] = {BAILING: dict(
    vocab_size=157184, hidden_size=2560, intermediate_size=6144, moe_intermediate_size=768,
    num_hidden_layers=42, num_attention_heads=32, num_key_value_heads=32, n_shared_experts=1,
    routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
    v_head_dim=128, qk_nope_head_dim=128, n_group=8, topk_group=4, num_experts_per_tok=8,
    first_k_dense_replace=2, norm_topk_prob=True, hidden_act="silu",
    max_position_embeddings=262144, rms_norm_eps=1e-6, bos_token_id=None,
    eos_token_id=156895, tie_word_embeddings=False, attention_bias=False,
    num_local_experts=512, rope_theta=6_000_000.0, head_dim=128, short_conv_kernel_size=4,
    layer_group_size=6, kda_safe_gate=True, kda_lower_bound=-5.0, layer_types=None,
    mlp_layer_types=None, expert_swiglu_limit_list=None, share_expert_swiglu_limit_list=None,
)}
# fmt: on
BAILING_ALIASES = {
    BAILING: {
        "max_position_embeddings": ("model_max_length",),
        "norm_topk_prob": ("moe_renormalize",),
        "n_group": ("num_expert_group",),
        "num_local_experts": ("num_experts",),
        "num_experts_per_tok": ("num_experts_per_token",),
        "n_shared_experts": ("num_shared_experts",),
        "expert_swiglu_limit_list": ("swiglu_limits",),
        "share_expert_swiglu_limit_list": ("swiglu_limits_shared",),
    }
}


def _limits(f: Any, key: str, num_layers: int) -> tuple[float, ...]:
    limits = f.get(key)
    if limits is None:
        return ()
    if (
        not isinstance(limits, list)
        or len(limits) != num_layers
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in limits)
        or min(limits) < 0
    ):
        raise ValueError(f"HF config {key}: expected {num_layers} numbers >= 0 (0: no clip)")
    return tuple(float(x) for x in limits) if any(limits) else ()


def bailing_fields(f: Any) -> dict:
    """ModelConfig's fields of a Ling 2.5 config; `f` is hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    if f.get("attention_bias"):
        raise ValueError("HF config attention_bias=True: not supported for bailing_hybrid")
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    if kinds is None:
        group = f.required("layer_group_size")
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise ValueError(f"HF config layer_group_size={group!r}: must be an int >= 1")
        kinds = [LAYER_KINDS[(i + 1) % group == 0] for i in range(num_layers)]
    check_layer_kinds(kinds, num_layers, "layer_types")
    heads = f.hf.get("linear_num_heads") or f.required("num_attention_heads")
    head_dim = f.hf.get("linear_head_dim") or f.required("head_dim")
    taps = f.hf.get("linear_conv_kernel_dim") or f.required("short_conv_kernel_size")
    bound = float(f.required("kda_lower_bound")) if f.get("kda_safe_gate") else 0.0
    if bound > 0:
        raise ValueError(f"HF config kda_lower_bound={bound}: must be <= 0 (a log decay)")
    dense = dense_layers(f, num_layers, default_first=2)
    return dict(
        kda_mla_fields(f, kinds, (heads, head_dim, taps), dense),
        head_gate=True,
        kda_full_rank=True,
        kda_gate_bound=bound,
        expert_clip_limits=_limits(f, "expert_swiglu_limit_list", num_layers),
        # (a dense layer's MLP takes no clip: transformers builds it without its limit)
        shared_clip_limits=_unclipped(
            _limits(f, "share_expert_swiglu_limit_list", num_layers), dense
        ),
    )


def _unclipped(limits: tuple[float, ...], dense) -> tuple[float, ...]:
    """`limits` with the dense layers' set to 0 (none); () where none is left."""
    limits = tuple(0.0 if i in dense else x for i, x in enumerate(limits))
    return limits if any(limits) else ()
