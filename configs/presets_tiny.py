"""Test-size presets: the HF fixtures under tests/fixtures/<arch>/ use exactly these shapes
(tests/test_hf_config.py reads each fixture's config.json back to its preset)."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling

TINY: dict[str, ModelConfig] = {}


def _add(cfg: ModelConfig) -> None:
    TINY[cfg.name] = cfg


_add(
    ModelConfig(
        name="tiny-llama",
        model_type="llama",
        vocab_size=512,
        hidden_size=96,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        head_dim=40,
        intermediate_size=192,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rope_scaling=RopeScaling(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
_add(
    ModelConfig(
        name="tiny-qwen3",
        model_type="qwen3",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        qk_norm=True,
        tie_word_embeddings=True,
        eos_token_ids=(2,),
    )
)
_add(
    ModelConfig(
        name="tiny-qwen2",
        model_type="qwen2",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        attention_bias=True,
        eos_token_ids=(2,),
    )
)
# Sliding-window attention (tests/fixtures/mistral, qwen2_sliding): every layer, and
# only layer 1 (layer_types [full, sliding]).
_add(
    TINY["tiny-qwen2"].replace(
        name="tiny-mistral",
        model_type="mistral",
        attention_bias=False,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        sliding_window=8,
        bos_token_id=1,
    )
)
_add(
    TINY["tiny-qwen2"].replace(
        name="tiny-qwen2-sliding", sliding_window=6, full_attention_layers=(0,)
    )
)
_add(
    ModelConfig(
        name="tiny-qwen3-moe",
        model_type="qwen3_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        qk_norm=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        mlp_only_layers=(1,),
        eos_token_ids=(2,),
    )
)
_add(
    ModelConfig(
        name="tiny-mixtral",
        model_type="mixtral",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=1,
        head_dim=16,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=96,
        norm_topk_prob=True,
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
# OLMoE: q/k norms over all heads' channels, q/k/v clipped to [-1, 1], q/k/v/o biases.
_add(
    ModelConfig(
        name="tiny-olmoe",
        model_type="olmoe",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=32,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        attention_bias=True,
        o_proj_bias=True,
        qk_norm=True,
        qk_norm_full=True,
        clip_qkv=1.0,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=False,
        eos_token_ids=(2,),
    )
)
# MiniMax-M2: OLMoE's q/k norms over all heads' channels, GLM-4.5's RoPE on half of each
# head, a sigmoid router whose choice adds a correction bias (no groups, no scaling).
_add(
    ModelConfig(
        name="tiny-minimax-m2",
        model_type="minimax_m2",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=32,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=5000000.0,
        partial_rotary_factor=0.5,
        qk_norm=True,
        qk_norm_full=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        eos_token_ids=(2,),
    )
)
# ERNIE 4.5 MoE: RoPE on interleaved pairs, softmax router with a choice-only correction
# bias (noaux_tc over one group), a shared expert, MoE on layers 1 and 3, tied embeddings.
_add(
    ModelConfig(
        name="tiny-ernie4-5-moe",
        model_type="ernie4_5_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        num_shared_experts=1,
        scoring_func="softmax",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        mlp_only_layers=(0, 2),
        eos_token_ids=(2,),
    )
)
# Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases, one shared expert of its own width
# gated by sigmoid(x @ shared_gate); decoder_sparse_step 2 (MoE on layers 1 and 3).
_add(
    ModelConfig(
        name="tiny-qwen2-moe",
        model_type="qwen2_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        attention_bias=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=False,
        num_shared_experts=1,
        shared_intermediate_size=48,
        shared_expert_gate=True,
        first_k_dense_replace=1,
        moe_layer_freq=2,
        eos_token_ids=(2,),
    )
)
# GLM-4.5 family: GQA with q/k/v biases, qk-norm and RoPE on half of each head; DeepSeek-V3's
# router (sigmoid, correction bias, 4 groups keep 2) with a shared expert; layer 0 dense.
_add(
    ModelConfig(
        name="tiny-glm4-moe",
        model_type="glm4_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        partial_rotary_factor=0.5,
        attention_bias=True,
        qk_norm=True,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        first_k_dense_replace=1,
        eos_token_ids=(2,),
    )
)
# dots.llm1: Qwen3's attention (per-head q/k norms; a 6-key window on layer 2, from
# max_window_layers) with DeepSeek-V3's MoE (group-limited sigmoid router with a correction
# bias, a shared expert, layer 0 dense).
_add(
    TINY["tiny-glm4-moe"].replace(
        name="tiny-dots1",
        model_type="dots1",
        rms_norm_eps=1e-6,
        partial_rotary_factor=1.0,
        attention_bias=False,
        sliding_window=6,
        full_attention_layers=(0, 1),
    )
)
# GLM-4.7-Flash: DeepSeek-V3's MLA (here with RoPE on halves, rope_interleave false) and
# V3 routing; mlp_layer_types makes layer 1 the dense one.
_add(
    ModelConfig(
        name="tiny-glm4-moe-lite",
        model_type="glm4_moe_lite",
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        attention_type="mla",
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=12,
        rope_interleave=False,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=1.8,
        mlp_only_layers=(1,),
        eos_token_ids=(2,),
    )
)
# gpt-oss: attention sinks, q/k/v/o biases, layer 0 windowed (8 keys), YaRN without
# truncation; biased router (softmax over the top k) and biased clamped-SwiGLU experts.
_add(
    ModelConfig(
        name="tiny-gpt-oss",
        model_type="gpt_oss",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=32,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=150000.0,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=64,
            beta_fast=32.0,
            beta_slow=1.0,
            truncate=False,
        ),
        attention_bias=True,
        o_proj_bias=True,
        attention_sinks=True,
        sliding_window=8,
        full_attention_layers=(1,),
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        scoring_func="softmax_topk",
        expert_bias=True,
        expert_act="clamped_swiglu",
        swiglu_limit=1.0,
        eos_token_ids=(2,),
    )
)
_add(
    ModelConfig(
        name="tiny-deepseek-v2",
        model_type="deepseek_v2",
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        intermediate_size=96,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        attention_type="mla",
        q_lora_rank=0,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=12,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        num_shared_experts=2,
        scoring_func="softmax",
        topk_method="group_limited_greedy",
        n_group=4,
        topk_group=1,
        norm_topk_prob=False,
        routed_scaling_factor=1.5,
        first_k_dense_replace=1,
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
_add(
    ModelConfig(
        name="tiny-deepseek-v3",
        model_type="deepseek_v3",
        vocab_size=512,
        hidden_size=64,
        num_layers=3,
        num_heads=4,
        intermediate_size=96,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=64,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        attention_type="mla",
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=12,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        first_k_dense_replace=1,
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
# DeepSeek-V3.2 (DeepSeek Sparse Attention): V3's shapes and an indexer keeping each query's
# 12 best keys; transformers' class places the dense MLP by mlp_layer_types (layer 0).
_add(
    TINY["tiny-deepseek-v3"].replace(
        name="tiny-deepseek-v32",
        model_type="deepseek_v32",
        first_k_dense_replace=0,
        mlp_only_layers=(0,),
        index_topk=12,
        index_n_heads=8,
        index_head_dim=16,
    )
)
# GLM-5 (glm_moe_dsa): V3.2's sparse attention, its indexer roping interleaved pairs; GLM's
# one expert group; the dense MLP on layer 1 (mlp_layer_types).
_add(
    TINY["tiny-deepseek-v32"].replace(
        name="tiny-glm-moe-dsa",
        model_type="glm_moe_dsa",
        rms_norm_eps=1e-5,
        rope_theta=1000000.0,
        rope_scaling=RopeScaling(),
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.8,
        mlp_only_layers=(1,),
        index_rope_interleave=True,
        bos_token_id=None,
    )
)
# Mistral Small 4 (mistral4, served from its Mistral 3 wrapper): V3's MLA and shapes, a
# softmax router with V3's groups and no bias, Llama 4's query temperature every 16 positions.
_add(
    TINY["tiny-deepseek-v3"].replace(
        name="tiny-mistral4",
        model_type="mistral4",
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=16,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        attn_scale_beta=0.5,
        attn_scale_positions=16,
        scoring_func="softmax",
        topk_method="group_top2",
        routed_scaling_factor=1.5,
    )
)
# Mistral Large 4 (mistral_large4_text, served from its mistral_large4 wrapper): GLM-5's
# sparse MLA without a q LoRA, layer 1 without RoPE and reusing layer 0's top-k, layer 2
# attending to layer 0's latent, LeRoPE, the learned query log scale, a softmax router
# with V3's groups, layer 0 dense, logits soft-capped at 2.
_add(
    TINY["tiny-glm-moe-dsa"].replace(
        name="tiny-mistral-large4",
        model_type="mistral_large4_text",
        rope_theta=10000.0,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=64,
            beta_fast=32.0,
            beta_slow=1.0,
            attention_factor=1.0,
        ),
        q_lora_rank=0,
        nope_layers=(1,),
        shared_indexer_layers=(1,),
        kv_source_layers=(0, 1, 0),
        learned_rope_scale=True,
        query_log_scale=True,
        final_logit_softcapping=2.0,
        scoring_func="softmax",
        topk_method="group_top2",
        n_group=4,
        topk_group=2,
        routed_scaling_factor=1.5,
        mlp_only_layers=(0,),
        bos_token_id=1,
    )
)
# Ministral 3 (ministral3): Mistral's attention with an 8-key window, YaRN, and Llama 4's
# query temperature every 16 positions.
_add(
    ModelConfig(
        name="tiny-ministral3",
        model_type="ministral3",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=24,
        intermediate_size=128,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=4.0,
            original_max_position_embeddings=16,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        sliding_window=8,
        attn_scale_beta=0.5,
        attn_scale_positions=16,
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
# Hunyuan-A13B (hunyuan_v1_moe): q/k norms after RoPE, NTK-alpha rope (alpha 50), a float32
# softmax router (top 2 of 8) beside a shared MLP as wide as each expert.
_add(
    ModelConfig(
        name="tiny-hunyuan-v1-moe",
        model_type="hunyuan_v1_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=48,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rope_scaling=RopeScaling(rope_type="ntk_alpha", alpha=50.0),
        qk_norm=True,
        qk_norm_after_rope=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=48,
        num_shared_experts=1,
        shared_intermediate_size=48,
        norm_topk_prob=True,
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
# Llama 4 (llama4_text, served from its llama4 wrapper): complex-pair RoPE with Llama 3's
# scaling, 8-key attention chunks and weightless q/k norms on layers 0-2, layer 3 without
# RoPE (full attention, Llama 4's query temperature), top-1 experts on layers 1 and 3 fed
# the token times its sigmoid score, a shared expert, dense layers 96 wide.
_add(
    ModelConfig(
        name="tiny-llama4",
        model_type="llama4_text",
        vocab_size=512,
        hidden_size=64,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=96,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        rope_theta=500000.0,
        rope_scaling=RopeScaling(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        full_attention_layers=(3,),
        attention_chunk_size=8,
        attn_scale_beta=0.5,
        attn_scale_positions=4,
        attn_scale_offset=1,
        attn_scale_nope_only=True,
        qk_l2_norm=True,
        nope_layers=(3,),
        num_experts=4,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        num_shared_experts=1,
        shared_intermediate_size=32,
        scoring_func="sigmoid",
        router_weight_on_input=True,
        mlp_only_layers=(0, 2),
        bos_token_id=1,
        eos_token_ids=(2,),
    )
)
# Qwen3-VL-MoE's language model (served from its qwen3_vl_moe wrapper): Qwen3-MoE's, experts
# stored with their last axes swapped as released.
_add(
    ModelConfig(
        name="tiny-qwen3-vl-moe",
        model_type="qwen3_moe",
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=1000000.0,
        qk_norm=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        norm_topk_prob=True,
        eos_token_ids=(2,),
    )
)
# GLM-4.5V's language model (served from its glm4v_moe wrapper): tiny-glm4-moe's without the
# q/k norms (its class has none).
_add(TINY["tiny-glm4-moe"].replace(name="tiny-glm4v-moe", qk_norm=False))
# Qwen3-Next (qwen3_next): gated DeltaNet on layers 0 and 2 (2 key heads of 16, 4 value
# heads of 12, a 4-tap conv), gated full attention with RoPE on a quarter of each head on
# 1 and 3, (1 + w) RMSNorms; top-2 of 8 softmax experts beside a gated shared expert, layer
# 2 dense.
_QWEN3_NEXT = ModelConfig(
    name="tiny-qwen3-next",
    model_type="qwen3_next",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    partial_rotary_factor=0.25,
    qk_norm=True,
    attn_output_gate=True,
    norm_zero_centered=True,
    linear_attention_layers=(0, 2),
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=12,
    linear_conv_kernel=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    shared_intermediate_size=32,
    shared_expert_gate=True,
    norm_topk_prob=True,
    mlp_only_layers=(2,),
    bos_token_id=1,
    eos_token_ids=(2,),
)
_add(_QWEN3_NEXT)
# Qwen3.5-MoE (qwen3_5_moe, served from its multimodal wrapper): Qwen3-Next's layers with
# three DeltaNet layers before each full one, 32-wide heads (RoPE on 8 channels), value
# heads of 16, every layer MoE.
_add(
    _QWEN3_NEXT.replace(
        name="tiny-qwen3-5-moe",
        model_type="qwen3_5_moe_text",
        head_dim=32,
        rope_theta=10000000.0,
        linear_attention_layers=(0, 1, 2),
        linear_value_head_dim=16,
        mlp_only_layers=(),
        intermediate_size=24,  # (its config's: no dense layer)
    )
)
# Qwen3.5 (qwen3_5, dense, served from its multimodal wrapper): Qwen3.5-MoE's layers with a
# SwiGLU MLP 96 wide in place of the experts, the full-attention layer third of four.
_add(
    TINY["tiny-qwen3-5-moe"].replace(
        name="tiny-qwen3-5",
        model_type="qwen3_5_text",
        intermediate_size=96,
        linear_attention_layers=(0, 1, 3),
        num_experts=0,
        num_experts_per_tok=0,
        moe_intermediate_size=0,
        num_shared_experts=0,
        shared_intermediate_size=0,
        shared_expert_gate=False,
        norm_topk_prob=False,
    )
)
# Kimi-Linear (kimi_linear): KDA layers (a decay per key channel, low-rank forget and output
# gates) first and third, MLA layers without RoPE (no q LoRA) second and fourth, DeepSeek-V3's
# sigmoid router with its correction bias (one group) and a shared expert; layer 0 dense.
_add(
    TINY["tiny-deepseek-v3"].replace(
        name="tiny-kimi-linear",
        model_type="kimi_linear",
        num_layers=4,
        rms_norm_eps=1e-5,
        rope_scaling=RopeScaling(),
        q_lora_rank=0,
        mla_unrotated=True,
        num_experts=8,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=2.446,
        first_k_dense_replace=0,
        mlp_only_layers=(0,),  # (its mlp_layer_types)
        linear_attention_layers=(0, 2),
        linear_attention_kind="kimi_delta",
        linear_num_key_heads=4,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel=4,
    )
)
# DeepSeek-V4 (deepseek_v4): a window of 8 keys on every layer, beside compressed entries on
# the last three (csa every 4 tokens with a top-3 indexer, hca every 8), one shared 32-wide
# key=value head (8 rope channels last), 4 hyper-connection streams, sqrtsoftplus routing
# (layer 0 by a token-id hash), gate and up clamped at 1.
_add(
    ModelConfig(
        name="tiny-deepseek-v4",
        model_type="deepseek_v4",
        attention_type="dsv4",
        num_layers=4,
        num_kv_heads=1,
        head_dim=32,
        partial_rotary_factor=0.25,
        intermediate_size=32,
        max_position_embeddings=256,
        rope_scaling=RopeScaling(
            "yarn", 4.0, original_max_position_embeddings=64, attention_factor=1.0
        ),
        sliding_window=8,
        q_lora_rank=32,
        index_topk=3,
        index_n_heads=4,
        index_head_dim=16,
        v4_layer_kinds=("sliding", "csa", "hca", "csa"),
        hca_ratio=8,
        o_groups=2,
        o_lora_rank=16,
        hc_mult=4,
        hash_moe_layers=(0,),
        **dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32),
        **dict(num_shared_experts=1, scoring_func="sqrtsoftplus", norm_topk_prob=True),
        **dict(routed_scaling_factor=1.5, expert_act="limited_swiglu", swiglu_limit=1.0),
        **dict(bos_token_id=1, eos_token_ids=(2,)),
    )
)
