"""Naver's HyperCLOVA X HF config (transformers' hyperclovax: HyperCLOVAX-SEED-Think-14B):
Granite's dense model (its embedding, residual and attention multipliers) with the logits
*multiplied* by logits_scaling (Granite divides: ModelConfig.logits_scaling holds its
reciprocal) and, with `use_post_norm` (Peri-LN), each block's output RMS-normed before it
joins the stream (sandwich norms, post_norm1 / post_norm2: models/release_names.py).
Refused with a ValueError naming the field: biases."""

from __future__ import annotations

from typing import Any

HYPERCLOVAX = "hyperclovax"
TYPES, ALIASES = (HYPERCLOVAX,), {}
# Defaults of transformers 5.25's HyperCLOVAXConfig for the fields read (attention_multiplier
# null: head_dim^-0.5).
DEFAULTS: dict[str, dict[str, Any]] = {
    HYPERCLOVAX: dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False,
        embedding_multiplier=1.0, logits_scaling=1.0, residual_multiplier=1.0,
        attention_multiplier=None, use_post_norm=True, rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and scaling fields; `f` is hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: biases are not supported here")
    heads = f.required("num_attention_heads")
    head_dim = f.get("head_dim") or f.required("hidden_size") // heads
    logits = float(f.required("logits_scaling"))
    if not logits > 0:
        raise ValueError(f"HF config logits_scaling={logits!r}: must be > 0")
    attention = f.get("attention_multiplier")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        embedding_multiplier=float(f.required("embedding_multiplier")),
        residual_multiplier=float(f.required("residual_multiplier")),
        attention_multiplier=head_dim**-0.5 if attention is None else float(attention),
        logits_scaling=1.0 / logits,
        sandwich_norms=bool(f.get("use_post_norm")),
        sliding_window=None,
        full_attention_layers=(),
    )
