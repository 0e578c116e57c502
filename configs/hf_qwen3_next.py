"""Qwen3-Next and Qwen3.5 HF configs (transformers' qwen3_next, qwen3_5_text and
qwen3_5_moe_text; Qwen3.5's come in the qwen3_5 / qwen3_5_moe multimodal wrappers): gated
DeltaNet layers between gated full-attention ones (ModelConfig.linear_attention_layers),
(1 + weight) RMSNorms, RoPE on a quarter of each head, and (the MoE ones) a renormalized
softmax top-k router beside one shared expert scaled by sigmoid(shared_expert_gate).
Qwen3.5's interleaved M-RoPE gives text tokens the same position on its three axes: plain
RoPE (image and video inputs are not supported)."""

from __future__ import annotations

from typing import Any

LINEAR_MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

# Defaults of transformers 5.25's Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig.
# fmt: off
_LINEAR = dict(
    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_num_key_heads=16, linear_num_value_heads=32, layer_types=None,
    full_attention_interval=4, num_key_value_heads=2, head_dim=256, rms_norm_eps=1e-6,
    max_position_embeddings=32768, partial_rotary_factor=0.25, bos_token_id=None,
    eos_token_id=None,
)
LINEAR_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": dict(
        _LINEAR, vocab_size=151936, hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=48, num_attention_heads=16, decoder_sparse_step=1,
        moe_intermediate_size=512, shared_expert_intermediate_size=512,
        num_experts_per_tok=10, num_experts=512, norm_topk_prob=True, mlp_only_layers=None,
    ),
    "qwen3_5_text": dict(
        _LINEAR, vocab_size=248320, hidden_size=4096, intermediate_size=12288,
        num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4,
    ),
    "qwen3_5_moe_text": dict(
        _LINEAR, vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
        num_attention_heads=16, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, num_experts_per_tok=8, num_experts=256,
    ),
}
# fmt: on


LAYER_KINDS = ("linear_attention", "full_attention")


def check_layer_kinds(kinds: Any, num_layers: int, field: str = "layer_types") -> None:
    """A hybrid model's per-layer kinds: num_layers entries, each one of LAYER_KINDS."""
    if (
        not isinstance(kinds, list)
        or len(kinds) != num_layers
        or any(k not in LAYER_KINDS for k in kinds)
    ):
        raise ValueError(
            f"HF config {field}: expected {num_layers} entries, each one of {LAYER_KINDS}"
        )


def linear_fields(f: Any, model_type: str) -> dict:
    """ModelConfig's linear-attention, gating and MoE fields of these families; `f` is
    hf_config._Fields."""
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    if kinds is None:  # transformers: every full_attention_interval-th layer is full
        interval = f.get("full_attention_interval")
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f"HF config full_attention_interval={interval!r}: must be an int >= 1")
        kinds = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    check_layer_kinds(kinds, num_layers)
    out = dict(
        linear_attention_layers=tuple(i for i, k in enumerate(kinds) if k == "linear_attention"),
        linear_num_key_heads=f.required("linear_num_key_heads"),
        linear_num_value_heads=f.required("linear_num_value_heads"),
        linear_key_head_dim=f.required("linear_key_head_dim"),
        linear_value_head_dim=f.required("linear_value_head_dim"),
        linear_conv_kernel=f.required("linear_conv_kernel_dim"),
        attn_output_gate=True,
        norm_zero_centered=True,
    )
    if model_type == "qwen3_5_text":
        return out
    step = (f.get("decoder_sparse_step") or 1) if model_type == "qwen3_next" else 1
    out.update(
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        # (Qwen3.5's router always renormalizes: its class has no norm_topk_prob.)
        norm_topk_prob=model_type == "qwen3_5_moe_text" or bool(f.get("norm_topk_prob")),
        mlp_only_layers=tuple(f.get("mlp_only_layers") or ()) if model_type == "qwen3_next" else (),
        first_k_dense_replace=step - 1,
        moe_layer_freq=step,
        num_shared_experts=1,
        shared_intermediate_size=f.required("shared_expert_intermediate_size"),
        shared_expert_gate=True,
    )
    if model_type == "qwen3_5_moe_text":  # (its class has none: no layer is dense)
        out["intermediate_size"] = out["moe_intermediate_size"]
    return out
