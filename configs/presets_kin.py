"""The 56th session's presets: the tiny-<arch> shapes of its fixtures
(tests/fixtures/hf_fixture_archs_kin.py) and the real shapes whose parameter counts
tests/test_param_counts.py checks against transformers' (Gemma, Gemma 2, Phi, GLM-4-9B-chat,
MiniCPM3-4B)."""

from __future__ import annotations

import math

from configs.model_config import ModelConfig, RopeScaling
from configs.presets_newer import NEWER
from configs.presets_tiny import TINY

KIN: dict[str, ModelConfig] = {}
# tests/fixtures/gemma2: Gemma 2, tiny-gemma3's shapes without q/k norms, one RoPE (base 1e4);
# the attention scores capped at 1 (1 * tanh(s / 1)), the logits at 3.
KIN["tiny-gemma2"] = NEWER["tiny-gemma3"].replace(
    name="tiny-gemma2",
    model_type="gemma2",
    rope_scaling=RopeScaling(),
    sliding_rope_theta=0.0,
    qk_norm=False,
    attn_logit_softcapping=1.0,
    final_logit_softcapping=3.0,
)
# tests/fixtures/vaultgemma: VaultGemma, tiny-gemma2 without the norms after each block, the
# scores capped at 0.5.
KIN["tiny-vaultgemma"] = KIN["tiny-gemma2"].replace(
    name="tiny-vaultgemma",
    model_type="vaultgemma",
    sandwich_norms=False,
    attn_logit_softcapping=0.5,
)
# Gemma 2's releases (Gemma2Config's defaults are 2B's): every other layer windowed (4,096
# keys) from layer 0, RoPE base 1e4, 8,192 positions, the scores capped at 50 and the logits
# at 30, GeGLU, tied embeddings; the scale query_pre_attn_scalar^-0.5 (256, or 27B's 144).
for _name, _shape in {
    "gemma-2-2b": (2304, 9216, 26, 8, 4, 256, 256),
    "gemma-2-9b": (3584, 14336, 42, 16, 8, 256, 256),
    "gemma-2-27b": (4608, 36864, 46, 32, 16, 128, 144),
}.items():
    _hidden, _mlp, _layers, _heads, _kv_heads, _head_dim, _scalar = _shape
    NEWER[_name] = KIN["tiny-gemma2"].replace(
        name=_name,
        vocab_size=256000,
        hidden_size=_hidden,
        num_layers=_layers,
        num_heads=_heads,
        num_kv_heads=_kv_heads,
        head_dim=_head_dim,
        intermediate_size=_mlp,
        max_position_embeddings=8192,
        sliding_window=4096,
        full_attention_layers=tuple(range(1, _layers, 2)),
        attention_multiplier=_scalar**-0.5,
        embedding_multiplier=math.sqrt(_hidden),
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        dtype="bfloat16",
    )
