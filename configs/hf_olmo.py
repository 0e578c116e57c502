"""AllenAI's OLMo 2 layers in HF configs: transformers' olmo2 (OLMo 2, dense), olmo3 (OLMo 3,
dense) and flex_olmo (FlexOlmo: OLMoE's experts and router, configs/hf_moe.py). All: OLMoE's
attention (q/k RMSNorms over all heads' channels, no q/k/v clipping), each block's output
RMS-normed before it joins the stream and nothing before the block (ModelConfig.pre_norms
False beside sandwich_norms), every norm scaled in float32 (OLMo 2's RMSNorm).

OLMo 3 windows three layers of four (`layer_types`, configs/hf_window.py) and keeps a RoPE
per layer kind: `rope_parameters` {"full_attention": ..., "sliding_attention": ...} (or the
legacy `rope_scaling`, the full layers'); the windowed layers' must be plain RoPE at the full
ones' rope_theta (its releases': rope_scaling on the full layers alone,
ModelConfig.rope_scaling_full_only)."""

from __future__ import annotations

from typing import Any

OLMO2, OLMO3, FLEX_OLMO = "olmo2", "olmo3", "flex_olmo"
OLMO_TYPES = (OLMO2, OLMO3, FLEX_OLMO)

# Defaults of transformers 5.25's Olmo2Config, Olmo3Config and FlexOlmoConfig (fields read).
# fmt: off
OLMO_DEFAULTS: dict[str, dict[str, Any]] = {
    OLMO2: dict(
        vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
        rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=50279,
    ),
    OLMO3: dict(
        vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
        rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=50279, sliding_window=4096,
        layer_types=None, rope_theta=500000.0,
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
# OLMo 2's layers (FlexOlmo's, OLMo 3's, EXAONE 4.0's): ModelConfig's norm fields.
POST_NORMED = dict(sandwich_norms=True, pre_norms=False)


def olmo_fields(model_type: str) -> dict:
    """The layers' norms (ModelConfig fields), beside _gqa_fields' attention and experts."""
    return dict(POST_NORMED, rope_scaling_full_only=model_type == OLMO3)


def olmo3_rope_source(f: Any) -> dict:
    """The HF config with its full-attention layers' RoPE as the model's (hf_config reads
    it in place of the config); the windowed layers' checked: plain RoPE at the same
    rope_theta."""
    params = f.hf.get("rope_parameters")
    if not isinstance(params, dict) or not {"full_attention", "sliding_attention"} & set(params):
        return f.hf  # (legacy rope_scaling: the full layers'; rope_theta: both kinds')

    def kind(name: str) -> dict:
        p = params.get(name) or {}
        return {"rope_type": "default", **p, "rope_theta": p.get("rope_theta", f.get("rope_theta"))}

    full, sliding = kind("full_attention"), kind("sliding_attention")
    if sliding["rope_type"] != "default" or sliding["rope_theta"] != full["rope_theta"]:
        raise ValueError(
            f"HF config rope_parameters.sliding_attention={params.get('sliding_attention')!r}:"
            f" only plain RoPE at the full layers' rope_theta={full['rope_theta']} (their "
            "rope_scaling applies to the full-attention layers alone)"
        )
    return {**f.hf, "rope_parameters": full, "rope_scaling": None}
