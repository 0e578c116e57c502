"""Attention-free state-space models' HF configs: transformers' mamba (Mamba-1: state-spaces'
mamba-130m-hf ... 2.8b-hf), falcon_mamba (TII's Falcon Mamba 7B) and mamba2 (Mamba-2,
Mistral's Mamba-Codestral 7B).

Every layer is one block: an RMSNorm, the mixer, the residual; no attention, no MLP
(ModelConfig: every layer in linear_attention_layers and no_ffn_layers, so the engine keeps
a state per sequence and no KV page: engine/kv_budget.py). Mamba-1's mixer is Jamba's
(linear_attention_kind "mamba1") without the RMSNorms of dt, B and C, or, Falcon Mamba's,
with them but without weights (eps mixer_rms_eps: linear_norm_eps; ModelConfig.mamba1_norms);
Mamba-2's is Nemotron-H's ("mamba2": the same names under "backbone."). No positions:
max_position_embeddings, which these configs do not have, is only the default max_model_len
(vLLM's 2,048 when a config names no length); a longer one may be asked for.

Refused with a ValueError naming the field: in_proj / out_proj biases (use_bias), another
activation, Mamba-2's heads not making expand x hidden_size."""

from __future__ import annotations

import math
from typing import Any

MAMBA, FALCON_MAMBA, MAMBA2 = "mamba", "falcon_mamba", "mamba2"
TYPES = (MAMBA, FALCON_MAMBA, MAMBA2)
_EPS = {"rms_norm_eps": ("layer_norm_epsilon",)}
ALIASES = {t: _EPS for t in TYPES}
# Defaults of transformers 5.25's MambaConfig, FalconMambaConfig and Mamba2Config for the
# fields read (layer_norm_epsilon as rms_norm_eps; max_position_embeddings: none of theirs,
# above).
# fmt: off
_MAMBA1 = dict(
    vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32,
    rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=0, expand=2, conv_kernel=4,
    use_bias=False, use_conv_bias=True, hidden_act="silu", time_step_rank="auto",
    tie_word_embeddings=True, max_position_embeddings=2048, residual_in_fp32=True,
)
DEFAULTS: dict[str, dict[str, Any]] = {
    MAMBA: _MAMBA1,
    FALCON_MAMBA: dict(_MAMBA1, mixer_rms_eps=1e-6),
    MAMBA2: dict(
        num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128,
        num_hidden_layers=64, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=2,
        expand=2, conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True,
        hidden_act="silu", time_step_limit=(0.0, math.inf), tie_word_embeddings=False,
        max_position_embeddings=2048, residual_in_fp32=True,
    ),
}
# fmt: on


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer and mixer fields of a Mamba, Falcon Mamba or Mamba-2 config; `f`
    is hf_config._Fields."""
    from configs.hf_nemotron_h import dt_limit

    if f.get("use_bias"):
        raise ValueError(f"HF config use_bias=True: in_proj / out_proj biases ({model_type})")
    if f.get("hidden_act") not in ("silu", "swish"):
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    num_layers, hidden = f.required("num_hidden_layers"), f.required("hidden_size")
    inner = f.required("expand") * hidden
    every = tuple(range(num_layers))
    common = dict(
        residual_in_float32=bool(f.get("residual_in_fp32")),
        num_heads=1,  # (no attention: the attention fields are unused)
        num_kv_heads=1,
        head_dim=hidden,
        intermediate_size=inner,
        linear_attention_layers=every,
        no_ffn_layers=every,
        linear_key_head_dim=f.required("state_size"),
        linear_conv_kernel=f.required("conv_kernel"),
        linear_conv_bias=bool(f.get("use_conv_bias")),
    )
    if model_type == MAMBA2:
        heads, head_dim = f.required("num_heads"), f.required("head_dim")
        if heads * head_dim != inner:
            raise ValueError(
                f"HF config num_heads={heads} x head_dim={head_dim}: must make expand x "
                f"hidden_size = {inner}"
            )
        return dict(
            common,
            linear_attention_kind="mamba2",
            linear_num_key_heads=f.required("n_groups"),
            linear_num_value_heads=heads,
            linear_value_head_dim=head_dim,
            mamba_dt_limit=dt_limit(f.get("time_step_limit")),
        )
    rank = f.get("time_step_rank")
    rank = math.ceil(hidden / 16) if rank == "auto" else int(rank)
    return dict(
        common,
        linear_attention_kind="mamba1",
        linear_num_key_heads=1,
        linear_num_value_heads=inner,
        linear_value_head_dim=1,
        mamba_dt_rank=rank,
        linear_norm_eps=float(f.get("mixer_rms_eps") or 0.0),
    )
