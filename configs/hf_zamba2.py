"""Zyphra's Zamba2 HF config (transformers' zamba2: Zamba2 1.2B / 2.7B / 7B), read whole.

Mamba-2 layers (ModelConfig's linear_attention_kind "mamba2": n_mamba_heads heads of
mamba_expand x hidden_size / n_mamba_heads channels, mamba_ngroups groups of B and C,
mamba_d_state, a conv of mamba_d_conv taps, dt at least time_step_min, the gated norm per
group), the "hybrid" ones of layers_block_type (legacy "mamba" / "hybrid") each run first
by one of num_mem_blocks shared transformer blocks in turn (models/zamba2.py): attention over
[x, embeddings] (MHA, heads 2 x hidden_size / num_attention_heads wide, scaled by
(head_width / 2)^-0.5, RoPE with use_mem_rope), an MLP of hidden_act ("gelu": the erf one),
each run with adapters of adapter_rank (use_shared_attention_adapter: on q / k / v too).
Here a hybrid layer is two layers: the block's run (attention, its KV pages), then the mixer.
Refused with a ValueError naming the field: biases (add_bias_linear), use_long_context (its
rescaled RoPE), another norm epsilon than the mixers' fixed 1e-5, GQA with attention
adapters, a model without hybrid layers."""

from __future__ import annotations

import math
from typing import Any

ZAMBA2 = "zamba2"
TYPES, ALIASES = (ZAMBA2,), {}
_LEGACY = {"mamba": "linear_attention"}
_ACTS = {"gelu": "gelu_exact", "gelu_pytorch_tanh": "geglu", "silu": "swiglu"}
# transformers 5.25's Zamba2Config's layer pattern (54 layers) when layers_block_type is null.
_DEFAULT_KINDS = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)
# Defaults of transformers 5.25's Zamba2Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    ZAMBA2: dict(
        vocab_size=32000, max_position_embeddings=4096, hidden_size=2560, num_hidden_layers=54,
        layers_block_type=None, mamba_d_state=64, mamba_d_conv=4, mamba_expand=2,
        mamba_ngroups=1, time_step_min=0.001, n_mamba_heads=8, use_conv_bias=True,
        add_bias_linear=False, intermediate_size=None, hidden_act="gelu",
        num_attention_heads=32, num_key_value_heads=None, num_mem_blocks=1,
        use_shared_attention_adapter=False, adapter_rank=128, use_mem_rope=False,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, use_long_context=False,
        tie_word_embeddings=True, rope_theta=10000.0,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer, mixer, attention and shared-block fields of a Zamba2 config (its
    num_layers: the mixers plus one per hybrid layer); `f` is hf_config._Fields."""
    for key in ("add_bias_linear", "use_long_context"):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: not supported (only false)")
    if f.get("rms_norm_eps") != 1e-5:
        raise ValueError(
            f"HF config rms_norm_eps={f.get('rms_norm_eps')!r}: only 1e-5 (the Mamba-2 mixers' "
            "gated norms take 1e-5 whatever it says)"
        )
    act = f.get("hidden_act")
    if act not in _ACTS:
        raise ValueError(f"HF config hidden_act={act!r}: expected one of {tuple(_ACTS)}")
    n = f.required("num_hidden_layers")
    kinds = f.get("layers_block_type") or _DEFAULT_KINDS
    kinds = [_LEGACY.get(k, k) for k in kinds] if isinstance(kinds, list) else kinds
    if (
        not isinstance(kinds, list)
        or len(kinds) != n
        or set(kinds) - {"linear_attention", "hybrid"}
    ):
        raise ValueError(
            f"HF config layers_block_type: expected {n} entries of 'mamba' / 'linear_attention' "
            "and 'hybrid'"
        )
    if "hybrid" not in kinds:
        raise ValueError("HF config layers_block_type: no 'hybrid' layer (Mamba-2 alone)")
    layers: list[str] = []  # ("attention": a shared block's run, then its layer's mixer)
    for kind in kinds:
        layers += ["attention", "mamba"] if kind == "hybrid" else ["mamba"]
    d, heads = f.required("hidden_size"), f.required("num_attention_heads")
    kv_heads = f.get("num_key_value_heads") or heads
    adapters = bool(f.get("use_shared_attention_adapter"))
    if adapters and kv_heads != heads:
        raise ValueError(
            f"HF config num_key_value_heads={kv_heads}: attention adapters need one KV head "
            f"per query head ({heads})"
        )
    head_dim = 2 * d // heads
    inner = int(f.required("mamba_expand") * d)
    mamba_heads = f.required("n_mamba_heads")
    attention = tuple(i for i, k in enumerate(layers) if k == "attention")
    return dict(
        num_layers=len(layers),
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        attention_multiplier=(head_dim / 2) ** -0.5,
        nope_layers=() if f.get("use_mem_rope") else attention,
        intermediate_size=f.get("intermediate_size") or 4 * d,
        mlp_act=_ACTS[act],
        shared_blocks=f.required("num_mem_blocks"),
        adapter_rank=f.required("adapter_rank"),
        attention_adapters=adapters,
        linear_attention_layers=tuple(i for i, k in enumerate(layers) if k == "mamba"),
        linear_attention_kind="mamba2",
        linear_num_key_heads=f.required("mamba_ngroups"),
        linear_num_value_heads=mamba_heads,
        linear_key_head_dim=f.required("mamba_d_state"),
        linear_value_head_dim=inner // mamba_heads,
        linear_conv_kernel=f.required("mamba_d_conv"),
        linear_conv_bias=bool(f.get("use_conv_bias")),
        mamba_dt_limit=(float(f.required("time_step_min")), math.inf),
        sliding_window=None,
        full_attention_layers=(),
    )
