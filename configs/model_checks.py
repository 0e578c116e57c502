"""Checks of ModelConfig's fields kept out of configs/model_config.py (its line limit): the
MoE router and experts, Gemma 4's attention geometry and Ling 2.5's gates and clips,
DeepSeek-V4's attention, the linear-attention layers, MiMo-V2-Flash's values and sinks and
LongCat-Flash's MoE. Each
raises ValueError naming the field and its limit."""

from __future__ import annotations

import math
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
        if cfg.mlp_act == "xielu" and cfg.num_shared_experts:
            raise ValueError("mlp_act='xielu': dense MLPs only (no shared experts)")
        if cfg.scoring_func == "sparsemixer" and (
            cfg.num_experts_per_tok != 2 or cfg.topk_method != "greedy" or cfg.sparsemixer_eps < 0
        ):
            raise ValueError(
                f"scoring_func='sparsemixer': needs num_experts_per_tok=2 (got "
                f"{cfg.num_experts_per_tok}), topk_method='greedy' and sparsemixer_eps >= 0"
            )
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
    if cfg.router_bias_on_logits and (
        not cfg.num_experts or cfg.topk_method != "noaux_tc" or cfg.scoring_func != "sigmoid"
    ):
        raise ValueError(
            "router_bias_on_logits=True: needs routed experts with scoring_func='sigmoid' and "
            f"topk_method='noaux_tc' (got {cfg.scoring_func!r}, {cfg.topk_method!r})"
        )
    if cfg.moe_post_norm and (not cfg.num_experts or cfg.sandwich_norms):
        raise ValueError(
            "moe_post_norm=True: needs routed experts, and not sandwich_norms (which norm "
            "every MLP's output already)"
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
    if cfg.head_gate and cfg.attn_output_gate:
        raise ValueError("head_gate=True: not with attn_output_gate (one gate on the output)")
    if not cfg.pre_norms and not cfg.sandwich_norms:
        raise ValueError("pre_norms=False: needs sandwich_norms (a layer normed nowhere)")
    if cfg.dense_beside_moe and not cfg.num_experts:
        raise ValueError("dense_beside_moe=True: needs routed experts (num_experts > 0)")


def check_v4(cfg: Any) -> None:
    """DeepSeek-V4's attention, hyper-connections and hash routing, as transformers'
    deepseek_v4 builds them."""
    from configs.model_config import V4_LAYER_KINDS

    kinds = cfg.v4_layer_kinds
    if len(kinds) != cfg.num_layers or any(k not in V4_LAYER_KINDS for k in kinds):
        raise ValueError(
            f"v4_layer_kinds={kinds!r}: needs one of {V4_LAYER_KINDS} per layer ({cfg.num_layers})"
        )
    rotary = cfg.rotary_dim
    if cfg.num_kv_heads != 1 or cfg.head_dim <= 0 or not 2 <= rotary <= cfg.head_dim:
        raise ValueError(
            f"num_kv_heads={cfg.num_kv_heads}, head_dim={cfg.head_dim}, "
            f"partial_rotary_factor={cfg.partial_rotary_factor}: DeepSeek-V4 attends one "
            "shared key=value head whose last int(head_dim * factor) >= 2 channels rotate"
        )
    if rotary % 2:
        raise ValueError(f"rotary channels {rotary}: must be even")
    for name in ("q_lora_rank", "o_groups", "o_lora_rank", "hc_mult", "hc_sinkhorn_iters"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name}={getattr(cfg, name)}: DeepSeek-V4 needs it >= 1")
    if cfg.num_heads % cfg.o_groups:
        raise ValueError(f"o_groups={cfg.o_groups}: must divide num_heads={cfg.num_heads}")
    if not isinstance(cfg.sliding_window, int) or cfg.sliding_window < 1:
        raise ValueError(
            f"sliding_window={cfg.sliding_window!r}: DeepSeek-V4 needs an integer >= 1"
        )
    if cfg.csa_ratio < 1 or cfg.hca_ratio < 1:
        raise ValueError(f"csa_ratio={cfg.csa_ratio}, hca_ratio={cfg.hca_ratio}: must be >= 1")
    if "csa" in kinds:
        for name in ("index_topk", "index_n_heads", "index_head_dim"):
            if getattr(cfg, name) < 1:
                raise ValueError(f"{name}={getattr(cfg, name)}: a csa layer needs it >= 1")
        if cfg.index_head_dim < rotary:
            raise ValueError(
                f"index_head_dim={cfg.index_head_dim}: must hold the {rotary} rotary channels"
            )
    bad = [i for i in cfg.hash_moe_layers if not (0 <= i < cfg.num_layers and cfg.is_moe_layer(i))]
    if bad:
        raise ValueError(f"hash_moe_layers: layer {bad[0]} is not an MoE layer")
    if cfg.linear_attention_layers or cfg.mtp_drafts:
        raise ValueError("DeepSeek-V4: no linear-attention layers or MTP drafts here")


def check_values_and_sinks(cfg: Any) -> None:
    """GQA values narrower than the keys and scaled (MiMo-V2-Flash), and sinks on the
    windowed layers alone."""
    if not cfg.attention_value_scale > 0 or cfg.v_head_dim < 0:
        raise ValueError(
            f"attention_value_scale={cfg.attention_value_scale}: must be > 0; v_head_dim="
            f"{cfg.v_head_dim}: must be >= 0"
        )
    if cfg.attention_type == "gqa" and cfg.v_head_dim and cfg.attention_k_eq_v:
        raise ValueError(
            f"v_head_dim={cfg.v_head_dim}: not with attention_k_eq_v (the values are the keys)"
        )
    if cfg.attention_value_scale != 1.0 and cfg.attention_type != "gqa":
        raise ValueError("attention_value_scale: GQA attention only")
    if cfg.windowed_sinks_only and not cfg.attention_sinks:
        raise ValueError("windowed_sinks_only=True: needs attention_sinks")


def check_mla(cfg: Any) -> None:
    """MLA's ranks and head widths, and DeepSeek sparse attention's indexer."""
    for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name}={getattr(cfg, name)}: MLA needs it > 0")
    if cfg.qk_rope_head_dim % 2:
        raise ValueError(f"qk_rope_head_dim={cfg.qk_rope_head_dim}: must be even")
    if cfg.sliding_window is not None:
        raise ValueError(f"sliding_window={cfg.sliding_window}: not implemented for MLA attention")
    if cfg.mla_query_gate and cfg.q_lora_rank <= 0:
        raise ValueError("mla_query_gate=True: needs a q LoRA (q_lora_rank > 0)")
    if cfg.gated_norm_rank < 0:
        raise ValueError(f"gated_norm_rank={cfg.gated_norm_rank}: must be >= 0")
    if cfg.index_topk:
        # (Without a q LoRA the indexer's queries come from the normed hidden state: Mistral
        # Large 4.)
        for name in ("index_topk", "index_n_heads", "index_head_dim"):
            if getattr(cfg, name) <= 0:
                raise ValueError(f"{name}={getattr(cfg, name)}: DSA needs it > 0")
        if cfg.index_head_dim < cfg.qk_rope_head_dim:
            raise ValueError(
                f"index_head_dim={cfg.index_head_dim}: must hold the rope part "
                f"(qk_rope_head_dim={cfg.qk_rope_head_dim})"
            )