# tests/fixtures/laguna (Laguna XS.2's layout): 4 layers 64 wide; an 8-key window on layers 0
# and 2, whose RoPE (base 100) turns the whole head, layers 1 and 3 global with YaRN (factor
# 4 over 64 positions, attention factor 1, betas 64 / 1) on the leading half of each head;
# 4 query heads on the windowed layers, 8 on the global ones, over 2 KV heads of 16, q/k
# norms, outputs times softplus(x @ g) per head; layer 0 dense (96), then top-2 of 8 experts
# 32 wide by sigmoid scores (logits capped at 1, the correction bias, renormalized, times
# 2.5) beside a shared expert 48 wide.
KIN["tiny-laguna"] = ModelConfig(
    name="tiny-laguna",
    model_type="laguna",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    heads_per_layer=(4, 8, 4, 8),
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rope_scaling=RopeScaling(
        rope_type="yarn",
        factor=4.0,
        original_max_position_embeddings=64,
        beta_fast=64.0,
        beta_slow=1.0,
        attention_factor=1.0,
    ),
    partial_rotary_factor=0.5,
    rope_scaling_full_only=True,
    sliding_rope_theta=100.0,
    sliding_full_rotary=True,
    sliding_window=8,
    full_attention_layers=(1, 3),
    qk_norm=True,
    head_gate=True,
    attn_gate_act="softplus",
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    num_shared_experts=1,
    shared_intermediate_size=48,
    mlp_only_layers=(0,),
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    router_logit_softcapping=1.0,
    bos_token_id=2,
    eos_token_ids=(1,),
)
# tests/fixtures/laguna_m (Laguna M.1's layout): tiny-laguna's shapes, every layer global with
# 4 query heads and the whole head turned (plain RoPE, base 1e4), outputs times softplus(x @ g)
# per channel; layers 0-1 dense; no router cap, no scaling.
KIN["tiny-laguna-m"] = KIN["tiny-laguna"].replace(
    name="tiny-laguna-m",
    heads_per_layer=(),
    rope_scaling=RopeScaling(),
    partial_rotary_factor=1.0,
    rope_scaling_full_only=False,
    sliding_rope_theta=0.0,
    sliding_full_rotary=False,
    sliding_window=None,
    full_attention_layers=(),
    head_gate=False,
    attn_output_gate=True,
    mlp_only_layers=(0, 1),
    routed_scaling_factor=1.0,
    router_logit_softcapping=0.0,
)
# tests/fixtures/olmo_hybrid: OLMo Hybrid, 4 layers 64 wide: gated DeltaNet on layers 0 and 2
# (2 key heads of 16, 4 value heads of 32, beta = 2 sigmoid(b), the gated norm's eps 1e-5;
# their blocks' inputs normed), OLMo 3 attention on 1 and 3 (4 heads over 2 KV heads of 16,
# q/k norms over all heads, no positions; their blocks' outputs normed); a SwiGLU MLP 96 wide.
KIN["tiny-olmo-hybrid"] = ModelConfig(
    name="tiny-olmo-hybrid",
    model_type="olmo_hybrid",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    qk_norm=True,
    qk_norm_full=True,
    nope_layers=(1, 3),
    linear_attention_layers=(0, 2),
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=32,
    linear_conv_kernel=4,
    linear_beta_scale=2.0,
    linear_norm_eps=1e-5,
    hybrid_post_norms=True,
    bos_token_id=2,
    eos_token_ids=(1,),
)
# tests/fixtures/ministral, cwm, arcee: Llama's layers, 2 of them 64 wide, 4 heads over 2 KV
# heads of 16, a SwiGLU MLP 96 wide (Arcee's: down(relu(up(x))^2), no gate); Ministral an
# 8-key window on layer 0, CWM on layer 1 with Llama 3's RoPE (factor 4 over 64 positions).
KIN["tiny-ministral"] = ModelConfig(
    name="tiny-ministral",
    model_type="ministral",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    sliding_window=8,
    full_attention_layers=(1,),
    bos_token_id=2,
    eos_token_ids=(1,),
)
KIN["tiny-cwm"] = KIN["tiny-ministral"].replace(
    name="tiny-cwm",
    model_type="cwm",
    rms_norm_eps=1e-5,
    rope_scaling=RopeScaling(
        rope_type="llama3",
        factor=4.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=64,
    ),
    full_attention_layers=(0,),
)
KIN["tiny-arcee"] = KIN["tiny-ministral"].replace(
    name="tiny-arcee",
    model_type="arcee",
    rms_norm_eps=1e-5,
    sliding_window=None,
    full_attention_layers=(),
    mlp_act="relu2",
)
# tests/fixtures/gemma: the first Gemma, 2 layers 64 wide, 4 query heads over one KV head of
# 16, norms by 1 + weight, a GeGLU MLP 96 wide, embeddings times 8, tied.
KIN["tiny-gemma"] = ModelConfig(
    name="tiny-gemma",
    model_type="gemma",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=1,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    norm_zero_centered=True,
    mlp_act="geglu",
    embedding_multiplier=8.0,
    bos_token_id=2,
    eos_token_ids=(1,),
)
# Gemma 2B (multi-query) and 7B (GemmaConfig's defaults): heads of 256, 8,192 positions.
for _name, _shape in {
    "gemma-2b": (2048, 16384, 18, 8, 1),
    "gemma-7b": (3072, 24576, 28, 16, 16),
}.items():
    _hidden, _mlp, _layers, _heads, _kv_heads = _shape
    NEWER[_name] = KIN["tiny-gemma"].replace(
        name=_name,
        vocab_size=256000,
        hidden_size=_hidden,
        num_layers=_layers,
        num_heads=_heads,
        num_kv_heads=_kv_heads,
        head_dim=256,
        intermediate_size=_mlp,
        max_position_embeddings=8192,
        embedding_multiplier=math.sqrt(_hidden),
        dtype="bfloat16",
    )
