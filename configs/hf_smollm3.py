"""Hugging Face's SmolLM3 HF config (transformers' smollm3: SmolLM3-3B): Llama's layers with
RoPE on the layers `no_rope_layers` marks 1 (default: all but every no_rope_layer_interval-th)
and none on the others; with use_sliding_window, the layers `layer_types` calls
"sliding_attention" windowed (by default the layers without RoPE)."""

from __future__ import annotations

from typing import Any

SMOLLM3 = "smollm3"
TYPES, ALIASES = (SMOLLM3,), {}
# Defaults of transformers 5.25's SmolLM3Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    SMOLLM3: dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
        num_attention_heads=16, num_key_value_heads=4, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-6, bos_token_id=128000,
        eos_token_id=128001, rope_theta=2000000.0, use_sliding_window=False,
        sliding_window=None, no_rope_layers=None, no_rope_layer_interval=4, layer_types=None,
        attention_bias=False, mlp_bias=False, tie_word_embeddings=True,
    )
}  # fmt: skip


def _flags(f: Any, num_layers: int) -> list[int]:
    flags = f.get("no_rope_layers")
    if flags is None:
        every = f.required("no_rope_layer_interval")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"HF config no_rope_layer_interval={every!r}: an integer >= 1")
        flags = [int((i + 1) % every != 0) for i in range(num_layers)]
    if not isinstance(flags, list) or len(flags) != num_layers or set(flags) - {0, 1}:
        raise ValueError(f"HF config no_rope_layers: expected {num_layers} entries of 0 / 1")
    return flags


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, RoPE and window fields of a SmolLM3 config; `f` is
    hf_config._Fields."""
    for key in ("attention_bias", "mlp_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}=True: not supported for smollm3")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    num_layers, heads = f.required("num_hidden_layers"), f.required("num_attention_heads")
    flags = _flags(f, num_layers)
    window = f.get("sliding_window") if f.get("use_sliding_window") else None
    kinds = f.get("layer_types")
    if kinds is None:
        kinds = ["sliding_attention" if window and not r else "full_attention" for r in flags]
    allowed = ("full_attention", "sliding_attention")
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(allowed):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {allowed}")
    windowed = window is not None and "sliding_attention" in kinds
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        nope_layers=tuple(i for i, r in enumerate(flags) if not r),
        sliding_window=window if windowed else None,
        full_attention_layers=(
            tuple(i for i, k in enumerate(kinds) if k == "full_attention") if windowed else ()
        ),
    )
