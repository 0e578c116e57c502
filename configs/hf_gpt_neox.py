"""EleutherAI's GPT-NeoX HF config (transformers' gpt_neox: Pythia, GPT-NeoX-20B), read whole.

LayerNorms with biases; attention (every head its own KV head) whose q, k and v come from one
projection, its rows per head q | k | v (query_key_value, with a bias by attention_bias, as
its output projection `dense`), RoPE over the leading partial_rotary_factor of each head
(released configs: rotary_pct, default 0.25; rotary_emb_base); an MLP without a gate
(dense_h_to_4h, the erf GELU or its tanh form, dense_4h_to_h, both biased). With
use_parallel_residual (the default) attention and MLP side by side, each on its own norm of
the layer's input (ModelConfig.parallel_norms); else one after the other. The untied head is
embed_out, the model's tensors under gpt_neox. (models/release_names.py). Refused with a
ValueError naming the field: another activation."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import GELU_MLP_ACTS
from configs.hf_rope import partial_rotary_factor

GPT_NEOX = "gpt_neox"
TYPES = (GPT_NEOX,)
ALIASES = {
    GPT_NEOX: {
        "rms_norm_eps": ("layer_norm_eps",),
        "partial_rotary_factor": ("rotary_pct",),
        "rope_theta": ("rotary_emb_base",),
    }
}
# Defaults of transformers 5.25's GPTNeoXConfig for the fields read (GPT-NeoX-20B's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    GPT_NEOX: dict(
        vocab_size=50432, hidden_size=6144, intermediate_size=24576, num_hidden_layers=44,
        num_attention_heads=64, hidden_act="gelu", max_position_embeddings=2048,
        rms_norm_eps=1e-5, tie_word_embeddings=False, use_parallel_residual=True,
        attention_bias=True, partial_rotary_factor=0.25, rope_theta=10000.0,
        bos_token_id=0, eos_token_id=2,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm, block and MLP fields of a GPT-NeoX config; `f` is
    hf_config._Fields."""
    act = f.get("hidden_act")
    if act not in GELU_MLP_ACTS:
        raise ValueError(f"HF config hidden_act={act!r}: expected one of {sorted(GELU_MLP_ACTS)}")
    heads = f.required("num_attention_heads")
    parallel = bool(f.get("use_parallel_residual"))
    biased = bool(f.get("attention_bias"))
    return dict(
        num_kv_heads=heads,
        head_dim=f.required("hidden_size") // heads,
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        attention_bias=biased,
        o_proj_bias=biased,
        mlp_bias=True,
        norm_kind="layer",
        norm_bias=True,
        parallel_block=parallel,
        parallel_norms=parallel,
        mlp_act=GELU_MLP_ACTS[act],
        sliding_window=None,
        full_attention_layers=(),
    )
