"""DeepSeek-V4's HF config (transformers' deepseek_v4; DeepSeek-V4-Flash, -Pro): the layer
kinds from `layer_types` (else the release's per-layer `compress_ratios`, 0 / the csa rate /
the hca rate, else transformers' default: two hca layers, then csa and hca alternating),
the hash-routed MoE layers from `mlp_layer_types` (else the first `num_hash_layers`, default
3), the rotary fraction from `partial_rotary_factor` (else qk_rope_head_dim / head_dim), the
compression rates from `compress_rates` (else compress_rate_csa / _hca), and RoPE as
transformers nests it: `rope_parameters` {"main": the sliding layers' (rope_theta,
unscaled), "compress": the compressed layers' (compress_rope_theta with the scaling)}, or a
flat dict / legacy rope_scaling meaning the compressed layers'.
"""

from __future__ import annotations

from typing import Any

DEEPSEEK_V4 = "deepseek_v4"

# Defaults of transformers 5.25's DeepseekV4Config for the fields read.
# fmt: off
V4_DEFAULTS: dict[str, dict[str, Any]] = {DEEPSEEK_V4: dict(
    vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, num_hidden_layers=43,
    num_attention_heads=64, num_key_value_heads=1, head_dim=512, q_lora_rank=1024,
    num_experts_per_tok=6, num_local_experts=256, n_shared_experts=1,
    scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5,
    max_position_embeddings=1048576, rope_theta=10000.0, compress_rope_theta=160000.0,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0, sliding_window=128,
    o_groups=8, o_lora_rank=1024, index_n_heads=64, index_head_dim=128, index_topk=512,
    num_nextn_predict_layers=1, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
    tie_word_embeddings=False,
)}
# fmt: on
V4_ALIASES = {DEEPSEEK_V4: {"num_local_experts": ("n_routed_experts",)}}
_KINDS = {
    "sliding_attention": "sliding",
    "compressed_sparse_attention": "csa",
    "heavily_compressed_attention": "hca",
}


def _rates(f: Any) -> tuple[int, int]:
    rates = f.hf.get("compress_rates") or {}
    csa = rates.get("compressed_sparse_attention", f.hf.get("compress_rate_csa", 4))
    hca = rates.get("heavily_compressed_attention", f.hf.get("compress_rate_hca", 128))
    for name, value in (("csa", csa), ("hca", hca)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"HF config compress rate ({name})={value!r}: must be an int >= 1")
    return csa, hca


def _layer_kinds(f: Any, num_layers: int, csa: int, hca: int) -> tuple[str, ...]:
    types = f.hf.get("layer_types")
    ratios = f.hf.get("compress_ratios")
    if types is None and ratios is not None:
        by_rate = {0: "sliding_attention", csa: "compressed_sparse_attention"}
        by_rate.setdefault(hca, "heavily_compressed_attention")
        bad = [r for r in ratios if r not in by_rate]
        if bad:
            raise ValueError(
                f"HF config compress_ratios: {bad[0]!r} is not 0, the csa rate {csa} or the "
                f"hca rate {hca}"
            )
        types = [by_rate[r] for r in ratios]
    if types is None:
        types = ["heavily_compressed_attention"] * min(num_layers, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(num_layers - 2, 0))
        ]
    types = list(types)[:num_layers]
    if len(types) != num_layers or any(t not in _KINDS for t in types):
        raise ValueError(
            f"HF config layer_types: expected {num_layers} entries from {sorted(_KINDS)}"
        )
    return tuple(_KINDS[t] for t in types)


def _hash_layers(f: Any, num_layers: int) -> tuple[int, ...]:
    kinds = f.hf.get("mlp_layer_types")
    if kinds is None:
        n = f.hf.get("num_hash_layers", 3)
        kinds = ["hash_moe"] * min(num_layers, n) + ["moe"] * max(0, num_layers - n)
    kinds = list(kinds)[:num_layers]
    if len(kinds) != num_layers or any(k not in ("hash_moe", "moe") for k in kinds):
        raise ValueError(
            f"HF config mlp_layer_types: expected {num_layers} entries, 'hash_moe' or 'moe'"
        )
    return tuple(i for i, k in enumerate(kinds) if k == "hash_moe")


def v4_rope_source(f: Any) -> dict:
    """The config with its compressed layers' RoPE as the one RoPE hf_config._rope reads
    (rope_theta: compress_rope_theta)."""
    params = f.hf.get("rope_parameters") or f.hf.get("rope_scaling") or {}
    compress = params.get("compress") if isinstance(params.get("compress"), dict) else params
    compress = {k: v for k, v in compress.items() if k not in ("main", "compress")}
    theta = compress.get("rope_theta", f.get("compress_rope_theta"))
    return {**f.hf, "rope_scaling": None, "rope_parameters": compress, "rope_theta": theta}


def v4_main_theta(f: Any) -> float:
    """The sliding layers' RoPE base (theirs is never scaled)."""
    params = f.hf.get("rope_parameters") or {}
    main = params.get("main") if isinstance(params.get("main"), dict) else {}
    if main.get("rope_type", "default") != "default":
        raise ValueError("HF config rope_parameters.main: only the default rope is supported")
    return float(main.get("rope_theta", f.get("rope_theta")))


def v4_fields(f: Any) -> dict:
    """ModelConfig's fields of a DeepSeek-V4 config; `f` is hf_config._Fields."""
    num_layers = f.required("num_hidden_layers")
    csa, hca = _rates(f)
    head_dim = f.required("head_dim")
    factor = f.hf.get("partial_rotary_factor")
    if factor is None:
        factor = f.hf.get("qk_rope_head_dim", 64) / head_dim
    act = f.hf.get("hidden_act", "silu")
    if f.hf.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus" or act != "silu":
        raise ValueError(
            f"HF config scoring_func={f.hf.get('scoring_func')!r}, hidden_act={act!r}: "
            "DeepSeek-V4 here scores with sqrtsoftplus and gates with silu"
        )
    return dict(
        attention_type="dsv4",
        num_kv_heads=1,
        head_dim=head_dim,
        partial_rotary_factor=float(factor),
        q_lora_rank=f.required("q_lora_rank"),
        v4_layer_kinds=_layer_kinds(f, num_layers, csa, hca),
        csa_ratio=csa,
        hca_ratio=hca,
        o_groups=f.required("o_groups"),
        o_lora_rank=f.required("o_lora_rank"),
        compress_rope_theta=float(v4_rope_source(f)["rope_theta"]),
        hc_mult=f.required("hc_mult"),
        hc_sinkhorn_iters=f.required("hc_sinkhorn_iters"),
        hc_eps=float(f.required("hc_eps")),
        sliding_window=f.required("sliding_window"),
        index_topk=f.required("index_topk"),
        index_n_heads=f.required("index_n_heads"),
        index_head_dim=f.required("index_head_dim"),
        hash_moe_layers=_hash_layers(f, num_layers),
        num_experts=f.required("num_local_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("n_shared_experts") or 0,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=bool(f.get("norm_topk_prob")),
        routed_scaling_factor=float(f.required("routed_scaling_factor")),
        expert_act="limited_swiglu",
        swiglu_limit=float(f.required("swiglu_limit")),
    )
