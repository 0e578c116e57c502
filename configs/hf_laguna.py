"""Poolside's Laguna HF config (transformers' laguna: Laguna XS.2 / XS 2.1, S 2.1, M.1), and
JetBrains' Mellum (mellum: Qwen3-MoE's attention and experts in Laguna's layers; below).

AFMoE-style attention: q/k RMSNorms per head and an output gate from its own projection
g_proj, softplus rather than sigmoid, one per head (`gating` true or "per-head": XS.2) or
per channel ("per-element": M.1); query heads per layer (`num_attention_heads_per_layer`,
the KV heads the same everywhere); "sliding_attention" layers windowed, "full_attention"
ones global, each kind with its own RoPE in `rope_parameters` (XS.2: YaRN on the leading
half of the global layers' heads at base 5e5, plain RoPE on the whole of the windowed
ones' at 1e4). Llama's pre-norm blocks; the layers `mlp_layer_types` calls "dense" a
SwiGLU MLP, the "sparse" ones DeepSeek-V3's router with one group (sigmoid scores, the
correction bias for the choice only, renormalized, times `moe_routed_scaling_factor`),
its logits first capped by `moe_router_logit_softcapping` (cap * tanh(x / cap); 0: none),
beside one shared expert `shared_expert_intermediate_size` wide.

Refused with a ValueError naming the field: router weights on the input
(moe_apply_router_weight_on_input, which transformers refuses too), attention biases, a
windowed layer's RoPE other than plain, partial rotation of the windowed layers with
scaling on the global ones."""

from __future__ import annotations

from typing import Any

LAGUNA, MELLUM = "laguna", "mellum"
TYPES, ALIASES = (LAGUNA, MELLUM), {MELLUM: {"num_experts": ("num_local_experts",)}}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's LagunaConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    LAGUNA: dict(
        vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
        num_attention_heads=48, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=False,
        num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, sliding_window=512, attention_bias=False,
        gating=True, num_attention_heads_per_layer=None, layer_types=None,
        mlp_layer_types=None, moe_routed_scaling_factor=1.0,
        moe_apply_router_weight_on_input=False, moe_router_logit_softcapping=0.0,
        rope_parameters={
            "full_attention": {
                "rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5
            },
            "sliding_attention": {
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0
            },
        },
        bos_token_id=None, eos_token_id=None,
    )
}  # fmt: skip
# transformers 5.25's MellumConfig (JetBrains' Mellum: Qwen3-MoE's attention and experts in
# Laguna's layer layout, its MTP layer not read).
DEFAULTS[MELLUM] = dict(
    vocab_size=98304, hidden_size=2304, intermediate_size=7168, num_hidden_layers=28,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, hidden_act="silu",
    max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=False,
    sliding_window=1024, attention_bias=False, num_experts=64, num_experts_per_tok=8,
    moe_intermediate_size=896, norm_topk_prob=True, layer_types=None, mlp_layer_types=None,
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    },
    bos_token_id=None, eos_token_id=None,
)  # fmt: skip


def _rope_kinds(f: Any) -> tuple[dict | None, dict | None]:
    """(the global layers' RoPE dict, the windowed layers'), each complete, or None where
    rope_parameters has none for that kind (a kind no layer has may go without)."""
    params = f.get("rope_parameters")
    if not isinstance(params, dict) or not set(params) & set(_KINDS):
        raise ValueError(
            f"HF config rope_parameters={params!r}: Laguna's has an entry per layer type {_KINDS}"
        )
    kinds = []
    for kind in _KINDS[::-1]:
        p = params.get(kind)
        if p is not None and not isinstance(p, dict):
            raise ValueError(f"HF config rope_parameters.{kind}={p!r}: expected a dict")
        kinds.append(
            None if p is None else {"rope_type": "default", "partial_rotary_factor": 1.0, **p}
        )
    return kinds[0], kinds[1]


def rope_source(f: Any) -> dict:
    """The HF config with the global layers' RoPE as the model's (hf_config reads its
    theta and scaling from it; with none, the windowed layers')."""
    full, sliding = _rope_kinds(f)
    return {**f.hf, "rope_parameters": full or sliding, "rope_scaling": None}


def windowed_rope(full: dict | None, sliding: dict | None, windowed: bool) -> dict:
    """ModelConfig's RoPE fields of global layers with RoPE `full` beside windowed ones with
    `sliding` (_rope_kinds' dicts; `windowed`: whether any layer is windowed): the global
    layers' rotated part, and the windowed layers' base and whole-head rotation (their RoPE
    plain, on the whole head or on the global layers' part)."""
    full = full or sliding
    rotary = dict(partial_rotary_factor=float(full["partial_rotary_factor"]))
    if not windowed:
        return rotary
    if sliding["rope_type"] != "default":
        raise ValueError(
            f"HF config rope_parameters.sliding_attention.rope_type="
            f"{sliding['rope_type']!r}: only 'default' (plain RoPE)"
        )
    whole = sliding["partial_rotary_factor"] in (1, 1.0)
    if not whole and sliding["partial_rotary_factor"] != full["partial_rotary_factor"]:
        raise ValueError(
            f"HF config rope_parameters.sliding_attention.partial_rotary_factor="
            f"{sliding['partial_rotary_factor']!r}: 1, or the full layers' "
            f"{full['partial_rotary_factor']!r}"
        )
    return dict(
        rotary,
        rope_scaling_full_only=True,
        sliding_rope_theta=float(sliding.get("rope_theta", 10000.0)),
        sliding_full_rotary=whole,
    )


