"""LG K-EXAONE's HF config (transformers' exaone_moe: K-EXAONE-236B-A23B): EXAONE 4's
attention (q/k RMSNorms per head; with a sliding window, the "sliding_attention" layers
windowed and rotated, the "full_attention" ones global and without positions) in OLMoE's
pre-norm layers, and DeepSeek-V3's MoE (sigmoid router with its correction bias, groups,
shared experts of num_shared_experts x moe_intermediate_size) after dense layers
(`mlp_layer_types`, else the first `first_k_dense_replace`). Its MTP module is not read.

The layer kinds: `layer_types`, else transformers' rule from an integer
`sliding_window_pattern` p (every p-th layer global, the others windowed); no window at all
without `sliding_window`.

LG's EXAONE 4.0 (transformers' exaone4: EXAONE-4.0-32B, -1.2B) is the dense model of the same
attention in OLMo 2's layers: each block's output normed, nothing before the block
(ModelConfig.pre_norms False), a SwiGLU MLP on every layer."""

from __future__ import annotations

from typing import Any

from configs.hf_moe import v3_router_fields
from configs.hf_olmo import POST_NORMED

EXAONE_MOE, EXAONE4 = "exaone_moe", "exaone4"
EXAONE_TYPES = (EXAONE_MOE, EXAONE4)

# Defaults of transformers 5.25's ExaoneMoeConfig for the fields read.
# fmt: off
EXAONE_DEFAULTS: dict[str, dict[str, Any]] = {EXAONE_MOE: dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
    max_position_embeddings=2048, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=53,
    tie_word_embeddings=False, sliding_window=4096, sliding_window_pattern=4,
    layer_types=None, mlp_layer_types=None, first_k_dense_replace=1,
    moe_intermediate_size=1024, num_experts=64, num_experts_per_tok=8, num_shared_experts=1,
    norm_topk_prob=True, routed_scaling_factor=2.5, n_group=1, topk_group=1,
    num_nextn_predict_layers=0,
)}
# transformers 5.25's Exaone4Config.
EXAONE_DEFAULTS[EXAONE4] = dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
    max_position_embeddings=2048, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=2,
    tie_word_embeddings=False, sliding_window=4096, sliding_window_pattern=4,
    layer_types=None,
)
# fmt: on
_KINDS = ("sliding_attention", "full_attention")


def _layer_kinds(f: Any, num_layers: int) -> list:
    kinds = f.get("layer_types")
    window = f.get("sliding_window")
    if kinds is None and window is None:
        kinds = [_KINDS[1]] * num_layers
    elif kinds is None:
        p = f.get("sliding_window_pattern")
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ValueError(
                f"HF config sliding_window_pattern={p!r}: expected an integer >= 1 (or "
                "layer_types; transformers reads no other form)"
            )
        kinds = [_KINDS[1] if (i + 1) % p == 0 else _KINDS[0] for i in range(num_layers)]
    if (
        not isinstance(kinds, list)
        or len(kinds) != num_layers
        or any(k not in _KINDS for k in kinds)
    ):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    if window is None and _KINDS[0] in kinds:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    return kinds


def exaone_fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window and MoE (K-EXAONE) or norm (EXAONE 4.0) fields;
    `f` is hf_config._Fields."""
    attention = _attention_fields(f)
    if model_type == EXAONE4:
        return dict(attention, **POST_NORMED)
    return dict(attention, **_moe_fields(f))


def _attention_fields(f: Any) -> dict:
    kinds = _layer_kinds(f, f.required("num_hidden_layers"))
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < len(kinds)
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        qk_norm=True,
        sliding_window=f.get("sliding_window") if windowed else None,
        full_attention_layers=full if windowed else (),
        # (with a window, the global layers take no positions: EXAONE 4's attention)
        nope_layers=full if f.get("sliding_window") is not None else (),
    )


def _moe_fields(f: Any) -> dict:
    num_layers = f.required("num_hidden_layers")
    dense = f.get("mlp_layer_types")
    if dense is None:
        first = f.get("first_k_dense_replace") or 0
        dense = ["dense" if i < first else "sparse" for i in range(num_layers)]
    if not isinstance(dense, list) or len(dense) != num_layers or set(dense) - {"dense", "sparse"}:
        raise ValueError(f"HF config mlp_layer_types: expected {num_layers} of dense / sparse")
    return dict(
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("num_shared_experts") or 0,
        **v3_router_fields(f),
        mlp_only_layers=tuple(i for i, k in enumerate(dense) if k == "dense"),
    )
