"""Cohere's Compass HF config (transformers 5.25's cohere_compass_text: North's language model,
served alone or from the cohere_compass wrapper's text_config), read whole.

Command R7B's layers (configs/hf_cohere.py: attention and MLP side by side on one normed
input, Cohere's LayerNorm, the logits times logit_scale, null: 1) with RoPE on halves (not
Cohere's interleaved pairs) set per layer type: rope_parameters has an entry per type of
`layer_types` (default: every layer "full_attention", global), null for a type without
positions; M-RoPE's sections rotate text as the plain RoPE. The "sliding_attention" layers
windowed by sliding_window; with both types rotated, the windowed ones' RoPE is plain on the
whole head (configs/hf_laguna.windowed_rope).
Refused with a ValueError naming the field: a layer type without a rope_parameters entry
(transformers fails on it), a partial rotary factor (its default RoPE turns whole heads),
another activation, attention biases."""

from __future__ import annotations

from typing import Any

from configs.hf_laguna import windowed_rope

COMPASS = "cohere_compass_text"
TYPES, ALIASES = (COMPASS,), {}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's CohereCompassTextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    COMPASS: dict(
        vocab_size=256000, hidden_size=8192, intermediate_size=22528, logit_scale=None,
        num_hidden_layers=40, num_attention_heads=64, num_key_value_heads=None,
        hidden_act="silu", max_position_embeddings=8192, layer_norm_eps=1e-5, bos_token_id=5,
        eos_token_id=255001, tie_word_embeddings=True, attention_bias=False,
        sliding_window=4096, layer_types=None, rope_parameters={},
    )
}  # fmt: skip


def _kinds(f: Any) -> list:
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types") or [_KINDS[1]] * num_layers
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return kinds


def _ropes(f: Any, kinds: list) -> dict:
    """{layer type: its RoPE dict, or None (no positions)} for the types `kinds` has."""
    params = f.get("rope_parameters")
    if not isinstance(params, dict):
        raise ValueError(f"HF config rope_parameters={params!r}: expected a dict per layer type")
    out = {}
    for kind in dict.fromkeys(kinds):
        if kind not in params:
            raise ValueError(
                f"HF config rope_parameters: no {kind!r} entry for its layers (null: no RoPE)"
            )
        p = params[kind]
        if p is not None and not isinstance(p, dict):
            raise ValueError(f"HF config rope_parameters.{kind}={p!r}: a dict or null")
        if p is not None and p.get("partial_rotary_factor", 1.0) not in (1, 1.0):
            raise ValueError(
                f"HF config rope_parameters.{kind}.partial_rotary_factor="
                f"{p['partial_rotary_factor']!r}: Compass rotates whole heads (only 1)"
            )
        out[kind] = (
            None if p is None else {"rope_type": "default", "partial_rotary_factor": 1.0, **p}
        )
    return out


def rope_source(f: Any) -> dict:
    """The HF config with the global layers' RoPE as the model's (else the windowed ones';
    hf_config reads its theta and scaling from it); none if no layer rotates."""
    ropes = _ropes(f, _kinds(f))
    main = ropes.get(_KINDS[1]) or ropes.get(_KINDS[0])
    rope = {
        k: v for k, v in (main or {}).items() if k not in ("mrope_section", "mrope_interleaved")
    }
    return {**f.hf, "rope_parameters": rope or None, "rope_scaling": None}


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, RoPE, norm and logit fields of a Compass config; `f`
    is hf_config._Fields."""
    for key, want in (("hidden_act", "silu"), ("attention_bias", False)):
        if f.get(key) != want:
            raise ValueError(f"HF config {key}={f.get(key)!r}: only {want!r} is supported")
    kinds = _kinds(f)
    ropes = _ropes(f, kinds)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < len(kinds)
    window = f.get("sliding_window")
    if windowed and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    rotated = {k for k, p in ropes.items() if p is not None}
    both = rotated == set(_KINDS)
    heads = f.required("num_attention_heads")
    scale = f.get("logit_scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
        raise ValueError(f"HF config logit_scale={scale!r}: a number, or null (1)")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        sliding_window=window if windowed else None,
        full_attention_layers=full if windowed else (),
        nope_layers=tuple(i for i, k in enumerate(kinds) if ropes[k] is None),
        **(windowed_rope(ropes[_KINDS[1]], ropes[_KINDS[0]], True) if both else {}),
        parallel_block=True,
        norm_kind="layer",
        rms_norm_eps=float(f.required("layer_norm_eps")),
        logit_scale=1.0 if scale is None else float(scale),
    )
