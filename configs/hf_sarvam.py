"""Sarvam's and BharatGen's MoE configs, served as the families transformers 5.25 builds
them from: Sarvam-30B (sarvam_moe) and Param2-17B-A2.4B (param2moe) as GLM-4.5's model
(Glm4MoeForCausalLM: q/k norms per head, whole-head RoPE, DeepSeek-V3's sigmoid router with
its correction bias, shared experts, a dense first layer), Sarvam-105B (sarvam_mla) as
DeepSeek-V3's (MLA without a query compression, one expert group).

Each config is read as its family's (`as_family`) with its own class's defaults and names
(num_experts, num_shared_experts, use_qkv_bias, num_mtp_layers), and Sarvam-105B's
remote-code spelling (a head_dim of kv_lora_rank + qk_rope_head_dim, q_head_dim,
rope_scaling "deepseek_yarn", which transformers reads as YaRN); the ModelConfig keeps the
checkpoint's model_type, whose tensor names (models/checkpoint_names.py) are the releases':
Sarvam-30B's and Param2's Bailing-style word_embeddings, attention.query_key_value (q, k
and v rows fused), attention.dense, query_ / key_layernorm and gate.expert_bias.
Their MTP layers (none in the releases) are not read."""

from __future__ import annotations

from typing import Any

SARVAM_MOE, PARAM2_MOE, SARVAM_MLA = "sarvam_moe", "param2moe", "sarvam_mla"

# Defaults of transformers 5.25's SarvamMoEConfig, Param2MoeConfig and SarvamMLAConfig for
# the fields their family's parser reads.
_GLM_BASE = dict(
    hidden_size=4096,
    max_position_embeddings=131072,
    n_routed_experts=128,
    n_shared_experts=1,
    n_group=1,
    topk_group=1,
    norm_topk_prob=True,
    first_k_dense_replace=1,
    attention_bias=False,
    bos_token_id=None,
    tie_word_embeddings=False,
    rms_norm_eps=1e-6,
    routed_scaling_factor=2.5,
    use_qk_norm=True,
    num_nextn_predict_layers=0,
    partial_rotary_factor=1.0,
    num_experts_per_tok=6,
    head_dim=64,
)
# fmt: off
_CLASS_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    SARVAM_MOE: ("glm4_moe", dict(
        _GLM_BASE, vocab_size=262144, intermediate_size=8192, num_hidden_layers=19,
        num_attention_heads=64, num_key_value_heads=4, moe_intermediate_size=1024,
        eos_token_id=1, rope_theta=8000000.0,
    )),
    PARAM2_MOE: ("glm4_moe", dict(
        _GLM_BASE, vocab_size=128000, hidden_size=2048, intermediate_size=9216,
        num_hidden_layers=21, num_attention_heads=32, num_key_value_heads=8,
        max_position_embeddings=32768, tie_word_embeddings=True, moe_intermediate_size=2048,
        n_shared_experts=2, n_routed_experts=64, eos_token_id=3, rope_theta=500000.0,
    )),
    SARVAM_MLA: ("deepseek_v3", dict(
        vocab_size=262144, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
        num_attention_heads=64, num_key_value_heads=None, n_routed_experts=128,
        n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=2048, n_group=1,
        topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=1,
        q_lora_rank=None, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, rope_interleave=True, max_position_embeddings=4096, rms_norm_eps=1e-6,
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, rope_theta=10000.0,
        num_nextn_predict_layers=0, attention_bias=False,
    )),
}
# fmt: on
SARVAM_TYPES = tuple(_CLASS_DEFAULTS)
# Each class's attribute_map: its own name -> the family's field.
_NAMES = {
    "num_local_experts": "n_routed_experts",
    "num_experts": "n_routed_experts",
    "num_shared_experts": "n_shared_experts",
    "num_mtp_layers": "num_nextn_predict_layers",
    "use_qkv_bias": "attention_bias",  # (not SarvamMLAConfig's)
}


def as_family(hf: dict) -> tuple[dict, str | None]:
    """(`hf` as its family's config with its own class's defaults filled in, the
    checkpoint's model_type); other configs come back as they are, with None."""
    model_type = hf.get("model_type")
    if model_type not in _CLASS_DEFAULTS:
        return hf, None
    family, defaults = _CLASS_DEFAULTS[model_type]
    out = dict(hf)
    for name, field in _NAMES.items():
        if name in out and not (model_type == SARVAM_MLA and name == "use_qkv_bias"):
            out.setdefault(field, out.pop(name))
    if model_type == SARVAM_MLA:
        # (transformers derives head_dim from the rope width; the release's is vLLM's MLA
        # cache width and its q_head_dim the query's, both dropped as transformers does)
        out.pop("head_dim", None)
        out.pop("q_head_dim", None)
        rope = out.get("rope_scaling") or {}
        if "deepseek_yarn" in (rope.get("type"), rope.get("rope_type")):
            rope = {k: v for k, v in rope.items() if k != "type"}
            out["rope_scaling"] = dict(rope, rope_type="yarn")
    return {**defaults, **out, "model_type": family}, model_type
