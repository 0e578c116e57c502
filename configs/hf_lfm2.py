"""LiquidAI's LFM2-MoE and LFM2 HF configs (transformers' lfm2_moe: LFM2-8B-A1B, LFM2-24B-A2B;
lfm2, dense: LFM2-350M to LFM2-2.6B).

Its layers (`layer_types`): gated short convolutions ("conv": ModelConfig's
linear_attention_kind "short_conv", conv_L_cache taps, each sequence's last inputs a state
row) and GQA attention ("full_attention": q/k RMSNorms per head before RoPE, head_dim =
hidden / heads); before each block an RMSNorm (operator_norm / ffn_norm). Its feed-forward:
a SwiGLU MLP on the first num_dense_layers layers, then a sigmoid router whose choice adds
expert_bias (DeepSeek-V3's rule with one group; a plain top-k without use_expert_bias),
renormalized when norm_topk_prob, times routed_scaling_factor. Embeddings tied by default
(`tie_embedding`, the releases' spelling, read where tie_word_embeddings is absent; the two
differing is refused); the final norm is `embedding_norm`.

LFM2 (dense): the same layers with a SwiGLU MLP on every layer, whose width transformers'
Lfm2MLP derives from intermediate_size (`block_ff_dim`, the releases' spelling, wins):
with block_auto_adjust_ff_dim, 2/3 of it, times block_ffn_dim_multiplier, rounded up to a
multiple of block_multiple_of; every layer attention where neither layer_types nor
full_attn_idxs says otherwise."""

from __future__ import annotations

from typing import Any

from configs.hf_gemma4 import gemma4_rope

LFM2_MOE, LFM2, LFM3 = "lfm2_moe", "lfm2", "lfm3"
TYPES = (LFM2_MOE, LFM2, LFM3)

# Defaults of transformers 5.25's Lfm2MoeConfig for the fields read.
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {LFM2_MOE: dict(
    vocab_size=65536, hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792,
    num_hidden_layers=32, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    rope_theta=1000000.0, max_position_embeddings=128000, rms_norm_eps=1e-5,
    num_attention_heads=32, num_key_value_heads=8, conv_bias=False, conv_L_cache=3,
    num_dense_layers=2, num_experts_per_tok=4, num_experts=32, use_expert_bias=True,
    routed_scaling_factor=1.0, norm_topk_prob=True, layer_types=None,
), LFM2: dict(
    vocab_size=65536, hidden_size=2560, intermediate_size=12288, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=128000,
    rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
    rope_theta=1000000.0, conv_bias=False, conv_L_cache=3, block_multiple_of=256,
    block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, full_attn_idxs=None,
    layer_types=None,
)}
# fmt: on
_NAMES = {"rms_norm_eps": ("norm_eps",), "tie_word_embeddings": ("tie_embedding",)}
# transformers 5.25's Lfm3Config.
DEFAULTS[LFM3] = dict(
    vocab_size=128000, hidden_size=2048, intermediate_size=7680, num_hidden_layers=24,
    num_attention_heads=16, num_key_value_heads=4, head_dim=128, bos_token_id=124894,
    eos_token_id=124900, conv_L_cache=7, sliding_window=256, layer_types=None,
    use_sandwich_norm=True, use_attention_gate=True, attention_bias=False, conv_bias=False,
    max_position_embeddings=128000, rms_norm_eps=1e-5, tie_word_embeddings=True,
    rope_parameters=dict(
        sliding_attention=dict(rope_type="default", rope_theta=10_000.0),
        full_attention=dict(
            rope_type="proportional", rope_theta=1_000_000.0, partial_rotary_factor=0.5
        ),
    ),
)  # fmt: skip
ALIASES = {LFM2_MOE: _NAMES, LFM2: _NAMES, LFM3: _NAMES}
_KINDS = ("conv", "full_attention", "sliding_attention")


