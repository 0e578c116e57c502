"""Nine HF configs of Llama's layers, seven with a twist each (transformers 5.25's classes).

- ministral (Mistral's Ministral-8B-Instruct-2410): Mistral's attention with a window on the
  layers `layer_types` marks "sliding_attention" (all of them by default), head width
  hidden / heads unless head_dim is set.
- cwm (Meta's Code World Model, CWM 32B): Llama 3's layers and RoPE, an 8,192-key window on
  the "sliding_attention" layers (three of four by default).
- arcee (Arcee's AFM-4.5B): Llama's attention with a ReLU² MLP without a gate,
  down(relu(up(x))^2) (ModelConfig.mlp_act "relu2").
- exaone (LG's EXAONE 3.0 / 3.5): Llama itself under its release's field names (num_layers,
  layer_norm_epsilon, activation_function) and tensor names (transformer.h.*, attn.attention,
  c_fc_0 / c_fc_1 / c_proj: models/release_names.py), which transformers 5.25 saves too.
- helium (Kyutai's Helium-1): RoPE on interleaved pairs, every RMSNorm scaled in float32
  (its weight times the normed value, then cast).
- iquestcoder (IQuest-Coder): Llama itself (transformers builds a LlamaForCausalLM).
- internlm3 (Shanghai AI Lab's InternLM3-8B): Llama itself, its biases' switches named
  qkv_bias and bias.
- apertus (Swiss AI's Apertus 8B / 70B): q/k RMSNorms per head, an MLP without a gate whose
  activation is xIELU with two learned slopes per layer (ModelConfig.mlp_act "xielu"), the
  norms named attention_layernorm and feedforward_layernorm (models/release_names.py).
- apertus1p5_text (Apertus 1.5's language model): Apertus' with a vocabulary extended by
  visual and audio codes and the head pruned to the first output_vocab_size ids
  (ModelConfig.output_vocab_size: the other ids' logits -inf).

Refused with a ValueError naming the field: an MLP activation other than the family's,
biases (mlp_bias; attention_bias where the class has it), layer_types of other kinds."""

from __future__ import annotations

from typing import Any

MINISTRAL, CWM, ARCEE, EXAONE, HELIUM = "ministral", "cwm", "arcee", "exaone", "helium"
IQUEST, INTERNLM3, APERTUS = "iquestcoder", "internlm3", "apertus"
APERTUS1P5 = "apertus1p5_text"
TYPES = (MINISTRAL, CWM, ARCEE, EXAONE, HELIUM, IQUEST, INTERNLM3, APERTUS, APERTUS1P5)
ALIASES = {
    EXAONE: {
        "num_hidden_layers": ("num_layers",),
        "rms_norm_eps": ("layer_norm_epsilon",),
        "hidden_act": ("activation_function",),
    },
    INTERNLM3: {"attention_bias": ("qkv_bias",), "mlp_bias": ("bias",)},
}
_KINDS = ("sliding_attention", "full_attention")
_ACT = {MINISTRAL: "silu", CWM: "silu", ARCEE: "relu2", EXAONE: "silu", HELIUM: "silu"}
_ACT.update({IQUEST: "silu", INTERNLM3: "silu", APERTUS: "xielu", APERTUS1P5: "xielu"})
# Defaults of transformers 5.25's MinistralConfig, CwmConfig and ArceeConfig (fields read).
DEFAULTS: dict[str, dict[str, Any]] = {
    MINISTRAL: dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, sliding_window=4096, layer_types=None,
        rope_theta=10000.0,
    ),
    CWM: dict(
        vocab_size=128256, hidden_size=6144, intermediate_size=21504, num_hidden_layers=64,
        num_attention_heads=48, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=[128001, 128008, 128009], sliding_window=8192,
        layer_types=None, mlp_bias=False, rope_theta=1000000.0,
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 1000000.0, "factor": 16.0,
            "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    ARCEE: dict(
        vocab_size=32000, hidden_size=2560, intermediate_size=18432, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="relu2",
        max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=128001, attention_bias=False, mlp_bias=False,
        rope_theta=10000.0,
    ),
    EXAONE: dict(
        vocab_size=102400, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=361, attention_bias=False, mlp_bias=False,
        rope_theta=500000.0,
    ),
    HELIUM: dict(
        vocab_size=48000, hidden_size=2560, intermediate_size=7040, num_hidden_layers=24,
        num_attention_heads=20, num_key_value_heads=20, head_dim=128, hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=1e-8, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False,
        rope_theta=100000.0,
    ),
    IQUEST: dict(
        vocab_size=76800, hidden_size=5120, intermediate_size=27648, num_hidden_layers=80,
        num_attention_heads=40, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False,
        rope_theta=10000.0,
    ),
    INTERNLM3: dict(
        vocab_size=128512, hidden_size=4096, intermediate_size=10240, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=2, head_dim=128, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False,
        rope_theta=10000.0,
    ),
    APERTUS: dict(
        vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=None, hidden_act="xielu",
        max_position_embeddings=65536, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, attention_bias=False,
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0,
            "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    ),
}  # fmt: skip
# Apertus 1.5's text model: Apertus' with the vocabulary extended (visual and audio codes) and
# its head pruned to the first output_vocab_size ids (None: not pruned).
DEFAULTS[APERTUS1P5] = dict(DEFAULTS[APERTUS], vocab_size=266752, output_vocab_size=None)


