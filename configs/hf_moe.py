"""The MoE fields of the GQA families' HF configs (configs/hf_config.py's _gqa_fields): each
family's router, experts and which layers are MoE, as its transformers class reads them."""

from __future__ import annotations

from typing import Any

# ERNIE 4.5's MoE, and ERNIE 4.5 VL's language model (its text experts; configs/hf_config.py)
ERNIE_MOE = ("ernie4_5_moe", "ernie4_5_vl_moe_text")


def v3_router_fields(
    f: Any, scale: str = "routed_scaling_factor", null_scale: float | None = None
) -> dict:
    """DeepSeek-V3's router as transformers' DeepseekV3TopkRouter and its copies read it
    (GLM-4.5, dots.llm1, Kimi-Linear, Nemotron-H, K-EXAONE, AFMoE, MiMo-V2-Flash): sigmoid
    scores, the correction bias for the choice only, group-limited, renormalized when
    norm_topk_prob, times the config's `scale` field (`null_scale` where that is null, if
    given: MiMo-V2-Flash's released config stores null for 1.0)."""
    factor = f.get(scale)
    if factor is None:
        factor = f.required(scale) if null_scale is None else null_scale
    return dict(
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=f.get("n_group") or 1,
        topk_group=f.get("topk_group") or 1,
        norm_topk_prob=bool(f.get("norm_topk_prob")),
        routed_scaling_factor=float(factor),
    )


