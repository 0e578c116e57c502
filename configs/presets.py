"""Named model presets: test-size models (match tests/fixtures) and real shapes."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling

_LLAMA3_ROPE = RopeScaling(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=8192,
)
_DEEPSEEK_YARN = dict(
    rope_type="yarn", factor=40.0, original_max_position_embeddings=4096, beta_fast=32.0,
    beta_slow=1.0,
)

PRESETS: dict[str, ModelConfig] = {}


def _add(cfg: ModelConfig) -> None:
    PRESETS[cfg.name] = cfg


# ---- test size: the HF fixtures under tests/fixtures/<arch>/ use exactly these shapes ----
_add(ModelConfig(
    name="tiny-llama", model_type="llama", vocab_size=512, hidden_size=96, num_layers=2,
    num_heads=6, num_kv_heads=2, head_dim=40, intermediate_size=192, rms_norm_eps=1e-5,
    max_position_embeddings=2048, rope_theta=10000.0,
    rope_scaling=RopeScaling(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=64),
    bos_token_id=1, eos_token_ids=(2,),
))
_add(ModelConfig(
    name="tiny-qwen3", model_type="qwen3", vocab_size=512, hidden_size=64, num_layers=2,
    num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=128, rms_norm_eps=1e-6,
    max_position_embeddings=2048, rope_theta=1000000.0, qk_norm=True, tie_word_embeddings=True,
    eos_token_ids=(2,),
))
_add(ModelConfig(
    name="tiny-qwen3-moe", model_type="qwen3_moe", vocab_size=512, hidden_size=64, num_layers=3,
    num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128, rms_norm_eps=1e-6,
    max_position_embeddings=2048, rope_theta=1000000.0, qk_norm=True, num_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=(1,),
    eos_token_ids=(2,),
))
_add(ModelConfig(
    name="tiny-mixtral", model_type="mixtral", vocab_size=512, hidden_size=64, num_layers=2,
    num_heads=4, num_kv_heads=1, head_dim=16, intermediate_size=96, rms_norm_eps=1e-5,
    max_position_embeddings=2048, rope_theta=1000000.0, num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=96, norm_topk_prob=True, bos_token_id=1, eos_token_ids=(2,),
))
_add(ModelConfig(
    name="tiny-deepseek-v2", model_type="deepseek_v2", vocab_size=512, hidden_size=64,
    num_layers=3, num_heads=4, intermediate_size=96, rms_norm_eps=1e-6,
    max_position_embeddings=2048, rope_theta=10000.0, attention_type="mla", q_lora_rank=0,
    kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, num_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=24, num_shared_experts=2,
    scoring_func="softmax", topk_method="group_limited_greedy", n_group=4, topk_group=1,
    norm_topk_prob=False, routed_scaling_factor=1.5, first_k_dense_replace=1,
    bos_token_id=1, eos_token_ids=(2,),
))
_add(ModelConfig(
    name="tiny-deepseek-v3", model_type="deepseek_v3", vocab_size=512, hidden_size=64,
    num_layers=3, num_heads=4, intermediate_size=96, rms_norm_eps=1e-6,
    max_position_embeddings=2048, rope_theta=10000.0,
    rope_scaling=RopeScaling(rope_type="yarn", factor=4.0, original_max_position_embeddings=64,
                             beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
    attention_type="mla", q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
    qk_rope_head_dim=8, v_head_dim=12, num_experts=16, num_experts_per_tok=2,
    moe_intermediate_size=24, num_shared_experts=1, scoring_func="sigmoid",
    topk_method="noaux_tc", n_group=4, topk_group=2, norm_topk_prob=True,
    routed_scaling_factor=2.5, first_k_dense_replace=1, bos_token_id=1, eos_token_ids=(2,),
))

# ---- benchmark size (random weights, f32 on CPU) ----
_add(ModelConfig(
    name="bench-llama-20m", model_type="llama", vocab_size=8192, hidden_size=512, num_layers=4,
    num_heads=8, num_kv_heads=2, head_dim=64, intermediate_size=1536, rms_norm_eps=1e-5,
    max_position_embeddings=8192, rope_theta=500000.0, eos_token_ids=(2,),
))
_add(ModelConfig(
    name="bench-deepseek-v3-35m", model_type="deepseek_v3", vocab_size=8192, hidden_size=512,
    num_layers=4, num_heads=8, intermediate_size=1536, rms_norm_eps=1e-6,
    max_position_embeddings=8192, rope_theta=10000.0, attention_type="mla", q_lora_rank=256,
    kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, num_experts=16,
    num_experts_per_tok=2, moe_intermediate_size=256, num_shared_experts=1,
    scoring_func="sigmoid", topk_method="noaux_tc", n_group=4, topk_group=2,
    norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=1,
    eos_token_ids=(2,),
))

# ---- real shapes (from the released config.json files) ----
_add(ModelConfig(
    name="llama-3.1-8b", model_type="llama", vocab_size=128256, hidden_size=4096,
    num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
    rms_norm_eps=1e-5, max_position_embeddings=131072, rope_theta=500000.0,
    rope_scaling=_LLAMA3_ROPE, bos_token_id=128000, eos_token_ids=(128001, 128008, 128009),
    dtype="bfloat16",
))
_add(PRESETS["llama-3.1-8b"].replace(
    name="llama-3.1-70b", hidden_size=8192, num_layers=80, num_heads=64,
    intermediate_size=28672,
))
_add(ModelConfig(
    name="mixtral-8x7b", model_type="mixtral", vocab_size=32000, hidden_size=4096,
    num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
    rms_norm_eps=1e-5, max_position_embeddings=32768, rope_theta=1000000.0, num_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=14336, norm_topk_prob=True,
    bos_token_id=1, eos_token_ids=(2,), dtype="bfloat16",
))
_add(ModelConfig(
    name="qwen3-30b-a3b", model_type="qwen3_moe", vocab_size=151936, hidden_size=2048,
    num_layers=48, num_heads=32, num_kv_heads=4, head_dim=128, intermediate_size=6144,
    rms_norm_eps=1e-6, max_position_embeddings=40960, rope_theta=1000000.0, qk_norm=True,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
    bos_token_id=151643, eos_token_ids=(151645, 151643), dtype="bfloat16",
))
_add(PRESETS["qwen3-30b-a3b"].replace(
    name="qwen3-235b-a22b", hidden_size=4096, num_layers=94, num_heads=64,
    intermediate_size=12288, moe_intermediate_size=1536,
))
_add(ModelConfig(
    name="deepseek-v2-lite", model_type="deepseek_v2", vocab_size=102400, hidden_size=2048,
    num_layers=27, num_heads=16, intermediate_size=10944, rms_norm_eps=1e-6,
    max_position_embeddings=163840, rope_theta=10000.0,
    rope_scaling=RopeScaling(mscale=0.707, mscale_all_dim=0.707, **_DEEPSEEK_YARN),
    attention_type="mla", q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, num_experts=64, num_experts_per_tok=6,
    moe_intermediate_size=1408, num_shared_experts=2, scoring_func="softmax",
    topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0,
    first_k_dense_replace=1, bos_token_id=100000, eos_token_ids=(100001,), dtype="bfloat16",
))
_add(ModelConfig(
    name="deepseek-v3", model_type="deepseek_v3", vocab_size=129280, hidden_size=7168,
    num_layers=61, num_heads=128, intermediate_size=18432, rms_norm_eps=1e-6,
    max_position_embeddings=163840, rope_theta=10000.0,
    rope_scaling=RopeScaling(mscale=1.0, mscale_all_dim=1.0, **_DEEPSEEK_YARN),
    attention_type="mla", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, num_experts=256, num_experts_per_tok=8,
    moe_intermediate_size=2048, num_shared_experts=1, scoring_func="sigmoid",
    topk_method="noaux_tc", n_group=8, topk_group=4, norm_topk_prob=True,
    routed_scaling_factor=2.5, first_k_dense_replace=3, bos_token_id=0, eos_token_ids=(1,),
    dtype="bfloat16",
))


def get_preset(name: str) -> ModelConfig:
    """The preset called `name`; ValueError listing the known names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"model={name!r}: unknown preset; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
