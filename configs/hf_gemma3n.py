"""Google's Gemma 3n HF config (transformers' gemma3n_text, the language model of gemma3n:
Gemma 3n E2B / E4B), read whole.

Gemma 4's small models' attention, per-layer inputs and KV sharing (configs/hf_gemma4.py:
q/k norms, a weightless v norm, scale 1, norms around each block, the last
num_kv_shared_layers layers reading the last earlier layer of their kind's K and V, each
layer gating its per-layer input in) with Gemma 3's RoPE per layer kind (rope_parameters,
or rope_theta and rope_local_base_freq), and three things of its own (models/gemma3n.py):
AltUp's altup_num_inputs streams, a LAuReL block of rank laurel_rank beside each attention,
and the MLP gate's Gaussian top-k on the layers activation_sparsity_pattern names. Its MLP
widths per layer (intermediate_size, a list or one width); the logits capped.
Refused with a ValueError naming the field: another activation, attention biases, another
AltUp stream as the active one, AltUp's output scale off."""

from __future__ import annotations

import math
from typing import Any

from configs.hf_gemma3 import gemma3_rope
from configs.hf_gemma4 import kv_sources

GEMMA3N = "gemma3n_text"
TYPES, ALIASES = (GEMMA3N,), {}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's Gemma3nTextConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    GEMMA3N: dict(
        vocab_size=262400, hidden_size=2048, intermediate_size=16384, num_hidden_layers=35,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32768,
        rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, tie_word_embeddings=True,
        attention_bias=False, sliding_window=512, layer_types=None,
        final_logit_softcapping=30.0, vocab_size_per_layer_input=262144,
        hidden_size_per_layer_input=256, altup_active_idx=0, altup_correct_scale=True,
        altup_num_inputs=4, num_kv_shared_layers=15, laurel_rank=64,
        activation_sparsity_pattern=None,
    )
}  # fmt: skip


def _per_layer(f: Any, key: str, num_layers: int, default: Any) -> list:
    """A per-layer list, or one value for every layer (transformers' __post_init__)."""
    value = f.get(key)
    value = default if value is None else value
    values = value if isinstance(value, list) else [value] * num_layers
    if len(values) != num_layers or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    ):
        raise ValueError(f"HF config {key}={value!r}: one number, or one per layer ({num_layers})")
    return values


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, stream and MLP fields of a Gemma 3n text config; `f`
    is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError("HF config attention_bias=True: attention biases not supported")
    if f.get("hidden_activation") != "gelu_pytorch_tanh":
        raise ValueError(
            f"HF config hidden_activation={f.get('hidden_activation')!r}: only "
            "'gelu_pytorch_tanh' (GeGLU) is supported"
        )
    for key, want in (("altup_active_idx", 0), ("altup_correct_scale", True)):
        if f.get(key) != want:
            raise ValueError(f"HF config {key}={f.get(key)!r}: only {want!r} is supported")
    n = f.required("num_hidden_layers")
    kinds = f.get("layer_types") or [_KINDS[(i + 1) % 5 == 0] for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {n} entries of {_KINDS}")
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < n
    sources = kv_sources(kinds, f.get("num_kv_shared_layers"))
    widths = _per_layer(f, "intermediate_size", n, None)
    sparse = 10 if n > 10 else 0  # (transformers' default pattern: 0.95 on the first ten)
    sparsity = _per_layer(
        f, "activation_sparsity_pattern", n, [0.95] * sparse + [0.0] * (n - sparse)
    )
    per_layer = f.required("hidden_size_per_layer_input")
    table = min(f.required("vocab_size_per_layer_input"), f.required("vocab_size"))
    cap = f.get("final_logit_softcapping")
    return dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.required("head_dim"),
        qk_norm=True,
        v_norm=True,
        attention_multiplier=1.0,
        sandwich_norms=True,
        sliding_window=f.required("sliding_window") if windowed else None,
        full_attention_layers=full if windowed else (),
        sliding_rope_theta=gemma3_rope(f)[2] if windowed else 0.0,
        kv_source_layers=tuple(sources) if sources != list(range(n)) else (),
        intermediate_size=max(widths),
        layer_intermediate_sizes=tuple(widths) if len(set(widths)) > 1 else (),
        mlp_act="geglu",
        embedding_multiplier=math.sqrt(f.required("hidden_size")),
        final_logit_softcapping=float(cap or 0.0),
        per_layer_input_dim=per_layer,
        per_layer_vocab_size=table,
        altup_num_inputs=f.required("altup_num_inputs"),
        laurel_rank=f.required("laurel_rank"),
        activation_sparsity=tuple(float(s) for s in sparsity) if any(sparsity) else (),
    )
