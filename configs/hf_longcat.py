"""Meituan's LongCat-Flash HF config (transformers' longcat_flash: LongCat-Flash-Chat, 560B).

Each of its `num_layers` layers is two of ModelConfig's decoder layers (transformers'
num_hidden_layers, 2 x num_layers): two MLA sublayers (a q LoRA; queries scaled by
sqrt(hidden / q_lora_rank), the normed latent by sqrt(hidden / kv_lora_rank):
ModelConfig.mla_lora_scales), each followed by a dense SwiGLU MLP (ffn_hidden_size), and a
shortcut MoE (ModelConfig.shortcut_moe) that reads the first MLP's input and whose output
joins after the second: a float32 softmax router over n_routed_experts experts
(expert_ffn_hidden_size wide) and zero_expert_num zero-computation ones (identity: the
token times its weight), the choice by score + correction bias, the moe_topk weights not
renormalized, times routed_scaling_factor. Its MTP module is not read."""

from __future__ import annotations

from typing import Any

LONGCAT = "longcat_flash"
TYPES, ALIASES = (LONGCAT,), {}

# Defaults of transformers 5.25's LongcatFlashConfig for the fields read (num_hidden_layers:
# its property, 2 x num_layers, what config_from_hf's generic read finds).
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {LONGCAT: dict(
    vocab_size=131072, hidden_size=6144, num_layers=28, num_hidden_layers=56,
    num_attention_heads=64, hidden_act="silu", max_position_embeddings=131072,
    rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    attention_bias=False, ffn_hidden_size=12288, q_lora_rank=1536, kv_lora_rank=512,
    qk_nope_head_dim=128, qk_rope_head_dim=64, head_dim=64, v_head_dim=128, qk_head_dim=None,
    moe_topk=12, n_routed_experts=512, zero_expert_num=256, expert_ffn_hidden_size=2048,
    routed_scaling_factor=6.0, rope_theta=10000000.0,
)}
# fmt: on


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's fields of a LongCat-Flash config (num_layers: the decoder layers, two
    per LongCat layer); `f` is hf_config._Fields."""
    nope, rope = f.required("qk_nope_head_dim"), f.required("qk_rope_head_dim")
    for key, want, why in (
        ("head_dim", rope, "transformers ropes head_dim channels: the rope part's"),
        ("qk_head_dim", nope + rope, "qk_nope_head_dim + qk_rope_head_dim"),
    ):
        value = f.get(key)
        if value is not None and value != want:
            raise ValueError(f"HF config {key}={value!r}: only {want} is supported ({why})")
    for key, why in (("attention_bias", "attention biases"), ("router_bias", "a router bias")):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: {why} not supported")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    kind = f.hf.get("zero_expert_type", "identity")
    if kind != "identity":
        raise ValueError(f"HF config zero_expert_type={kind!r}: only 'identity' is supported")
    return dict(
        num_layers=2 * f.required("num_layers"),
        intermediate_size=f.required("ffn_hidden_size"),
        attention_type="mla",
        q_lora_rank=f.required("q_lora_rank"),
        kv_lora_rank=f.required("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=f.required("v_head_dim"),
        rope_interleave=True,
        mla_lora_scales=True,
        num_experts=f.required("n_routed_experts"),
        zero_experts=f.get("zero_expert_num") or 0,
        num_experts_per_tok=f.required("moe_topk"),
        moe_intermediate_size=f.required("expert_ffn_hidden_size"),
        scoring_func="softmax",
        topk_method="noaux_tc",
        routed_scaling_factor=float(f.required("routed_scaling_factor")),
        moe_layer_freq=2,
        shortcut_moe=True,
    )
