"""AllenAI's OLMo 2 layers in HF configs: transformers' olmo2 (OLMo 2, dense) and flex_olmo
(FlexOlmo: OLMoE's experts and router, configs/hf_moe.py). Both: OLMoE's attention (q/k
RMSNorms over all heads' channels, no q/k/v clipping), each block's output RMS-normed
before it joins the stream and nothing before the block (ModelConfig.pre_norms False beside
sandwich_norms), every norm scaled in float32 (OLMo 2's RMSNorm)."""

from __future__ import annotations

from typing import Any

OLMO2, FLEX_OLMO = "olmo2", "flex_olmo"
OLMO_TYPES = (OLMO2, FLEX_OLMO)

# Defaults of transformers 5.25's Olmo2Config and FlexOlmoConfig for the fields read.
# fmt: off
OLMO_DEFAULTS: dict[str, dict[str, Any]] = {
    OLMO2: dict(
        vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
        rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=50279,
    ),
    FLEX_OLMO: dict(
        vocab_size=100352, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=4096,
        rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=100257, num_experts=7,
        num_experts_per_tok=5, norm_topk_prob=False, rope_theta=500000.0,
    ),
}
# fmt: on
OLMO_ALIASES = {FLEX_OLMO: {"num_experts": ("num_local_experts",)}}
# The layers' norms (ModelConfig fields), beside _gqa_fields' attention and experts.
OLMO_NORMS = dict(sandwich_norms=True, pre_norms=False)