def _layer_kinds(f: Any, model_type: str, num_layers: int) -> list[str]:
    kinds = f.get("layer_types") if model_type in (MINISTRAL, CWM) else None
    if kinds is None:  # (the classes': Ministral's every layer windowed, CWM's 3 of 4)
        if model_type == CWM:
            return [_KINDS[1] if i % 4 == 0 else _KINDS[0] for i in range(num_layers)]
        return [_KINDS[0] if model_type == MINISTRAL else _KINDS[1]] * num_layers
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return kinds


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window and MLP fields; `f` is hf_config._Fields."""
    act = f.get("hidden_act")
    if act != _ACT[model_type]:
        raise ValueError(f"HF config hidden_act={act!r}: {model_type} takes {_ACT[model_type]!r}")
    for key in ("mlp_bias", "attention_bias"):
        if f.get(key):
            raise ValueError(f"HF config {key}={f.get(key)!r}: biases are not supported here")
    num_layers = f.required("num_hidden_layers")
    heads = f.required("num_attention_heads")
    head_dim = f.get("head_dim") or f.required("hidden_size") // heads
    if model_type == HELIUM and heads * head_dim != f.required("hidden_size"):
        raise ValueError(
            f"HF config head_dim={head_dim}: Helium's o_proj takes hidden_size inputs "
            f"({heads} heads of it do not make hidden_size={f.required('hidden_size')})"
        )
    kinds = _layer_kinds(f, model_type, num_layers)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    window = f.get("sliding_window") if len(full) < num_layers else None
    if len(full) < num_layers and window is None:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        sliding_window=window,
        full_attention_layers=full if window is not None else (),
        mlp_act={ARCEE: "relu2", APERTUS: "xielu", APERTUS1P5: "xielu"}.get(model_type, "swiglu"),
        qk_norm=model_type in (APERTUS, APERTUS1P5),
        output_vocab_size=_output_vocab(f) if model_type == APERTUS1P5 else 0,
    )


def _output_vocab(f: Any) -> int:
    """Apertus 1.5's head rows: output_vocab_size (None, or vocab_size: all, 0 here)."""
    out, vocab = f.get("output_vocab_size"), f.required("vocab_size")
    if out is None or out == vocab:
        return 0
    if isinstance(out, bool) or not isinstance(out, int) or not 1 <= out <= vocab:
        raise ValueError(f"HF config output_vocab_size={out!r}: an int in [1, {vocab}], or null")
    return out
