"""TII's Falcon-H1 HF config (transformers' falcon_h1: Falcon-H1 0.5B ... 34B, Falcon-H1R).

Each layer runs Llama's attention (GQA, RoPE, head_dim its own or hidden / heads) and a
Mamba-2 mixer side by side on one normed input, their outputs summed into the stream, then a
SwiGLU MLP. moeserve serves HF layer j as decoder layers 2j (the attention, its output held
back: no feed-forward block) and 2j + 1 (the Mamba-2 mixer, which adds both, and the MLP):
ModelConfig.parallel_hybrid. The mixer is Nemotron-H's Mamba-2 (mamba_d_ssm channels, or
mamba_expand x hidden) without its gated norm (mamba_rms_norm false, the releases';
ModelConfig.mamba_gated_norm) or with Nemotron-H's (norm after the gate).

Its µP multipliers: the embeddings' (embedding_multiplier) and the logits' (lm_head_multiplier:
ModelConfig.logit_scale) as such; those of a projection's input or output (attention in and
out, the key, the Mamba-2 input, in_proj's five sections z | x | B | C | dt, its output, the
MLP's gate and down) folded into the weights on load (ModelConfig.load_scales).

Refused with a ValueError naming the field: biases (attention_bias, mlp_bias,
mamba_proj_bias, projectors_bias), another activation, mamba_norm_before_gate with the norm,
multiplier lists of another length."""

from __future__ import annotations

import math
from typing import Any

FALCON_H1 = "falcon_h1"
TYPES = (FALCON_H1,)
ALIASES: dict = {}
# Defaults of transformers 5.25's FalconH1Config for the fields read.
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {FALCON_H1: dict(
    vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
    rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, max_position_embeddings=8192,
    mamba_d_ssm=1024, mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1,
    mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True,
    mamba_proj_bias=False, mamba_norm_before_gate=True, mamba_rms_norm=False,
    time_step_limit=(0.0, math.inf), projectors_bias=False, lm_head_multiplier=1.0,
    embedding_multiplier=1.0, mlp_multipliers=None, key_multiplier=1.0,
    attention_out_multiplier=1.0, attention_in_multiplier=1.0, ssm_multipliers=None,
    ssm_in_multiplier=1.0, ssm_out_multiplier=1.0, attention_bias=False, mlp_bias=False,
)}
# fmt: on


def _multipliers(f: Any, key: str, n: int) -> list[float]:
    value = f.get(key)
    value = [1.0] * n if value is None else value
    if not isinstance(value, list | tuple) or len(value) != n:
        raise ValueError(f"HF config {key}={value!r}: expected a list of {n} numbers")
    return [float(v) for v in value]


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer, mixer and multiplier fields of a Falcon-H1 config; `f` is
    hf_config._Fields."""
    from configs.hf_granite import mamba2_fields

    for key in ("attention_bias", "mlp_bias", "mamba_proj_bias", "projectors_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}=True: biases are not supported for {FALCON_H1}")
    if f.get("hidden_act") not in ("silu", "swish"):
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    gated_norm = bool(f.get("mamba_rms_norm"))
    if gated_norm and f.get("mamba_norm_before_gate"):
        raise ValueError(
            "HF config mamba_norm_before_gate=True: with mamba_rms_norm, only the norm after "
            "the gate (false) is supported"
        )
    layers, hidden = f.required("num_hidden_layers"), f.required("hidden_size")
    heads = f.required("num_attention_heads")
    inner = f.get("mamba_d_ssm") or f.required("mamba_expand") * hidden
    gate, down = _multipliers(f, "mlp_multipliers", 2)
    z, x, b, c, dt = _multipliers(f, "ssm_multipliers", 5)
    ssm_in, attn_in = float(f.get("ssm_in_multiplier")), float(f.get("attention_in_multiplier"))
    scales = {
        ("attn", "wq"): attn_in,
        ("attn", "wk"): attn_in * float(f.get("key_multiplier")),
        ("attn", "wv"): attn_in,
        ("attn", "wo"): float(f.get("attention_out_multiplier")),
        # (in_proj's rows: z -> wz, x -> wv, B -> wk, C -> wq, dt -> wa)
        ("linear", "wz"): ssm_in * z,
        ("linear", "wv"): ssm_in * x,
        ("linear", "wk"): ssm_in * b,
        ("linear", "wq"): ssm_in * c,
        ("linear", "wa"): ssm_in * dt,
        ("linear", "wo"): float(f.get("ssm_out_multiplier")),
        ("mlp", "w_gate"): gate,
        ("mlp", "w_down"): down,
    }
    return dict(
        num_layers=2 * layers,
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.hf.get("head_dim") or hidden // heads,
        parallel_hybrid=True,
        no_ffn_layers=tuple(range(0, 2 * layers, 2)),
        **mamba2_fields(f, tuple(range(0, 2 * layers, 2)), 2 * layers, inner),
        mamba_gated_norm=gated_norm,
        embedding_multiplier=float(f.get("embedding_multiplier")),
        logit_scale=float(f.get("lm_head_multiplier")),
        load_scales=tuple((k, v) for k, v in scales.items() if v != 1.0),
    )