# tests/fixtures/glm: GLM-4-9B-chat-hf's layout, tiny-glm4 without the norms after each block;
# glm-4-9b-chat its shapes (GlmConfig's defaults, glm-4-9b's without those norms).
KIN["tiny-glm"] = NEWER["tiny-glm4"].replace(
    name="tiny-glm", model_type="glm", sandwich_norms=False
)
KIN["glm-4-9b-chat"] = NEWER["glm-4-9b"].replace(
    name="glm-4-9b-chat", model_type="glm", sandwich_norms=False
)
# tests/fixtures/exaone: EXAONE 3, tiny-cwm's model without its window (Llama 3's RoPE at base
# 1e6), under its release's names.
KIN["tiny-exaone"] = KIN["tiny-cwm"].replace(
    name="tiny-exaone",
    model_type="exaone",
    rope_theta=1e6,
    sliding_window=None,
    full_attention_layers=(),
)
# tests/fixtures/helium: Helium, tiny-ministral's model without a window, RoPE on interleaved
# pairs, norms scaled in float32 (eps 1e-8).
KIN["tiny-helium"] = KIN["tiny-ministral"].replace(
    name="tiny-helium",
    model_type="helium",
    rms_norm_eps=1e-8,
    sliding_window=None,
    full_attention_layers=(),
)
# tests/fixtures/starcoder2: StarCoder2, 2 layers 64 wide, an 8-key window on both, 4 heads over
# 2 KV heads of 16 with biases on q, k, v and o_proj, LayerNorms with biases, the MLP
# c_proj(gelu_tanh(c_fc(x))) 96 wide with biases, tied embeddings.
KIN["tiny-starcoder2"] = KIN["tiny-ministral"].replace(
    name="tiny-starcoder2",
    model_type="starcoder2",
    rms_norm_eps=1e-5,
    full_attention_layers=(),
    tie_word_embeddings=True,
    attention_bias=True,
    o_proj_bias=True,
    mlp_bias=True,
    norm_kind="layer",
    norm_bias=True,
    mlp_act="gelu",
)
# tests/fixtures/phi: Phi-2's model, 2 layers 64 wide, 4 heads of 16, RoPE on each head's
# leading half; attention and MLP side by side on one LayerNorm'd input (biases), biases on
# q, k, v, dense, fc1, fc2 and lm_head; fc2(gelu_tanh(fc1(x))) 96 wide.
KIN["tiny-phi"] = KIN["tiny-starcoder2"].replace(
    name="tiny-phi",
    model_type="phi",
    num_kv_heads=4,
    sliding_window=None,
    tie_word_embeddings=False,
    partial_rotary_factor=0.5,
    parallel_block=True,
    lm_head_bias=True,
)
# Phi-1.5 (PhiConfig's defaults) and Phi-2: 2,048 positions, a vocabulary of 51,200.
for _name, _shape in {"phi-1_5": (2048, 8192, 24, 0.5), "phi-2": (2560, 10240, 32, 0.4)}.items():
    _hidden, _mlp, _layers, _partial = _shape
    NEWER[_name] = KIN["tiny-phi"].replace(
        name=_name,
        vocab_size=51200,
        hidden_size=_hidden,
        num_layers=_layers,
        num_heads=32,
        num_kv_heads=32,
        head_dim=_hidden // 32,
        intermediate_size=_mlp,
        partial_rotary_factor=_partial,
        bos_token_id=1,
        eos_token_ids=(2,),
        dtype="bfloat16",
    )
