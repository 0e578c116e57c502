"""Xiaomi MiMo-V2-Flash's HF config (transformers' mimo_v2_flash: MiMo-V2-Flash, 309B-A15B).

Its attention: q/k heads head_dim wide, values v_head_dim wide and times
attention_value_scale before attention; windowed ("sliding_attention") layers with twice the
full layers' KV heads and a sink logit per query head; RoPE on the first
int(head_dim * partial_rotary_factor) channels (rotate-half pairs), at one base per layer
kind. Its MoE: DeepSeek-V3's router (sigmoid, correction bias, groups) without shared
experts, after dense layers (`mlp_layer_types`). Its MTP modules are not read.

Two spellings are read. transformers' own (what its save_pretrained writes): layer_types,
mlp_layer_types, rope_parameters per layer kind, sliding_window, rms_norm_eps. The released
checkpoints' (the remote code's, which vLLM and SGLang read): hybrid_layer_pattern (1:
windowed), moe_layer_freq (1: MoE), swa_num_key_value_heads, rope_theta / swa_rope_theta /
partial_rotary_factor, sliding_window_size, layernorm_epsilon, add_swa_attention_sink_bias,
add_full_attention_sink_bias. A windowed query sees sliding_window_size keys before it and
itself (transformers' reading, after SGLang: its sliding_window is that plus one)."""

from __future__ import annotations

from typing import Any

from configs.hf_moe import v3_router_fields
from configs.model_config import RopeScaling

MIMO = "mimo_v2_flash"
_KINDS = ("sliding_attention", "full_attention")

# Defaults of transformers 5.25's MiMoV2FlashConfig for the fields read.
# fmt: off
MIMO_DEFAULTS: dict[str, dict[str, Any]] = {MIMO: dict(
    vocab_size=152576, hidden_size=4096, intermediate_size=16384, num_hidden_layers=48,
    num_attention_heads=64, num_key_value_heads=4, hidden_act="silu",
    max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
    attention_bias=False, moe_intermediate_size=2048, num_experts_per_tok=8,
    n_routed_experts=256, routed_scaling_factor=1.0, n_group=1, topk_group=1,
    norm_topk_prob=True, bos_token_id=1, head_dim=192, v_head_dim=128, sliding_window=129,
    layer_types=None, mlp_layer_types=None, attention_value_scale=0.707,
)}
# fmt: on
MIMO_ALIASES = {
    MIMO: {"n_routed_experts": ("num_local_experts",), "rms_norm_eps": ("layernorm_epsilon",)}
}
_THETAS = {_KINDS[1]: 5_000_000.0, _KINDS[0]: 10_000.0}  # (transformers' defaults)


def _per_layer(f: Any, key: str, hub_key: str, names: tuple[str, str]) -> list[str]:
    """transformers' `key` list, else the hub's `hub_key` list of 0 / 1 (names[1] for 1)."""
    num_layers = f.required("num_hidden_layers")
    kinds = f.hf.get(key)
    hub = f.hf.get(hub_key)
    if kinds is None and isinstance(hub, list):
        kinds = [names[1] if v == 1 else names[0] if v == 0 else v for v in hub]
        key = hub_key
    if kinds is None:
        return []
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(names):
        raise ValueError(
            f"HF config {key}: expected {num_layers} entries of "
            f"{names if key != hub_key else (0, 1)}"
        )
    return kinds


def _layer_kinds(f: Any) -> list[str]:
    kinds = _per_layer(f, "layer_types", "hybrid_layer_pattern", ("full_attention", _KINDS[0]))
    if kinds:
        return kinds
    # transformers: the first layer and every sixth full, the rest windowed
    n = f.required("num_hidden_layers")
    return [_KINDS[1] if i == 0 or not (i + 1) % 6 else _KINDS[0] for i in range(n)]


def _dense_layers(f: Any) -> tuple[int, ...]:
    kinds = _per_layer(f, "mlp_layer_types", "moe_layer_freq", ("dense", "sparse"))
    if not kinds:  # transformers: the first layer dense, the rest MoE
        kinds = ["dense"] + ["sparse"] * (f.required("num_hidden_layers") - 1)
    return tuple(i for i, k in enumerate(kinds) if k == "dense")