def check_laguna(cfg: Any) -> None:
    """Softplus gates, per-layer query heads, whole-head RoPE on windowed layers, a capped
    router (Laguna's)."""
    if cfg.attn_gate_act not in ("sigmoid", "softplus"):
        raise ValueError(f"attn_gate_act={cfg.attn_gate_act!r}: expected 'sigmoid' or 'softplus'")
    heads = cfg.heads_per_layer
    if heads:
        if cfg.attention_type != "gqa" or len(heads) != cfg.num_layers:
            raise ValueError(
                f"heads_per_layer: GQA attention only, one entry per layer ({cfg.num_layers})"
            )
        for i, h in enumerate(heads):
            if isinstance(h, bool) or not isinstance(h, int) or h < 1 or h % cfg.num_kv_heads:
                raise ValueError(
                    f"heads_per_layer[{i}]={h!r}: must be a multiple >= 1 of num_kv_heads="
                    f"{cfg.num_kv_heads}"
                )
    if cfg.sliding_full_rotary and not cfg.rope_scaling_full_only and not cfg.sliding_rope_theta:
        raise ValueError(
            "sliding_full_rotary: the windowed layers' RoPE needs rope_scaling_full_only or "
            "sliding_rope_theta (their own plain RoPE)"
        )
    cap = cfg.router_logit_softcapping
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 <= cap < math.inf:
        raise ValueError(f"router_logit_softcapping={cap!r}: must be a finite number >= 0")