def _layer_list(f: Any, key: str, num_layers: int, allowed: tuple, default: list) -> list:
    value = f.get(key)
    value = default if value is None else value
    if not isinstance(value, list) or len(value) != num_layers or set(value) - set(allowed):
        raise ValueError(f"HF config {key}: expected {num_layers} entries of {allowed}")
    return value


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, RoPE, window and MoE fields of a Laguna (or Mellum) config;
    `f` is hf_config._Fields."""
    if model_type == MELLUM:
        return _mellum_fields(f)
    for key, why in (
        ("moe_apply_router_weight_on_input", "router weights on the input"),
        ("attention_bias", "attention biases"),
    ):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: {why} not supported")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    gating = f.get("gating")
    if gating not in (True, False, "per-head", "per-element"):
        raise ValueError(f"HF config gating={gating!r}: expected true, 'per-head' or 'per-element'")
    if gating is False:
        raise ValueError("HF config gating=False: Laguna's attention always has its g_proj")
    per_head = gating in (True, "per-head")
    num_layers = f.required("num_hidden_layers")
    heads = f.required("num_attention_heads")
    kinds, mlps = _layouts(f, 1)
    per_layer = f.get("num_attention_heads_per_layer")
    per_layer = [heads] * num_layers if per_layer is None else per_layer
    if not isinstance(per_layer, list) or len(per_layer) != num_layers:
        raise ValueError(f"HF config num_attention_heads_per_layer: expected {num_layers} entries")
    full_layers = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full_layers) < num_layers
    full, sliding = _rope_kinds(f)
    for kind, p, used in ((_KINDS[1], full, full_layers), (_KINDS[0], sliding, windowed)):
        if used and p is None:
            raise ValueError(f"HF config rope_parameters: no {kind!r} entry for its layers")
    rotary = windowed_rope(full, sliding, windowed)
    window = f.get("sliding_window")
    if windowed and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    dense = tuple(i for i, k in enumerate(mlps) if k == "dense")
    cap = f.get("moe_router_logit_softcapping") or 0.0
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        heads_per_layer=() if set(per_layer) <= {heads} else tuple(per_layer),
        **rotary,
        qk_norm=True,
        attn_output_gate=not per_head,
        head_gate=per_head,
        attn_gate_act="softplus",
        sliding_window=window if windowed else None,
        full_attention_layers=full_layers if windowed else (),
        num_experts=f.required("num_experts") if len(dense) < num_layers else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=f.required("shared_expert_intermediate_size"),
        mlp_only_layers=dense,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=float(f.required("moe_routed_scaling_factor")),
        router_logit_softcapping=float(cap),
    )


def _layouts(f: Any, dense_default: int) -> tuple[list, list]:
    """(layer_types, mlp_layer_types), each checked; their defaults every layer global and
    the first `dense_default` layers dense."""
    num_layers = f.required("num_hidden_layers")
    kinds = _layer_list(f, "layer_types", num_layers, _KINDS, [_KINDS[1]] * num_layers)
    mlps = ["dense"] * dense_default + ["sparse"] * (num_layers - dense_default)
    return kinds, _layer_list(f, "mlp_layer_types", num_layers, ("dense", "sparse"), mlps)


def _mellum_fields(f: Any) -> dict:
    """Mellum: Qwen3-MoE's attention (q/k RMSNorms per head, RoPE over the whole head: a
    partial factor is refused) on Laguna's layer kinds, each with its plain RoPE; dense
    layers by mlp_layer_types (default none), the others Qwen3-MoE's softmax top-k."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    kinds, mlps = _layouts(f, 0)
    full_layers = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full_layers) < len(kinds)
    full, sliding = _rope_kinds(f)
    for kind, p in ((_KINDS[1], full), (_KINDS[0], sliding)):
        if kind in kinds and p is None:
            raise ValueError(f"HF config rope_parameters: no {kind!r} entry for its layers")
        if p is not None and p["partial_rotary_factor"] not in (1, 1.0):
            raise ValueError(
                f"HF config rope_parameters.{kind}.partial_rotary_factor="
                f"{p['partial_rotary_factor']!r}: Mellum rotates whole heads (only 1)"
            )
    if windowed and sliding["rope_type"] != "default":
        raise ValueError(
            f"HF config rope_parameters.sliding_attention.rope_type={sliding['rope_type']!r}: "
            "only 'default' (plain RoPE)"
        )
    window = f.get("sliding_window")
    if windowed and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    heads = f.required("num_attention_heads")
    dense = tuple(i for i, k in enumerate(mlps) if k == "dense")
    rotary = {}
    if windowed:
        theta = float(sliding.get("rope_theta", 10000.0))
        rotary = dict(rope_scaling_full_only=True, sliding_rope_theta=theta)
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        qk_norm=True,
        **rotary,
        sliding_window=window if windowed else None,
        full_attention_layers=full_layers if windowed else (),
        num_experts=f.required("num_experts") if len(dense) < len(kinds) else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        mlp_only_layers=dense,
        norm_topk_prob=bool(f.get("norm_topk_prob")),
    )
