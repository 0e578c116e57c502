"""StepFun's Step 3.5 / 3.7 Flash HF config (transformers 5.25's step3p5, Step3p7TextConfig: the
language model of step3p7, served from its text_config), read whole, in the releases'
spelling too.

Laguna's layers (configs/hf_laguna.py) with: every RMSNorm scaled by 1 + its weight in
float32, the q/k norms' too; scores scaled by query_pre_attn_scalar^-0.5 (default head_dim);
a sigmoid output gate per head (`gating` true or "per-head"; "per-element": per channel);
"sliding_attention" layers with num_sliding_attention_heads query heads (per_layer_config's
on reload); RoPE per layer type (rope_parameters per type, or the releases' per-layer
rope_theta and partial_rotary_factors, each type's from its first layer as transformers
takes it, rope_scaling on the global layers); the layers mlp_layer_types calls "dense" (or
that moe_layers_enum leaves out; default: the first three) a SwiGLU MLP, the others
DeepSeek-V3's router with one group (sigmoid scores, the correction bias for the choice
only, renormalized, times moe_router_scaling_factor) beside one shared expert
share_expert_dim wide; the SwiGLUs clipped after the activation per layer (swiglu_limits: the
experts'; swiglu_limits_shared: the shared expert's and a dense layer's MLP; 0: none). The
releases' per-layer lists carry their MTP layers' entries after the model's: dropped, as
transformers does (the MTP layers are not read). hidden_act is not read (transformers sets
SiLU whatever the config says: the releases say "swigluoai").
Refused with a ValueError naming the field: biases, bidirectional attention, layer types
other than those two (sparse attention)."""

from __future__ import annotations

from typing import Any

from configs.hf_laguna import windowed_rope

STEP3P5 = "step3p5"
TYPES = (STEP3P5,)
ALIASES = {
    STEP3P5: {
        "n_routed_experts": ("num_local_experts", "moe_num_experts"),
        "num_key_value_heads": ("num_attention_groups",),
        "num_experts_per_tok": ("moe_top_k",),
        "share_expert_dim": ("share_expert_dims",),
        "num_nextn_predict_layers": ("num_mtp_layers",),
    }
}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's Step3p7TextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    STEP3P5: dict(
        vocab_size=128815, hidden_size=4096, intermediate_size=11264, num_hidden_layers=45,
        num_attention_heads=64, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=128000, rms_norm_eps=1e-5, tie_word_embeddings=False,
        num_experts_per_tok=8, moe_intermediate_size=1280, n_routed_experts=288,
        share_expert_dim=1280, sliding_window=None, num_sliding_attention_heads=None,
        attention_bias=False, query_pre_attn_scalar=None, moe_router_scaling_factor=1.0,
        mlp_bias=False, swiglu_limits=None, swiglu_limits_shared=None, layer_types=None,
        mlp_layer_types=None, gating=True, use_bidirectional_attention=False,
        num_nextn_predict_layers=0, rope_theta=10000.0, pad_token_id=1, bos_token_id=None,
        eos_token_id=None,
    )
}  # fmt: skip


def _per_layer(f: Any, key: str, n: int, mtp: int) -> list | None:
    """The per-layer list `key`, its MTP layers' trailing entries dropped; None if unset."""
    value = f.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) not in (n, n + mtp):
        raise ValueError(f"HF config {key}: expected {n} entries (or {n + mtp}, the MTP layers')")
    return value[:n]


def _limits(f: Any, key: str, n: int, mtp: int) -> tuple[float, ...]:
    limits = _per_layer(f, key, n, mtp) or []
    if not all(x is None or isinstance(x, int | float) and not isinstance(x, bool) for x in limits):
        raise ValueError(f"HF config {key}: expected numbers >= 0 or null (0, null: no clip)")
    limits = [float(x or 0.0) for x in limits]
    if limits and min(limits) < 0:
        raise ValueError(f"HF config {key}: expected numbers >= 0 or null (0, null: no clip)")
    return tuple(limits) if any(limits) else ()


def _layer_kinds(f: Any, n: int, mtp: int) -> tuple[list, list]:
    """(layer_types, mlp_layer_types) as Step3p7TextConfig resolves them."""
    kinds = _per_layer(f, "layer_types", n, mtp) or [_KINDS[1]] * n
    if set(kinds) - set(_KINDS):
        raise ValueError(
            f"HF config layer_types: {sorted(set(kinds) - set(_KINDS))} not supported "
            f"(only {_KINDS})"
        )
    mlps = _per_layer(f, "mlp_layer_types", n, mtp)
    if mlps is None:
        enum = f.hf.get("moe_layers_enum")
        if enum is None:
            sparse = set(range(3, n))
        else:
            items = enum.split(",") if isinstance(enum, str) else enum
            sparse = {int(i) for i in items if str(i).strip()}
        mlps = ["sparse" if i in sparse else "dense" for i in range(n)]
    if set(mlps) - {"dense", "sparse"}:
        raise ValueError(f"HF config mlp_layer_types: expected {n} entries of dense / sparse")
    return kinds, mlps