def _rope_kind(f: Any, kind: str) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) of one layer kind."""
    params = f.hf.get("rope_parameters")
    if isinstance(params, dict) and params:
        p = params.get(kind)
        if not isinstance(p, dict) or p.get("rope_type", "default") != "default":
            raise ValueError(
                f"HF config rope_parameters[{kind!r}]={p!r}: expected a dict of plain RoPE "
                "(rope_type 'default')"
            )
        return float(p.get("rope_theta", _THETAS[kind])), float(
            p.get("partial_rotary_factor", 0.334)
        )
    if f.hf.get("rope_scaling"):
        raise ValueError(
            f"HF config rope_scaling={f.hf['rope_scaling']!r}: not supported for {MIMO}"
        )
    theta = f.hf.get("swa_rope_theta" if kind == _KINDS[0] else "rope_theta") or _THETAS[kind]
    return float(theta), float(f.hf.get("partial_rotary_factor") or 0.334)


def mimo_rope(f: Any) -> tuple[float, RopeScaling]:
    """(rope_theta, RopeScaling) of the full-attention layers (plain RoPE)."""
    return _rope_kind(f, _KINDS[1])[0], RopeScaling()


def _check_hub_geometry(f: Any, kv_heads: int) -> int:
    """The windowed layers' KV heads (the hub's swa_num_key_value_heads, else transformers'
    twice the full layers'); their other geometry must be the full layers'."""
    for hub, own in (
        ("swa_num_attention_heads", "num_attention_heads"),
        ("swa_head_dim", "head_dim"),
        ("swa_v_head_dim", "v_head_dim"),
    ):
        if f.hf.get(hub) is not None and f.hf[hub] != f.get(own):
            raise ValueError(
                f"HF config {hub}={f.hf[hub]!r}: only {own}={f.get(own)!r} (the full "
                "layers') is supported"
            )
    swa = f.hf.get("swa_num_key_value_heads")
    return int(swa) if swa is not None else 2 * kv_heads


def mimo_fields(f: Any) -> dict:
    """ModelConfig's attention, window and MoE fields of a MiMo-V2-Flash config; `f` is
    hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias=True: not supported for {MIMO}")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    if f.hf.get("add_full_attention_sink_bias"):
        raise ValueError(
            "HF config add_full_attention_sink_bias=True: not supported (sinks on the "
            "windowed layers alone, as released)"
        )
    kinds = _layer_kinds(f)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < len(kinds)
    kv_heads = f.required("num_key_value_heads")
    size = f.hf.get("sliding_window_size")
    window = int(size) + 1 if size is not None else f.required("sliding_window")
    (full_theta, full_factor), (swa_theta, swa_factor) = map(
        lambda k: _rope_kind(f, k), _KINDS[::-1]
    )
    if full_factor != swa_factor:
        raise ValueError(
            f"HF config rope_parameters: partial_rotary_factor {full_factor} (full) and "
            f"{swa_factor} (sliding) differ; one for both layer kinds is supported"
        )
    scale = f.get("attention_value_scale")
    sinks = f.hf.get("add_swa_attention_sink_bias", True)
    head_dim = f.required("head_dim")
    return dict(
        num_kv_heads=_check_hub_geometry(f, kv_heads) if windowed else kv_heads,
        head_dim=head_dim,
        v_head_dim=f.required("v_head_dim"),
        global_head_dim=head_dim if windowed else 0,
        global_num_kv_heads=kv_heads if windowed else 0,
        attention_value_scale=1.0 if scale is None else float(scale),
        attention_sinks=bool(sinks) and windowed,
        windowed_sinks_only=bool(sinks) and windowed,
        partial_rotary_factor=full_factor,
        sliding_rope_theta=swa_theta if windowed else 0.0,
        sliding_window=window if windowed else None,
        full_attention_layers=full if windowed else (),
        num_experts=f.required("n_routed_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        **v3_router_fields(f, null_scale=1.0),
        mlp_only_layers=_dense_layers(f),
    )
