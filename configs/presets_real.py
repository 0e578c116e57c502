"""Real-shape presets, from the released config.json files (random weights when built;
`jax.eval_shape` counts their parameters, tests/test_param_counts.py)."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling
from configs.presets_tiny import TINY

LLAMA3_ROPE = RopeScaling(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=8192,
)
DEEPSEEK_YARN = dict(
    rope_type="yarn",
    factor=40.0,
    original_max_position_embeddings=4096,
    beta_fast=32.0,
    beta_slow=1.0,
)

REAL: dict[str, ModelConfig] = {}


def _add(cfg: ModelConfig) -> None:
    REAL[cfg.name] = cfg


_add(
    ModelConfig(
        name="llama-3.1-8b",
        model_type="llama",
        vocab_size=128256,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=LLAMA3_ROPE,
        bos_token_id=128000,
        eos_token_ids=(128001, 128008, 128009),
        dtype="bfloat16",
    )
)
_add(
    REAL["llama-3.1-8b"].replace(
        name="llama-3.1-70b",
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        intermediate_size=28672,
    )
)
_add(
    ModelConfig(
        name="mixtral-8x7b",
        model_type="mixtral",
        vocab_size=32000,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        rms_norm_eps=1e-5,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=14336,
        norm_topk_prob=True,
        bos_token_id=1,
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
)
_add(
    ModelConfig(
        name="qwen3-30b-a3b",
        model_type="qwen3_moe",
        vocab_size=151936,
        hidden_size=2048,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=6144,
        rms_norm_eps=1e-6,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        qk_norm=True,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        norm_topk_prob=True,
        bos_token_id=151643,
        eos_token_ids=(151645, 151643),
        dtype="bfloat16",
    )
)
_add(
    REAL["qwen3-30b-a3b"].replace(
        name="qwen3-235b-a22b",
        hidden_size=4096,
        num_layers=94,
        num_heads=64,
        intermediate_size=12288,
        moe_intermediate_size=1536,
    )
)
_add(
    ModelConfig(
        name="deepseek-v2-lite",
        model_type="deepseek_v2",
        vocab_size=102400,
        hidden_size=2048,
        num_layers=27,
        num_heads=16,
        intermediate_size=10944,
        rms_norm_eps=1e-6,
        max_position_embeddings=163840,
        rope_theta=10000.0,
        rope_scaling=RopeScaling(mscale=0.707, mscale_all_dim=0.707, **DEEPSEEK_YARN),
        attention_type="mla",
        q_lora_rank=0,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        num_experts=64,
        num_experts_per_tok=6,
        moe_intermediate_size=1408,
        num_shared_experts=2,
        scoring_func="softmax",
        topk_method="greedy",
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
        first_k_dense_replace=1,
        bos_token_id=100000,
        eos_token_ids=(100001,),
        dtype="bfloat16",
    )
)
# GLM-4.5 (zai-org/GLM-4.5, 355B total, 32B active): 3 dense layers then 89 MoE layers of
# 160 routed experts (top 8) plus one shared; RoPE on half of each 128-wide head.
_add(
    ModelConfig(
        name="glm-4.5",
        model_type="glm4_moe",
        num_nextn_predict_layers=1,
        vocab_size=151552,
        hidden_size=5120,
        num_layers=92,
        num_heads=96,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=12288,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_theta=1000000.0,
        partial_rotary_factor=0.5,
        attention_bias=True,
        qk_norm=True,
        num_experts=160,
        num_experts_per_tok=8,
        moe_intermediate_size=1536,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        first_k_dense_replace=3,
        eos_token_ids=(151329, 151336, 151338),
        dtype="bfloat16",
    )
)
# MiniMax-M2 (MiniMaxAI/MiniMax-M2, 230B total, 10B active; M2.1 and M2.5 have its shapes):
# 62 MoE layers of 256 experts (top 8, sigmoid scores with a correction bias), q/k norms over
# all heads' channels, RoPE on the first 64 channels of each 128-wide head.
_add(
    TINY["tiny-minimax-m2"].replace(
        name="minimax-m2",
        vocab_size=200064,
        hidden_size=3072,
        num_layers=62,
        num_heads=48,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=1536,
        max_position_embeddings=196608,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=1536,
        bos_token_id=200034,
        eos_token_ids=(200020,),
        dtype="bfloat16",
    )
)
# dots.llm1 (rednote-hilab/dots.llm1.inst, 142B total, 14B active): one dense layer, then 61
# MoE layers of 128 routed experts (top 6) plus 2 shared, Qwen3's attention (32 heads of 128,
# no GQA), no sliding window. Its EOS ids are not set here (a checkpoint's config has them).
_add(
    TINY["tiny-dots1"].replace(
        name="dots-llm1",
        vocab_size=152064,
        hidden_size=4096,
        num_layers=62,
        num_heads=32,
        num_kv_heads=32,
        head_dim=128,
        intermediate_size=10944,
        rms_norm_eps=1e-5,
        max_position_embeddings=32768,
        rope_theta=10000000.0,
        num_experts=128,
        num_experts_per_tok=6,
        moe_intermediate_size=1408,
        num_shared_experts=2,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=2.5,
        sliding_window=None,
        full_attention_layers=(),
        eos_token_ids=(),
        dtype="bfloat16",
    )
)
# GLM-4.7-Flash (30B total, 3B active): DeepSeek-V3-style MLA, 64 routed experts (top 4)
# plus one shared, layer 0 dense. Its EOS ids are not set here (a checkpoint's config has them).
_add(
    TINY["tiny-glm4-moe-lite"].replace(
        name="glm-4.7-flash",
        vocab_size=154880,
        hidden_size=2048,
        num_layers=47,
        num_heads=20,
        intermediate_size=10240,
        max_position_embeddings=202752,
        q_lora_rank=768,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        v_head_dim=256,
        rope_interleave=True,
        num_experts=64,
        num_experts_per_tok=4,
        moe_intermediate_size=1536,
        n_group=1,
        topk_group=1,
        mlp_only_layers=(0,),
        eos_token_ids=(),
        dtype="bfloat16",
    )
)
# gpt-oss-20b / gpt-oss-120b (OpenAI; 24 / 36 layers of 32 / 128 experts, top 4): 64 query
# and 8 KV heads of 64, every other layer a 128-key window, YaRN x32 from 4096 without
# truncation. EOS ids are not set here (a checkpoint's config has them).
_add(
    TINY["tiny-gpt-oss"].replace(
        name="gpt-oss-20b",
        vocab_size=201088,
        hidden_size=2880,
        num_layers=24,
        num_heads=64,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=2880,
        max_position_embeddings=131072,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=32.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            truncate=False,
        ),
        sliding_window=128,
        full_attention_layers=tuple(range(1, 24, 2)),
        num_experts=32,
        num_experts_per_tok=4,
        moe_intermediate_size=2880,
        swiglu_limit=7.0,
        eos_token_ids=(),
        dtype="bfloat16",
    )
)
_add(
    REAL["gpt-oss-20b"].replace(
        name="gpt-oss-120b",
        num_layers=36,
        full_attention_layers=tuple(range(1, 36, 2)),
        num_experts=128,
    )
)
# OLMoE-1B-7B (AllenAI, 0924): 16 layers of 64 experts (top 8), no biases, no clipping.
_add(
    TINY["tiny-olmoe"].replace(
        name="olmoe-1b-7b",
        vocab_size=50304,
        hidden_size=2048,
        num_layers=16,
        num_heads=16,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=1024,
        max_position_embeddings=4096,
        attention_bias=False,
        o_proj_bias=False,
        clip_qkv=None,
        num_experts=64,
        num_experts_per_tok=8,
        moe_intermediate_size=1024,
        eos_token_ids=(50279,),
        dtype="bfloat16",
    )
)
# ERNIE-4.5-21B-A3B (Baidu): 28 layers, layer 0 dense, then 64 experts (top 6) + 2 shared.
_add(
    TINY["tiny-ernie4-5-moe"].replace(
        name="ernie-4.5-21b-a3b",
        vocab_size=103424,
        hidden_size=2560,
        num_layers=28,
        num_heads=20,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=12288,
        max_position_embeddings=131072,
        num_experts=64,
        num_experts_per_tok=6,
        moe_intermediate_size=1536,
        num_shared_experts=2,
        mlp_only_layers=(0,),
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
)
# Qwen1.5-MoE-A2.7B (Qwen2-MoE): 24 layers of 60 experts (top 4) plus a gated shared expert
# four experts wide.
_add(
    TINY["tiny-qwen2-moe"].replace(
        name="qwen1.5-moe-a2.7b",
        vocab_size=151936,
        hidden_size=2048,
        num_layers=24,
        num_heads=16,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=5632,
        max_position_embeddings=8192,
        num_experts=60,
        num_experts_per_tok=4,
        moe_intermediate_size=1408,
        shared_intermediate_size=5632,
        first_k_dense_replace=0,
        moe_layer_freq=1,
        eos_token_ids=(151643,),
        dtype="bfloat16",
    )
)
_add(
    ModelConfig(
        name="deepseek-v3",
        model_type="deepseek_v3",
        num_nextn_predict_layers=1,
        vocab_size=129280,
        hidden_size=7168,
        num_layers=61,
        num_heads=128,
        intermediate_size=18432,
        rms_norm_eps=1e-6,
        max_position_embeddings=163840,
        rope_theta=10000.0,
        rope_scaling=RopeScaling(mscale=1.0, mscale_all_dim=1.0, **DEEPSEEK_YARN),
        attention_type="mla",
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        n_group=8,
        topk_group=4,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        first_k_dense_replace=3,
        bos_token_id=0,
        eos_token_ids=(1,),
        dtype="bfloat16",
    )
)
# DeepSeek-V3.2-Exp: V3 with DeepSeek Sparse Attention (each query attends to the 2,048 keys
# its layer's indexer scores highest); transformers' class places the dense MLPs by
# mlp_layer_types (the first three layers).
_add(
    REAL["deepseek-v3"].replace(
        name="deepseek-v3.2-exp",
        model_type="deepseek_v32",
        first_k_dense_replace=0,
        mlp_only_layers=(0, 1, 2),
        index_topk=2048,
        index_n_heads=64,
        index_head_dim=128,
    )
)
# GLM-5 (zai-org/GLM-5, glm_moe_dsa): transformers' GlmMoeDsaConfig defaults, which are its
# shapes; DeepSeek sparse attention on every layer (the indexer roping interleaved pairs).
_add(
    REAL["deepseek-v3.2-exp"].replace(
        name="glm-5",
        model_type="glm_moe_dsa",
        vocab_size=154880,
        hidden_size=6144,
        num_layers=78,
        num_heads=64,
        intermediate_size=12288,
        rms_norm_eps=1e-5,
        max_position_embeddings=202752,
        rope_theta=1000000.0,
        rope_scaling=RopeScaling(),
        q_lora_rank=2048,
        qk_nope_head_dim=192,
        v_head_dim=256,
        n_group=1,
        topk_group=1,
        index_n_heads=32,
        index_rope_interleave=True,
        eos_token_ids=(154820, 154827, 154829),
    )
)
# Mistral Small 4 (mistralai/Mistral-Small-4-119B-2603, mistral4 in a Mistral 3 wrapper):
# transformers' Mistral4Config defaults, its shapes: DeepSeek-V3's MLA with a 256-wide
# latent, 128 experts (4 routed, 1 shared) on every layer, Llama 4's query temperature.
_add(
    ModelConfig(
        name="mistral-small-4",
        model_type="mistral4",
        vocab_size=131072,
        hidden_size=4096,
        num_layers=36,
        num_heads=32,
        intermediate_size=12288,
        rms_norm_eps=1e-6,
        max_position_embeddings=1048576,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=128.0,
            original_max_position_embeddings=8192,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
        attention_type="mla",
        q_lora_rank=1024,
        kv_lora_rank=256,
        qk_nope_head_dim=64,
        qk_rope_head_dim=64,
        v_head_dim=128,
        attn_scale_beta=0.1,
        attn_scale_positions=8192,
        num_experts=128,
        num_experts_per_tok=4,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        scoring_func="softmax",
        topk_method="group_top2",
        norm_topk_prob=True,
        bos_token_id=1,
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
)
# Mistral Large 4 (mistralai/Mistral-Large-4-1T-A52B): transformers' MistralLarge4TextConfig
# defaults: GLM-5's sparse MLA (2,048 keys per query) without a q LoRA, every 4th layer
# without RoPE, LeRoPE, the learned query log scale, logits soft-capped at 30, layer 0 dense.
_add(
    ModelConfig(
        name="mistral-large-4",
        model_type="mistral_large4_text",
        vocab_size=204800,
        hidden_size=6144,
        num_layers=72,
        num_heads=64,
        intermediate_size=24576,
        rms_norm_eps=1e-5,
        max_position_embeddings=1048576,
        rope_scaling=RopeScaling(
            rope_type="yarn",
            factor=2048.0,
            original_max_position_embeddings=512,
            attention_factor=1.0,
        ),
        attention_type="mla",
        kv_lora_rank=512,
        qk_nope_head_dim=64,
        qk_rope_head_dim=64,
        v_head_dim=128,
        nope_layers=tuple(range(3, 72, 4)),
        learned_rope_scale=True,
        query_log_scale=True,
        index_topk=2048,
        index_n_heads=32,
        index_head_dim=128,
        index_rope_interleave=True,
        final_logit_softcapping=30.0,
        num_experts=128,
        num_experts_per_tok=4,
        moe_intermediate_size=6144,
        num_shared_experts=1,
        scoring_func="softmax",
        topk_method="group_top2",
        norm_topk_prob=True,
        mlp_only_layers=(0,),
        bos_token_id=1,
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
)
# Llama 4 Scout (meta-llama/Llama-4-Scout-17B-16E, llama4_text in its llama4 wrapper):
# transformers' Llama4TextConfig defaults, its shapes (the release's config.json adds Llama
# 3 rope scaling, which a loaded checkpoint takes): 8,192-key attention chunks on three
# layers of four, the fourth without RoPE seeing every key; top-1 of 16 experts, fed the
# token times its router score, beside a shared expert, on every layer.
_add(
    ModelConfig(
        name="llama-4-scout",
        model_type="llama4_text",
        vocab_size=202048,
        hidden_size=5120,
        num_layers=48,
        num_heads=40,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=16384,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        full_attention_layers=tuple(range(3, 48, 4)),
        attention_chunk_size=8192,
        attn_scale_beta=0.1,
        attn_scale_positions=8192,
        attn_scale_offset=1,
        attn_scale_nope_only=True,
        qk_l2_norm=True,
        nope_layers=tuple(range(3, 48, 4)),
        num_experts=16,
        num_experts_per_tok=1,
        moe_intermediate_size=8192,
        num_shared_experts=1,
        shared_intermediate_size=8192,
        scoring_func="sigmoid",
        router_weight_on_input=True,
        bos_token_id=1,
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
)
# Llama 4 Maverick (meta-llama/Llama-4-Maverick-17B-128E): Scout's layers with 128 experts on
# every other layer (interleave_moe_layer_step 2), dense MLPs 16,384 wide between them.
_add(
    REAL["llama-4-scout"].replace(
        name="llama-4-maverick", num_experts=128, mlp_only_layers=tuple(range(0, 48, 2))
    )
)
# Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct): three gated DeltaNet layers (16 key
# heads, 32 value heads of 128, a 4-tap conv) before each gated full-attention layer (16
# heads of 256, 2 KV heads, RoPE on 64 channels), 512 experts (top 10) beside a gated shared
# expert on every layer.
_add(
    ModelConfig(
        name="qwen3-next-80b-a3b",
        model_type="qwen3_next",
        vocab_size=151936,
        hidden_size=2048,
        num_layers=48,
        num_heads=16,
        num_kv_heads=2,
        head_dim=256,
        intermediate_size=5120,
        rms_norm_eps=1e-6,
        max_position_embeddings=262144,
        rope_theta=10000000.0,
        partial_rotary_factor=0.25,
        qk_norm=True,
        attn_output_gate=True,
        norm_zero_centered=True,
        linear_attention_layers=tuple(i for i in range(48) if i % 4 != 3),
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel=4,
        num_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=512,
        num_shared_experts=1,
        shared_intermediate_size=512,
        shared_expert_gate=True,
        norm_topk_prob=True,
        bos_token_id=151643,
        eos_token_ids=(151645, 151643),
        dtype="bfloat16",
    )
)
# Qwen3.5-397B-A17B (Qwen/Qwen3.5-397B-A17B, its language model): Qwen3-Next's layout, 60
# layers 4,096 wide, 32 heads, 64 DeltaNet value heads, 512 experts of 1,024 (top 10).
_add(
    REAL["qwen3-next-80b-a3b"].replace(
        name="qwen3.5-397b-a17b",
        model_type="qwen3_5_moe_text",
        vocab_size=248320,
        hidden_size=4096,
        num_layers=60,
        num_heads=32,
        intermediate_size=1024,
        linear_attention_layers=tuple(i for i in range(60) if i % 4 != 3),
        linear_num_value_heads=64,
        moe_intermediate_size=1024,
        shared_intermediate_size=1024,
        bos_token_id=None,
        eos_token_ids=(),  # (its checkpoint's generation_config.json gives them)
    )
)
# Kimi-Linear-48B-A3B (moonshotai/Kimi-Linear-48B-A3B-Instruct): 27 layers 2,304 wide, KDA
# (32 heads of 128) on 20 of them and MLA without RoPE (no q LoRA) on every 4th and the last
# (its linear_attn_config's full_attn_layers, 1-indexed: 4, 8, ..., 24, 27); DeepSeek-V3's
# sigmoid router, 256 experts of 1,024 (top 8) and a shared expert; layer 0 dense.
_add(
    ModelConfig(
        name="kimi-linear-48b-a3b",
        model_type="kimi_linear",
        vocab_size=163840,
        hidden_size=2304,
        num_layers=27,
        num_heads=32,
        intermediate_size=9216,
        rms_norm_eps=1e-5,
        max_position_embeddings=1048576,
        attention_type="mla",
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        mla_unrotated=True,
        linear_attention_layers=tuple(
            i for i in range(27) if i + 1 not in (4, 8, 12, 16, 20, 24, 27)
        ),
        linear_attention_kind="kimi_delta",
        linear_num_key_heads=32,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel=4,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=1024,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        routed_scaling_factor=2.446,
        mlp_only_layers=(0,),  # (its config's first_k_dense_replace=1)
        bos_token_id=163584,
        eos_token_ids=(163586,),
        dtype="bfloat16",
    )
)
# DeepSeek-V4-Flash (deepseek_v4): transformers 5.25's DeepseekV4Config defaults (its docstring
# names DeepSeek-V4-Flash-Base): 43 layers of hyper-connections (4 streams), a 128-token
# window on every layer beside compressed entries (two hca layers, then csa and hca
# alternating: transformers' default layer_types), one 512-wide key=value head, 64 query
# heads in 8 output groups, 256 experts (6 routed, 3 hash layers), YaRN x16 on the
# compressed layers' rope (the factor transformers' config comment gives).
_add(
    ModelConfig(
        name="deepseek-v4-flash",
        model_type="deepseek_v4",
        attention_type="dsv4",
        vocab_size=129280,
        hidden_size=4096,
        num_layers=43,
        num_heads=64,
        num_kv_heads=1,
        head_dim=512,
        partial_rotary_factor=0.125,
        intermediate_size=2048,
        max_position_embeddings=1048576,
        rope_scaling=RopeScaling(
            "yarn", 16.0, original_max_position_embeddings=65536, attention_factor=1.0
        ),
        sliding_window=128,
        q_lora_rank=1024,
        index_topk=512,
        index_n_heads=64,
        index_head_dim=128,
        v4_layer_kinds=("hca", "hca") + ("hca", "csa") * 20 + ("hca",),
        o_groups=8,
        o_lora_rank=1024,
        hc_mult=4,
        hash_moe_layers=(0, 1, 2),
        num_experts=256,
        num_experts_per_tok=6,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        expert_act="limited_swiglu",
        swiglu_limit=10.0,
        num_nextn_predict_layers=1,
        bos_token_id=0,
        eos_token_ids=(1,),
        dtype="bfloat16",
    )
)
