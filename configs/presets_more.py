"""Presets of Upstage Solar Open (transformers' solar_open: Llama's attention, GLM-4.5's MoE on
every layer), LG K-EXAONE (exaone_moe) and EXAONE 4.0 (exaone4), Arcee's AFMoE (afmoe),
inclusionAI's Ling 2.5 (bailing_hybrid), IBM Granite 3's MoE (granitemoe, granitemoeshared),
AllenAI's FlexOlmo (flex_olmo), OLMo 2 (olmo2) and OLMo 3 (olmo3), Xiaomi's MiMo-V2-Flash
(mimo_v2_flash), LiquidAI's LFM2-MoE (lfm2_moe) and LFM2 (lfm2), Meituan's LongCat-Flash
(longcat_flash), AI21's Jamba (jamba) and MiniMax-01 (minimax): the test-size models of
tests/fixtures/<arch> (tests/test_hf_config.py, test_mimo.py, test_lfm2.py, test_longcat.py,
test_jamba.py and test_minimax.py read each config.json back to its preset) and the shapes
of Solar-Open-100B, Ling 3 Flash, MiMo-V2-Flash, LongCat-Flash, Jamba 1.5 Mini and
MiniMax-Text-01 (the others' real ones come from their config.json: transformers' defaults
are not them)."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling
from configs.presets_tiny import TINY

MORE: dict[str, ModelConfig] = {}


def _solar(name: str, **fields) -> ModelConfig:
    return ModelConfig(
        name=name,
        model_type="solar_open",
        rms_norm_eps=1e-5,
        rope_theta=1000000.0,
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        **fields,
    )


# tests/fixtures/solar_open: 3 layers 64 wide, 4 heads over 2 KV heads of 16, top-2 of 8
# experts 24 wide scaled 1.5 beside a shared one.
MORE["tiny-solar-open"] = _solar(
    "tiny-solar-open",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=24,
    max_position_embeddings=2048,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    routed_scaling_factor=1.5,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# Solar-Open-100B (upstage/Solar-Open-100B): transformers 5.25's SolarOpenConfig defaults (its
# docstring names that checkpoint): 48 layers 4,096 wide, 64 heads over 8 KV heads of 128,
# 128 experts 1,280 wide (top 8) beside a shared one on every layer, 196,608 tokens.
MORE["solar-open-100b"] = _solar(
    "solar-open-100b",
    vocab_size=196608,
    hidden_size=4096,
    num_layers=48,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=1280,
    max_position_embeddings=131072,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=1280,
    dtype="bfloat16",
)
# tests/fixtures/exaone_moe: 4 layers 64 wide, 4 heads over 2 KV heads of 16 with q/k norms,
# an 8-key window and RoPE on layers 0-2, layer 3 global without positions; layer 0 dense
# (96 wide), then top-2 of 8 experts 24 wide over two groups (one kept), scaled 2.5, beside a
# shared one.
MORE["tiny-exaone-moe"] = ModelConfig(
    name="tiny-exaone-moe",
    model_type="exaone_moe",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    qk_norm=True,
    sliding_window=8,
    full_attention_layers=(3,),
    nope_layers=(3,),
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=2,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    mlp_only_layers=(0,),
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/afmoe: 4 layers 64 wide, 4 heads over 2 KV heads of 16 with q/k norms and a
# sigmoid output gate, an 8-key window and RoPE on layers 0-2, layer 3 global without
# positions; norms before and after each block; layer 0 dense (96 wide), then top-2 of 8
# experts 24 wide scaled 2.0 beside 2 shared ones; muP's embedding scale sqrt(64).
MORE["tiny-afmoe"] = MORE["tiny-exaone-moe"].replace(
    name="tiny-afmoe",
    model_type="afmoe",
    attn_output_gate=True,
    sandwich_norms=True,
    embedding_multiplier=8.0,
    num_shared_experts=2,
    n_group=1,
    routed_scaling_factor=2.0,
    mlp_only_layers=(),
    first_k_dense_replace=1,
)
# tests/fixtures/bailing_hybrid (Ling 2.5's kind): Kimi-Linear's shapes, its KDA layers' gates
# full-rank and its decay bounded at -5, MLA layers with RoPE (base 6e6) and a sigmoid gate per
# head; 2 expert groups (1 kept), scaled 2.5; the SwiGLU clipped after the activation at 0.5
# and 0.4 in layers 1 and 3's experts, at 0.5 in layer 2's shared expert.
MORE["tiny-bailing-hybrid"] = TINY["tiny-kimi-linear"].replace(
    name="tiny-bailing-hybrid",
    model_type="bailing_hybrid",
    rms_norm_eps=1e-6,
    rope_theta=6e6,
    mla_unrotated=False,
    kda_full_rank=True,
    kda_gate_bound=-5.0,
    head_gate=True,
    expert_clip_limits=(0.0, 0.5, 0.0, 0.4),
    shared_clip_limits=(0.0, 0.0, 0.5, 0.0),
    n_group=2,
    routed_scaling_factor=2.5,
)
# Ling 3 Flash's shapes: transformers 5.25's BailingHybridConfig defaults, MaxText's ling3-flash
# (-vl) language model: 42 layers 2,560 wide, five KDA layers (32 heads of 128) to one MLA
# layer (32 heads, a 512-wide latent, 64 rope channels), two dense layers (6,144), then top-8
# of 512 experts 768 wide over 8 groups (4 kept) beside a shared one; no SwiGLU clips.
MORE["ling-3-flash"] = MORE["tiny-bailing-hybrid"].replace(
    name="ling-3-flash",
    vocab_size=157184,
    hidden_size=2560,
    num_layers=42,
    num_heads=32,
    intermediate_size=6144,
    max_position_embeddings=262144,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    linear_attention_layers=tuple(i for i in range(42) if (i + 1) % 6),
    linear_num_key_heads=32,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    num_experts=512,
    num_experts_per_tok=8,
    moe_intermediate_size=768,
    n_group=8,
    topk_group=4,
    mlp_only_layers=(0, 1),
    expert_clip_limits=(),
    shared_clip_limits=(),
    bos_token_id=None,
    eos_token_ids=(156895,),
    dtype="bfloat16",
)
# tests/fixtures/granitemoe: Granite 3's MoE (granitemoe): 3 layers 64 wide, 4 heads over 2 KV
# heads of 16 with RoPE (theta 1e5), top-2 of 8 SwiGLU experts 24 wide (softmax over the top
# 2), its multipliers away from 1, tied embeddings. granitemoeshared: a SwiGLU shared MLP 32
# wide beside the experts.
MORE["tiny-granitemoe"] = ModelConfig(
    name="tiny-granitemoe",
    model_type="granitemoe",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=24,
    max_position_embeddings=2048,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    embedding_multiplier=3.0,
    residual_multiplier=0.6,
    attention_multiplier=0.15,
    logits_scaling=0.7,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    scoring_func="softmax_topk",
    bos_token_id=1,
    eos_token_ids=(2,),
)
MORE["tiny-granitemoeshared"] = MORE["tiny-granitemoe"].replace(
    name="tiny-granitemoeshared",
    model_type="granitemoeshared",
    num_shared_experts=1,
    shared_intermediate_size=32,
)


def _post_normed(name: str, model_type: str, **fields) -> ModelConfig:
    """A test-size model of OLMo 2's layers (each block's output normed, nothing before it):
    4 heads over 2 KV heads of 16 with q/k RMSNorms, 64 wide."""
    return ModelConfig(
        name=name,
        model_type=model_type,
        vocab_size=512,
        hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        qk_norm=True,
        sandwich_norms=True,
        pre_norms=False,
        bos_token_id=1,
        eos_token_ids=(2,),
        **fields,
    )


# tests/fixtures/flex_olmo: AllenAI's FlexOlmo: 3 layers, RoPE theta 5e5, q/k norms over all
# heads' channels, top-2 of 8 SwiGLU experts 24 wide (softmax over all, not renormalized).
MORE["tiny-flex-olmo"] = _post_normed(
    "tiny-flex-olmo",
    "flex_olmo",
    num_layers=3,
    intermediate_size=24,
    rope_theta=500000.0,
    qk_norm_full=True,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    norm_topk_prob=False,
)
# tests/fixtures/exaone4: LG's EXAONE 4.0: 4 layers, q/k norms per head, an 8-key window
# with RoPE (theta 1e6) on three layers of four, the fourth global without positions; a
# SwiGLU MLP 96 wide.
MORE["tiny-exaone4"] = _post_normed(
    "tiny-exaone4",
    "exaone4",
    num_layers=4,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    rope_theta=1000000.0,
    sliding_window=8,
    full_attention_layers=(3,),
    nope_layers=(3,),
)
# tests/fixtures/olmo2: AllenAI's OLMo 2 (dense): 3 layers, biases on q, k, v and o, q/k
# norms over all heads' channels, a SwiGLU MLP 96 wide.
MORE["tiny-olmo2"] = _post_normed(
    "tiny-olmo2",
    "olmo2",
    num_layers=3,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    attention_bias=True,
    o_proj_bias=True,
    qk_norm_full=True,
)
# tests/fixtures/olmo3: AllenAI's OLMo 3 (dense): tiny-olmo2's layers (4, no biases), an
# 8-key window on three layers of four, YaRN (x8 over 256 positions, theta 5e5) on the
# fourth, full-attention one, plain RoPE on the windowed ones.
MORE["tiny-olmo3"] = MORE["tiny-olmo2"].replace(
    name="tiny-olmo3",
    model_type="olmo3",
    num_layers=4,
    attention_bias=False,
    o_proj_bias=False,
    rope_theta=500000.0,
    rope_scaling=RopeScaling(rope_type="yarn", factor=8.0, original_max_position_embeddings=256),
    rope_scaling_full_only=True,
    sliding_window=8,
    full_attention_layers=(3,),
)
# tests/fixtures/mimo_v2_flash: Xiaomi MiMo-V2-Flash: 4 layers 64 wide, 4 query heads with
# q/k 32 wide and values 16 wide (times 0.6); layers 0 and 3 global over 1 KV head, layers 1
# and 2 an 8-key window over 2 KV heads with a sink per head; RoPE on 10 channels of each
# head at theta 5e6 (global) or 1e4 (windowed); layer 0 dense (96 wide), then top-2 of 8
# experts 24 wide over two groups (one kept), renormalized, scaled 1.5, no shared expert.
MORE["tiny-mimo-v2-flash"] = MORE["tiny-exaone-moe"].replace(
    name="tiny-mimo-v2-flash",
    model_type="mimo_v2_flash",
    num_kv_heads=2,
    head_dim=32,
    v_head_dim=16,
    global_head_dim=32,
    global_num_kv_heads=1,
    attention_value_scale=0.6,
    attention_sinks=True,
    windowed_sinks_only=True,
    qk_norm=False,
    partial_rotary_factor=0.334,
    rope_theta=5e6,
    sliding_rope_theta=1e4,
    full_attention_layers=(0, 3),
    nope_layers=(),
    num_shared_experts=0,
    routed_scaling_factor=1.5,
)
# MiMo-V2-Flash (XiaomiMiMo/MiMo-V2-Flash): transformers 5.25's MiMoV2FlashConfig defaults (its
# docstring names that checkpoint): 48 layers 4,096 wide, 64 heads with q/k 192 wide and
# values 128 wide; layer 0 and every sixth layer global over 4 KV heads, the other 39 a
# 129-key window over 8 with sinks; a dense first layer 16,384 wide, then top-8 of 256
# experts 2,048 wide; 131,072 positions.
MORE["mimo-v2-flash"] = MORE["tiny-mimo-v2-flash"].replace(
    name="mimo-v2-flash",
    vocab_size=152576,
    hidden_size=4096,
    num_layers=48,
    num_heads=64,
    num_kv_heads=8,
    head_dim=192,
    v_head_dim=128,
    global_head_dim=192,
    global_num_kv_heads=4,
    attention_value_scale=0.707,
    intermediate_size=16384,
    max_position_embeddings=131072,
    sliding_window=129,
    full_attention_layers=tuple(i for i in range(48) if i == 0 or (i + 1) % 6 == 0),
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=2048,
    n_group=1,
    routed_scaling_factor=1.0,
    eos_token_ids=(),
    dtype="bfloat16",
)
# tests/fixtures/lfm2_moe: LiquidAI LFM2-MoE: 5 layers 64 wide; short convs (3 taps) on
# layers 0, 1 and 3, attention on 2 and 4 (4 heads over 2 KV heads of 16, q/k norms); layer 0
# dense (96 wide), then top-2 of 8 experts 24 wide by sigmoid score + expert bias,
# renormalized, scaled 1.5; tied embeddings.
MORE["tiny-lfm2-moe"] = MORE["tiny-exaone-moe"].replace(
    name="tiny-lfm2-moe",
    model_type="lfm2_moe",
    num_layers=5,
    rope_theta=1e6,
    tie_word_embeddings=True,
    sliding_window=None,
    full_attention_layers=(),
    nope_layers=(),
    linear_attention_layers=(0, 1, 3),
    linear_attention_kind="short_conv",
    linear_conv_kernel=3,
    num_shared_experts=0,
    n_group=1,
    routed_scaling_factor=1.5,
    mlp_only_layers=(),
    first_k_dense_replace=1,
)
# tests/fixtures/longcat_flash: Meituan LongCat-Flash: 2 LongCat layers (4 decoder layers) 64
# wide; MLA sublayers of 4 heads (q LoRA 32, latent 32, nope 16 + rope 8, values 12; the
# LoRAs' scales) each with a dense MLP 96 wide; a shortcut MoE per LongCat layer: top-3 of 8
# experts 24 wide and 4 zero-computation ones, softmax scores, chosen with the correction
# bias, scaled 2.0.
MORE["tiny-longcat-flash"] = ModelConfig(
    name="tiny-longcat-flash",
    model_type="longcat_flash",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    intermediate_size=96,
    max_position_embeddings=2048,
    rope_theta=1e7,
    attention_type="mla",
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=12,
    mla_lora_scales=True,
    num_experts=8,
    zero_experts=4,
    num_experts_per_tok=3,
    moe_intermediate_size=24,
    scoring_func="softmax",
    topk_method="noaux_tc",
    routed_scaling_factor=2.0,
    moe_layer_freq=2,
    shortcut_moe=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# LongCat-Flash-Chat (meituan-longcat/LongCat-Flash-Chat): transformers 5.25's
# LongcatFlashConfig defaults (its docstring names that checkpoint): 28 LongCat layers (56
# decoder layers) 6,144 wide, 64 MLA heads (q LoRA 1,536, latent 512, nope 128 + rope 64,
# values 128), dense MLPs 12,288 wide, a shortcut MoE per LongCat layer over 512 experts 2,048
# wide and 256 zero-computation ones (top 12, scaled 6.0); 131,072 positions.
MORE["longcat-flash"] = MORE["tiny-longcat-flash"].replace(
    name="longcat-flash",
    vocab_size=131072,
    hidden_size=6144,
    num_layers=56,
    num_heads=64,
    intermediate_size=12288,
    rms_norm_eps=1e-5,
    max_position_embeddings=131072,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    num_experts=512,
    zero_experts=256,
    num_experts_per_tok=12,
    moe_intermediate_size=2048,
    routed_scaling_factor=6.0,
    eos_token_ids=(),
    dtype="bfloat16",
)
# tests/fixtures/lfm2: LiquidAI LFM2 (dense): tiny-lfm2-moe's attention and short convs on 4
# layers (attention on 1 and 3), a SwiGLU MLP 112 wide on every layer (transformers' width
# from block_ff_dim 100: 66, times 1.5, rounded up to a multiple of 16).
MORE["tiny-lfm2"] = MORE["tiny-lfm2-moe"].replace(
    name="tiny-lfm2",
    model_type="lfm2",
    num_layers=4,
    intermediate_size=112,
    linear_attention_layers=(0, 2),
    num_experts=0,
    num_experts_per_tok=0,
    moe_intermediate_size=0,
    scoring_func="softmax",
    topk_method="greedy",
    norm_topk_prob=False,
    routed_scaling_factor=1.0,
    first_k_dense_replace=0,
)
# tests/fixtures/jamba: AI21 Jamba: 4 layers 64 wide; Mamba on 0, 1 and 3 (128 channels, 8
# state channels, a 4-tap conv with bias, dt rank 8), attention without positions on 2 (4
# heads over 2 KV heads of 16); top-2 of 8 experts 96 wide (softmax, not renormalized) on
# layers 1 and 3, a dense MLP 96 wide on 0 and 2.
MORE["tiny-jamba"] = ModelConfig(
    name="tiny-jamba",
    model_type="jamba",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    nope_layers=(2,),
    linear_attention_layers=(0, 1, 3),
    linear_attention_kind="mamba1",
    linear_num_key_heads=1,
    linear_key_head_dim=8,
    linear_num_value_heads=128,
    linear_value_head_dim=1,
    linear_conv_kernel=4,
    linear_conv_bias=True,
    mamba_dt_rank=8,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=96,
    first_k_dense_replace=1,
    moe_layer_freq=2,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# Jamba 1.5 Mini / Jamba-v0.1 (ai21labs/AI21-Jamba-1.5-Mini): transformers 5.25's JambaConfig
# defaults: 32 layers 4,096 wide; attention (32 heads over 8 KV heads, no positions) on
# every eighth from layer 4, Mamba on the others (8,192 channels, 16 state channels, dt
# rank 256); top-2 of 16 experts 14,336 wide on the odd layers, a dense MLP on the even;
# 262,144 positions.
MORE["jamba-1.5-mini"] = MORE["tiny-jamba"].replace(
    name="jamba-1.5-mini",
    vocab_size=65536,
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    max_position_embeddings=262144,
    nope_layers=tuple(range(4, 32, 8)),
    linear_attention_layers=tuple(i for i in range(32) if i % 8 != 4),
    linear_key_head_dim=16,
    linear_num_value_heads=8192,
    mamba_dt_rank=256,
    num_experts=16,
    moe_intermediate_size=14336,
    eos_token_ids=(),
    dtype="bfloat16",
)
# tests/fixtures/minimax: MiniMax-01: 4 layers 64 wide; GQA with RoPE on 0 (4 heads over 2
# KV heads of 16), lightning attention on 1-3 (4 heads of 16); top-2 of 8 experts 96 wide
# (softmax, renormalized) on every layer; each block's normed input times 1.68 joins its
# output times 0.8 (full attention), 1.2 (lightning), 0.9 (MoE).
MORE["tiny-minimax"] = ModelConfig(
    name="tiny-minimax",
    model_type="minimax",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_theta=1000000.0,
    linear_attention_layers=(1, 2, 3),
    linear_attention_kind="lightning",
    linear_num_key_heads=4,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    residual_normed=True,
    residual_alphas=(1.68, 1.68, 1.68),
    residual_betas=(0.8, 1.2, 0.9),
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=96,
    norm_topk_prob=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# MiniMax-Text-01 (MiniMaxAI/MiniMax-Text-01; MiniMax-M1 has its shapes): 80 layers 6,144
# wide; softmax attention (64 heads over 8 KV heads of 128, RoPE on 64 channels, base 1e7)
# on every eighth layer from layer 7, lightning attention (64 heads of 128) on the others;
# top-2 of 32 experts 9,216 wide on every layer; DeepNorm's alpha (2 x 80)^0.25, beta 1.
MORE["minimax-text-01"] = MORE["tiny-minimax"].replace(
    name="minimax-text-01",
    vocab_size=200064,
    hidden_size=6144,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=9216,
    max_position_embeddings=10240000,
    rope_theta=10000000.0,
    partial_rotary_factor=0.5,
    linear_attention_layers=tuple(i for i in range(80) if i % 8 != 7),
    linear_num_key_heads=64,
    linear_num_value_heads=64,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    residual_alphas=(3.5565588200778455,) * 3,
    residual_betas=(1.0, 1.0, 1.0),
    num_experts=32,
    moe_intermediate_size=9216,
    bos_token_id=None,
    eos_token_ids=(),
    dtype="bfloat16",
)
# tests/fixtures/sarvam_moe: Sarvam-30B's kind (GLM-4.5's model): 3 layers 64 wide, 4 heads
# over 2 KV heads of 16 with q/k norms and whole-head RoPE (base 8e6); a dense first layer
# (96 wide), then top-2 of 8 experts 24 wide under the biased sigmoid router (one group,
# renormalized, scaled 2.5) beside a shared one.
MORE["tiny-sarvam-moe"] = ModelConfig(
    name="tiny-sarvam-moe",
    model_type="sarvam_moe",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    rope_theta=8000000.0,
    qk_norm=True,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    first_k_dense_replace=1,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/param2moe: the same with q/k/v biases, tied embeddings, two shared experts
# and Param2's RoPE base (5e5).
MORE["tiny-param2moe"] = MORE["tiny-sarvam-moe"].replace(
    name="tiny-param2moe",
    model_type="param2moe",
    rope_theta=500000.0,
    attention_bias=True,
    tie_word_embeddings=True,
    num_shared_experts=2,
)
# tests/fixtures/sarvam_mla: Sarvam-105B's kind (DeepSeek-V3's model): 3 layers 64 wide, MLA
# (4 heads, no query compression, a 32-wide latent, 16 + 8 rope channels on interleaved
# pairs, values 16 wide); the MoE as tiny-sarvam-moe's.
MORE["tiny-sarvam-mla"] = MORE["tiny-sarvam-moe"].replace(
    name="tiny-sarvam-mla",
    model_type="sarvam_mla",
    num_kv_heads=4,  # (ModelConfig's default; MLA reads none)
    rope_theta=10000.0,
    qk_norm=False,
    attention_type="mla",
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
)
# Sarvam-30B, Param2-17B-A2.4B and Sarvam-105B: transformers 5.25's SarvamMoEConfig,
# Param2MoeConfig and SarvamMLAConfig defaults ("sarvamai/sarvam-30b style" and so on):
# 19 / 21 / 32 layers 4,096 / 2,048 / 4,096 wide; 64 heads over 4 KV heads of 64 / 32 over 8
# of 64 / MLA with 64 heads (a 512-wide latent, 128 + 64 channels, values 128); top-6 of 128
# experts 1,024 wide and a shared one / top-6 of 64, 2,048 wide, two shared / top-8 of 128,
# 2,048 wide, one shared; dense first layers 8,192 / 9,216 / 16,384 wide.
MORE["sarvam-30b"] = MORE["tiny-sarvam-moe"].replace(
    name="sarvam-30b",
    vocab_size=262144,
    hidden_size=4096,
    num_layers=19,
    num_heads=64,
    num_kv_heads=4,
    head_dim=64,
    intermediate_size=8192,
    max_position_embeddings=131072,
    num_experts=128,
    num_experts_per_tok=6,
    moe_intermediate_size=1024,
    bos_token_id=None,
    eos_token_ids=(1,),
    dtype="bfloat16",
)
MORE["param2-17b-a2.4b"] = MORE["tiny-param2moe"].replace(
    name="param2-17b-a2.4b",
    vocab_size=128000,
    hidden_size=2048,
    num_layers=21,
    num_heads=32,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=9216,
    max_position_embeddings=32768,
    attention_bias=False,
    num_experts=64,
    num_experts_per_tok=6,
    moe_intermediate_size=2048,
    bos_token_id=None,
    eos_token_ids=(3,),
    dtype="bfloat16",
)
MORE["sarvam-105b"] = MORE["tiny-sarvam-mla"].replace(
    name="sarvam-105b",
    vocab_size=262144,
    hidden_size=4096,
    num_layers=32,
    num_heads=64,
    intermediate_size=16384,
    max_position_embeddings=4096,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=2048,
    bos_token_id=0,
    eos_token_ids=(1,),
    dtype="bfloat16",
)
# tests/fixtures/cohere2: Cohere's Command R7B / Command A kind: 4 layers 64 wide, attention
# (4 heads over 2 KV heads of 16) beside a SwiGLU MLP 96 wide on one LayerNorm'd input;
# 8-key windows with RoPE on interleaved pairs on layers 0-2, layer 3 global without
# positions; tied embeddings; logits times 0.25.
MORE["tiny-cohere2"] = ModelConfig(
    name="tiny-cohere2",
    model_type="cohere2",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    sliding_window=8,
    full_attention_layers=(3,),
    nope_layers=(3,),
    parallel_block=True,
    norm_kind="layer",
    logit_scale=0.25,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/cohere2_moe: Command A+'s kind: the same parallel layers with RMSNorms; a
# dense first layer (96 wide, global and rotated), windows with RoPE on layers 1-2, layer 3
# global without positions; top-2 of 8 experts 32 wide (softmax over the chosen logits) and
# a shared MLP 64 wide (two shared experts), their outputs averaged; logits times 0.5.
MORE["tiny-cohere2-moe"] = MORE["tiny-cohere2"].replace(
    name="tiny-cohere2-moe",
    model_type="cohere2_moe",
    full_attention_layers=(0, 3),
    norm_kind="rms",
    logit_scale=0.5,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    num_shared_experts=1,
    shared_intermediate_size=64,
    shared_expert_average=True,
    scoring_func="softmax_topk",
    mlp_only_layers=(0,),
)
