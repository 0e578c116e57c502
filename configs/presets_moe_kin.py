"""The 57th session's presets: the tiny-<arch> shapes of its MoE fixtures
(tests/fixtures/hf_fixture_archs_moe_kin.py; GPT-Neo's, the 58th's, too)."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling
from configs.preset_shapes import at_release_shapes

MOE_KIN: dict[str, ModelConfig] = {}
_LAYERS = dict(
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/axk1 (A.X K1): 4 layers 64 wide, MLA (q LoRA 48, latent 32, nope 16 + rope 8
# on interleaved pairs, values 12) over 4 heads; layers 0 and 2 dense (96), 1 and 3 top-2 of 16
# experts 24 wide (sigmoid scores, the correction bias over 4 groups, 2 kept, renormalized,
# times 2.5) beside a shared expert, their output RMS-normed.
MOE_KIN["tiny-axk1"] = ModelConfig(
    name="tiny-axk1",
    model_type="axk1",
    **{**_LAYERS, "num_kv_heads": 4},
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
    moe_post_norm=True,
    mlp_only_layers=(0, 2),
)
# tests/fixtures/axk2 (A.X K2): tiny-axk1's MLA and MoE without the MoE output norm, layer 0
# dense; its queries and a gate per value channel from [normed, raw] q LoRA latent; gated
# input norms (and MoE layers' second) of rank 4; V3.2's indexer, 8 heads of 16 keeping 12.
MOE_KIN["tiny-axk2"] = MOE_KIN["tiny-axk1"].replace(
    name="tiny-axk2", model_type="axk2", moe_post_norm=False, mlp_only_layers=(0,),
    mla_query_gate=True, gated_norm_rank=4, index_topk=12, index_n_heads=8, index_head_dim=16,
)  # fmt: skip
# tests/fixtures/mellum (Mellum): 4 heads over 2 KV heads of 16 with q/k norms; an 8-key window
# on layers 0 and 2 (RoPE base 100), layers 1 and 3 global (base 1e4); layer 0 dense (96),
# layers 1-3 a softmax top-2 of 8 experts 32 wide, renormalized.
MOE_KIN["tiny-mellum"] = ModelConfig(
    name="tiny-mellum",
    model_type="mellum",
    **_LAYERS,
    qk_norm=True,
    sliding_window=8,
    full_attention_layers=(1, 3),
    rope_scaling_full_only=True,
    sliding_rope_theta=100.0,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    norm_topk_prob=True,
    mlp_only_layers=(0,),
)
# tests/fixtures/flint (Flint): tiny-mellum's attention with a sink per query head, RoPE
# (base 1e4) on the windowed layers 0 and 2 alone; layer 0 dense, layers 1-3 top-2 of 8 by
# sigmoid scores (no bias), renormalized, beside an ungated shared expert 48 wide.
MOE_KIN["tiny-flint"] = MOE_KIN["tiny-mellum"].replace(
    name="tiny-flint",
    model_type="flint",
    attention_sinks=True,
    rope_scaling_full_only=False,
    sliding_rope_theta=0.0,
    nope_layers=(1, 3),
    num_shared_experts=1,
    shared_intermediate_size=48,
    scoring_func="sigmoid",
)
# tests/fixtures/kolibri1 (Kolibri-1): tiny-flint's attention without sinks, GLM-4's sandwich
# norms, an MoE on every layer choosing the top-2 of logit + correction bias, weighed by
# sigmoid(logit), renormalized (no dense layer: intermediate_size is the shared expert's).
MOE_KIN["tiny-kolibri1"] = MOE_KIN["tiny-flint"].replace(
    name="tiny-kolibri1",
    model_type="kolibri1",
    intermediate_size=48,
    attention_sinks=False,
    sandwich_norms=True,
    topk_method="noaux_tc",
    router_bias_on_logits=True,
    mlp_only_layers=(),
)
# tests/fixtures/beam (Beam): 4 heads over 2 KV heads of 16 with q/k norms, the output times
# sigmoid(gate_proj(x) + a bias per head); an 8-key window and RoPE (base 1e4) on layers 0-2,
# layer 3 global without positions, its queries times (1 + (position + 1) / 2048) ** 0.1;
# sandwich norms scaled in float32, the stream depth-scaled; layers 0-1 dense (96), 2-3 top-2
# of 8 experts 32 wide (sigmoid, the correction bias, 2 groups, 1 kept, renormalized, times
# 2.5); logits capped at 3.
MOE_KIN["tiny-beam"] = ModelConfig(
    name="tiny-beam",
    model_type="beam",
    **_LAYERS,
    qk_norm=True,
    attn_output_gate=True,
    attn_gate_bias=True,
    sliding_window=8,
    full_attention_layers=(3,),
    nope_layers=(3,),
    attn_scale_power=0.1,
    attn_scale_positions=2048,
    attn_scale_offset=1,
    attn_scale_nope_only=True,
    sandwich_norms=True,
    depth_scaled_residual=True,
    final_logit_softcapping=3.0,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=2,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    mlp_only_layers=(0, 1),
)
# tests/fixtures/aria_text (Aria's language model): 4 heads over 2 KV heads of 16, RoPE base
# 1e4; on every layer the top-2 of 8 router logits softmaxed among themselves over experts 48
# wide beside 2 shared experts (one MLP 96 wide).
MOE_KIN["tiny-aria-text"] = ModelConfig(
    name="tiny-aria-text",
    model_type="aria_text",
    **{**_LAYERS, "intermediate_size": 48},
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    num_shared_experts=2,
    scoring_func="softmax_topk",
)
# tests/fixtures/lara_mini (Lara Mini): 5 layers: gated DeltaNet on 0 and 2 (2 key heads of 16,
# 4 value heads of 16), q/k-normed attention windowed (8 keys, RoPE base 1e4) on 1 and 4,
# global without positions on 3; on every layer a softmax top-2 of 8 experts 32 wide,
# renormalized, beside an ungated shared expert 48 wide; tied embeddings.
MOE_KIN["tiny-lara-mini"] = ModelConfig(
    name="tiny-lara-mini",
    model_type="lara_mini",
    **{**_LAYERS, "num_layers": 5, "intermediate_size": 48},
    tie_word_embeddings=True,
    qk_norm=True,
    sliding_window=8,
    full_attention_layers=(3,),
    nope_layers=(3,),
    linear_attention_layers=(0, 2),
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    num_shared_experts=1,
    shared_intermediate_size=48,
    norm_topk_prob=True,
)
# tests/fixtures/cohere (Command R+'s kind): 4 layers 64 wide, attention (4 heads over 2 KV
# heads of 16) beside the MLP on one LayerNorm'd input, RoPE on interleaved pairs (base 1e4) on
# every layer, q and k LayerNorm'd with a weight per head and channel; logits times 0.25, tied.
MOE_KIN["tiny-cohere"] = ModelConfig(
    name="tiny-cohere",
    model_type="cohere",
    **{**_LAYERS, "rms_norm_eps": 1e-5},
    tie_word_embeddings=True,
    qk_norm=True,
    parallel_block=True,
    norm_kind="layer",
    logit_scale=0.25,
)
# tests/fixtures/internlm3 (InternLM3): Llama's model, 4 layers 64 wide, 4 heads over 2 KV heads
# of 16, RoPE base 1e4.
MOE_KIN["tiny-internlm3"] = ModelConfig(name="tiny-internlm3", model_type="internlm3", **_LAYERS)
# tests/fixtures/apertus (Apertus): 4 heads over 2 KV heads of 16 with q/k RMSNorms, Llama 3's
# RoPE (factor 8 over 64 positions, base 1e4); an MLP without a gate, 96 wide, under xIELU.
MOE_KIN["tiny-apertus"] = ModelConfig(
    name="tiny-apertus",
    model_type="apertus",
    **_LAYERS,
    rope_scaling=RopeScaling(
        rope_type="llama3",
        factor=8.0,
        original_max_position_embeddings=64,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
    ),
    qk_norm=True,
    mlp_act="xielu",
)
# tests/fixtures/gpt_neox (Pythia's layout): 2 layers 64 wide, LayerNorms with biases, 4 heads of
# 16 (q / k / v / o biased), RoPE on the leading quarter of each head (base 1e4), attention and
# an MLP without a gate (96 wide, the erf GELU, biased) side by side on their own norms.
# tests/fixtures/gpt_neox_seq: the blocks one after the other, the tanh GELU.
MOE_KIN["tiny-gpt-neox"] = ModelConfig(
    name="tiny-gpt-neox",
    model_type="gpt_neox",
    **{**_LAYERS, "num_layers": 2, "num_kv_heads": 4, "rms_norm_eps": 1e-5},
    partial_rotary_factor=0.25,
    attention_bias=True,
    o_proj_bias=True,
    mlp_bias=True,
    norm_kind="layer",
    norm_bias=True,
    parallel_block=True,
    parallel_norms=True,
    mlp_act="gelu_exact",
)
MOE_KIN["tiny-gpt-neox-seq"] = MOE_KIN["tiny-gpt-neox"].replace(
    name="tiny-gpt-neox-seq", parallel_block=False, parallel_norms=False, mlp_act="gelu"
)
# tests/fixtures/olmo (OLMo-1B's kind): Llama's layers, 4 heads over 2 KV heads of 16, LayerNorms
# without weights (eps 1e-5), q, k and v clamped to [-0.5, 0.5], tied embeddings.
MOE_KIN["tiny-olmo"] = ModelConfig(
    name="tiny-olmo",
    model_type="olmo",
    **{**_LAYERS, "rms_norm_eps": 1e-5},
    tie_word_embeddings=True,
    clip_qkv=0.5,
    norm_kind="layer",
    norm_weightless=True,
)
# tests/fixtures/falcon (Falcon-40B / 180B's layout): 4 layers 64 wide, 8 query heads over 2 KV
# heads of 8, RoPE base 1e4; attention and an MLP without a gate (128 wide, the erf GELU)
# side by side on two LayerNorms with biases; tied embeddings. tests/fixtures/falcon_7b
# (Falcon-7B's): one KV head, one norm before both blocks, biases on every projection.
MOE_KIN["tiny-falcon"] = ModelConfig(
    name="tiny-falcon",
    model_type="falcon",
    **{**_LAYERS, "num_heads": 8, "head_dim": 8, "intermediate_size": 128, "rms_norm_eps": 1e-5},
    tie_word_embeddings=True,
    norm_kind="layer",
    norm_bias=True,
    parallel_block=True,
    parallel_norms=True,
    mlp_act="gelu_exact",
)
MOE_KIN["tiny-falcon-7b"] = MOE_KIN["tiny-falcon"].replace(
    name="tiny-falcon-7b",
    num_kv_heads=1,
    parallel_norms=False,
    attention_bias=True,
    o_proj_bias=True,
    mlp_bias=True,
)
# tests/fixtures/gptj (GPT-J's layout): 2 layers 64 wide, 4 heads of 16; attention and an MLP
# without a gate (96 wide, the tanh GELU, biased) side by side on one LayerNorm with a bias;
# RoPE on interleaved pairs of each head's leading 8 channels; lm_head biased.
MOE_KIN["tiny-gptj"] = ModelConfig(
    name="tiny-gptj",
    model_type="gptj",
    **{**_LAYERS, "num_layers": 2, "num_kv_heads": 4, "rms_norm_eps": 1e-5},
    partial_rotary_factor=0.5,
    mlp_bias=True,
    lm_head_bias=True,
    norm_kind="layer",
    norm_bias=True,
    parallel_block=True,
    mlp_act="gelu",
)
# tests/fixtures/codegen: tiny-gptj's model, q/k/v from one qkv_proj in 4 groups.
MOE_KIN["tiny-codegen"] = MOE_KIN["tiny-gptj"].replace(name="tiny-codegen", model_type="codegen")
# tests/fixtures/persimmon: 2 layers 64 wide, 4 heads of 16 with q/k LayerNorms (biased),
# RoPE on each head's leading half at base 25,000, a 96-wide ReLU-squared MLP, biases and
# LayerNorms everywhere, untied.
MOE_KIN["tiny-persimmon"] = ModelConfig(
    name="tiny-persimmon",
    model_type="persimmon",
    **{**_LAYERS, "num_layers": 2, "num_kv_heads": 4, "rms_norm_eps": 1e-5},
    rope_theta=25000.0,
    partial_rotary_factor=0.5,
    qk_norm=True,
    attention_bias=True,
    o_proj_bias=True,
    mlp_bias=True,
    norm_kind="layer",
    norm_bias=True,
    mlp_act="relu2",
)
# tests/fixtures/gpt_bigcode (StarCoder's layout): 2 layers 64 wide, a learned position
# embedding (2,048 positions), no RoPE; 4 query heads of 16 over one KV head, biases
# everywhere; LayerNorms; an MLP without a gate (96 wide, the tanh GELU); tied embeddings.
MOE_KIN["tiny-gpt-bigcode"] = MOE_KIN["tiny-gptj"].replace(
    name="tiny-gpt-bigcode",
    model_type="gpt_bigcode",
    num_kv_heads=1,
    partial_rotary_factor=1.0,
    learned_positions=True,
    nope_layers=(0, 1),
    attention_bias=True,
    o_proj_bias=True,
    lm_head_bias=False,
    parallel_block=False,
    tie_word_embeddings=True,
)
# tests/fixtures/gpt_neo (GPT-Neo's layout): tiny-gpt-bigcode's with 4 layers, a KV head per
# query head, q/k/v unbiased and scores unscaled, layers 1 and 3 local (an 8-key window).
MOE_KIN["tiny-gpt-neo"] = MOE_KIN["tiny-gpt-bigcode"].replace(
    name="tiny-gpt-neo",
    model_type="gpt_neo",
    num_layers=4,
    num_kv_heads=4,
    nope_layers=(0, 1, 2, 3),
    attention_bias=False,
    attention_multiplier=1.0,
    sliding_window=8,
    full_attention_layers=(0, 2),
)
# EleutherAI's Pythia (its config.json's shapes: rotary_pct 0.25 at base 1e4, 2,048 positions,
# untied embed_out, eos 0) and GPT-J-6B, TII's Falcon-7B / 40B / 180B (their shapes, untied
# but Falcon-7B's; plain RoPE at 1e4), in bfloat16: tests/test_param_counts.py.
_PYTHIA = MOE_KIN["tiny-gpt-neox"].replace(bos_token_id=0, eos_token_ids=(0,), dtype="bfloat16")
for _name, (_v, _d, _layers, _heads) in {
    "pythia-1b": (50304, 2048, 16, 8),
    "pythia-6.9b": (50432, 4096, 32, 32),
    "pythia-12b": (50688, 5120, 36, 40),
}.items():
    MOE_KIN[_name] = _PYTHIA.replace(
        name=_name,
        vocab_size=_v,
        hidden_size=_d,
        num_layers=_layers,
        num_heads=_heads,
        num_kv_heads=_heads,
        head_dim=_d // _heads,
        intermediate_size=4 * _d,
    )
MOE_KIN["gpt-j-6b"] = MOE_KIN["tiny-gptj"].replace(
    name="gpt-j-6b",
    vocab_size=50400,
    hidden_size=4096,
    num_layers=28,
    num_kv_heads=16,
    num_heads=16,
    head_dim=256,
    intermediate_size=16384,
    partial_rotary_factor=0.25,
    bos_token_id=50256,
    eos_token_ids=(50256,),
    dtype="bfloat16",
)
_FALCON = MOE_KIN["tiny-falcon"].replace(
    vocab_size=65024, bos_token_id=11, eos_token_ids=(11,), dtype="bfloat16"
)
MOE_KIN["falcon-7b"] = MOE_KIN["tiny-falcon-7b"].replace(
    name="falcon-7b",
    vocab_size=65024,
    hidden_size=4544,
    num_layers=32,
    num_heads=71,
    head_dim=64,
    intermediate_size=4 * 4544,
    attention_bias=False,
    o_proj_bias=False,
    mlp_bias=False,
    bos_token_id=11,
    eos_token_ids=(11,),
    dtype="bfloat16",
)
for _name, (_d, _layers, _heads) in {
    "falcon-40b": (8192, 60, 128),
    "falcon-180b": (14848, 80, 232),
}.items():
    MOE_KIN[_name] = _FALCON.replace(
        name=_name,
        hidden_size=_d,
        num_layers=_layers,
        num_heads=_heads,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=4 * _d,
        tie_word_embeddings=False,
    )
# BigCode's StarCoder / StarCoderBase (15.5B: 40 layers 6,144 wide, 48 query heads over one KV
# head, 8,192 learned positions, 24,576-wide MLPs, 49,152 tokens), in bfloat16.
MOE_KIN["starcoder"] = MOE_KIN["tiny-gpt-bigcode"].replace(
    name="starcoder",
    vocab_size=49152,
    hidden_size=6144,
    num_layers=40,
    num_heads=48,
    head_dim=128,
    intermediate_size=24576,
    max_position_embeddings=8192,
    nope_layers=tuple(range(40)),
    bos_token_id=0,
    eos_token_ids=(0,),
    dtype="bfloat16",
)
# tests/fixtures/gpt2 (GPT-2's layout): tiny-gpt-bigcode with a KV head per query head.
MOE_KIN["tiny-gpt2"] = MOE_KIN["tiny-gpt-bigcode"].replace(
    name="tiny-gpt2", model_type="gpt2", num_kv_heads=4
)
# tests/fixtures/opt (OPT-125M's layout): 2 layers 64 wide, learned positions two rows into
# their table, no RoPE; 4 heads of 16, biases everywhere; LayerNorms (eps 1e-5) before each
# block; an MLP without a gate (96 wide, ReLU); tied embeddings.
MOE_KIN["tiny-opt"] = MOE_KIN["tiny-gpt2"].replace(
    name="tiny-opt", model_type="opt", position_offset=2, mlp_act="relu"
)
# tests/fixtures/biogpt: tiny-opt's layers with the tokens' embeddings times sqrt(64), the erf
# GELU.
MOE_KIN["tiny-biogpt"] = MOE_KIN["tiny-opt"].replace(
    name="tiny-biogpt", model_type="biogpt", embedding_multiplier=8.0, mlp_act="gelu_exact"
)
# tests/fixtures/xglm: tiny-biogpt's model with fairseq's sinusoidal positions, computed.
MOE_KIN["tiny-xglm"] = MOE_KIN["tiny-biogpt"].replace(
    name="tiny-xglm", model_type="xglm", learned_positions=False, sinusoidal_positions=True
)
# Meta's OPT-125M (OPTConfig's defaults: 12 layers 768 wide, 12 heads, a 3,072-wide MLP, 50,272
# tokens, 2,048 positions) and OPT-6.7B (32 layers 4,096 wide, 32 heads, 16,384), in bfloat16.
for _name, (_d, _layers, _heads) in {"opt-125m": (768, 12, 12), "opt-6.7b": (4096, 32, 32)}.items():
    MOE_KIN[_name] = at_release_shapes(
        MOE_KIN["tiny-opt"], _name, 50272, _d, _layers, _heads, bos_token_id=2
    )
# EleutherAI's GPT-Neo 125M, 1.3B (GPTNeoConfig's defaults) and 2.7B: global and local
# (256-key windows) in turn, 50,257 tokens, 2,048 positions, in bfloat16.
for _name, (_d, _layers, _heads) in {
    "gpt-neo-125m": (768, 12, 12),
    "gpt-neo-1.3b": (2048, 24, 16),
    "gpt-neo-2.7b": (2560, 32, 20),
}.items():
    MOE_KIN[_name] = at_release_shapes(
        MOE_KIN["tiny-gpt-neo"],
        _name,
        50257,
        _d,
        _layers,
        _heads,
        sliding_window=256,
        full_attention_layers=tuple(range(0, _layers, 2)),
        bos_token_id=50256,
        eos_token_ids=(50256,),
    )
# Salesforce's CodeGen 350M / 2B / 6B / 16B (mono, multi and nl share their shapes): 51,200
# tokens, 2,048 positions, RoPE on each head's leading rotary_dim channels, in bfloat16.
for _name, (_d, _layers, _heads, _rotary) in {
    "codegen-350m": (1024, 20, 16, 32),
    "codegen-2b": (2560, 32, 32, 64),
    "codegen-6b": (4096, 33, 16, 64),
    "codegen-16b": (6144, 34, 24, 64),
}.items():
    MOE_KIN[_name] = at_release_shapes(
        MOE_KIN["tiny-codegen"],
        _name,
        51200,
        _d,
        _layers,
        _heads,
        partial_rotary_factor=_rotary / (_d // _heads),
        bos_token_id=50256,
        eos_token_ids=(50256,),
    )
# Adept's Persimmon-8B (PersimmonConfig's shapes: 262,144 tokens, 36 layers 4,096 wide, 64
# heads, a 16,384-wide MLP, 16,384 positions; its release's RoPE base 25,000), in bfloat16.
MOE_KIN["persimmon-8b"] = at_release_shapes(
    MOE_KIN["tiny-persimmon"],
    "persimmon-8b",
    262144,
    4096,
    36,
    64,
    max_position_embeddings=16384,
)
# Microsoft's BioGPT (BioGptConfig's shapes: 24 layers 1,024 wide, 42,384 tokens, 1,024
# positions) and BioGPT-Large (48 layers 1,600 wide, 25 heads, 57,717 tokens, 2,048
# positions), in bfloat16.
for _name, (_v, _d, _layers, _heads, _positions) in {
    "biogpt": (42384, 1024, 24, 16, 1024),
    "biogpt-large": (57717, 1600, 48, 25, 2048),
}.items():
    MOE_KIN[_name] = at_release_shapes(
        MOE_KIN["tiny-biogpt"],
        _name,
        _v,
        _d,
        _layers,
        _heads,
        embedding_multiplier=_d**0.5,
        max_position_embeddings=_positions,
        bos_token_id=0,
    )
# Meta's XGLM-564M (XGLMConfig's shapes) and XGLM-7.5B (32 layers 4,096 wide, 32 heads, a
# 16,384-wide MLP): 256,008 tokens, 2,048 positions, in bfloat16.
for _name, (_d, _layers, _heads) in {
    "xglm-564m": (1024, 24, 16),
    "xglm-7.5b": (4096, 32, 32),
}.items():
    MOE_KIN[_name] = at_release_shapes(
        MOE_KIN["tiny-xglm"],
        _name,
        256008,
        _d,
        _layers,
        _heads,
        embedding_multiplier=_d**0.5,
        bos_token_id=0,
    )
