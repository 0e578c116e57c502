"""Checks of ModelConfig's fields kept out of configs/model_config.py (its line limit): the
MoE router and experts, Gemma 4's attention geometry and Ling 2.5's gates and clips. Each
raises ValueError naming the field and its limit."""

from __future__ import annotations

from typing import Any


def check_moe(cfg: Any) -> None:
    """The routed experts' fields (none without experts)."""
    from configs.model_config import EXPERT_ACTS, SCORING_FUNCS, TOPK_METHODS

    if cfg.num_experts:
        if not 0 < cfg.num_experts_per_tok <= cfg.num_experts:
            raise ValueError(
                f"num_experts_per_tok={cfg.num_experts_per_tok}: must be in "
                f"[1, num_experts={cfg.num_experts}]"
            )
        if cfg.moe_intermediate_size <= 0:
            raise ValueError(f"moe_intermediate_size={cfg.moe_intermediate_size}: must be > 0")
        if cfg.shared_intermediate_size < 0 or (
            cfg.shared_intermediate_size and not cfg.num_shared_experts
        ):
            raise ValueError(
                f"shared_intermediate_size={cfg.shared_intermediate_size}: must be >= 0, "
                f"and 0 without shared experts (num_shared_experts={cfg.num_shared_experts})"
            )
        if cfg.shared_expert_gate and not cfg.num_shared_experts:
            raise ValueError("shared_expert_gate=True: needs num_shared_experts >= 1")
        if cfg.scoring_func not in SCORING_FUNCS:
            raise ValueError(f"scoring_func={cfg.scoring_func!r}: expected {SCORING_FUNCS}")
        if cfg.topk_method not in TOPK_METHODS:
            raise ValueError(f"topk_method={cfg.topk_method!r}: expected {TOPK_METHODS}")
        if cfg.expert_act not in EXPERT_ACTS:
            raise ValueError(f"expert_act={cfg.expert_act!r}: expected {EXPERT_ACTS}")
        if cfg.scoring_func == "softmax_topk" and cfg.topk_method != "greedy":
            raise ValueError(
                f"scoring_func='softmax_topk': needs topk_method='greedy' (got {cfg.topk_method!r})"
            )
        if cfg.n_group <= 0 or cfg.num_experts % cfg.n_group:
            raise ValueError(f"n_group={cfg.n_group}: must divide num_experts={cfg.num_experts}")
        if not 0 < cfg.topk_group <= cfg.n_group:
            raise ValueError(f"topk_group={cfg.topk_group}: must be in [1, {cfg.n_group}]")
        per_group = cfg.num_experts // cfg.n_group
        if cfg.topk_method in ("noaux_tc", "group_top2") and per_group < 2:
            # A group's score is the sum of its two best experts.
            raise ValueError(
                f"n_group={cfg.n_group}: {cfg.topk_method} needs >= 2 experts per group "
                f"(num_experts={cfg.num_experts})"
            )
        if cfg.topk_method != "greedy" and cfg.topk_group * per_group < (cfg.num_experts_per_tok):
            raise ValueError(
                f"topk_group={cfg.topk_group}: its groups hold {cfg.topk_group * per_group}"
                f" experts, fewer than num_experts_per_tok={cfg.num_experts_per_tok}"
            )


def check_gemma4_ling(cfg: Any) -> None:
    """Gemma 4's fields: the full-attention layers' geometry, their proportional RoPE, the
    dense MLP beside the MoE; Ling 2.5's KDA gates, MLA head gate and SwiGLU clips."""
    if cfg.global_head_dim < 0 or cfg.global_num_kv_heads < 0:
        raise ValueError(
            f"global_head_dim={cfg.global_head_dim}, global_num_kv_heads="
            f"{cfg.global_num_kv_heads}: must be >= 0"
        )
    if (cfg.global_head_dim or cfg.attention_k_eq_v or cfg.rope_proportional) and (
        cfg.attention_type != "gqa"
    ):
        raise ValueError(
            "global_head_dim, attention_k_eq_v, rope_proportional: GQA attention only "
            "(Gemma 4's full-attention layers)"
        )
    kv = cfg.global_num_kv_heads
    if kv and cfg.num_heads % kv:
        raise ValueError(f"global_num_kv_heads={kv}: must divide num_heads={cfg.num_heads}")
    if cfg.global_head_dim % 2 or cfg.sliding_rope_theta < 0:
        raise ValueError(
            f"global_head_dim={cfg.global_head_dim}: must be even; sliding_rope_theta="
            f"{cfg.sliding_rope_theta}: must be >= 0"
        )
    for name in ("expert_clip_limits", "shared_clip_limits"):
        limits = getattr(cfg, name)
        if limits and (len(limits) != cfg.num_layers or not all(x >= 0 for x in limits)):
            raise ValueError(
                f"{name}={limits}: one limit >= 0 per layer (num_layers={cfg.num_layers})"
            )
    if (
        cfg.kda_gate_bound > 0
        or (cfg.kda_full_rank or cfg.kda_gate_bound)
        and (cfg.linear_attention_kind != "kimi_delta")
    ):
        raise ValueError(
            f"kda_full_rank={cfg.kda_full_rank}, kda_gate_bound={cfg.kda_gate_bound}: KDA "
            "layers only (linear_attention_kind 'kimi_delta'), the bound <= 0"
        )
    if cfg.mla_head_gate and cfg.attention_type != "mla":
        raise ValueError("mla_head_gate=True: needs MLA attention")
    if not cfg.pre_norms and not cfg.sandwich_norms:
        raise ValueError("pre_norms=False: needs sandwich_norms (a layer normed nowhere)")
    if cfg.dense_beside_moe and not cfg.num_experts:
        raise ValueError("dense_beside_moe=True: needs routed experts (num_experts > 0)")
