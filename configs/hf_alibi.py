"""BigScience's BLOOM and MosaicML's MPT HF configs (transformers' bloom, mpt), read whole:
ALiBi models, no RoPE. ModelConfig.alibi_slopes holds each query head's slope as
transformers computes it (`bloom_slopes`, `mpt_slopes`; Falcon-RW's: configs/hf_falcon.py).

BLOOM: LayerNorms with biases (eps layer_norm_epsilon), one on the embeddings too
(ModelConfig.embed_norm: word_embeddings_layernorm); a KV head per query head, q, k and v
from one biased projection whose rows come per head q | k | v (query_key_value); an MLP
without a gate, 4 x hidden wide, the tanh GELU, biased; tied embeddings. Its config holds no
position limit: max_position_embeddings is 2,048, the length BLOOM was trained at.

MPT: LayerNorms with a weight and no bias; q, k and v from one projection (Wqkv: all q rows,
all k, all v), clamped to +-clip_qkv where set; no biases; an MLP without a gate,
4 x d_model wide (transformers' MptMLP, whatever expansion_ratio says: another is refused),
the erf GELU; the attention scale softmax_scale where set;
tied embeddings. transformers' MptModel builds its ALiBi from max_seq_len positions, so no
sequence may be longer (max_position_embeddings).

Refused with a ValueError naming the field: what transformers' classes do not build or
build otherwise than the release (BLOOM's apply_residual_connection_post_layernorm,
pretraining_tp's slow_but_exact slices; MPT without ALiBi, multi-query or prefix-LM
attention, q/k LayerNorms, a logit scale, an MLP other than 4 x d_model wide)."""

from __future__ import annotations

import math
import struct
from typing import Any

BLOOM = "bloom"
MPT = "mpt"
TYPES = (BLOOM, MPT)
ALIASES = {
    BLOOM: {
        "hidden_size": ("n_embed",),
        "num_hidden_layers": ("n_layer",),
        "num_attention_heads": ("n_head",),
        "rms_norm_eps": ("layer_norm_epsilon",),
    },
    MPT: {
        "hidden_size": ("d_model",),
        "num_hidden_layers": ("n_layers",),
        "num_attention_heads": ("n_heads",),
        "max_position_embeddings": ("max_seq_len",),
        "rms_norm_eps": ("layer_norm_epsilon",),
    },
}
# Defaults of transformers 5.25's BloomConfig and MptConfig for the fields read (MptConfig's
# attn_config: MptAttentionConfig's).
DEFAULTS: dict[str, dict[str, Any]] = {
    BLOOM: dict(
        vocab_size=250880, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
        rms_norm_eps=1e-5, max_position_embeddings=2048, tie_word_embeddings=True,
        apply_residual_connection_post_layernorm=False, pretraining_tp=1,
        slow_but_exact=False, bos_token_id=1, eos_token_id=2,
    ),
    MPT: dict(
        vocab_size=50368, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
        expansion_ratio=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
        logit_scale=None, tie_word_embeddings=True, attn_config=None,
        bos_token_id=None, eos_token_id=None,
    ),
}  # fmt: skip
MPT_ATTN_DEFAULTS = dict(
    attn_type="multihead_attention", clip_qkv=None, softmax_scale=None, prefix_lm=False,
    qk_ln=False, alibi=True, alibi_bias_max=8,
)  # fmt: skip


def bloom_slopes(num_heads: int) -> tuple[float, ...]:
    """BLOOM's (and Falcon-RW's) slopes, as transformers' _get_alibi_slopes: for the largest
    power of two n <= num_heads, b^i for i = 1 .. n with b = 2^(-8 / n); then, for the heads
    past n, the odd powers of 2^(-4 / n), i = 1, 3, ... (the slopes of 2n heads that n heads
    skip). Each base is rounded to float32 first, as there."""
    n = 2 ** math.floor(math.log2(num_heads))
    base, extra_base = _float32([2.0 ** (-8.0 / n), 2.0 ** (-4.0 / n)])
    slopes = [base**i for i in range(1, n + 1)]
    extra = [extra_base**i for i in range(1, 2 * min(n, num_heads - n), 2)]
    return _float32(slopes + extra)


def mpt_slopes(num_heads: int, bias_max: float) -> tuple[float, ...]:
    """MPT's slopes, as transformers' build_mpt_alibi_tensor: for the smallest power of two
    n >= num_heads, 2^(-bias_max i / n) for i = 1 .. n, then (n > num_heads) its odd-indexed
    ones before its even-indexed ones, the first num_heads of them."""
    n = 2 ** math.ceil(math.log2(num_heads))
    slopes = [2.0 ** (-i * (bias_max / n)) for i in range(1, n + 1)]
    if n != num_heads:
        slopes = (slopes[1::2] + slopes[::2])[:num_heads]
    return _float32(slopes)


def _float32(values: list[float]) -> tuple[float, ...]:
    """The values rounded to float32 (to nearest), as transformers holds them."""
    return tuple(struct.unpack("<f", struct.pack("<f", x))[0] for x in values)


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's position, attention, norm and MLP fields of a BLOOM or MPT config; `f`
    is hf_config._Fields."""
    return _bloom(f) if model_type == BLOOM else _mpt(f)


def _bloom(f: Any) -> dict:
    if f.get("apply_residual_connection_post_layernorm"):
        raise ValueError(
            "HF config apply_residual_connection_post_layernorm=True: residuals taken after "
            "the norms are not supported"
        )
    if f.get("pretraining_tp") != 1 and f.get("slow_but_exact"):
        raise ValueError(
            f"HF config slow_but_exact=True (pretraining_tp={f.get('pretraining_tp')}): "
            "the projections' sliced sums are not supported"
        )
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    return dict(
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=4 * hidden,
        alibi_slopes=bloom_slopes(heads),
        embed_norm=True,
        nope_layers=tuple(range(f.required("num_hidden_layers"))),
        attention_bias=True,
        o_proj_bias=True,
        mlp_bias=True,
        norm_kind="layer",
        norm_bias=True,
        mlp_act="gelu",
        sliding_window=None,
        full_attention_layers=(),
    )


def _mpt(f: Any) -> dict:
    attn = {**MPT_ATTN_DEFAULTS, **(f.get("attn_config") or {})}
    refusals = (
        ("alibi", True, "models without ALiBi (learned positions, which transformers does not "
         "build)"),
        ("attn_type", "multihead_attention", "another attention than multihead_attention"),
        ("prefix_lm", False, "prefix-LM attention"),
        ("qk_ln", False, "q/k LayerNorms"),
    )  # fmt: skip
    for key, want, what in refusals:
        if attn[key] != want:
            raise ValueError(f"HF config attn_config.{key}={attn[key]!r}: {what} not supported")
    if f.get("expansion_ratio") != 4:
        raise ValueError(
            f"HF config expansion_ratio={f.get('expansion_ratio')!r}: transformers' MptMLP is "
            "4 x d_model wide whatever it says; another is not supported"
        )
    if f.get("logit_scale") is not None:
        raise ValueError(f"HF config logit_scale={f.get('logit_scale')!r}: not supported")
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    scale = attn["softmax_scale"]
    return dict(
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=4 * hidden,
        alibi_slopes=mpt_slopes(heads, attn["alibi_bias_max"]),
        nope_layers=tuple(range(f.required("num_hidden_layers"))),
        clip_qkv=attn["clip_qkv"],
        attention_multiplier=float(scale) if scale else 0.0,
        norm_kind="layer",
        mlp_act="gelu_exact",
        sliding_window=None,
        full_attention_layers=(),
    )
