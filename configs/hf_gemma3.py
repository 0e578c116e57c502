"""Google's Gemma 3 and Gemma 2 HF configs.

Gemma 3 (transformers' gemma3_text: Gemma 3 270M / 1B, and the
language model of Gemma 3 4B / 12B / 27B): five windowed layers to one global layer
(layer_types, or the older sliding_window_pattern); q/k RMSNorms; every RMSNorm scales by
1 + its weight; the attention scaled by query_pre_attn_scalar^-0.5; norms after each block
as well as before; a GeGLU (tanh) MLP; the embeddings times sqrt(hidden_size). RoPE per
layer kind: the global layers' (base 1e6, linear scaling on the larger models), the
windowed layers' plain (base 1e4): rope_parameters by layer type, or the older rope_theta,
rope_scaling and rope_local_base_freq. Soft-capped attention scores when
attn_logit_softcapping is set (null in the releases; Gemma 2's, below). Refused with a
ValueError naming the field: bidirectional attention, attention biases.

Gemma 2 (gemma2: Gemma 2 2B / 9B / 27B) is the same block without the q/k norms, every
other layer windowed (layer_types, or from layer 0 as the releases have it), one RoPE for
both kinds, and its attention scores (times the scale) soft-capped, cap * tanh(s / cap),
by attn_logit_softcapping (50 in the releases; null: none), as the logits are by
final_logit_softcapping (30). VaultGemma (vaultgemma: VaultGemma 1B) is Gemma 2 without
the norms after each block (its MLP's input norm named pre_feedforward_layernorm).

Gemma (gemma: Gemma 2B / 7B, CodeGemma) is the first: Llama's blocks with the norms by
1 + weight, a GeGLU MLP (its releases' hidden_act "gelu", which transformers reads as the
tanh approximation), the embeddings times sqrt(hidden_size), the scale head_dim^-0.5, no
window, no caps."""

from __future__ import annotations

import math
from typing import Any

from configs.model_config import RopeScaling

GEMMA3, GEMMA2, VAULTGEMMA, GEMMA = "gemma3_text", "gemma2", "vaultgemma", "gemma"
TYPES, ALIASES = (GEMMA3, GEMMA2, VAULTGEMMA, GEMMA), {}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's Gemma3TextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    GEMMA3: dict(
        vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
        rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, tie_word_embeddings=True,
        attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
        layer_types=None, final_logit_softcapping=None, attn_logit_softcapping=None,
        use_bidirectional_attention=False,
    ),
    # transformers 5.25's Gemma2Config (RoPE: the generic reading, base 1e4)
    GEMMA2: dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
        rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, tie_word_embeddings=True,
        attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
        layer_types=None, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
        use_bidirectional_attention=None, rope_theta=10000.0,
    ),
}  # fmt: skip
# VaultGemmaConfig is Gemma2Config (its use_bidirectional_attention removed).
DEFAULTS[VAULTGEMMA] = {**DEFAULTS[GEMMA2], "use_bidirectional_attention": None}
# transformers 5.25's GemmaConfig (Gemma 7B's shapes)
DEFAULTS[GEMMA] = dict(
    vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=16, head_dim=256,
    hidden_act="gelu_pytorch_tanh", max_position_embeddings=8192, rms_norm_eps=1e-6,
    bos_token_id=2, eos_token_id=1, tie_word_embeddings=True, attention_bias=False,
    use_bidirectional_attention=None, rope_theta=10000.0,
)  # fmt: skip


