"""EleutherAI's GPT-J HF config (transformers' gptj: GPT-J-6B), read whole, under its GPT-2
field names (n_embd, n_layer, n_head, n_positions, n_inner, activation_function,
layer_norm_epsilon).

Attention and MLP side by side on one LayerNorm (with a bias) of the layer's input
(ModelConfig.parallel_block); RoPE on interleaved pairs of each head's leading rotary_dim
channels at base 1e4; no attention biases; an MLP without a gate (fc_in, the tanh GELU,
fc_out, biased; n_inner wide, default 4 x n_embd); lm_head with a bias. Its tensors under
transformer (models/release_names.py). Refused with a ValueError naming the field: another
activation, a rotary_dim that is not an even number of a head's channels.

Salesforce's CodeGen (codegen: 350M ... 16B, mono / multi / nl) is GPT-J's model with q, k
and v from one projection without a bias (qkv_proj), its rows in CODEGEN_MP_NUM = 4 groups
as its training's model-parallel shards left them, each group a quarter of q's channels,
then a quarter of v's, then of k's (models/checkpoint_names.py); hidden_size must divide by
4."""

from __future__ import annotations

from typing import Any

from configs.hf_gpt_bigcode import GPT2_FIELD_NAMES
from configs.hf_heads import GELU_TANH

GPTJ, CODEGEN = "gptj", "codegen"
TYPES = (GPTJ, CODEGEN)
ALIASES = {GPTJ: GPT2_FIELD_NAMES, CODEGEN: GPT2_FIELD_NAMES}
CODEGEN_MP_NUM = 4  # (transformers' CodeGenAttention.mp_num)
# Defaults of transformers 5.25's GPTJConfig for the fields read (GPT-J-6B's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    GPTJ: dict(
        vocab_size=50400, hidden_size=4096, num_hidden_layers=28, num_attention_heads=16,
        max_position_embeddings=2048, intermediate_size=None, rotary_dim=64,
        hidden_act="gelu_new", rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0,
        bos_token_id=50256, eos_token_id=50256,
    )
}  # fmt: skip
# transformers 5.25's CodeGenConfig: GPT-J's defaults (CodeGen-6B's shapes but its 33 layers).
DEFAULTS[CODEGEN] = DEFAULTS[GPTJ]


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm, block and MLP fields of a GPT-J or CodeGen config; `f`
    is hf_config._Fields."""
    act = f.get("hidden_act")
    if act not in GELU_TANH:
        raise ValueError(f"HF config activation_function={act!r}: only the tanh GELU")
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    head_dim = hidden // heads
    if model_type == CODEGEN and hidden % CODEGEN_MP_NUM:
        raise ValueError(
            f"HF config n_embd={hidden}: CodeGen's qkv_proj comes in {CODEGEN_MP_NUM} groups; "
            f"it must divide by {CODEGEN_MP_NUM}"
        )
    rotary = f.get("rotary_dim") or head_dim
    if isinstance(rotary, bool) or not isinstance(rotary, int) or not 2 <= rotary <= head_dim:
        raise ValueError(f"HF config rotary_dim={rotary!r}: an int in [2, head_dim={head_dim}]")
    if rotary % 2:
        raise ValueError(f"HF config rotary_dim={rotary}: must be even (pairs rotate)")
    return dict(
        num_kv_heads=heads,
        head_dim=head_dim,
        intermediate_size=f.get("intermediate_size") or 4 * hidden,
        partial_rotary_factor=rotary / head_dim,
        mlp_bias=True,
        lm_head_bias=True,
        norm_kind="layer",
        norm_bias=True,
        parallel_block=True,
        mlp_act="gelu",
        sliding_window=None,
        full_attention_layers=(),
    )