def moe_fields(f: Any, model_type: str, attn: dict) -> dict:
    """ModelConfig's MoE fields for `model_type` (none for a dense family); `f` is
    hf_config._Fields, `attn` the attention fields already read."""
    out: dict = {}
    heads = f.required("num_attention_heads")
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = f.get("decoder_sparse_step") or 1
        # transformers: layer i is MoE iff (i + 1) % step == 0, i.e. layers step-1, 2*step-1, ...
        out.update(
            num_experts=f.required("num_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("moe_intermediate_size"),
            norm_topk_prob=bool(f.get("norm_topk_prob")),
            mlp_only_layers=tuple(f.get("mlp_only_layers") or ()),
            first_k_dense_replace=step - 1,
            moe_layer_freq=step,
        )
        if model_type == "qwen2_moe":
            # One shared SwiGLU expert of its own width, scaled by sigmoid(shared_expert_gate).
            out.update(
                num_shared_experts=1,
                shared_intermediate_size=f.required("shared_expert_intermediate_size"),
                shared_expert_gate=True,
            )
    elif model_type in ("olmo2", "olmo3"):  # (dense; with attention_bias, o_proj's too)
        out.update(o_proj_bias=attn["attention_bias"])
    elif model_type == "gpt_oss":
        # transformers' GptOssTopKRouter (biased logits, softmax over the top k) and
        # GptOssExperts (biased, clamped SwiGLU with interleaved gate/up columns).
        out.update(
            o_proj_bias=attn["attention_bias"],
            attention_sinks=True,
            num_experts=f.required("num_local_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("intermediate_size"),
            scoring_func="softmax_topk",
            expert_bias=True,
            expert_act="clamped_swiglu",
            swiglu_limit=float(f.required("swiglu_limit")),
            swiglu_alpha=float(f.required("swiglu_alpha")),
        )
    elif model_type in ("glm4_moe", "dots1", "solar_open"):
        # transformers' Glm4MoeTopkRouter is DeepSeek-V3's (dots.llm1's is that one itself):
        # sigmoid scores, the correction bias for the choice only, group-limited (noaux_tc),
        # renormalized when norm_topk_prob, times routed_scaling_factor; shared experts on
        # every MoE layer, the first first_k_dense_replace layers dense (Solar Open: none).
        out.update(
            num_experts=f.required("n_routed_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("moe_intermediate_size"),
            num_shared_experts=f.required("n_shared_experts"),
            first_k_dense_replace=f.get("first_k_dense_replace") or 0,
            **v3_router_fields(f),
        )
        if model_type == "solar_open":  # (every layer MoE, whatever the field says)
            out.update(first_k_dense_replace=0, intermediate_size=out["moe_intermediate_size"])
    elif model_type in ERNIE_MOE:
        out.update(_ernie_moe_fields(f, model_type))
    elif model_type == "hunyuan_v1_moe":
        out.update(_hunyuan_moe_fields(f))
    elif model_type in ("olmoe", "flex_olmo"):
        # transformers' OlmoeAttention (its q_norm spans hidden_size: refused when the heads
        # do not fill it) and a Qwen-style router over experts of intermediate_size.
        clip = f.get("clip_qkv") if model_type == "olmoe" else None  # (OLMo 2's: none)
        out.update(
            o_proj_bias=attn["attention_bias"],
            clip_qkv=None if clip is None else float(clip),
            num_experts=f.required("num_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("intermediate_size"),
            norm_topk_prob=bool(f.get("norm_topk_prob")),
        )
        if attn["head_dim"] * heads != f.required("hidden_size"):
            raise ValueError(
                f"HF config head_dim={attn['head_dim']}: OLMoE's q_norm spans hidden_size="
                f"{f.required('hidden_size')}, so heads x head_dim must equal it"
            )
    elif model_type == "minimax_m2":
        # transformers' MiniMaxM2TopKRouter: sigmoid scores, the correction bias for the
        # choice only, renormalized, no groups, no scaling; experts of intermediate_size.
        out.update(
            num_experts=f.required("num_local_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("intermediate_size"),
            scoring_func="sigmoid",
            topk_method="noaux_tc",
            norm_topk_prob=True,
        )
    elif model_type == "mixtral":
        # Mixtral renormalizes the top-k softmax weights; its experts use intermediate_size.
        out.update(
            num_experts=f.required("num_local_experts"),
            num_experts_per_tok=f.required("num_experts_per_tok"),
            moe_intermediate_size=f.required("intermediate_size"),
            norm_topk_prob=True,
        )
    return out


def _hunyuan_moe_fields(f: Any) -> dict:
    """transformers' HunYuanMoEV1Moe on every layer: a float32 softmax router whose top k
    are renormalized, Mixtral's experts of intermediate_size and one shared MLP of the same
    width. num_experts and moe_topk may be per-layer lists: only one value for all layers
    is supported. (The released configs' moe_intermediate_size, num_shared_expert and
    use_mixed_mlp_moe are not read by transformers, nor here.)"""
    num_layers = f.required("num_hidden_layers")
    out = {}
    for name, key in (("num_experts", "num_experts"), ("moe_topk", "num_experts_per_tok")):
        value = f.required(name)
        if isinstance(value, list):
            if len(value) != num_layers or len(set(value)) != 1:
                raise ValueError(
                    f"HF config {name}={value!r}: only the same value on every layer is supported"
                )
            value = value[0]
        out[key] = value
    width = f.required("intermediate_size")
    return dict(
        out,
        moe_intermediate_size=width,
        num_shared_experts=1,
        shared_intermediate_size=width,
        norm_topk_prob=True,
    )


def _ernie_moe_fields(f: Any, model_type: str) -> dict:
    """transformers' Ernie4_5_MoeTopKRouter: softmax scores, the top k picked on scores plus
    the correction bias, the picked scores renormalized (their sum clamped at moe_norm_min,
    1e-12: the same as noaux_tc's + 1e-20 for any real sum); MoE on layers i with
    (i + 1) % interval == 0 and start <= i <= end (end -1: the last). ERNIE 4.5 VL's: on the
    layers mlp_layer_types calls "sparse" (default: all but the first), its text experts
    moe_intermediate_size[0] wide (its vision experts' width after it)."""
    num_layers = f.required("num_hidden_layers")
    width = f.required("moe_intermediate_size")
    if model_type == ERNIE_MOE[1]:
        kinds = f.get("mlp_layer_types") or ["dense"] + ["sparse"] * (num_layers - 1)
        if (
            not isinstance(kinds, list)
            or len(kinds) != num_layers
            or set(kinds) - {"dense", "sparse"}
        ):
            raise ValueError(f"HF config mlp_layer_types: expected {num_layers} of dense / sparse")
        if not isinstance(width, list) or len(width) != 2:
            raise ValueError(f"HF config moe_intermediate_size={width!r}: [text, vision] widths")
        moe_layers, width = [k == "sparse" for k in kinds], width[0]
    else:
        moe_layers = _ernie_moe_layers(f, num_layers)
    norm_min = f.get("moe_norm_min")
    if norm_min is not None and not 0 <= norm_min <= 1e-6:
        raise ValueError(
            f"HF config moe_norm_min={norm_min!r}: only values up to 1e-6 are supported (the "
            "renormalization here clamps nothing)"
        )
    return dict(
        num_experts=f.required("moe_num_experts"),
        num_experts_per_tok=f.required("moe_k"),
        moe_intermediate_size=width,
        num_shared_experts=f.get("moe_num_shared_experts") or 0,
        scoring_func="softmax",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        mlp_only_layers=tuple(i for i, moe in enumerate(moe_layers) if not moe),
    )


def _ernie_moe_layers(f: Any, num_layers: int) -> list[bool]:
    interval = f.required("moe_layer_interval")
    start, end = f.required("moe_layer_start_index"), f.required("moe_layer_end_index")
    end = num_layers - 1 if end == -1 else end
    if not isinstance(interval, int) or interval < 1:
        raise ValueError(f"HF config moe_layer_interval={interval!r}: must be an integer >= 1")
    return [(i + 1) % interval == 0 and start <= i <= end for i in range(num_layers)]