def check_blocks(cfg: Any) -> None:
    """The block and embedding fields of the 57th session's families and later: Llama 4's
    and Beam's query scales on NoPE layers, Beam's gate bias and depth-scaled stream; OLMo
    1's weightless LayerNorms; GPT-BigCode's and OPT's learned positions; GPT-NeoX's two
    norms side by side; ALiBi's slopes and BLOOM's embedding norm; Llama 3.2 Vision's skipped
    cross-attention layers."""
    cross, total = cfg.cross_attention_layers, cfg.num_layers + len(cfg.cross_attention_layers)
    if cross and (sorted(set(cross)) != list(cross) or not 0 <= cross[0] <= cross[-1] < total):
        raise ValueError(
            f"cross_attention_layers={cross}: expected increasing checkpoint layer indices "
            f"below num_layers + their number ({total})"
        )
    if cross and (cfg.attention_type != "gqa" or cfg.num_experts):
        raise ValueError(f"cross_attention_layers={cross}: a dense GQA model's only")
    if cfg.attn_scale_beta and not (cfg.attn_scale_beta > 0 and cfg.attn_scale_positions >= 1):
        raise ValueError(
            f"attn_scale_beta={cfg.attn_scale_beta}, attn_scale_positions="
            f"{cfg.attn_scale_positions}: need beta > 0 and positions >= 1 (or beta 0)"
        )
    power = cfg.attn_scale_power
    if isinstance(power, bool) or not isinstance(power, int | float) or not 0 <= power < math.inf:
        raise ValueError(f"attn_scale_power={power!r}: must be a finite number >= 0")
    if power and (cfg.attn_scale_beta or cfg.attn_scale_positions < 1):
        raise ValueError(
            f"attn_scale_power={power}: needs attn_scale_positions >= 1 (got "
            f"{cfg.attn_scale_positions}) and no attn_scale_beta (got {cfg.attn_scale_beta})"
        )
    if cfg.attn_gate_bias and not cfg.attn_output_gate:
        raise ValueError("attn_gate_bias=True: needs attn_output_gate (a gate to bias)")
    if cfg.norm_weightless and (
        cfg.is_dsv4
        or cfg.norm_bias
        or cfg.sandwich_norms
        or cfg.norm_offset
        or cfg.residual_in_float32
    ):
        raise ValueError(
            "norm_weightless=True: not with norm_bias, sandwich_norms, a norm_offset, "
            "residual_in_float32 or DeepSeek-V4"
        )
    for name in ("learned_positions", "sinusoidal_positions"):
        if getattr(cfg, name) and (
            cfg.attention_type != "gqa" or set(cfg.nope_layers) != set(range(cfg.num_layers))
        ):
            raise ValueError(f"{name}=True: GQA with every layer in nope_layers (no RoPE)")
    if cfg.learned_positions and cfg.sinusoidal_positions:
        raise ValueError("learned_positions and sinusoidal_positions: one position table")
    tabled = cfg.learned_positions or cfg.sinusoidal_positions
    if cfg.position_offset and not (tabled and cfg.position_offset > 0):
        raise ValueError(
            f"position_offset={cfg.position_offset}: > 0, with learned_positions or "
            "sinusoidal_positions"
        )
    if cfg.parallel_norms and not cfg.parallel_block:
        raise ValueError("parallel_norms=True: needs parallel_block (GPT-NeoX's parallel layers)")
    if cfg.depth_scaled_residual and (cfg.residual_normed or cfg.parallel_block):
        raise ValueError("depth_scaled_residual=True: not beside residual_normed or parallel_block")
    slopes = cfg.alibi_slopes
    if slopes:
        if len(slopes) != cfg.num_heads or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in slopes
        ):
            raise ValueError(
                f"alibi_slopes: expected {cfg.num_heads} finite numbers (one per query head), "
                f"got {len(slopes)}"
            )
        if cfg.attention_type != "gqa" or set(cfg.nope_layers) != set(range(cfg.num_layers)):
            raise ValueError("alibi_slopes: GQA with every layer in nope_layers (no RoPE)")
        if cfg.learned_positions or cfg.sinusoidal_positions:
            raise ValueError("alibi_slopes: not beside a position table (one position scheme)")


