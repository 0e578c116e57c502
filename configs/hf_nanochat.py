"""Karpathy's NanoChat HF config (transformers' nanochat: nanochat-d20, -d32), read whole.

Qwen3's attention (a KV head per query head by default, no biases) whose q and k are
RMS-normed without a weight after RoPE (Llama 4's qk_l2_norm), RoPE by the opposite angle
(its rotate_half flips both signs: models/rope.py "half_reversed"); every norm an RMSNorm
without a weight (ModelConfig.norm_weightless), the embeddings normed before the first layer
(embed_norm); an MLP without a gate, fc2(relu(fc1(x))^2) (models/release_names.py); untied
embeddings; the logits soft-capped (final_logit_softcapping, 15 by default).
Refused with a ValueError naming the field: another activation, attention biases."""

from __future__ import annotations

from typing import Any

NANOCHAT = "nanochat"
TYPES, ALIASES = (NANOCHAT,), {}
# Defaults of transformers 5.25's NanoChatConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    NANOCHAT: dict(
        vocab_size=50304, hidden_size=768, intermediate_size=8192, num_hidden_layers=12,
        num_attention_heads=6, num_key_value_heads=None, max_position_embeddings=2048,
        hidden_act="relu2", rms_norm_eps=1e-6, final_logit_softcapping=15.0,
        attention_bias=False, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and MLP fields of a NanoChat config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "relu2":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: NanoChat takes 'relu2'")
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    heads = f.required("num_attention_heads")
    cap = f.get("final_logit_softcapping")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int | float) or cap <= 0):
        raise ValueError(f"HF config final_logit_softcapping={cap!r}: a number > 0, or null")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.get("head_dim") or f.required("hidden_size") // heads,
        qk_l2_norm=True,
        norm_weightless=True,
        embed_norm=True,
        mlp_act="relu2",
        final_logit_softcapping=float(cap or 0.0),
        sliding_window=None,
        full_attention_layers=(),
    )