def _rope_kinds(f: Any, kinds: list, n: int, mtp: int) -> dict:
    """{layer type: its complete RoPE dict}: rope_parameters per type as saved, else from the
    releases' rope_theta (one, or per layer), partial_rotary_factors and rope_scaling (the
    global layers'), each type's from its first layer."""
    saved = f.get("rope_parameters")
    if isinstance(saved, dict) and all(isinstance(saved.get(k), dict) for k in set(kinds)):
        return {
            k: {"rope_type": "default", "partial_rotary_factor": 1.0, **saved[k]} for k in kinds
        }
    theta = f.get("rope_theta")
    thetas = _per_layer(f, "rope_theta", n, mtp) if isinstance(theta, list) else [theta] * n
    factors = _per_layer(f, "partial_rotary_factors", n, mtp)
    scaling = f.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"HF config rope_scaling={scaling!r}: expected a dict or null")
    out = {}
    for kind in set(kinds):
        i = kinds.index(kind)
        p = {"rope_type": "default", "rope_theta": thetas[i]}
        p["partial_rotary_factor"] = factors[i] if factors else 1.0
        if kind == _KINDS[1] and scaling:
            p.update({"rope_type": scaling.get("type", "default"), **scaling})
            p.pop("type", None)
        out[kind] = p
    return out


def _shape(f: Any) -> tuple[int, int, list, list, dict]:
    n = f.required("num_hidden_layers")
    mtp = f.get("num_nextn_predict_layers") or 0
    kinds, mlps = _layer_kinds(f, n, mtp)
    return n, mtp, kinds, mlps, _rope_kinds(f, kinds, n, mtp)


def rope_source(f: Any) -> dict:
    """The HF config with the global layers' RoPE as the model's (hf_config reads its theta
    and scaling from it; with none, the windowed layers')."""
    *_, rope = _shape(f)
    return {**f.hf, "rope_parameters": rope.get(_KINDS[1]) or rope[_KINDS[0]], "rope_scaling": None}


def _heads(f: Any, kinds: list, n: int) -> list[int]:
    """Query heads per layer: per_layer_config's on reload, else num_sliding_attention_heads
    (or the releases' attention_other_setting) on the windowed layers."""
    heads = f.required("num_attention_heads")
    saved = f.hf.get("per_layer_config")
    if isinstance(saved, dict):
        per_layer = [heads] * n
        for key, override in saved.items():
            if not isinstance(override, dict) or set(override) != {"num_attention_heads"}:
                raise ValueError(
                    f"HF config per_layer_config[{key!r}]={override!r}: only num_attention_heads"
                )
            per_layer[int(key)] = override["num_attention_heads"]
        return per_layer
    sliding = f.get("num_sliding_attention_heads")
    if sliding is None:
        sliding = (f.hf.get("attention_other_setting") or {}).get("num_attention_heads", heads)
    return [sliding if k == _KINDS[0] else heads for k in kinds]


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, RoPE, window, MoE and clip fields of a Step 3.5 / 3.7 text
    config; `f` is hf_config._Fields."""
    for key, why in (
        ("attention_bias", "attention biases"),
        ("mlp_bias", "MLP biases"),
        ("use_bidirectional_attention", "bidirectional attention"),
    ):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: {why} not supported")
    gating = f.get("gating")
    if gating not in (True, "per-head", "per-element"):
        raise ValueError(f"HF config gating={gating!r}: expected true, 'per-head' or 'per-element'")
    n, mtp, kinds, mlps, rope = _shape(f)
    full_layers = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full_layers) < n
    window = f.get("sliding_window")
    if windowed and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    heads = f.required("num_attention_heads")
    head_dim = f.get("head_dim") or f.required("hidden_size") // heads
    per_layer = _heads(f, kinds, n)
    scalar = f.get("query_pre_attn_scalar") or head_dim
    dense = tuple(i for i, k in enumerate(mlps) if k == "dense")
    per_head = gating in (True, "per-head")
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=head_dim,
        heads_per_layer=() if set(per_layer) <= {heads} else tuple(per_layer),
        **windowed_rope(rope.get(_KINDS[1]), rope.get(_KINDS[0]), windowed),
        attention_multiplier=0.0 if scalar == head_dim else float(scalar) ** -0.5,
        qk_norm=True,
        norm_zero_centered=True,
        attn_output_gate=not per_head,
        head_gate=per_head,
        sliding_window=window if windowed else None,
        full_attention_layers=full_layers if windowed else (),
        num_experts=f.required("n_routed_experts") if len(dense) < n else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=f.required("share_expert_dim"),
        mlp_only_layers=dense,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=float(f.required("moe_router_scaling_factor")),
        expert_clip_limits=_limits(f, "swiglu_limits", n, mtp),
        shared_clip_limits=_limits(f, "swiglu_limits_shared", n, mtp),
        num_nextn_predict_layers=0,  # (Step's MTP layers: not read)
    )
