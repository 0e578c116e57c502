"""Mamba-2 hybrids' presets: Nemotron-H's (transformers' nemotron_h, configs/hf_nemotron_h.py)
and Granite 4.0's (granitemoehybrid, configs/hf_granite.py): the test-size models of
tests/fixtures/<arch> (tests/test_hf_config.py reads each config.json back to its preset)
and NVIDIA Nemotron 3 Nano's shapes; the attention-free models (configs/hf_mamba.py):
Mamba's, Falcon Mamba's and Mamba-2's test sizes and releases."""

from __future__ import annotations

import math

from configs.hf_nemotron_h import decoder_layers, layer_fields, pattern_kinds
from configs.model_config import ModelConfig

MAMBA: dict[str, ModelConfig] = {}

# The blocks of Nemotron 3 Nano 30B-A3B (hybrid_override_pattern; M Mamba-2, E MoE, *
# attention): 23 Mamba-2 and 6 attention layers, 23 MoE blocks.
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def _nemotron(name: str, pattern: str, **fields) -> ModelConfig:
    return ModelConfig(
        name=name,
        model_type="nemotron_h",
        **layer_fields(decoder_layers(pattern_kinds(pattern))),
        linear_attention_kind="mamba2",
        linear_conv_bias=True,
        linear_conv_kernel=4,
        mlp_act="relu2",
        expert_act="relu2",
        num_shared_experts=1,
        scoring_func="sigmoid",
        topk_method="noaux_tc",
        norm_topk_prob=True,
        rms_norm_eps=1e-5,
        **fields,
    )


