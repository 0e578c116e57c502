"""DeepSeek-OCR 2's language model HF config (transformers 5.25's deepseek_ocr2_text, served
from the deepseek_ocr2 wrapper's text_config), read whole.

Llama's attention (a head hidden / heads wide whatever head_dim says, its KV heads, RoPE on
halves; q, k, v and o biased with attention_bias) in DeepSeek-V2's layers: the layers
`mlp_layer_types` calls "dense" a SwiGLU MLP, the "sparse" ones DeepSeek-V2's MoE (softmax
scores, the top k greedily or within the best topk_group of n_group groups, not renormalized,
times routed_scaling_factor) beside n_shared_experts shared experts as one MLP.
Refused with a ValueError naming the field: MLP biases, another activation, another top-k
method, no mlp_layer_types or num_experts_per_tok (transformers cannot build the model)."""

from __future__ import annotations

from typing import Any

DEEPSEEK_OCR2 = "deepseek_ocr2_text"
TYPES, ALIASES = (DEEPSEEK_OCR2,), {}
# Defaults of transformers 5.25's DeepseekOcr2TextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    DEEPSEEK_OCR2: dict(
        vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
        max_position_embeddings=2048, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, rope_theta=10000.0, attention_bias=False, mlp_bias=False,
        n_group=None, topk_group=None, n_routed_experts=64, n_shared_experts=2,
        routed_scaling_factor=1.0, topk_method="greedy", num_experts_per_tok=None,
        moe_intermediate_size=1407, mlp_layer_types=None,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and MoE fields of a DeepSeek-OCR 2 text config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    if f.get("mlp_bias"):
        raise ValueError(f"HF config mlp_bias={f.get('mlp_bias')!r}: not supported")
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("mlp_layer_types")
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - {"dense", "sparse"}:
        raise ValueError(
            f"HF config mlp_layer_types={kinds!r}: expected {num_layers} entries of dense / "
            "sparse (transformers builds no layer without it)"
        )
    method = f.get("topk_method")
    if method not in ("greedy", "group_limited_greedy"):
        raise ValueError(
            f"HF config topk_method={method!r}: transformers' DeepSeek-V2 router takes greedy "
            "or group_limited_greedy"
        )
    groups = {"n_group": 1, "topk_group": 1}
    if method == "group_limited_greedy":
        groups = {key: f.required(key) for key in groups}
    heads = f.required("num_attention_heads")
    bias = bool(f.get("attention_bias"))
    dense = tuple(i for i, k in enumerate(kinds) if k == "dense")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        attention_bias=bias,
        o_proj_bias=bias,
        sliding_window=None,
        full_attention_layers=(),
        num_experts=f.required("n_routed_experts") if len(dense) < num_layers else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("n_shared_experts") or 0,
        scoring_func="softmax",
        topk_method=method,
        **groups,
        norm_topk_prob=False,
        routed_scaling_factor=float(f.required("routed_scaling_factor")),
        mlp_only_layers=dense,
    )
