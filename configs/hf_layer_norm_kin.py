"""Three HF configs of Llama-like layers under LayerNorms with biases (transformers 5.25's
classes).

- stablelm (Stability's StableLM 2 1.6B / 12B, StableLM-3B-4E1T, Zephyr 3B): RoPE on the
  leading partial_rotary_factor of each head (0.25), biases on q, k, v (`use_qkv_bias`),
  a SwiGLU MLP; with `use_parallel_residual`, attention and MLP side by side on one normed
  input (ModelConfig.parallel_block).
- nemotron (NVIDIA's Nemotron-4 / Minitron / Mistral-NeMo-Minitron): LayerNorm1P (the norm
  times 1 + its weight, plus its bias: norm_zero_centered), RoPE on half of each head, an MLP
  without a gate, down(relu(up(x))^2).
- jais2 (Inception's Jais 2): Llama's attention with biases on q, k, v and o_proj, the same
  ReLU² MLP with biases on up and down, plain LayerNorms with biases.

Refused with a ValueError naming the field: q/k LayerNorms (qk_layernorm), biases the
params have no slot for (StableLM's and Nemotron's attention_bias, mlp_bias), another MLP
activation."""

from __future__ import annotations

from typing import Any

from configs.hf_rope import partial_rotary_factor

STABLELM, NEMOTRON, JAIS2 = "stablelm", "nemotron", "jais2"
TYPES = (STABLELM, NEMOTRON, JAIS2)
ALIASES: dict = {}
# Each class's LayerNorm epsilon (Jais2Config also carries LlamaConfig's unused rms_norm_eps).
_EPS = {STABLELM: "layer_norm_eps", NEMOTRON: "norm_eps", JAIS2: "layer_norm_eps"}
_ACT = {STABLELM: "silu", NEMOTRON: "relu2", JAIS2: "relu2"}
# Defaults of transformers 5.25's StableLmConfig and NemotronConfig for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    STABLELM: dict(
        vocab_size=50304, hidden_size=2560, intermediate_size=6912, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
        max_position_embeddings=4096, layer_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=0, use_qkv_bias=False, qk_layernorm=False,
        use_parallel_residual=False, partial_rotary_factor=0.25, rope_theta=10000.0,
    ),
    NEMOTRON: dict(
        vocab_size=256000, hidden_size=6144, intermediate_size=24576, num_hidden_layers=32,
        num_attention_heads=48, num_key_value_heads=None, head_dim=128, hidden_act="relu2",
        max_position_embeddings=4096, norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=2, eos_token_id=3, attention_bias=False, mlp_bias=False,
        partial_rotary_factor=0.5, rope_theta=10000.0,
    ),
    JAIS2: dict(
        vocab_size=150272, hidden_size=3328, intermediate_size=26624, num_hidden_layers=32,
        num_attention_heads=26, num_key_value_heads=None, head_dim=None, hidden_act="relu2",
        max_position_embeddings=8192, layer_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=150024, attention_bias=True, mlp_bias=True,
        rope_theta=10000.0,
    ),
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm and MLP fields; `f` is hf_config._Fields."""
    act = f.get("hidden_act")
    if act != _ACT[model_type]:
        raise ValueError(f"HF config hidden_act={act!r}: {model_type} takes {_ACT[model_type]!r}")
    jais2 = model_type == JAIS2
    for key in ("qk_layernorm",) + (() if jais2 else ("attention_bias", "mlp_bias")):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: not supported for {model_type}")
    heads = f.required("num_attention_heads")
    stablelm = model_type == STABLELM
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=(None if stablelm else f.get("head_dim")) or f.required("hidden_size") // heads,
        partial_rotary_factor=partial_rotary_factor(f, model_type),
        attention_bias=bool(
            f.get("use_qkv_bias") if stablelm else jais2 and f.get("attention_bias")
        ),
        o_proj_bias=jais2 and bool(f.get("attention_bias")),
        mlp_bias=jais2 and bool(f.get("mlp_bias")),
        parallel_block=stablelm and bool(f.get("use_parallel_residual")),
        rms_norm_eps=float(f.required(_EPS[model_type])),
        norm_kind="layer",
        norm_bias=True,
        norm_zero_centered=model_type == NEMOTRON,
        mlp_act="swiglu" if stablelm else "relu2",
        sliding_window=None,
        full_attention_layers=(),
    )
