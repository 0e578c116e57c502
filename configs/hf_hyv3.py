"""Tencent's Hunyuan 3 (transformers' hy_v3) and OpenBMB's MiniCPM5-MoE (minicpm5_moe)
HF configs, each read whole here (configs/hf_config._FAMILIES).

hy_v3: GQA with q/k RMSNorms per head before RoPE (Apertus' attention); after the dense
layers `mlp_layer_types` names, DeepSeek-V3's sigmoid router with its correction bias (one
group, renormalized, times router_scaling_factor) over num_experts experts beside
num_shared_experts shared ones as one MLP; the releases' names (mlp.router.gate,
mlp.expert_bias, mlp.shared_mlp) and its MTP layer (not read).

minicpm5_moe: Llama's attention whose q_proj also yields a sigmoid gate on each output
channel (per head its query rows, then its gate rows: Qwen3-Next's attn_output_gate), no
q/k norms; DeepSeek-V3's MoE (groups, n_shared_experts shared) after the dense layers
`mlp_layer_types` names (else the first first_k_dense_replace)."""

from __future__ import annotations

from typing import Any

from configs.hf_moe import v3_router_fields

HY_V3, MINICPM5_MOE = "hy_v3", "minicpm5_moe"
TYPES = (HY_V3, MINICPM5_MOE)
ALIASES = {HY_V3: {"num_experts": ("num_local_experts",)}}
ALIASES[MINICPM5_MOE] = {"n_routed_experts": ("num_local_experts",)}

# Defaults of transformers 5.25's HYV3Config and MiniCPM5MoeConfig for the fields read.
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {HY_V3: dict(
    vocab_size=120832, hidden_size=4096, intermediate_size=13312, num_hidden_layers=80,
    num_attention_heads=64, num_key_value_heads=8, head_dim=128, hidden_act="silu",
    max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
    tie_word_embeddings=False, attention_bias=False, mlp_bias=False, num_experts=192,
    num_experts_per_tok=8, num_shared_experts=1, moe_intermediate_size=1536,
    router_scaling_factor=2.826, mlp_layer_types=None, rope_theta=11158840.0,
), MINICPM5_MOE: dict(
    vocab_size=130560, hidden_size=2048, intermediate_size=8192, num_hidden_layers=28,
    num_attention_heads=32, num_key_value_heads=2, head_dim=128, hidden_act="silu",
    max_position_embeddings=524288, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=[1, 130073],
    tie_word_embeddings=False, attention_bias=False, mlp_layer_types=None,
    first_k_dense_replace=1, n_routed_experts=160, n_shared_experts=1, n_group=1,
    topk_group=1, norm_topk_prob=True, routed_scaling_factor=3.66, num_experts_per_tok=16,
    moe_intermediate_size=512, rope_theta=5000000.0,
)}
# fmt: on


def _dense_layers(f: Any, num_layers: int, first: int) -> tuple[int, ...]:
    kinds = f.get("mlp_layer_types")
    if kinds is None:  # (transformers' default: the first `first` layers dense)
        kinds = ["dense" if i < first else "sparse" for i in range(num_layers)]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - {"dense", "sparse"}:
        raise ValueError(f"HF config mlp_layer_types: expected {num_layers} of dense / sparse")
    return tuple(i for i, k in enumerate(kinds) if k == "dense")


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention and MoE fields of a Hunyuan 3 or MiniCPM5-MoE config; `f` is
    hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}=True: not supported for {model_type}")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    if model_type == MINICPM5_MOE and f.hf.get("use_gated_attention") is False:
        raise ValueError("HF config use_gated_attention=False: MiniCPM5-MoE's is gated")
    heads, num_layers = f.required("num_attention_heads"), f.required("num_hidden_layers")
    out = dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
    )
    if model_type == HY_V3:
        return dict(
            out,
            qk_norm=True,
            num_experts=f.required("num_experts"),
            num_shared_experts=f.get("num_shared_experts") or 0,
            # (one group, always renormalized: HYV3TopKRouter)
            **dict(v3_router_fields(f, "router_scaling_factor"), norm_topk_prob=True),
            mlp_only_layers=_dense_layers(f, num_layers, 1),
        )
    first = f.hf.get("first_k_dense_replace", 1)
    return dict(
        out,
        attn_output_gate=True,
        num_experts=f.required("n_routed_experts"),
        num_shared_experts=f.get("n_shared_experts") or 0,
        **v3_router_fields(f),
        mlp_only_layers=_dense_layers(f, num_layers, first),
    )