def check_gqa(cfg: Any) -> None:
    """GQA attention's heads, widths, rotary fraction and window; the per-layer inputs
    (Gemma 4's PLE) and dense MLP widths."""
    if cfg.num_kv_heads <= 0 or cfg.num_heads % cfg.num_kv_heads:
        raise ValueError(
            f"num_kv_heads={cfg.num_kv_heads}: must be > 0 and divide num_heads={cfg.num_heads}"
        )
    if cfg.head_dim <= 0:
        raise ValueError(f"head_dim={cfg.head_dim}: must be > 0")
    if cfg.qk_norm_full and not cfg.qk_norm:
        raise ValueError("qk_norm_full=True: needs qk_norm=True")
    if cfg.clip_qkv is not None and not cfg.clip_qkv > 0:
        raise ValueError(f"clip_qkv={cfg.clip_qkv!r}: must be > 0 or None")
    rotary = int(cfg.head_dim * cfg.partial_rotary_factor)
    if not 0 < cfg.partial_rotary_factor <= 1 or rotary < 2 or rotary % 2:
        raise ValueError(
            f"partial_rotary_factor={cfg.partial_rotary_factor}: must be in (0, 1] and "
            f"rotate an even number >= 2 of head_dim={cfg.head_dim} channels "
            f"(int(head_dim * factor) = {rotary})"
        )
    window = cfg.sliding_window
    if window is not None and not (
        isinstance(window, int) and not isinstance(window, bool) and window >= 1
    ):
        raise ValueError(f"sliding_window={window!r}: must be an integer >= 1 or None")
    bad = [i for i in cfg.full_attention_layers if not 0 <= i < cfg.num_layers]
    if bad:
        raise ValueError(
            f"full_attention_layers: layer {bad[0]} is outside [0, num_layers={cfg.num_layers})"
        )
    if cfg.per_layer_input_dim < 0 or not 0 <= cfg.per_layer_vocab_size <= cfg.vocab_size:
        raise ValueError(
            f"per_layer_input_dim={cfg.per_layer_input_dim}: must be >= 0; "
            f"per_layer_vocab_size={cfg.per_layer_vocab_size}: must be in [0, "
            f"vocab_size={cfg.vocab_size}]"
        )
    if cfg.altup_num_inputs and (
        cfg.altup_num_inputs < 2 or cfg.laurel_rank < 1 or not cfg.per_layer_input_dim
    ):
        raise ValueError(
            f"altup_num_inputs={cfg.altup_num_inputs}: 0, or >= 2 with laurel_rank >= 1 "
            f"(got {cfg.laurel_rank}) and per_layer_input_dim > 0 (Gemma 3n)"
        )
    sparsity = cfg.activation_sparsity
    if sparsity and (len(sparsity) != cfg.num_layers or not all(0 <= s < 1 for s in sparsity)):
        raise ValueError(
            f"activation_sparsity={sparsity}: one share in [0, 1) per layer "
            f"(num_layers={cfg.num_layers})"
        )
    sizes = cfg.layer_intermediate_sizes
    if sizes and (len(sizes) != cfg.num_layers or not all(s > 0 for s in sizes)):
        raise ValueError(
            f"layer_intermediate_sizes={sizes}: one width > 0 per layer "
            f"(num_layers={cfg.num_layers})"
        )