def _layer_kinds(f: Any, num_layers: int, dense: bool, lfm3: bool = False) -> list[str]:
    """`layer_types`, else (LFM2's dense configs' spelling) `full_attn_idxs` (dense: all
    layers where neither is given, as transformers' Lfm2Config; LFM3: its pattern of four,
    conv, conv, full, conv, the first of each four from the second on windowed)."""
    kinds = f.get("layer_types")
    if kinds is None and lfm3:
        kinds = [
            _KINDS[1] if i % 4 == 2 else _KINDS[2] if i % 4 == 0 and i else _KINDS[0]
            for i in range(num_layers)
        ]
    idxs = f.hf.get("full_attn_idxs")
    if kinds is None and dense and idxs is None:
        idxs = list(range(num_layers))
    if kinds is None and isinstance(idxs, list):
        kinds = [_KINDS[1] if i in idxs else _KINDS[0] for i in range(num_layers)]
    if kinds is None:
        raise ValueError("HF config layer_types: required (conv / full_attention per layer)")
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    if _KINDS[2] in kinds and not lfm3:
        raise ValueError("HF config layer_types: sliding_attention is LFM3's (lfm3) only")
    if _KINDS[1] not in kinds:
        raise ValueError("HF config layer_types: needs a full_attention layer")
    return kinds


def _mlp_width(f: Any) -> int:
    """transformers' Lfm2MLP width (from block_ff_dim where the config has it, as
    Lfm2Config reads it)."""
    width = f.hf.get("block_ff_dim") or f.required("intermediate_size")
    if not f.get("block_auto_adjust_ff_dim"):
        return width
    width = int(2 * width / 3)
    multiplier = f.get("block_ffn_dim_multiplier")
    if multiplier is None:
        return width
    multiple = f.required("block_multiple_of")
    return multiple * ((int(multiplier * width) + multiple - 1) // multiple)


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer, attention and MoE (or MLP) fields of an LFM2-MoE (LFM2)
    config; `f` is hf_config._Fields."""
    if f.get("conv_bias"):
        raise ValueError(f"HF config conv_bias=True: not supported for {model_type}")
    tied = f.hf.get("tie_embedding")
    if tied is not None and "tie_word_embeddings" in f.hf and tied != f.hf["tie_word_embeddings"]:
        raise ValueError(
            f"HF config tie_embedding={tied!r} and tie_word_embeddings="
            f"{f.hf['tie_word_embeddings']!r} differ"
        )
    num_layers = f.required("num_hidden_layers")
    kinds = _layer_kinds(f, num_layers, model_type == LFM2, model_type == LFM3)
    heads = f.required("num_attention_heads")
    bias = bool(f.get("use_expert_bias"))
    layers = dict(
        num_kv_heads=f.required("num_key_value_heads"),
        head_dim=f.required("hidden_size") // heads,
        qk_norm=True,
        linear_attention_layers=tuple(i for i, k in enumerate(kinds) if k == _KINDS[0]),
        linear_attention_kind="short_conv",
        linear_conv_kernel=f.required("conv_L_cache"),
    )
    if model_type == LFM3:
        return dict(layers, **_lfm3_fields(f, kinds))
    if model_type == LFM2:
        return dict(layers, intermediate_size=_mlp_width(f))
    return dict(
        layers,
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        scoring_func="sigmoid",
        topk_method="noaux_tc" if bias else "greedy",
        norm_topk_prob=bool(f.get("norm_topk_prob")),
        routed_scaling_factor=float(f.required("routed_scaling_factor")),
        first_k_dense_replace=f.required("num_dense_layers"),
    )


def _lfm3_fields(f: Any, kinds: list[str]) -> dict:
    """LFM3's attention: head_dim as given, a sigmoid gate per head (use_attention_gate),
    windows on the sliding_attention layers, RoPE per layer kind (Gemma 4's reading: the
    global layers' proportional RoPE, the windowed ones' default at their own base), norms
    after each block too (use_sandwich_norm); a SwiGLU MLP intermediate_size wide."""
    if f.get("attention_bias"):
        raise ValueError("HF config attention_bias=True: not supported for lfm3")
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = _KINDS[2] in kinds and f.get("sliding_window") is not None
    if _KINDS[2] in kinds and not windowed:
        raise ValueError("HF config layer_types: sliding_attention layers need a sliding_window")
    _, _, rope = gemma4_rope(f)
    return dict(
        rope,
        head_dim=f.required("head_dim"),
        head_gate=bool(f.get("use_attention_gate")),
        sandwich_norms=bool(f.get("use_sandwich_norm")),
        sliding_window=f.get("sliding_window") if windowed else None,
        full_attention_layers=full if windowed else (),
        intermediate_size=f.required("intermediate_size"),
    )
