"""Llama 4's `config.json` fields (transformers' Llama4TextConfig, the language model of its
llama4 wrapper), as its modeling code reads them; configs/hf_config.py reads the rest.

Llama 4 Scout / Maverick: GQA whose layers with RoPE (complex pairs) attend within chunks
of attention_chunk_size keys and RMS-normalize q and k without a weight (use_qk_norm),
while every no_rope_layer_interval-th layer has no RoPE, sees every key and scales its
queries by 1 + attn_scale * log(1 + floor((position + 1) / floor_scale)); MoE layers
(moe_layers, every interleave_moe_layer_step-th) route each token to one expert whose input
it scales by sigmoid(its logit), beside a shared expert; the dense layers' MLP is
intermediate_size_mlp wide.
"""

from __future__ import annotations

from typing import Any

# transformers' Llama4TextConfig defaults (Llama 4 Scout's shapes).
# fmt: off
LLAMA4_DEFAULTS = dict(
    vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
    num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
    max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
    num_experts_per_tok=1, num_local_experts=16, moe_layers=None, interleave_moe_layer_step=1,
    use_qk_norm=True, no_rope_layers=None, no_rope_layer_interval=4, attention_chunk_size=8192,
    layer_types=None, attn_temperature_tuning=True, floor_scale=8192, attn_scale=0.1,
    rope_theta=500000.0,
)
# fmt: on
LAYER_TYPES = ("full_attention", "chunked_attention")


def llama4_fields(f: Any) -> dict:
    """ModelConfig's Llama 4 fields; `f` is hf_config._Fields."""
    num_layers = f.required("num_hidden_layers")
    interval = f.required("no_rope_layer_interval")
    rope = f.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(rope, list) or len(rope) < num_layers or any(r not in (0, 1) for r in rope):
        raise ValueError(
            f"HF config no_rope_layers: expected a list of >= num_hidden_layers={num_layers} "
            "entries, each 0 (no RoPE) or 1"
        )
    chunk = f.get("attention_chunk_size")
    types = f.get("layer_types") or [
        "chunked_attention" if r and chunk is not None else "full_attention" for r in rope
    ]
    if (
        not isinstance(types, list)
        or len(types) != num_layers
        or any(t not in LAYER_TYPES for t in types)
    ):
        raise ValueError(
            f"HF config layer_types: expected num_hidden_layers={num_layers} entries, each "
            f"one of {LAYER_TYPES}"
        )
    if "chunked_attention" in types and chunk is None:
        raise ValueError("HF config layer_types: chunked layers need an attention_chunk_size")
    step = f.required("interleave_moe_layer_step")
    moe = f.get("moe_layers")
    moe = list(range(step - 1, num_layers, step)) if moe is None else moe
    fields = dict(
        nope_layers=tuple(i for i in range(num_layers) if not rope[i]),
        qk_l2_norm=bool(f.get("use_qk_norm")),
        num_experts=f.required("num_local_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=f.required("intermediate_size"),
        intermediate_size=f.required("intermediate_size_mlp"),
        scoring_func="sigmoid",
        router_weight_on_input=True,
        mlp_only_layers=tuple(i for i in range(num_layers) if i not in moe),
    )
    if "chunked_attention" in types:
        full = tuple(i for i, t in enumerate(types) if t == "full_attention")
        fields.update(attention_chunk_size=chunk, full_attention_layers=full)
    if f.get("attn_temperature_tuning"):
        fields.update(
            attn_scale_beta=float(f.required("attn_scale")),
            attn_scale_positions=f.required("floor_scale"),
            attn_scale_offset=1,
            attn_scale_nope_only=True,
        )
    return fields
