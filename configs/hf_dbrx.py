"""Databricks' DBRX HF config (transformers' dbrx: DBRX Base and Instruct, 132B / 36B active).

Its layers: LayerNorms without a bias (ModelConfig's norm_kind "layer") before GQA whose
fused Wqkv output is clamped to +-clip_qkv, then top-k of moe_num_experts SwiGLU experts
under a softmax router, the chosen weights divided by their moe_normalize_expert_weights-
norm (1: their sum; null: as they are). Its fields: d_model, n_heads, n_layers, max_seq_len
at the top, the attention's in attn_config (kv_n_heads, clip_qkv) and the experts' in
ffn_config. RoPE: the config's rope_parameters (transformers'); a release's
attn_config.rope_theta where there are none (transformers 5.25 reads no base there and takes
10,000; DBRX was trained with 500,000, as its code and vLLM read it)."""

from __future__ import annotations

from typing import Any

DBRX = "dbrx"
TYPES = (DBRX,)
ALIASES = {
    DBRX: {
        "hidden_size": ("d_model",),
        "num_attention_heads": ("n_heads",),
        "num_hidden_layers": ("n_layers",),
        "max_position_embeddings": ("max_seq_len",),
    }
}
# Defaults of transformers 5.25's DbrxConfig (and its attention and FFN sub-configs).
DEFAULTS: dict[str, dict[str, Any]] = {
    DBRX: dict(
        hidden_size=2048, num_attention_heads=16, num_hidden_layers=24,
        max_position_embeddings=2048, vocab_size=32000, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, rope_theta=10000.0,
    )
}  # fmt: skip
_ATTN = dict(clip_qkv=None, kv_n_heads=1)
_FFN = dict(
    ffn_act_fn=None, ffn_hidden_size=3584, moe_num_experts=4, moe_top_k=1,
    moe_normalize_expert_weights=1.0,
)  # fmt: skip


def _sub(f: Any, key: str, defaults: dict) -> dict:
    sub = f.hf.get(key)
    if sub is not None and not isinstance(sub, dict):
        raise ValueError(f"HF config {key}={sub!r}: expected a JSON object")
    return {**defaults, **(sub or {})}


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and MoE fields of a DBRX config; `f` is
    hf_config._Fields."""
    if f.get("tie_word_embeddings"):
        raise ValueError("HF config tie_word_embeddings=True: not supported for dbrx")
    attn, ffn = _sub(f, "attn_config", _ATTN), _sub(f, "ffn_config", _FFN)
    act = (ffn["ffn_act_fn"] or {"name": "silu"}).get("name", "silu")
    if act != "silu":
        raise ValueError(f"HF config ffn_config.ffn_act_fn.name={act!r}: only 'silu'")
    p = ffn["moe_normalize_expert_weights"]
    if p not in (None, 1, 1.0):
        raise ValueError(
            f"HF config ffn_config.moe_normalize_expert_weights={p!r}: only 1 (the weights "
            "over their sum) or null"
        )
    clip = attn["clip_qkv"]
    heads, width = f.required("num_attention_heads"), ffn["ffn_hidden_size"]
    out = dict(
        num_kv_heads=attn["kv_n_heads"],
        head_dim=f.required("hidden_size") // heads,
        clip_qkv=None if clip is None else float(clip),
        norm_kind="layer",
        rms_norm_eps=1e-5,  # (nn.LayerNorm's default)
        intermediate_size=width,
        num_experts=ffn["moe_num_experts"],
        num_experts_per_tok=ffn["moe_top_k"],
        moe_intermediate_size=width,
        norm_topk_prob=p is not None,
    )
    rope = f.hf.get("rope_parameters") or f.hf.get("rope_scaling") or {}
    if "rope_theta" not in rope and "rope_theta" not in f.hf and "rope_theta" in attn:
        out["rope_theta"] = float(attn["rope_theta"])
    return out