def gemma3_rope(f: Any) -> tuple[float, RopeScaling, float]:
    """(the global layers' base, their RopeScaling, the windowed layers' base)."""
    params = f.hf.get("rope_parameters")
    if isinstance(params, dict) and set(params) & set(_KINDS):
        full, sliding = dict(params.get(_KINDS[1]) or {}), dict(params.get(_KINDS[0]) or {})
    else:  # (the released configs' spelling)
        full = dict(f.hf.get("rope_scaling") or {})
        sliding = {"rope_theta": f.hf.get("rope_local_base_freq", 10_000.0)}
        full.setdefault("rope_theta", f.hf.get("rope_theta", 1_000_000.0))
    kinds = (
        full.get("rope_type", full.get("type", "default")),
        sliding.get("rope_type", "default"),
    )
    if kinds[0] not in ("default", "linear") or kinds[1] != "default":
        raise ValueError(
            f"HF config rope_parameters: rope_type {kinds[0]!r} (full_attention) and "
            f"{kinds[1]!r} (sliding_attention) not supported (default / linear, default)"
        )
    scaling = RopeScaling()
    if kinds[0] == "linear":
        scaling = RopeScaling(rope_type="linear", factor=float(full.get("factor", 1.0)))
    return (
        float(full.get("rope_theta", 1_000_000.0)),
        scaling,
        float(sliding.get("rope_theta", 10_000.0)),
    )


def _layer_kinds(f: Any, num_layers: int, model_type: str) -> list[str]:
    kinds = f.get("layer_types")
    if kinds is None:  # transformers: sliding_window_pattern - 1 windowed layers, a global one
        every = f.hf.get("sliding_window_pattern", 6) if model_type == GEMMA3 else 2
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"HF config sliding_window_pattern={every!r}: an integer >= 1")
        kinds = [_KINDS[0] if (i + 1) % every else _KINDS[1] for i in range(num_layers)]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return kinds


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, norm and MLP fields of a Gemma 3 text config or a
    Gemma 2 one; `f` is hf_config._Fields."""
    gemma3 = model_type == GEMMA3
    for key, why in (
        ("attention_bias", "attention biases"),
        ("use_bidirectional_attention", "bidirectional attention"),
    ):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: {why} not supported")
    if model_type == GEMMA:
        return _gemma_fields(f)
    # (Gemma 2's releases also carry a hidden_act, which its model does not read)
    if f.get("hidden_activation") != "gelu_pytorch_tanh":
        raise ValueError(
            f"HF config hidden_activation={f.get('hidden_activation')!r}: only "
            "'gelu_pytorch_tanh' (GeGLU) is supported"
        )
    scalar = f.required("query_pre_attn_scalar")
    if isinstance(scalar, bool) or not isinstance(scalar, int | float) or scalar <= 0:
        raise ValueError(f"HF config query_pre_attn_scalar={scalar!r}: must be a number > 0")
    num_layers = f.required("num_hidden_layers")
    kinds = _layer_kinds(f, num_layers, model_type)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < num_layers
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.required("head_dim"),
        qk_norm=gemma3,
        norm_zero_centered=True,
        attention_multiplier=float(scalar) ** -0.5,
        sandwich_norms=model_type != VAULTGEMMA,
        sliding_window=f.required("sliding_window") if windowed else None,
        full_attention_layers=full if windowed else (),
        sliding_rope_theta=gemma3_rope(f)[2] if windowed and gemma3 else 0.0,
        mlp_act="geglu",
        embedding_multiplier=math.sqrt(f.required("hidden_size")),
        final_logit_softcapping=_cap(f, "final_logit_softcapping"),
        attn_logit_softcapping=_cap(f, "attn_logit_softcapping"),
    )


def _cap(f: Any, key: str) -> float:
    """A soft cap: a number > 0, or null / absent (none; 0 is refused as HF would divide by
    it)."""
    cap = f.get(key)
    if cap is None:
        return 0.0
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 < cap < math.inf:
        raise ValueError(f"HF config {key}={cap!r}: a finite number > 0, or null for none")
    return float(cap)


def _gemma_fields(f: Any) -> dict:
    """The first Gemma's: Llama's blocks, norms by 1 + weight, GeGLU, scaled embeddings."""
    act = f.get("hidden_act")
    if act not in ("gelu_pytorch_tanh", "gelu"):  # (transformers reads "gelu" as the tanh one)
        raise ValueError(
            f"HF config hidden_act={act!r}: only 'gelu_pytorch_tanh' (or the releases' 'gelu')"
        )
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.required("head_dim"),
        norm_zero_centered=True,
        mlp_act="geglu",
        embedding_multiplier=math.sqrt(f.required("hidden_size")),
    )