def check_sharing(cfg: Any) -> None:
    """shared_indexer_layers and kv_source_layers, as transformers runs them."""
    shared = cfg.shared_indexer_layers
    if shared and not cfg.sparse_attention:
        raise ValueError("shared_indexer_layers: needs sparse attention (index_topk > 0)")
    bad = [i for i in shared if not 0 < i < cfg.num_layers]
    if bad:
        raise ValueError(
            f"shared_indexer_layers: layer {bad[0]} has no earlier layer with an indexer "
            f"to take the top-k of (must be in [1, num_layers={cfg.num_layers}))"
        )
    sources = cfg.kv_source_layers
    if not sources:
        return
    if cfg.is_dsv4 or cfg.linear_attention_layers or len(sources) != cfg.num_layers:
        raise ValueError(
            f"kv_source_layers: MLA or GQA attention alone, one entry per layer ({cfg.num_layers})"
        )
    if not cfg.is_mla:
        if cfg.qk_norm_full or cfg.attention_bias or cfg.clip_qkv is not None:
            raise ValueError(
                "kv_source_layers: not beside qk_norm_full, attention_bias or clip_qkv (GQA)"
            )
        for i, s in enumerate(sources):
            if s != i and not (0 <= s < i and sources[s] == s and _same_kind(cfg, s, i)):
                raise ValueError(
                    f"kv_source_layers[{i}]={s}: a layer reads an earlier layer that keeps "
                    "its own KV, of its kind (window, head width, KV heads)"
                )
        return
    for i, s in enumerate(sources):
        # transformers hands a reading layer the latest latent stored by a layer of its
        # kind (with or without RoPE): that must be the one named.
        stores = [
            j
            for j in range(i)
            if sources[j] == j
            and cfg.layer_rope_dim(j) == cfg.layer_rope_dim(i)
            and j in sources[j + 1 :]
        ]
        if s != i and not (0 <= s < i and sources[s] == s and stores and stores[-1] == s):
            raise ValueError(
                f"kv_source_layers[{i}]={s}: a layer reads the latest earlier layer of "
                "its kind (with or without RoPE) that keeps its own KV"
            )


def _same_kind(cfg: Any, a: int, b: int) -> bool:
    """Whether GQA layers a and b cache alike (one may attend to the other's pages)."""
    return all(
        f(a) == f(b)
        for f in (
            cfg.attention_window,
            cfg.layer_chunked,
            cfg.layer_head_dim,
            cfg.layer_v_head_dim,
            cfg.layer_num_kv_heads,
        )
    )


def check_softcaps(cfg: Any) -> None:
    """The logits' and the attention scores' tanh caps: finite, >= 0 (0: none); the
    scores' on GQA attention (no MLA or DeepSeek-V4 path caps them); a pruned head's rows."""
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        cap = getattr(cfg, name)
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 <= cap < math.inf:
            raise ValueError(f"{name}={cap!r}: must be a finite number >= 0 (0: none)")
    out = cfg.output_vocab_size
    if out and (not 0 < out <= cfg.vocab_size or cfg.tie_word_embeddings or cfg.lm_head_bias):
        raise ValueError(
            f"output_vocab_size={out}: at most vocab_size={cfg.vocab_size}, untied, no lm_head bias"
        )
    if cfg.attn_logit_softcapping and cfg.attention_type != "gqa":
        raise ValueError(
            f"attn_logit_softcapping: GQA attention only (attention_type={cfg.attention_type!r})"
        )


