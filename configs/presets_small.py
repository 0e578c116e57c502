"""Random-weight presets sized for a CPU: benchmark models and long-context models."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling
from configs.presets_real import DEEPSEEK_YARN, LLAMA3_ROPE
from configs.presets_tiny import TINY

SMALL: dict[str, ModelConfig] = {}


def _add(cfg: ModelConfig) -> None:
    SMALL[cfg.name] = cfg


# ---- benchmark size (random weights, f32 on CPU) ----
_add(
    ModelConfig(
        name="bench-llama-20m",
        model_type="llama",
        vocab_size=8192,
        hidden_size=512,
        num_layers=4,
        num_heads=8,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=1536,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        eos_token_ids=(2,),
    )
)
# The same with gpt-oss's layout: a 128-key window on every other layer (a hybrid model:
# the windowed layers' KV in a pool of their own; scripts/bench_prefix_cache.py).
_add(
    SMALL["bench-llama-20m"].replace(
        name="bench-llama-20m-swa", sliding_window=128, full_attention_layers=(1, 3)
    )
)
# DeepSeek-V3's routing and MLA at a width where decode is memory-bound on a CPU.
_add(
    TINY["tiny-deepseek-v3"].replace(
        name="bench-deepseek-v3-35m",
        num_nextn_predict_layers=1,  # random MTP weights when drafting with them
        vocab_size=8192,
        hidden_size=512,
        num_layers=4,
        num_heads=8,
        intermediate_size=1536,
        max_position_embeddings=8192,
        rope_scaling=RopeScaling(),
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_nope_head_dim=64,
        qk_rope_head_dim=32,
        v_head_dim=64,
        moe_intermediate_size=256,
        bos_token_id=None,
    )
)

# DeepSeek-V3's routing over DeepSeek-V2-Lite's expert counts (64 routed, top-6), narrow:
# expert-parallel load balancing on an 8-device CPU mesh (scripts/bench_eplb.py).
_add(
    SMALL["bench-deepseek-v3-35m"].replace(
        name="bench-deepseek-v3-64e",
        hidden_size=256,
        num_experts=64,
        num_experts_per_tok=6,
        n_group=8,
        topk_group=4,
        moe_intermediate_size=128,
    )
)

# Qwen3-Next's layers (three gated DeltaNet to one gated full attention, a routed MoE with a
# gated shared expert) at a width where a CPU step is not overhead alone: prefix caching
# with state snapshots (scripts/bench_prefix_cache.py).
_add(
    TINY["tiny-qwen3-next"].replace(
        name="bench-qwen3-next-40m",
        vocab_size=8192,
        hidden_size=512,
        num_layers=4,
        num_heads=8,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=1536,
        max_position_embeddings=8192,
        linear_attention_layers=(0, 1, 2),
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        num_experts=16,
        moe_intermediate_size=256,
        shared_intermediate_size=512,
        mlp_only_layers=(),
    )
)

# ---- long context (random weights, f32 on CPU): 128k positions with scaled RoPE ----
# Small enough that a 131,072-token prefill finishes on a 2-core CPU; the RoPE scaling is
# the released models' (Llama 3.1's llama3, DeepSeek-V3's YaRN), so positions past the
# original window are exercised.
_add(
    ModelConfig(
        name="small-llama-long",
        model_type="llama",
        vocab_size=8192,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=768,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=LLAMA3_ROPE,
        eos_token_ids=(2,),
    )
)
_add(
    TINY["tiny-deepseek-v3"].replace(
        name="small-mla-long",
        vocab_size=8192,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        intermediate_size=768,
        max_position_embeddings=131072,
        rope_scaling=RopeScaling(
            mscale=1.0, mscale_all_dim=1.0, **{**DEEPSEEK_YARN, "factor": 32.0}
        ),
        q_lora_rank=0,
        kv_lora_rank=32,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        num_experts=8,
        moe_intermediate_size=128,
        n_group=2,
        topk_group=1,
        bos_token_id=None,
    )
)
# DeepSeek-V4 at CPU size with V4-Flash's attention geometry: a 128-token window, csa every
# 4 tokens with a top-512 indexer, hca every 128, 4 hyper-connection streams.
_add(
    TINY["tiny-deepseek-v4"].replace(
        name="small-deepseek-v4-long",
        vocab_size=8192,
        hidden_size=256,
        num_heads=8,
        head_dim=128,
        max_position_embeddings=131072,
        rope_scaling=RopeScaling(
            "yarn", 16.0, original_max_position_embeddings=8192, attention_factor=1.0
        ),
        sliding_window=128,
        q_lora_rank=128,
        index_topk=512,
        index_n_heads=8,
        index_head_dim=64,
        hca_ratio=128,
        o_groups=4,
        o_lora_rank=64,
        num_experts=16,
        moe_intermediate_size=128,
        intermediate_size=128,
        swiglu_limit=10.0,
        bos_token_id=None,
    )
)
