"""Presets of Tencent's Hunyuan 3 (transformers' hy_v3), OpenBMB's MiniCPM5-MoE
(minicpm5_moe) and IBM's Granite SWA (granite_swa, granitemoe_swa): the test-size models
of tests/fixtures/<arch> (tests/test_hyv3.py and test_granite_swa.py read each config.json
back to its preset) and the shapes of transformers 5.25's class defaults (HYV3Config;
MiniCPM5MoeConfig, whose docstring names openbmb/MiniCPM5-15B-A2.5B)."""

from __future__ import annotations

import dataclasses

from configs.model_config import ModelConfig, RopeScaling

NEWER: dict[str, ModelConfig] = {}

# tests/fixtures/hy_v3: 3 layers 64 wide; 4 heads over 2 KV heads of 16 with q/k norms per
# head; a dense first layer (96 wide), then top-2 of 8 experts 24 wide under the biased
# sigmoid router (one group, renormalized, times 2.826) beside a shared one.
NEWER["tiny-hy-v3"] = ModelConfig(
    name="tiny-hy-v3",
    model_type="hy_v3",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_theta=11158840.0,
    qk_norm=True,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=2.826,
    mlp_only_layers=(0,),
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/minicpm5_moe: the same sizes with a sigmoid gate on each attention output
# channel and no q/k norms; two expert groups, one kept, times 3.66.
NEWER["tiny-minicpm5-moe"] = NEWER["tiny-hy-v3"].replace(
    name="tiny-minicpm5-moe",
    model_type="minicpm5_moe",
    rms_norm_eps=1e-6,
    rope_theta=5000000.0,
    qk_norm=False,
    attn_output_gate=True,
    n_group=2,
    routed_scaling_factor=3.66,
)
# HYV3Config's defaults: 80 layers 4,096 wide, 64 heads over 8 KV heads of 128; a dense
# first layer 13,312 wide, then top-8 of 192 experts 1,536 wide and a shared one.
NEWER["hy-v3"] = NEWER["tiny-hy-v3"].replace(
    name="hy-v3",
    vocab_size=120832,
    hidden_size=4096,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=13312,
    max_position_embeddings=131072,
    num_experts=192,
    num_experts_per_tok=8,
    moe_intermediate_size=1536,
    bos_token_id=None,
    eos_token_ids=(),
    dtype="bfloat16",
)
# MiniCPM5-15B-A2.5B (MiniCPM5MoeConfig's defaults): 28 layers 2,048 wide, 32 heads over 2
# KV heads of 128; a dense first layer 8,192 wide, then top-16 of 160 experts 512 wide and
# a shared one (one group, times 3.66); 524,288 positions.
NEWER["minicpm5-15b-a2.5b"] = NEWER["tiny-minicpm5-moe"].replace(
    name="minicpm5-15b-a2.5b",
    vocab_size=130560,
    hidden_size=2048,
    num_layers=28,
    num_heads=32,
    num_kv_heads=2,
    head_dim=128,
    intermediate_size=8192,
    max_position_embeddings=524288,
    num_experts=160,
    num_experts_per_tok=16,
    moe_intermediate_size=512,
    n_group=1,
    bos_token_id=0,
    eos_token_ids=(1, 130073),
    dtype="bfloat16",
)
# tests/fixtures/granite_swa: IBM Granite SWA (dense): 4 layers 64 wide, 4 heads over 2 KV
# heads of 16 with a sink each; 8-key windows with RoPE on layers 1-3, layer 0 global
# without positions; a SwiGLU MLP 96 wide; Granite's multipliers (embeddings x2, blocks x0.5,
# scores x0.2, logits / 2).
NEWER["tiny-granite-swa"] = ModelConfig(
    name="tiny-granite-swa",
    model_type="granite_swa",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    attention_sinks=True,
    sliding_window=8,
    full_attention_layers=(0,),
    nope_layers=(0,),
    embedding_multiplier=2.0,
    residual_multiplier=0.5,
    attention_multiplier=0.2,
    logits_scaling=2.0,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/granitemoe_swa: the same layers with RoPE on layer 0 too (base 5e5; the
# windowed layers' 1e4); top-2 of 8 experts 32 wide (softmax over the chosen logits) beside
# a shared MLP 48 wide.
NEWER["tiny-granitemoe-swa"] = NEWER["tiny-granite-swa"].replace(
    name="tiny-granitemoe-swa",
    model_type="granitemoe_swa",
    intermediate_size=32,
    rms_norm_eps=1e-6,
    rope_theta=500000.0,
    sliding_rope_theta=10000.0,
    nope_layers=(),
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    num_shared_experts=1,
    shared_intermediate_size=48,
    scoring_func="softmax_topk",
)
# tests/fixtures/dbrx: Databricks' DBRX: 3 layers 64 wide; LayerNorms without a bias; 4 heads
# over 2 KV heads of 16, q / k / v clamped to +-0.5, RoPE base 5e5; top-2 of 8 experts 32
# wide under a softmax router, renormalized.
NEWER["tiny-dbrx"] = ModelConfig(
    name="tiny-dbrx",
    model_type="dbrx",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=32,
    rms_norm_eps=1e-5,
    norm_kind="layer",
    max_position_embeddings=2048,
    rope_theta=500000.0,
    clip_qkv=0.5,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    norm_topk_prob=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# DBRX Base / Instruct (databricks/dbrx-instruct's config.json): 40 layers 6,144 wide, 48
# heads over 8 KV heads of 128 clamped to +-8, RoPE base 5e5; top-4 of 16 experts 10,752
# wide; 32,768 positions.
NEWER["dbrx"] = NEWER["tiny-dbrx"].replace(
    name="dbrx",
    vocab_size=100352,
    hidden_size=6144,
    num_layers=40,
    num_heads=48,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=10752,
    max_position_embeddings=32768,
    clip_qkv=8.0,
    num_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=10752,
    bos_token_id=None,
    eos_token_ids=(),
    dtype="bfloat16",
)
# tests/fixtures/lfm3: LiquidAI's LFM3: 6 layers 64 wide; short convs (7 taps) on 0, 1, 3, 5;
# q/k-normed GQA (4 heads over 2 KV heads of 16) with a sigmoid gate per head: global with
# proportional RoPE (base 1e6, half the pairs) on 2, an 8-key window with default RoPE (base
# 1e4) on 4; RMSNorms before and after every block; a SwiGLU MLP 96 wide; tied embeddings.
NEWER["tiny-lfm3"] = ModelConfig(
    name="tiny-lfm3",
    model_type="lfm3",
    vocab_size=512,
    hidden_size=64,
    num_layers=6,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_theta=1000000.0,
    partial_rotary_factor=0.5,
    rope_proportional=True,
    sliding_rope_theta=10000.0,
    tie_word_embeddings=True,
    qk_norm=True,
    head_gate=True,
    sandwich_norms=True,
    sliding_window=8,
    full_attention_layers=(2,),
    linear_attention_layers=(0, 1, 3, 5),
    linear_attention_kind="short_conv",
    linear_conv_kernel=7,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/phi3: Microsoft's Phi-3 kind: 3 layers 64 wide, 4 heads over 2 KV heads of
# 16 (q/k/v and gate/up fused as released), RoPE on 12 of 16 channels with LongRoPE's short
# factors (pretraining length 64 of 2,048 positions); phi3_long: a length of 4, its long
# factors (what an engine longer than that uses: models/rope.for_max_model_len).
_LONGROPE = RopeScaling(
    rope_type="longrope",
    factor=2048 / 64,
    original_max_position_embeddings=64,
    short_factor=(1.0, 1.1, 1.3, 1.6, 2.0, 2.5),
    long_factor=(1.0, 1.5, 2.5, 4.0, 6.0, 9.0),
)
NEWER["tiny-phi3"] = ModelConfig(
    name="tiny-phi3",
    model_type="phi3",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    partial_rotary_factor=0.75,
    rope_scaling=_LONGROPE,
    bos_token_id=1,
    eos_token_ids=(2,),
)
NEWER["tiny-phi3-long"] = NEWER["tiny-phi3"].replace(
    name="tiny-phi3-long",
    rope_scaling=dataclasses.replace(
        _LONGROPE, factor=2048 / 4, original_max_position_embeddings=4, long_factors=True
    ),
)
# tests/fixtures/phimoe: Phi-3.5-MoE's kind: 3 layers 64 wide; 4 heads over 2 KV heads of 16
# with biases on q, k, v and o; LayerNorms with biases; top-2 of 8 experts 32 wide under the
# sparsemixer router (relative gap 0.3); a bias on lm_head; LongRoPE's short factors and
# mscale 1.2 (pretraining length 64).
NEWER["tiny-phimoe"] = NEWER["tiny-phi3"].replace(
    name="tiny-phimoe",
    model_type="phimoe",
    intermediate_size=32,
    partial_rotary_factor=1.0,
    rope_scaling=dataclasses.replace(
        _LONGROPE,
        short_factor=(1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 3.5),
        long_factor=(1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0),
        short_mscale=1.2,
        long_mscale=1.4,
    ),
    attention_bias=True,
    o_proj_bias=True,
    norm_kind="layer",
    norm_bias=True,
    lm_head_bias=True,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    scoring_func="sparsemixer",
    sparsemixer_eps=0.3,
)
# tests/fixtures/granite: IBM Granite 3's dense kind: 3 layers 64 wide, Llama's layers (4
# heads over 2 KV heads of 16, a SwiGLU MLP 96 wide) under tiny-granite-swa's multipliers.
NEWER["tiny-granite"] = NEWER["tiny-granite-swa"].replace(
    name="tiny-granite",
    model_type="granite",
    num_layers=3,
    rms_norm_eps=1e-6,
    attention_sinks=False,
    sliding_window=None,
    full_attention_layers=(),
    nope_layers=(),
)
# tests/fixtures/smollm3: Hugging Face's SmolLM3 kind: 4 layers 64 wide, Llama's layers (4
# heads over 2 KV heads of 16, a SwiGLU MLP 96 wide) with RoPE (base 2e6) on layers 0-2,
# none on layer 3, which an 8-key window covers; tied embeddings.
NEWER["tiny-smollm3"] = ModelConfig(
    name="tiny-smollm3",
    model_type="smollm3",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    rope_theta=2000000.0,
    tie_word_embeddings=True,
    nope_layers=(3,),
    sliding_window=8,
    full_attention_layers=(0, 1, 2),
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/ernie4_5: ERNIE 4.5 dense, 2 layers 64 wide: ERNIE 4.5 MoE's attention (4
# heads over 2 KV heads of 16, RoPE base 5e5 on interleaved pairs), a SwiGLU MLP 96 wide;
# tied embeddings.
NEWER["tiny-ernie4-5"] = ModelConfig(
    name="tiny-ernie4-5",
    model_type="ernie4_5",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_theta=500000.0,
    tie_word_embeddings=True,
    bos_token_id=None,
    eos_token_ids=(2,),
)
# tests/fixtures/hunyuan_v1_dense: Hunyuan dense, 2 layers 64 wide: Hunyuan-A13B's attention
# (4 heads over 2 KV heads of 16, q/k RMSNorms after RoPE, NTK-alpha RoPE: alpha 50), a
# SwiGLU MLP 96 wide.
NEWER["tiny-hunyuan-v1-dense"] = ModelConfig(
    name="tiny-hunyuan-v1-dense",
    model_type="hunyuan_v1_dense",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_scaling=RopeScaling(rope_type="ntk_alpha", alpha=50.0),
    qk_norm=True,
    qk_norm_after_rope=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# ERNIE-4.5-0.3B (Ernie4_5Config's defaults, its card's shapes): 18 layers 1,024 wide, 16
# heads over 2 KV heads of 128, a SwiGLU MLP 3,072 wide; tied embeddings; 131,072 positions.
NEWER["ernie-4.5-0.3b"] = NEWER["tiny-ernie4-5"].replace(
    name="ernie-4.5-0.3b",
    vocab_size=103424,
    hidden_size=1024,
    num_layers=18,
    num_heads=16,
    num_kv_heads=2,
    head_dim=128,
    intermediate_size=3072,
    max_position_embeddings=131072,
    bos_token_id=1,
    dtype="bfloat16",
)
# tests/fixtures/seed_oss: Seed-OSS, 2 layers 64 wide: Llama's layers (4 heads over 2 KV
# heads of 16, a SwiGLU MLP 96 wide) with biases on q, k, v and o_proj; RoPE base 1e7.
NEWER["tiny-seed-oss"] = ModelConfig(
    name="tiny-seed-oss",
    model_type="seed_oss",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    rope_theta=10000000.0,
    attention_bias=True,
    o_proj_bias=True,
    bos_token_id=0,
    eos_token_ids=(2,),
)
# tests/fixtures/glm4: GLM-4 dense, 2 layers 64 wide: 4 heads over 2 KV heads of 16 with q/k/v
# biases, RoPE on interleaved pairs of each head's first 8 channels, a SwiGLU MLP 96 wide
# (gate and up fused in the checkpoint), sandwich norms.
NEWER["tiny-glm4"] = ModelConfig(
    name="tiny-glm4",
    model_type="glm4",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    partial_rotary_factor=0.5,
    attention_bias=True,
    sandwich_norms=True,
    bos_token_id=None,
    eos_token_ids=(2,),
)
# GLM-4-9B's shapes (Glm4Config's defaults): 40 layers 4,096 wide, 32 heads over 2 KV heads
# of 128 with q/k/v biases, RoPE on the leading half of each head, a SwiGLU MLP 13,696 wide,
# sandwich norms; 131,072 positions.
NEWER["glm-4-9b"] = NEWER["tiny-glm4"].replace(
    name="glm-4-9b",
    vocab_size=151552,
    hidden_size=4096,
    num_layers=40,
    num_heads=32,
    num_kv_heads=2,
    head_dim=128,
    intermediate_size=13696,
    rms_norm_eps=1.5625e-07,
    max_position_embeddings=131072,
    eos_token_ids=(151329, 151336, 151338),
    dtype="bfloat16",
)
# tests/fixtures/gemma3_text: Gemma 3, 2 layers 64 wide: an 8-key window on layer 0 (RoPE base
# 100), layer 1 global (base 1e4, linear scaling 4); 4 heads over 2 KV heads of 16 with q/k
# norms, scores times 24^-0.5; norms scaling by 1 + weight before and after each block; a
# GeGLU MLP 96 wide; embeddings times 8; tied embeddings.
NEWER["tiny-gemma3"] = ModelConfig(
    name="tiny-gemma3",
    model_type="gemma3_text",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rope_scaling=RopeScaling(rope_type="linear", factor=4.0),
    sliding_rope_theta=100.0,
    sliding_window=8,
    full_attention_layers=(1,),
    tie_word_embeddings=True,
    qk_norm=True,
    norm_zero_centered=True,
    attention_multiplier=24**-0.5,
    sandwich_norms=True,
    mlp_act="geglu",
    embedding_multiplier=8.0,
    bos_token_id=2,
    eos_token_ids=(1,),
)