def check_longcat(cfg: Any) -> None:
    """LongCat-Flash's zero-computation experts, shortcut MoE and scaled MLA LoRAs."""
    if cfg.zero_experts < 0 or (cfg.zero_experts and not cfg.num_experts):
        raise ValueError(f"zero_experts={cfg.zero_experts}: must be >= 0, and 0 without experts")
    if cfg.zero_experts and cfg.topk_method != "noaux_tc":
        raise ValueError("zero_experts: with the noaux_tc router only (LongCat-Flash's)")
    if cfg.shortcut_moe and (
        cfg.num_layers % 2
        or not cfg.num_experts
        or any(cfg.is_moe_layer(i) != (i % 2 == 0) for i in range(cfg.num_layers))
    ):
        raise ValueError(
            f"shortcut_moe=True: needs an even num_layers ({cfg.num_layers}) with experts on "
            "the even layers alone (first_k_dense_replace 0, moe_layer_freq 2)"
        )
    if cfg.mla_lora_scales and not (cfg.is_mla and cfg.q_lora_rank):
        raise ValueError("mla_lora_scales=True: needs MLA attention with a q LoRA")


def check_linear(cfg: Any) -> None:
    """The linear-attention layers (linear_attention_layers), as Qwen3-Next and
    Kimi-Linear build them."""
    if cfg.mla_unrotated and not cfg.is_mla:
        raise ValueError("mla_unrotated: needs MLA attention")
    from configs.model_config import LINEAR_ATTENTION_KINDS

    if cfg.linear_attention_kind not in LINEAR_ATTENTION_KINDS:
        raise ValueError(
            f"linear_attention_kind={cfg.linear_attention_kind!r}: expected one of "
            f"{LINEAR_ATTENTION_KINDS}"
        )
    if not 0 < cfg.linear_beta_scale < math.inf or not 0 <= cfg.linear_norm_eps < 1:
        raise ValueError(
            f"linear_beta_scale={cfg.linear_beta_scale}: must be > 0; linear_norm_eps="
            f"{cfg.linear_norm_eps}: in [0, 1)"
        )
    if cfg.hybrid_post_norms and not (
        cfg.linear_attention_layers and cfg.pre_norms and not cfg.sandwich_norms
    ):
        raise ValueError(
            "hybrid_post_norms: needs linear_attention_layers, pre_norms and no sandwich_norms "
            "(the linear layers' norms; the attention layers norm their blocks' outputs)"
        )
    mamba2 = cfg.linear_attention_kind == "mamba2"
    if not cfg.mamba_gated_norm and not (mamba2 and cfg.linear_attention_layers):
        raise ValueError("mamba_gated_norm=False: only for Mamba-2 layers (Falcon-H1's)")
    pairs = tuple(range(0, cfg.num_layers, 2)), tuple(range(1, cfg.num_layers, 2))
    split = (tuple(cfg.no_ffn_layers), cfg.linear_attention_layers) != pairs
    if cfg.parallel_hybrid and (cfg.num_layers % 2 or split or not mamba2):
        raise ValueError(
            "parallel_hybrid: needs an even num_layers, Mamba-2 (linear_attention_layers) on "
            "the odd layers and no_ffn_layers the even ones (attention and its Mamba-2 pair)"
        )
    if not cfg.linear_attention_layers:
        return
    if cfg.kv_window or cfg.attention_chunk_size or cfg.mtp_drafts:
        raise ValueError(
            "linear_attention_layers: with full or windowed attention on some of the other "
            "layers only (no window on all of them, no attention chunks or MTP drafts)"
        )
    bad = [i for i in cfg.linear_attention_layers if not 0 <= i < cfg.num_layers]
    if bad:
        raise ValueError(
            f"linear_attention_layers: layer {bad[0]} is outside [0, num_layers={cfg.num_layers})"
        )
    if len(cfg.linear_attention_layers) == cfg.num_layers and cfg.linear_attention_kind not in (
        "mamba1",
        "mamba2",
    ):
        raise ValueError(
            f"linear_attention_layers: every layer; only Mamba's mixers (linear_attention_kind "
            f"mamba1, mamba2) make a model without attention, not {cfg.linear_attention_kind!r}"
        )
    lightning = cfg.linear_attention_kind == "lightning"  # (no conv)
    if cfg.linear_conv_kernel < 2 and not lightning:  # (its state: the last kernel - 1 inputs)
        raise ValueError(f"linear_conv_kernel={cfg.linear_conv_kernel}: must be >= 2")
    if cfg.linear_attention_kind == "short_conv":  # (LFM2's: no heads, no bias here)
        if cfg.linear_conv_bias:
            raise ValueError("linear_conv_bias: only Mamba's convs have a bias")
        return
    for name in (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
    ):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name}={getattr(cfg, name)}: linear attention needs it >= 1")
    if cfg.linear_num_value_heads % cfg.linear_num_key_heads:
        raise ValueError(
            f"linear_num_value_heads={cfg.linear_num_value_heads}: must be a multiple of "
            f"linear_num_key_heads={cfg.linear_num_key_heads}"
        )
    if cfg.linear_conv_bias and cfg.linear_attention_kind not in ("mamba2", "mamba1"):
        raise ValueError("linear_conv_bias: only Mamba's convs have a bias")
    mamba1 = cfg.linear_attention_kind == "mamba1"
    if mamba1 and (
        cfg.mamba_dt_rank < 1 or cfg.linear_num_key_heads != 1 or cfg.linear_value_head_dim != 1
    ):
        raise ValueError(
            f"mamba_dt_rank={cfg.mamba_dt_rank}, linear_num_key_heads="
            f"{cfg.linear_num_key_heads}, linear_value_head_dim={cfg.linear_value_head_dim}:"
            " mamba1 needs a dt rank >= 1, one key head (B and C) and values 1 wide"
        )
    kda = (cfg.linear_num_key_heads, cfg.linear_key_head_dim)
    if cfg.linear_attention_kind in ("kimi_delta", "lightning") and kda != (
        cfg.linear_num_value_heads,
        cfg.linear_value_head_dim,
    ):
        raise ValueError(
            f"linear_num_value_heads={cfg.linear_num_value_heads}, linear_value_head_dim="
            f"{cfg.linear_value_head_dim}: {cfg.linear_attention_kind} needs them equal to "
            f"the key heads and width ({kda[0]}, {kda[1]})"
        )


