"""TII's Falcon HF config (transformers' falcon: Falcon-7B, -40B, -180B), read whole.

LayerNorms with biases; q, k and v from one projection (query_key_value) whose rows come per
KV head, its query heads' rows then its k and v rows: Falcon-40B / 180B's grouped layout
(new_decoder_architecture, num_kv_heads), Falcon-7B's one KV head (multi_query), or a KV
head per query head; RoPE over whole heads; an MLP without a gate (ffn_hidden_size, default
4 x hidden, the erf GELU); biases on every projection where `bias`. Attention and MLP side
by side: Falcon-40B / 180B's on two norms (ln_attn, ln_mlp; num_ln_in_parallel_attn 2, the
default) or one, Falcon-7B's (parallel_attn) on one (input_layernorm); or one after the other.
Tied embeddings by default; the model's tensors under transformer (models/release_names.py).
With alibi (Falcon-RW), no RoPE: ALiBi with BLOOM's slopes, which transformers rounds to
bfloat16 and adds divided by sqrt(head_dim) (ModelConfig.alibi_slopes holds them so; it
rounds each slope x position to bfloat16 too, exact at the fixture's positions, which the
engine adds in float32 instead). Refused with a ValueError naming the field: an activation
other than the erf GELU, ALiBi beside the new decoder architecture."""

from __future__ import annotations

import math
import struct
from typing import Any

from configs.hf_alibi import bloom_slopes

FALCON = "falcon"
TYPES = (FALCON,)
ALIASES = {FALCON: {"rms_norm_eps": ("layer_norm_epsilon",), "hidden_act": ("activation",)}}
# Defaults of transformers 5.25's FalconConfig for the fields read (Falcon-7B's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    FALCON: dict(
        vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
        num_kv_heads=None, max_position_embeddings=2048, rms_norm_eps=1e-5,
        tie_word_embeddings=True, alibi=False, new_decoder_architecture=False,
        multi_query=True, parallel_attn=True, bias=False, ffn_hidden_size=None,
        num_ln_in_parallel_attn=None, hidden_act="gelu", rope_theta=10000.0,
        bos_token_id=11, eos_token_id=11,
    )
}  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, norm, block and MLP fields of a Falcon config; `f` is
    hf_config._Fields."""
    if f.get("hidden_act") != "gelu":
        raise ValueError(f"HF config activation={f.get('hidden_act')!r}: only 'gelu' (erf)")
    hidden, heads = f.required("hidden_size"), f.required("num_attention_heads")
    new = bool(f.get("new_decoder_architecture"))
    if new:
        kv_heads = f.get("num_kv_heads") or heads
    else:
        kv_heads = 1 if f.get("multi_query") else heads
    if heads % kv_heads:
        raise ValueError(f"HF config num_kv_heads={kv_heads}: must divide {heads} heads")
    parallel = new or bool(f.get("parallel_attn"))
    norms = f.get("num_ln_in_parallel_attn") or 2 if new else 1
    if norms not in (1, 2):
        raise ValueError(f"HF config num_ln_in_parallel_attn={norms!r}: expected 1 or 2")
    biased = bool(f.get("bias"))
    alibi = {}
    if f.get("alibi"):  # (Falcon-RW)
        if new:
            raise ValueError("HF config alibi=True: not with new_decoder_architecture")
        alibi = dict(
            alibi_slopes=falcon_slopes(heads, hidden // heads),
            nope_layers=tuple(range(f.required("num_hidden_layers"))),
        )
    return dict(
        **alibi,
        num_kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate_size=f.get("ffn_hidden_size") or 4 * hidden,
        attention_bias=biased,
        o_proj_bias=biased,
        mlp_bias=biased,
        norm_kind="layer",
        norm_bias=True,
        parallel_block=parallel,
        parallel_norms=parallel and norms == 2,
        mlp_act="gelu_exact",
        sliding_window=None,
        full_attention_layers=(),
    )


def falcon_slopes(num_heads: int, head_dim: int) -> tuple[float, ...]:
    """BLOOM's slopes rounded to bfloat16 (to nearest, ties to even), divided by
    sqrt(head_dim), as transformers' FalconModel adds them."""
    out = []
    for slope in bloom_slopes(num_heads):  # (float32 values: their bits, rounded to 16)
        bits = struct.unpack("<I", struct.pack("<f", slope))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        out.append(struct.unpack("<f", struct.pack("<I", bits))[0] / math.sqrt(head_dim))
    return tuple(out)
