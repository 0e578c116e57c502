"""Nemotron-H's HF config (transformers' nemotron_h: NVIDIA Nemotron 3 Nano / Super, Nemotron-H):
a stack of blocks, each one mixer after its own RMSNorm: Mamba-2 ("M", "linear_attention"),
attention without positions ("*", "full_attention"), a relu2 MLP ("-", "mlp") or
DeepSeek-V3's MoE with relu2 experts ("E", "moe"). `layers_block_type`, else the release's
`hybrid_override_pattern` (its letters), names them.

moeserve's decoder layer is a mixer and the feed-forward block after it, so each mixer
block starts a layer and the MLP or MoE block right after it (if any) joins it; a layer
whose mixer another mixer follows has none (ModelConfig.no_ffn_layers). A feed-forward block
that follows no mixer (first, or after another) has no layer to join: refused."""

from __future__ import annotations

import math
from typing import Any

from configs.hf_moe import v3_router_fields

NEMOTRON_H = "nemotron_h"

_LETTERS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
_MIXERS = ("linear_attention", "full_attention")
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}  # older configs' names

# Defaults of transformers 5.25's NemotronHConfig for the fields read (and, for the
# config_from_hf checks, the layer count its default 4-block pattern would give).
# fmt: off
NEMOTRON_DEFAULTS: dict[str, dict[str, Any]] = {NEMOTRON_H: dict(
    vocab_size=131072, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, max_position_embeddings=4096, intermediate_size=21504,
    mlp_hidden_act="relu2", ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64,
    mamba_hidden_act="silu", n_groups=8, conv_kernel=4, time_step_limit=(0.0, math.inf),
    use_conv_bias=True, n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=7688,
    moe_shared_expert_intermediate_size=7688, moe_latent_size=None, num_experts_per_tok=2,
    routed_scaling_factor=1.0, n_group=1, topk_group=1, norm_topk_prob=True,
    layer_norm_epsilon=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    num_hidden_layers=4, sliding_window=None,
)}
# fmt: on
# The class's attribute_map and __post_init__ renames: the field read <- its other names.
NEMOTRON_ALIASES = {
    NEMOTRON_H: {
        "n_routed_experts": ("num_local_experts",),
        "n_groups": ("mamba_n_groups",),
        "conv_kernel": ("mamba_d_conv",),
        "rms_norm_eps": ("layer_norm_epsilon",),
    }
}


def _blocks(f: Any) -> list[str]:
    kinds = f.hf.get("layers_block_type") or f.hf.get("layer_types")
    pattern = f.hf.get("hybrid_override_pattern")
    if kinds is None and isinstance(pattern, str):
        kinds = pattern_kinds(pattern)
    if kinds is None:
        raise ValueError("HF config layers_block_type (or hybrid_override_pattern): required")
    kinds = [_LEGACY.get(k, k) for k in kinds] if isinstance(kinds, list) else kinds
    if not isinstance(kinds, list) or not kinds or any(k not in _LETTERS.values() for k in kinds):
        raise ValueError(
            f"HF config layers_block_type: expected a list, each one of {list(_LETTERS.values())}"
        )
    return kinds


def dt_limit(value: Any) -> tuple[float, float]:
    """time_step_limit: [low, high], high maybe Infinity (a JSON extension) or transformers
    5's {"__float__": "Infinity"}."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"HF config time_step_limit={value!r}: expected [low, high]")
    out = [float(v["__float__"]) if isinstance(v, dict) else float(v) for v in value]
    if not 0 <= out[0] < out[1]:
        raise ValueError(f"HF config time_step_limit={value!r}: needs 0 <= low < high")
    return out[0], out[1]


def pattern_kinds(pattern: str) -> list[str]:
    """The block kinds a hybrid_override_pattern names (M, *, -, E)."""
    bad = sorted(set(pattern) - set(_LETTERS))
    if bad:
        raise ValueError(
            f"HF config hybrid_override_pattern: {bad[0]!r} is not one of {sorted(_LETTERS)}"
        )
    return [_LETTERS[c] for c in pattern]


def decoder_layers(kinds: list[str]) -> list[tuple[str, str | None]]:
    """(mixer kind, the feed-forward block's kind after it or None) of each decoder layer a
    block list makes; refused where a feed-forward block follows no mixer."""
    layers: list[list] = []
    for b, kind in enumerate(kinds):
        if kind in _MIXERS:
            layers.append([kind, None])
        elif not layers or layers[-1][1] is not None:
            raise ValueError(
                f"HF config layers_block_type[{b}]={kind!r}: a feed-forward block must follow "
                "a mixer (linear_attention or full_attention) directly"
            )
        else:
            layers[-1][1] = kind
    return [(mixer, ffn) for mixer, ffn in layers]


def layer_fields(layers: list[tuple[str, str | None]]) -> dict:
    """ModelConfig's per-layer fields of decoder_layers' layers."""
    return dict(
        num_layers=len(layers),
        nope_layers=tuple(i for i, (m, _) in enumerate(layers) if m == _MIXERS[1]),
        linear_attention_layers=tuple(i for i, (m, _) in enumerate(layers) if m == _MIXERS[0]),
        no_ffn_layers=tuple(i for i, (_, ffn) in enumerate(layers) if ffn is None),
        mlp_only_layers=tuple(i for i, (_, ffn) in enumerate(layers) if ffn == "mlp"),
    )


def nemotron_h_fields(f: Any) -> dict:
    """ModelConfig's fields of a Nemotron-H config (num_layers among them: its mixers); `f`
    is hf_config._Fields."""
    for key, want in (("mlp_hidden_act", "relu2"), ("mamba_hidden_act", "silu")):
        if f.get(key) != want:
            raise ValueError(f"HF config {key}={f.get(key)!r}: only {want!r} is supported")
    for key in ("attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"):
        if f.hf.get(key):
            raise ValueError(f"HF config {key}=True: not supported for nemotron_h")
    if f.get("sliding_window") is not None:
        raise ValueError("HF config sliding_window: nemotron_h's attention has no window here")
    layers = decoder_layers(_blocks(f))
    if all(mixer == "linear_attention" for mixer, _ in layers):
        raise ValueError("HF config layers_block_type: needs a full_attention block")
    num_heads, groups = f.required("mamba_num_heads"), f.required("n_groups")
    latent = f.get("moe_latent_size")
    return dict(
        **layer_fields(layers),
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.get("head_dim")
        or f.required("hidden_size") // f.required("num_attention_heads"),
        intermediate_size=f.required("intermediate_size"),
        linear_attention_kind="mamba2",
        linear_num_key_heads=groups,
        linear_num_value_heads=num_heads,
        linear_key_head_dim=f.required("ssm_state_size"),
        linear_value_head_dim=f.required("mamba_head_dim"),
        linear_conv_kernel=f.required("conv_kernel"),
        linear_conv_bias=bool(f.get("use_conv_bias")),
        mamba_dt_limit=dt_limit(f.get("time_step_limit")),
        mlp_act="relu2",
        expert_act="relu2",
        num_experts=f.required("n_routed_experts") if any(ffn == "moe" for _, ffn in layers) else 0,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        moe_latent_size=int(latent or 0),
        num_shared_experts=1,  # (transformers builds the shared MLP whatever n_shared_experts)
        shared_intermediate_size=f.required("moe_shared_expert_intermediate_size"),
        **v3_router_fields(f),
    )
