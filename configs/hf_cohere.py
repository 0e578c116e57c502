"""Cohere's HF configs: cohere2 (Command R7B, Command A) and cohere2_moe (Command A+); and
cohere (Command R, Command R+: every layer global and rotated, no window; with use_qk_norm
Cohere's LayerNorm on q and k per head, a weight per head and channel).

Their layers: attention and MLP side by side on one normed input (ModelConfig
parallel_block), Cohere's LayerNorm (mean-subtracted, no bias; cohere2_moe's RMSNorm where
rms_norm_eps is set); the "sliding_attention" layers windowed and rotated (RoPE on
interleaved pairs), the "full_attention" ones global and without positions (but for
cohere2_moe's dense prefix layers under prefix_dense_sliding_window_pattern 1, which
transformers rotates); the logits times logit_scale; embeddings tied by default.
cohere2's head_dim is hidden_size / heads whatever the config says (transformers sets it so).

The layer kinds: `layer_types`, else transformers' rule: every sliding_window_pattern-th
layer global (cohere2_moe: its first_k_dense_replace dense layers by
prefix_dense_sliding_window_pattern, the rest by sliding_window_pattern).

cohere2_moe's MLPs: per `mlp_layer_types` (else the first first_k_dense_replace dense), a
SwiGLU MLP prefix_dense_intermediate_size wide (else intermediate_size) or top-k experts
intermediate_size wide under a router choosing by logit: "softmax" over the k chosen
(Mixtral's weights), or "sigmoid" of them (renormalized with norm_topk_prob); its
num_shared_experts as one MLP num_shared_experts x intermediate_size wide, summed with the
routed output or averaged ("average")."""

from __future__ import annotations

from typing import Any

COHERE, COHERE2, COHERE2_MOE = "cohere", "cohere2", "cohere2_moe"
TYPES = (COHERE, COHERE2, COHERE2_MOE)
ALIASES: dict = {}

# Defaults of transformers 5.25's Cohere2Config and Cohere2MoeConfig for the fields read.
_COMMON = dict(
    vocab_size=256000, hidden_size=8192, intermediate_size=22528, logit_scale=0.0625,
    num_hidden_layers=40, num_attention_heads=64, num_key_value_heads=None, hidden_act="silu",
    max_position_embeddings=8192, layer_norm_eps=1e-5, bos_token_id=5, eos_token_id=255001,
    tie_word_embeddings=True, attention_bias=False, sliding_window=4096, layer_types=None,
    sliding_window_pattern=4, rope_theta=10000.0,
)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers 5.25's CohereConfig (Command R's shapes; its own RoPE base)
    COHERE: dict(
        _COMMON, num_key_value_heads=None, use_qk_norm=False, sliding_window=None,
        sliding_window_pattern=None, rope_theta=500000.0,
    ),
    COHERE2: _COMMON,
    COHERE2_MOE: dict(
        _COMMON, head_dim=128, num_experts_per_tok=2, num_experts=8, num_shared_experts=0,
        shared_expert_combination_strategy="average", expert_selection_fn="softmax",
        mlp_layer_types=None, prefix_dense_sliding_window_pattern=1, norm_topk_prob=True,
        prefix_dense_intermediate_size=None, rms_norm_eps=None, first_k_dense_replace=0,
    ),
}  # fmt: skip
_KINDS = ("sliding_attention", "full_attention")


def _pattern(f: Any, name: str) -> int:
    p = f.get(name)
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"HF config {name}={p!r}: expected an integer >= 1")
    return p


def _kinds(f: Any, num_layers: int, first_dense: int) -> list:
    kinds = f.get("layer_types")
    if kinds is None:
        prefix = _pattern(f, "prefix_dense_sliding_window_pattern") if first_dense else 1
        rest = _pattern(f, "sliding_window_pattern")
        kinds = [_KINDS[(i + 1) % prefix == 0] for i in range(first_dense)]
        kinds += [_KINDS[(i + 1) % rest == 0] for i in range(num_layers - first_dense)]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return kinds


def _logit_scale(f: Any) -> float:
    scale = f.required("logit_scale")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0:
        raise ValueError(f"HF config logit_scale={scale!r}: expected a number > 0")
    return float(scale)


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, norm, logit and MoE fields of a Cohere config; `f`
    is hf_config._Fields."""
    for key, want in (("hidden_act", "silu"), ("attention_bias", False)):
        if f.get(key) != want:
            raise ValueError(f"HF config {key}={f.get(key)!r}: only {want!r} is supported")
    num_layers, heads = f.required("num_hidden_layers"), f.required("num_attention_heads")
    if model_type == COHERE:  # (no window: every layer global and rotated)
        return dict(
            num_kv_heads=f.get("num_key_value_heads") or heads,
            head_dim=f.required("hidden_size") // heads,
            qk_norm=bool(f.get("use_qk_norm")),
            sliding_window=None,
            full_attention_layers=(),
            parallel_block=True,
            norm_kind="layer",
            rms_norm_eps=float(f.required("layer_norm_eps")),
            logit_scale=_logit_scale(f),
        )
    if f.get("sliding_window") is None:
        raise ValueError("HF config sliding_window: null is not supported (no layer rotates)")
    moe = model_type == COHERE2_MOE
    first = (f.get("first_k_dense_replace") or 0) if moe else 0
    kinds = _kinds(f, num_layers, first)
    dense = f.get("mlp_layer_types") if moe else None
    if dense is None:
        dense = ["dense" if i < first else "sparse" for i in range(num_layers)]
    if not isinstance(dense, list) or len(dense) != num_layers or set(dense) - {"dense", "sparse"}:
        raise ValueError(f"HF config mlp_layer_types: expected {num_layers} of dense / sparse")
    # (transformers' Cohere2MoeAttention rotates a dense layer's global attention too)
    forced = moe and f.get("prefix_dense_sliding_window_pattern") == 1
    full = tuple(i for i, k in enumerate(kinds) if k == "full_attention")
    rms = f.get("rms_norm_eps") if moe else None
    out = dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("head_dim") if moe else f.required("hidden_size") // heads,
        sliding_window=f.get("sliding_window") if len(full) < num_layers else None,
        full_attention_layers=full if len(full) < num_layers else (),
        nope_layers=tuple(i for i in full if not (forced and dense[i] == "dense")),
        parallel_block=True,
        norm_kind="rms" if rms is not None else "layer",
        rms_norm_eps=float(rms if rms is not None else f.required("layer_norm_eps")),
        logit_scale=_logit_scale(f),
    )
    if not moe:
        return out
    width, shared = f.required("intermediate_size"), f.get("num_shared_experts") or 0
    combine = f.get("shared_expert_combination_strategy")
    select = f.get("expert_selection_fn")
    if combine not in ("sum", "average") or select not in ("softmax", "sigmoid"):
        raise ValueError(
            f"HF config shared_expert_combination_strategy={combine!r}, expert_selection_fn="
            f"{select!r}: expected 'sum' or 'average', and 'softmax' or 'sigmoid'"
        )
    return dict(
        out,
        intermediate_size=f.get("prefix_dense_intermediate_size") or width,
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=width,
        num_shared_experts=1 if shared else 0,
        shared_intermediate_size=shared * width,
        shared_expert_average=shared > 0 and combine == "average",
        scoring_func="softmax_topk" if select == "softmax" else "sigmoid",
        norm_topk_prob=select == "sigmoid" and bool(f.get("norm_topk_prob")),
        mlp_only_layers=tuple(i for i, k in enumerate(dense) if k == "dense"),
    )