def check_norms_and_rope(cfg: Any) -> None:
    """The norms' kind and bias, the stream's residual scales (MiniMax-01), the logit scale
    (Cohere) and LongRoPE's factor lists (Phi-3)."""
    rs = cfg.rope_scaling
    if rs.rope_type == "longrope" and not (
        len(rs.short_factor) == len(rs.long_factor) == cfg.rotary_dim // 2
    ):
        raise ValueError(
            f"rope_scaling short_factor / long_factor: {len(rs.short_factor)} / "
            f"{len(rs.long_factor)} entries; longrope needs rotary_dim / 2 = "
            f"{cfg.rotary_dim // 2} each"
        )
    if cfg.norm_bias and cfg.norm_kind != "layer":
        raise ValueError("norm_bias=True: needs norm_kind='layer' (an RMSNorm has no bias)")
    if cfg.norm_kind not in ("rms", "layer") or not cfg.logit_scale > 0:
        raise ValueError(
            f"norm_kind={cfg.norm_kind!r}, logit_scale={cfg.logit_scale}: expected "
            "'rms' or 'layer', and a scale > 0"
        )
    for name in ("residual_alphas", "residual_betas"):
        values = getattr(cfg, name)
        if len(values) != 3 or not all(math.isfinite(v) for v in values):
            raise ValueError(f"{name}={values}: three finite numbers (full, linear, MLP)")
        if not cfg.residual_normed and tuple(values) != (1.0, 1.0, 1.0):
            raise ValueError(f"{name}={values}: needs residual_normed=True")
