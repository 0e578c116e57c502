"""Rhymes' Aria language model (transformers 5.25's aria_text; served alone from an "aria"
checkpoint, its vision tower not read: hf_wrappers.MULTIMODAL_WRAPPERS), read whole.

Llama's attention and RoPE; an MoE on every layer: the top `moe_topk` of
`moe_num_experts` router logits, softmaxed among themselves (gpt-oss's rule without its
bias), over SiLU-gated experts `intermediate_size` wide (stored fused as the release keeps
them, fc1 [E, D, 2F] and fc2 [E, F, D]), beside `moe_num_shared_experts` shared experts as one
MLP of their summed width. Refused with a ValueError naming the field: attention or MLP
biases (Llama's honour them, on o_proj too), a hidden_act other than SiLU."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads

ARIA = "aria_text"
TYPES, ALIASES = (ARIA,), {}
# Defaults of transformers 5.25's AriaTextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    ARIA: dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=4096, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, moe_num_experts=8, moe_topk=2,
        moe_num_shared_experts=2, bos_token_id=1, eos_token_id=2,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and MoE fields of an Aria language model config; `f` is
    hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: not supported")
    shared = f.required("moe_num_shared_experts")
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise ValueError(f"HF config moe_num_shared_experts={shared!r}: expected an int >= 0")
    return dict(
        **silu_gqa_heads(f),
        sliding_window=None,
        full_attention_layers=(),
        num_experts=f.required("moe_num_experts"),
        num_experts_per_tok=f.required("moe_topk"),
        moe_intermediate_size=f.required("intermediate_size"),
        num_shared_experts=shared,
        scoring_func="softmax_topk",
    )
