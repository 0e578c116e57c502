"""Kimi-Linear's HF config (transformers' kimi_linear; Moonshot's release, whose config.json
names its fields through the class's attribute_map: num_experts, num_experts_per_token,
moe_renormalize, num_expert_group, model_max_length ...): KDA layers (ModelConfig's
linear_attention_kind "kimi_delta") between MLA layers that use their rope channels
unrotated (transformers' KimiLinearAttention applies no RoPE), and DeepSeek-V3's MoE
(transformers' DeepseekV3TopkRouter: sigmoid scores with the correction bias, groups).
The layer kinds come from `layer_types`, else the release's `linear_attn_config`
(full_attn_layers and kda_layers, 1-indexed), else transformers' default (every 4th layer
from layer 4 full); the dense layers from `mlp_layer_types`, else `first_k_dense_replace`
(default 1)."""

from __future__ import annotations

from typing import Any

from configs.hf_moe import v3_router_fields
from configs.hf_qwen3_next import LAYER_KINDS, check_layer_kinds

KIMI_LINEAR = "kimi_linear"

# Defaults of transformers 5.25's KimiLinearConfig for the fields read.
# fmt: off
KIMI_DEFAULTS: dict[str, dict[str, Any]] = {KIMI_LINEAR: dict(
    vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024,
    num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32, n_shared_experts=1,
    routed_scaling_factor=2.446, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
    v_head_dim=128, qk_nope_head_dim=128, n_group=1, topk_group=1, num_experts_per_tok=8,
    norm_topk_prob=True, max_position_embeddings=1048576, rms_norm_eps=1e-5,
    bos_token_id=163584, eos_token_id=163586, num_local_experts=256, mlp_layer_types=None,
    layer_types=None, linear_head_dim=128, linear_num_heads=32, linear_conv_kernel_dim=4,
)}
# fmt: on
# The class's attribute_map: the field read here <- the names config.json may use.
KIMI_ALIASES = {
    KIMI_LINEAR: {
        "num_local_experts": ("num_experts",),
        "num_experts_per_tok": ("num_experts_per_token",),
        "n_shared_experts": ("num_shared_experts",),
        "norm_topk_prob": ("moe_renormalize",),
        "n_group": ("num_expert_group",),
        "max_position_embeddings": ("model_max_length",),
    }
}
_KINDS = LAYER_KINDS


def _kinds(f: Any, num_layers: int) -> list:
    kinds = f.get("layer_types")
    release = f.hf.get("linear_attn_config") or {}
    if kinds is None and {"full_attn_layers", "kda_layers"} <= set(release):
        kinds = [None] * num_layers
        for key, kind in (("full_attn_layers", _KINDS[1]), ("kda_layers", _KINDS[0])):
            for layer in release[key]:
                if not isinstance(layer, int) or not 1 <= layer <= num_layers:
                    raise ValueError(
                        f"HF config linear_attn_config.{key}: {layer!r} is not a layer number "
                        f"in [1, num_hidden_layers={num_layers}] (they count from 1)"
                    )
                kinds[layer - 1] = kind
    elif kinds is None:
        kinds = [_KINDS[1] if i and i % 4 == 0 else _KINDS[0] for i in range(num_layers)]
    check_layer_kinds(kinds, num_layers, "layer_types (or linear_attn_config)")
    return kinds


def dense_layers(f: Any, num_layers: int, default_first: int = 1) -> tuple[int, ...]:
    """The dense layers: `mlp_layer_types`' "dense" ones, else the first
    `first_k_dense_replace` (default `default_first`)."""
    kinds = f.get("mlp_layer_types")
    if kinds is None:
        first = f.hf.get("first_k_dense_replace", default_first)
        if not isinstance(first, int) or first < 0:
            raise ValueError(f"HF config first_k_dense_replace={first!r}: must be an int >= 0")
        kinds = ["dense" if i < first else "sparse" for i in range(num_layers)]
    if (
        not isinstance(kinds, list)
        or len(kinds) != num_layers
        or any(k not in ("dense", "sparse") for k in kinds)
    ):
        raise ValueError(
            f"HF config mlp_layer_types: expected {num_layers} entries, each 'dense' or 'sparse'"
        )
    return tuple(i for i, k in enumerate(kinds) if k == "dense")


def kimi_linear_fields(f: Any) -> dict:
    """ModelConfig's fields of a Kimi-Linear config; `f` is hf_config._Fields."""
    router = f.hf.get("moe_router_activation_func")
    if router not in (None, "sigmoid"):
        raise ValueError(
            f"HF config moe_router_activation_func={router!r}: transformers' kimi_linear "
            "always scores with a sigmoid (only that is supported)"
        )
    num_layers = f.required("num_hidden_layers")
    kinds = _kinds(f, num_layers)
    release = f.hf.get("linear_attn_config") or {}
    heads = release.get("num_heads", f.required("linear_num_heads"))
    head_dim = release.get("head_dim", f.required("linear_head_dim"))
    taps = release.get("short_conv_kernel_size", f.required("linear_conv_kernel_dim"))
    shape = (heads, head_dim, taps)
    return dict(kda_mla_fields(f, kinds, shape, dense_layers(f, num_layers)), mla_unrotated=True)


def kda_mla_fields(f: Any, kinds: list, kda: tuple[int, int, int], dense: tuple) -> dict:
    """The fields Kimi-Linear and Ling 2.5 share: MLA layers beside KDA ones (`kinds`, each
    of LAYER_KINDS) of `kda` = (heads, head width, conv taps), DeepSeek-V3's MoE with shared
    experts, the `dense` layers' MLP."""
    heads, head_dim, taps = kda
    return dict(
        attention_type="mla",
        q_lora_rank=f.get("q_lora_rank") or 0,
        kv_lora_rank=f.required("kv_lora_rank"),
        qk_nope_head_dim=f.required("qk_nope_head_dim"),
        qk_rope_head_dim=f.required("qk_rope_head_dim"),
        v_head_dim=f.required("v_head_dim"),
        linear_attention_layers=tuple(i for i, k in enumerate(kinds) if k == _KINDS[0]),
        linear_attention_kind="kimi_delta",
        linear_num_key_heads=heads,
        linear_num_value_heads=heads,
        linear_key_head_dim=head_dim,
        linear_value_head_dim=head_dim,
        linear_conv_kernel=taps,
        num_experts=f.required("num_local_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("n_shared_experts") or 0,
        **v3_router_fields(f),
        mlp_only_layers=dense,
    )