# tests/fixtures/stablelm, nemotron: 2 layers 64 wide, 4 heads over 2 KV heads of 16, LayerNorms
# with biases; StableLM biases on q, k, v, RoPE on each head's leading quarter, a SwiGLU MLP 96
# wide; Nemotron's norms by 1 + weight, RoPE on half of each head, the MLP down(relu(up(x))^2).
KIN["tiny-stablelm"] = KIN["tiny-ministral"].replace(
    name="tiny-stablelm",
    model_type="stablelm",
    rms_norm_eps=1e-5,
    sliding_window=None,
    full_attention_layers=(),
    partial_rotary_factor=0.25,
    attention_bias=True,
    norm_kind="layer",
    norm_bias=True,
)
KIN["tiny-nemotron"] = KIN["tiny-stablelm"].replace(
    name="tiny-nemotron",
    model_type="nemotron",
    partial_rotary_factor=0.5,
    attention_bias=False,
    norm_zero_centered=True,
    mlp_act="relu2",
)
# tests/fixtures/minicpm3: MiniCPM3, 2 layers 64 wide; MLA with 4 heads (q LoRA 32, kv LoRA 32,
# 16 + 8 channels per head, values of 16), plain RoPE on the rope halves; a SwiGLU MLP 96 wide;
# embeddings times 12, block outputs times 1.4 / sqrt(2), logits over 4; tied embeddings.
KIN["tiny-minicpm3"] = ModelConfig(
    name="tiny-minicpm3",
    model_type="minicpm3",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=8,
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    attention_type="mla",
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    rope_interleave=False,
    embedding_multiplier=12.0,
    residual_multiplier=1.4 / math.sqrt(2),
    logits_scaling=4.0,
    bos_token_id=2,
    eos_token_ids=(1,),
)
# MiniCPM3-4B's shapes (MiniCPM3Config's defaults, which transformers gives as the release's;
# the release's LongRoPE factors are not on this machine: plain RoPE here).
KIN["minicpm3-4b"] = KIN["tiny-minicpm3"].replace(
    name="minicpm3-4b",
    vocab_size=73448,
    hidden_size=2560,
    num_layers=62,
    num_heads=40,
    num_kv_heads=40,
    head_dim=32,
    intermediate_size=6400,
    max_position_embeddings=32768,
    q_lora_rank=768,
    kv_lora_rank=256,
    qk_nope_head_dim=64,
    qk_rope_head_dim=32,
    v_head_dim=64,
    residual_multiplier=1.4 / math.sqrt(62),
    logits_scaling=10.0,
    bos_token_id=1,
    eos_token_ids=(2,),
    dtype="bfloat16",
)
# tests/fixtures/youtu: Youtu-LLM, tiny-minicpm3's shapes without its scalings, V3's MLA (RoPE
# on interleaved pairs).
KIN["tiny-youtu"] = KIN["tiny-minicpm3"].replace(
    name="tiny-youtu",
    model_type="youtu",
    rms_norm_eps=1e-6,
    rope_interleave=True,
    embedding_multiplier=1.0,
    residual_multiplier=1.0,
    logits_scaling=1.0,
)
# tests/fixtures/jais2: Jais 2, 2 layers 64 wide, 4 heads over 2 KV heads of 16 with biases on
# q, k, v and o_proj, LayerNorms with biases, the MLP down(relu(up(x))^2) 96 wide with biases.
KIN["tiny-jais2"] = KIN["tiny-stablelm"].replace(
    name="tiny-jais2",
    model_type="jais2",
    partial_rotary_factor=1.0,
    o_proj_bias=True,
    mlp_bias=True,
    mlp_act="relu2",
)
# tests/fixtures/hyperclovax: HyperCLOVA X, tiny-ministral's model without its window, Granite's
# multipliers (embeddings times 8, block outputs times 0.5, scores times 0.3, logits times
# 0.25: divided by 4), each block's output normed too (Peri-LN).
KIN["tiny-hyperclovax"] = KIN["tiny-ministral"].replace(
    name="tiny-hyperclovax",
    model_type="hyperclovax",
    sliding_window=None,
    full_attention_layers=(),
    embedding_multiplier=8.0,
    residual_multiplier=0.5,
    attention_multiplier=0.3,
    logits_scaling=4.0,
    sandwich_norms=True,
)
# tests/fixtures/iquestcoder: IQuest-Coder, tiny-ministral's model without its window.
KIN["tiny-iquestcoder"] = KIN["tiny-ministral"].replace(
    name="tiny-iquestcoder", model_type="iquestcoder", sliding_window=None, full_attention_layers=()
)
# tests/fixtures/qwen2_vl, qwen2_5_vl: Qwen2-VL's and Qwen2.5-VL's language model (served from
# its wrapper): tiny-qwen2's shapes; Qwen2.5-VL's tied, as its 3B.
KIN["tiny-qwen2-vl"] = TINY["tiny-qwen2"].replace(name="tiny-qwen2-vl", bos_token_id=1)
KIN["tiny-qwen2-5-vl"] = KIN["tiny-qwen2-vl"].replace(
    name="tiny-qwen2-5-vl", tie_word_embeddings=True
)
# tests/fixtures/llava, smolvlm: LLaVA's and SmolVLM's Llama language model (2 layers 64 wide,
# 4 heads of 16 over 2 KV heads, a 128-wide SwiGLU), untied; llava_onevision, internvl:
# tiny-qwen2-vl's, tied (by text_config, by InternVL's default).
KIN["tiny-llava"] = KIN["tiny-qwen2-vl"].replace(
    name="tiny-llava", model_type="llama", attention_bias=False, rms_norm_eps=1e-5,
    rope_theta=10000.0,
)  # fmt: skip
KIN["tiny-smolvlm"] = KIN["tiny-llava"].replace(name="tiny-smolvlm")
KIN["tiny-llava-onevision"] = KIN["tiny-qwen2-5-vl"].replace(name="tiny-llava-onevision")
KIN["tiny-internvl"] = KIN["tiny-qwen2-5-vl"].replace(name="tiny-internvl")
