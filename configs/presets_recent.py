"""The 61st session's presets: the tiny-<arch> shapes of its fixtures
(tests/fixtures/hf_fixture_archs_recent.py) and the releases' shapes beside them."""

from __future__ import annotations

from configs.model_config import ModelConfig
from configs.preset_shapes import at_release_shapes
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
