"""The 61st session's presets: the tiny-<arch> shapes of its fixtures
(tests/fixtures/hf_fixture_archs_recent.py) and the releases' shapes beside them."""

from __future__ import annotations

from configs.model_config import ModelConfig, RopeScaling
from configs.preset_shapes import at_release_shapes
from configs.presets_kin import KIN
from configs.presets_moe_kin import MOE_KIN
from configs.presets_more import MORE
from configs.presets_newer import NEWER
from configs.presets_tiny import TINY

RECENT: dict[str, ModelConfig] = {}

# tests/fixtures/nanochat: 3 layers 64 wide, 4 query heads of 16 over 2 KV heads, q and k
# RMS-normed without a weight after RoPE (by the opposite angle: models/rope.py); every norm
# weightless, the embeddings' too; a 96-wide ReLU-squared MLP without a gate; untied; the
# logits capped at 2.
RECENT["tiny-nanochat"] = ModelConfig(
    name="tiny-nanochat",
    model_type="nanochat",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    bos_token_id=1,
    eos_token_ids=(2,),
    qk_l2_norm=True,
    norm_weightless=True,
    embed_norm=True,
    mlp_act="relu2",
    final_logit_softcapping=2.0,
)
# Karpathy's nanochat-d20 and -d32 (depth d: d layers 64 d wide, heads of 128, each its own KV
# head, 4 x wide MLPs; 65,536 tokens, 2,048 positions; logits capped at 15), in bfloat16; ids
# by NanoChatConfig's defaults (bos 0, eos 1).
for _depth in (20, 32):
    RECENT[f"nanochat-d{_depth}"] = at_release_shapes(
        RECENT["tiny-nanochat"],
        f"nanochat-d{_depth}",
        65536,
        64 * _depth,
        _depth,
        _depth // 2,
        final_logit_softcapping=15.0,
        bos_token_id=0,
        eos_token_ids=(1,),
    )
# tests/fixtures/cosmos3_omni: tiny-qwen3's language model (its M-RoPE plain RoPE for text),
# untied by Cosmos3OmniConfig's default, saved as its unified checkpoints are (the language
# model at the root, Diffusers' attention names).
RECENT["tiny-cosmos3-omni"] = TINY["tiny-qwen3"].replace(
    name="tiny-cosmos3-omni", tie_word_embeddings=False
)
# tests/fixtures/step3p7 (Step 3.7 Flash's language model, its text_config in the releases'
# spelling): 4 layers 64 wide; layers 0 and 3 global (4 query heads of 16 over 2 KV heads,
# Llama 3's RoPE on half of each head at base 5e5), 1 and 2 windowed (8 keys, 8 query heads,
# RoPE on the whole head at base 1e4); q/k norms; every norm times 1 + its weight; scores
# times 24^-0.5; a sigmoid gate per head; layer 0 a dense SwiGLU (96 wide, clipped at 0.6),
# 1-3 top-2 of 8 experts 24 wide (sigmoid, the correction bias, renormalized, times 2;
# clipped at 0.5 in layer 2, 0.4 in 3) beside a shared expert 32 wide (clipped at 0.5 in 1).
RECENT["tiny-step3p7"] = ModelConfig(
    name="tiny-step3p7",
    model_type="step3p5",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    heads_per_layer=(4, 8, 8, 4),
    intermediate_size=96,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    rope_theta=500000.0,
    rope_scaling=RopeScaling(
        rope_type="llama3",
        factor=2.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=16,
    ),
    partial_rotary_factor=0.5,
    rope_scaling_full_only=True,
    sliding_rope_theta=10000.0,
    sliding_full_rotary=True,
    sliding_window=8,
    full_attention_layers=(0, 3),
    attention_multiplier=24**-0.5,
    qk_norm=True,
    norm_zero_centered=True,
    head_gate=True,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    shared_intermediate_size=32,
    mlp_only_layers=(0,),
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=2.0,
    expert_clip_limits=(0.0, 0.0, 0.5, 0.4),
    shared_clip_limits=(0.6, 0.5, 0.0, 0.0),
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/ernie4_5_vl_moe (ERNIE 4.5 VL's language model): tiny-ernie4-5-moe's with
# layers 1 and 3 MoE (its text experts), untied.
RECENT["tiny-ernie4-5-vl-moe"] = TINY["tiny-ernie4-5-moe"].replace(
    name="tiny-ernie4-5-vl-moe",
    model_type="ernie4_5_vl_moe_text",
    mlp_only_layers=(0, 2),
    tie_word_embeddings=False,
)
# tests/fixtures/apertus1p5_text (Apertus 1.5's language model): tiny-apertus' layers, its
# head pruned to the first 400 ids.
RECENT["tiny-apertus1p5"] = MOE_KIN["tiny-apertus"].replace(
    name="tiny-apertus1p5", model_type="apertus1p5_text", output_vocab_size=400
)
# tests/fixtures/deepseek_ocr2 (DeepSeek-OCR 2's language model): 3 layers 64 wide, Llama's
# attention (4 heads over 2 KV heads of 16), layer 0 dense (96), 1 and 2 DeepSeek-V2's MoE
# (softmax, top-2 of 8 experts 24 wide within the best of 4 groups, times 1.5) beside a
# shared expert.
RECENT["tiny-deepseek-ocr2"] = ModelConfig(
    name="tiny-deepseek-ocr2",
    model_type="deepseek_ocr2_text",
    vocab_size=512,
    hidden_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    num_shared_experts=1,
    scoring_func="softmax",
    topk_method="group_limited_greedy",
    n_group=4,
    topk_group=1,
    routed_scaling_factor=1.5,
    mlp_only_layers=(0,),
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/cohere_compass_text (Compass's language model): tiny-cohere2's layers with RoPE
# on halves at base 5e4 on the windowed layers 0-2 (layer 3 global, without positions).
RECENT["tiny-cohere-compass"] = MORE["tiny-cohere2"].replace(
    name="tiny-cohere-compass", model_type="cohere_compass_text", rope_theta=50000.0
)
# tests/fixtures/cosmos3_edge (Cosmos3 Edge's language model): tiny-arcee's layers, untied.
RECENT["tiny-cosmos3-edge"] = KIN["tiny-arcee"].replace(name="tiny-cosmos3-edge")
# tests/fixtures/molmo2 (Molmo2's language model): 2 layers 64 wide, 4 heads over 2 KV heads of
# 16, q and k normed over all heads at once, q/k/v biased; a SwiGLU MLP 96 wide; RoPE base 1e6.
RECENT["tiny-molmo2"] = ModelConfig(
    name="tiny-molmo2",
    model_type="molmo2_text",
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    rms_norm_eps=1e-6,
    max_position_embeddings=2048,
    rope_theta=1e6,
    attention_bias=True,
    qk_norm=True,
    qk_norm_full=True,
    eos_token_ids=(2,),
)
# tests/fixtures/paddleocr_vl (PaddleOCR-VL's language model): tiny-ernie4-5's layers with RoPE
# on halves, tied.
RECENT["tiny-paddleocr-vl"] = NEWER["tiny-ernie4-5"].replace(
    name="tiny-paddleocr-vl", model_type="paddleocr_vl_text"
)
# tests/fixtures/emu3 (Emu3's language model): Llama's layers, 2 of them 64 wide, 4 heads over 2
# KV heads of 16, a SwiGLU MLP 96 wide, RoPE base 1e6; untied.
RECENT["tiny-emu3"] = TINY["tiny-llama"].replace(
    name="tiny-emu3",
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    head_dim=16,
    intermediate_size=96,
    rope_theta=1e6,
    rope_scaling=RopeScaling(),
)