# tests/fixtures/nemotron_h: blocks M E * E M M - * (layers: Mamba-2 + MoE, attention + MoE,
# Mamba-2 alone, Mamba-2 + MLP, attention alone); Mamba-2 with 8 heads of 8 over 2 groups
# of a 16-wide state; attention 4 heads over 2 KV heads of 16; top-2 of 8 relu2 experts 24
# wide, scaled 2.5, a shared expert 32 wide; the MLP 96 wide.
MAMBA["tiny-nemotron-h"] = _nemotron(
    "tiny-nemotron-h",
    "ME*EMM-*",
    vocab_size=512,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=2048,
    linear_num_key_heads=2,
    linear_num_value_heads=8,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    shared_intermediate_size=32,
    routed_scaling_factor=2.5,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/nemotron_h_latent: Nemotron 3 Super's latent MoE (routed experts at width
# 32 between the token's projections down and up) and a router of two groups of 4 (one
# kept); blocks M E * E M E.
MAMBA["tiny-nemotron-h-latent"] = MAMBA["tiny-nemotron-h"].replace(
    name="tiny-nemotron-h-latent",
    num_layers=3,
    nope_layers=(1,),
    linear_attention_layers=(0, 2),
    no_ffn_layers=(),
    mlp_only_layers=(),
    moe_latent_size=32,
    n_group=2,
    topk_group=1,
)
# NVIDIA Nemotron 3 Nano 30B-A3B (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): 2,688 wide;
# Mamba-2 with 64 heads of 64 over 8 groups of a 128-wide state; attention 32 heads over 2
# KV heads of 128, no positions; 128 relu2 experts 1,856 wide (top 6, scaled 2.5) beside a
# shared one 3,712 wide; 262,144 positions in its config (1M tokens in its card). Shapes as
# Megatron-Bridge's Nemotron3NanoProvider gives them (the release's config.json is not on
# this machine: no hub access).
MAMBA["nemotron-3-nano-30b-a3b"] = _nemotron(
    "nemotron-3-nano-30b-a3b",
    NANO_PATTERN,
    vocab_size=131072,
    hidden_size=2688,
    num_heads=32,
    num_kv_heads=2,
    head_dim=128,
    intermediate_size=1856,
    max_position_embeddings=262144,
    linear_num_key_heads=8,
    linear_num_value_heads=64,
    linear_key_head_dim=128,
    linear_value_head_dim=64,
    num_experts=128,
    num_experts_per_tok=6,
    moe_intermediate_size=1856,
    shared_intermediate_size=3712,
    routed_scaling_factor=2.5,
    bos_token_id=1,
    eos_token_ids=(2,),
    dtype="bfloat16",
)
# tests/fixtures/granitemoehybrid: Granite 4.0-H's layers (Mamba-2 with 8 heads of 16 over 2
# groups of a 16-wide state, attention second without positions), each with top-2 of 8
# SwiGLU experts 24 wide (softmax over the top 2) beside a SwiGLU shared MLP 32 wide; its
# multipliers away from 1.
MAMBA["tiny-granitemoehybrid"] = ModelConfig(
    name="tiny-granitemoehybrid",
    model_type="granitemoehybrid",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=24,
    max_position_embeddings=2048,
    nope_layers=(1,),
    linear_attention_layers=(0, 2, 3),
    linear_attention_kind="mamba2",
    linear_num_key_heads=2,
    linear_num_value_heads=8,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_bias=True,
    embedding_multiplier=3.0,
    residual_multiplier=0.6,
    attention_multiplier=0.15,
    logits_scaling=0.7,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    shared_intermediate_size=32,
    scoring_func="softmax_topk",
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/granitemoehybrid_dense: Granite 4.0-H-Micro's kind (no experts: the shared
# MLP, 96 wide, is the dense MLP), RoPE on its attention layer, one group of the state.
MAMBA["tiny-granitemoehybrid-dense"] = MAMBA["tiny-granitemoehybrid"].replace(
    name="tiny-granitemoehybrid-dense",
    num_layers=3,
    intermediate_size=96,
    nope_layers=(),
    linear_attention_layers=(0, 2),
    linear_num_key_heads=1,
    num_experts=0,
    num_experts_per_tok=0,
    moe_intermediate_size=0,
    num_shared_experts=0,
    shared_intermediate_size=0,
    scoring_func="softmax",
)
# tests/fixtures/bamba: Bamba's layers (Mamba-2 as tiny-granitemoehybrid-dense's; attention
# on layers 1 and 3 with RoPE on each head's leading half), a 96-wide SwiGLU MLP after every
# mixer, no multipliers.
MAMBA["tiny-bamba"] = MAMBA["tiny-granitemoehybrid-dense"].replace(
    name="tiny-bamba",
    model_type="bamba",
    num_layers=4,
    rms_norm_eps=1e-5,
    partial_rotary_factor=0.5,
    linear_attention_layers=(0, 2),
    embedding_multiplier=1.0,
    residual_multiplier=1.0,
    attention_multiplier=0.0,
    logits_scaling=1.0,
)
# IBM's Bamba-9B (BambaConfig's shapes, attention on layers 9, 18 and 27; 128,000 tokens,
# 262,144 positions), in bfloat16.
MAMBA["bamba-9b"] = MAMBA["tiny-bamba"].replace(
    name="bamba-9b",
    vocab_size=128000,
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    max_position_embeddings=262144,
    linear_attention_layers=tuple(i for i in range(32) if i not in (9, 18, 27)),
    linear_num_key_heads=1,
    linear_num_value_heads=128,
    linear_key_head_dim=256,
    linear_value_head_dim=64,
    dtype="bfloat16",
)


def _ssm(name: str, model_type: str, vocab: int, d: int, layers: int, **fields) -> ModelConfig:
    """An attention-free model (configs/hf_mamba.py): every layer a norm and a mixer, the
    unused attention fields as its reader sets them."""
    every = tuple(range(layers))
    return ModelConfig(
        name=name,
        model_type=model_type,
        vocab_size=vocab,
        hidden_size=d,
        num_layers=layers,
        num_heads=1,
        num_kv_heads=1,
        head_dim=d,
        intermediate_size=2 * d,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        linear_attention_layers=every,
        no_ffn_layers=every,
        linear_conv_bias=True,
        residual_in_float32=True,
        **fields,
    )


def _mamba1(name: str, model_type: str, vocab: int, d: int, layers: int, **fields):
    """Mamba-1: 2 x d channels, each a value head of width 1; a 16-wide state, dt of rank
    ceil(d / 16) (the releases' "auto")."""
    mamba1 = dict(
        linear_attention_kind="mamba1", linear_num_key_heads=1, linear_key_head_dim=16,
        linear_num_value_heads=2 * d, linear_value_head_dim=1, mamba_dt_rank=-(-d // 16),
    )  # fmt: skip
    return _ssm(name, model_type, vocab, d, layers, **{**mamba1, **fields})


# tests/fixtures/mamba: 3 layers 64 wide, 128 channels, dt of rank 8, tied embeddings.
MAMBA["tiny-mamba"] = _mamba1(
    "tiny-mamba", "mamba", 512, 64, 3, mamba_dt_rank=8, tie_word_embeddings=True,
    bos_token_id=1, eos_token_ids=(2,),
)  # fmt: skip
# tests/fixtures/falcon_mamba: the same, dt / B / C normed without weights (eps 1e-3), untied.
MAMBA["tiny-falcon-mamba"] = MAMBA["tiny-mamba"].replace(
    name="tiny-falcon-mamba", model_type="falcon_mamba", tie_word_embeddings=False,
    linear_norm_eps=1e-3,
)  # fmt: skip
# tests/fixtures/mamba2: 3 layers 64 wide, Mamba-2 with 8 heads of 16 over 2 groups of a
# 16-wide state, untied.
MAMBA["tiny-mamba2"] = _ssm(
    "tiny-mamba2", "mamba2", 512, 64, 3, linear_attention_kind="mamba2",
    linear_num_key_heads=2, linear_num_value_heads=8, linear_key_head_dim=16,
    linear_value_head_dim=16, bos_token_id=1, eos_token_ids=(2,),
)  # fmt: skip
# state-spaces' Mamba releases in transformers' format (mamba-<size>-hf): the GPT-NeoX
# tokenizer's 50,280 rows, tied, eos 0; and TII's Falcon Mamba 7B (65,024 tokens, untied,
# its mixer eps 1e-6), all in bfloat16.
for _name, (_d, _layers) in {
    "mamba-130m": (768, 24),
    "mamba-370m": (1024, 48),
    "mamba-790m": (1536, 48),
    "mamba-1.4b": (2048, 48),
    "mamba-2.8b": (2560, 64),
}.items():
    MAMBA[_name] = _mamba1(
        _name, "mamba", 50280, _d, _layers, tie_word_embeddings=True, bos_token_id=0,
        eos_token_ids=(0,), dtype="bfloat16",
    )  # fmt: skip
MAMBA["falcon-mamba-7b"] = _mamba1(
    "falcon-mamba-7b", "falcon_mamba", 65024, 4096, 64, linear_norm_eps=1e-6, bos_token_id=0,
    eos_token_ids=(11,), dtype="bfloat16",
)  # fmt: skip
# Mistral's Mamba-Codestral 7B (Mamba2Config's defaults, its token ids too: 64 layers 4,096
# wide, 128 heads of 64 over 8 groups of a 128-wide state, 32,768 tokens, untied), bfloat16.
MAMBA["mamba-codestral-7b"] = _ssm(
    "mamba-codestral-7b", "mamba2", 32768, 4096, 64, linear_attention_kind="mamba2",
    linear_num_key_heads=8, linear_num_value_heads=128, linear_key_head_dim=128,
    linear_value_head_dim=64, bos_token_id=0, eos_token_ids=(2,), dtype="bfloat16",
)  # fmt: skip
# tests/fixtures/falcon_h1: Falcon-H1's 3 layers as 6 (attention 4 heads of 16 over 2 KV
# heads beside Mamba-2 8 heads of 8 over 2 groups of a 16-wide state, no gated norm; a
# 96-wide SwiGLU), its µP multipliers away from 1: the embeddings', the logits' and, folded
# into the weights on load, its projections' (configs/hf_falcon_h1.py).
MAMBA["tiny-falcon-h1"] = ModelConfig(
    name="tiny-falcon-h1", model_type="falcon_h1", vocab_size=512, hidden_size=64,
    num_layers=6, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96,
    rms_norm_eps=1e-5, max_position_embeddings=2048, rope_theta=100000.0,
    parallel_hybrid=True, linear_attention_layers=(1, 3, 5), no_ffn_layers=(0, 2, 4),
    linear_attention_kind="mamba2", linear_num_key_heads=2, linear_num_value_heads=8,
    linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_bias=True,
    mamba_gated_norm=False, embedding_multiplier=1.7, logit_scale=0.6,
    load_scales=(
        (("attn", "wq"), 1.3), (("attn", "wk"), 1.3 * 0.8), (("attn", "wv"), 1.3),
        (("attn", "wo"), 0.7), (("linear", "wz"), 1.2 * 0.5), (("linear", "wv"), 1.2 * 1.5),
        (("linear", "wk"), 1.2 * 0.75), (("linear", "wq"), 1.2 * 1.25),
        (("linear", "wa"), 1.2 * 2.0), (("linear", "wo"), 0.9), (("mlp", "w_gate"), 1.1),
        (("mlp", "w_down"), 0.85),
    ),
    bos_token_id=1, eos_token_ids=(2,),
)  # fmt: skip
# tests/fixtures/zamba2 (Zyphra's Zamba2, 1.2B's kind): six Mamba-2 layers 64 wide (4 heads of
# 32 channels, 2 groups of B and C of 16, dt at least 0.001), layers 1, 3 and 4 hybrid: each
# first runs one of two shared blocks in turn (attention over [x, embeddings], 4 MHA heads of
# 32 with RoPE, scaled by 16^-0.5; an erf-GELU MLP 96 wide; rank-4 adapters on q / k / v and
# the MLP), here a layer of its own before the mixer: 9 layers; tied embeddings.
MAMBA["tiny-zamba2"] = ModelConfig(
    name="tiny-zamba2",
    model_type="zamba2",
    vocab_size=512,
    hidden_size=64,
    num_layers=9,
    num_heads=4,
    num_kv_heads=4,
    head_dim=32,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    attention_multiplier=0.25,
    mlp_act="gelu_exact",
    shared_blocks=2,
    adapter_rank=4,
    attention_adapters=True,
    linear_attention_layers=(0, 2, 3, 5, 7, 8),
    linear_attention_kind="mamba2",
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=32,
    linear_conv_kernel=4,
    linear_conv_bias=True,
    mamba_dt_limit=(0.001, math.inf),
    bos_token_id=1,
    eos_token_ids=(2,),
)
