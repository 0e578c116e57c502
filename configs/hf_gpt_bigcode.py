"""BigCode's GPT-BigCode HF config (transformers' gpt_bigcode: StarCoder, StarCoderBase,
SantaCoder, WizardCoder), read whole, under GPT-2's field names (n_embd, n_layer, n_head,
n_positions, n_inner, activation_function, layer_norm_epsilon).

A learned position embedding (wpe) added to the token's (ModelConfig.learned_positions: no
RoPE, and no position past n_positions: max_model_len is refused beyond it); LayerNorms with
biases; attention whose q, k and v come from one biased projection (c_attn: all query heads
then the one KV head's k and v with multi_query, else per head q | k | v), scores scaled by
head_dim^-0.5 unless scale_attn_weights is false, a biased output projection; an MLP
without a gate (c_fc, the tanh GELU or the erf one, c_proj, biased; n_inner wide, default
4 x n_embd); tied embeddings by default. Its tensors under transformer
(models/release_names.py). Refused with a ValueError naming the field: cross-attention,
another activation.

OpenAI's GPT-2 (gpt2) is the same model with a KV head per query head, its projections
stored as Conv1D weights ([in, out]; c_attn's columns all q, all k, all v); refused where
scale_attn_by_inverse_layer_idx scales a layer's scores by 1 / (layer + 1).

EleutherAI's GPT-Neo (gpt_neo: 125M, 1.3B, 2.7B) is GPT-2's model with q, k and v apart and
without biases (attn.attention.q_proj ..., out_proj biased), scores not scaled at all, and
its layers global or local by attention_types (local: a sliding window of window_size keys,
the token's own included; ModelConfig.sliding_window, full_attention_layers the global
ones); its own field names (num_layers, num_heads)."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import GELU_MLP_ACTS

GPT_BIGCODE, GPT2, GPT_NEO = "gpt_bigcode", "gpt2", "gpt_neo"
TYPES = (GPT_BIGCODE, GPT2, GPT_NEO)
# GPT-2's field names, read as the fields they stand for (GPTBigCodeConfig's, GPT2Config's and
# GPTJConfig's attribute_map).
GPT2_FIELD_NAMES = {
    "hidden_size": ("n_embd",),
    "num_hidden_layers": ("n_layer",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions",),
    "intermediate_size": ("n_inner",),
    "hidden_act": ("activation_function",),
    "rms_norm_eps": ("layer_norm_epsilon",),
}
ALIASES = {GPT_BIGCODE: GPT2_FIELD_NAMES, GPT2: GPT2_FIELD_NAMES}
ALIASES[GPT_NEO] = {
    "num_hidden_layers": ("num_layers",),
    "num_attention_heads": ("num_heads",),
    "hidden_act": ("activation_function",),
    "rms_norm_eps": ("layer_norm_epsilon",),
}
# Defaults of transformers 5.25's GPTBigCodeConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    GPT_BIGCODE: dict(
        vocab_size=50257, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        max_position_embeddings=1024, intermediate_size=None, hidden_act="gelu_pytorch_tanh",
        rms_norm_eps=1e-5, scale_attn_weights=True, multi_query=True,
        add_cross_attention=False, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=50256, eos_token_id=50256,
    )
}  # fmt: skip
# transformers 5.25's GPT2Config (GPT-2 small's shapes, a KV head per query head).
DEFAULTS[GPT2] = dict(
    DEFAULTS[GPT_BIGCODE], hidden_act="gelu_new", multi_query=False,
    scale_attn_by_inverse_layer_idx=False,
)  # fmt: skip
# transformers 5.25's GPTNeoConfig (GPT-Neo 1.3B's shapes; attention_types None: global and
# local in turn over its 24 layers).
DEFAULTS[GPT_NEO] = dict(
    vocab_size=50257, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
    max_position_embeddings=2048, intermediate_size=None, hidden_act="gelu_new",
    rms_norm_eps=1e-5, attention_types=None, window_size=256, tie_word_embeddings=True,
    rope_theta=10000.0, bos_token_id=50256, eos_token_id=50256,
)  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's embedding, attention, norm and MLP fields of a GPT-BigCode, GPT-2 or
    GPT-Neo config (GPT-Neo's windows too); `f` is hf_config._Fields."""
    if f.get("add_cross_attention"):
        raise ValueError("HF config add_cross_attention=True: cross-attention is not supported")
    if model_type == GPT2 and f.get("scale_attn_by_inverse_layer_idx"):
        raise ValueError(
            "HF config scale_attn_by_inverse_layer_idx=True: scores scaled per layer are not "
            "supported"
        )
    act = f.get("hidden_act")
    if act not in GELU_MLP_ACTS:
        raise ValueError(
            f"HF config activation_function={act!r}: expected one of {sorted(GELU_MLP_ACTS)}"
        )
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    neo = model_type == GPT_NEO
    windows = _gpt_neo_windows(f) if neo else dict(sliding_window=None, full_attention_layers=())
    return dict(
        **windows,
        num_kv_heads=1 if model_type == GPT_BIGCODE and f.get("multi_query") else heads,
        head_dim=hidden // heads,
        intermediate_size=f.get("intermediate_size") or 4 * hidden,
        learned_positions=True,
        nope_layers=tuple(range(f.required("num_hidden_layers"))),
        # (an unscaled score: a multiplier of 1 where head_dim^-0.5 is the default)
        attention_multiplier=0.0 if f.get("scale_attn_weights") and not neo else 1.0,
        attention_bias=not neo,
        o_proj_bias=True,
        mlp_bias=True,
        norm_kind="layer",
        norm_bias=True,
        mlp_act=GELU_MLP_ACTS[act],
    )


def _gpt_neo_windows(f: Any) -> dict:
    """GPT-Neo's layer kinds: attention_types [[kinds, repeats], ...] expanded as
    GPTNeoConfig.expand_attention_types_params does (default: global, local 12 times), one
    per layer."""
    layers = f.required("num_hidden_layers")
    types = f.get("attention_types") or [[["global", "local"], 12]]
    kinds = [kind for group, repeats in types for _ in range(repeats) for kind in group]
    if len(kinds) != layers or set(kinds) - {"global", "local"}:
        raise ValueError(
            f"HF config attention_types={types!r}: expected 'global' / 'local' kinds for each "
            f"of the {layers} layers (got {kinds})"
        )
    local = "local" in kinds
    return dict(
        sliding_window=f.required("window_size") if local else None,
        full_attention_layers=tuple(i for i, k in enumerate(kinds) if k == "global")
        if local
        else (),
    )
