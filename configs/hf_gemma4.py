"""Google's Gemma 4 HF config (transformers' gemma4_text, the language model of gemma4): five
windowed layers to one full-attention layer ("layer_types"), the full ones with their own
head width and KV heads (`global_head_dim`, `num_global_key_value_heads`, or as
transformers saves them, `per_layer_config`), their values the key projection's
(`attention_k_eq_v`); q/k RMSNorms, values RMS-normed without a weight, attention scale 1;
the windowed layers' default RoPE and the full ones' proportional RoPE (rope_parameters per
layer type); norms after each block; a GeGLU (tanh) MLP, and with `enable_moe_block` beside
it on every layer a softmax top-k router over the RMS-normed token (renormalized, times a
learned per-expert scale) and GeGLU experts; a learned scalar on each layer's output; the
embeddings times sqrt(hidden_size); logits soft-capped.

The small models (E2B, E4B): per-layer embeddings (hidden_size_per_layer_input > 0:
ModelConfig.per_layer_input_dim), the last num_kv_shared_layers layers reading the last
earlier layer of their kind's K and V (kv_source_layers), their MLPs twice as wide with
use_double_wide_mlp (layer_intermediate_sizes).

Served: Gemma 4 26B-A4B (MoE), 31B (dense), E2B and E4B. Refused with a ValueError naming
the field: bidirectional attention, attention biases."""

from __future__ import annotations

import math
from typing import Any

from configs.model_config import RopeScaling

GEMMA4 = "gemma4_text"
_KINDS = ("sliding_attention", "full_attention")

# Defaults of transformers 5.25's Gemma4TextConfig for the fields read (global_head_dim and
# num_global_key_value_heads are __post_init__ keywords, not attributes).
# fmt: off
GEMMA4_DEFAULTS: dict[str, dict[str, Any]] = {GEMMA4: dict(
    vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072, rms_norm_eps=1e-6,
    bos_token_id=2, eos_token_id=1, tie_word_embeddings=True, attention_bias=False,
    sliding_window=512, layer_types=None, final_logit_softcapping=None,
    use_bidirectional_attention=None, hidden_size_per_layer_input=256,
    attention_k_eq_v=False, num_kv_shared_layers=0, enable_moe_block=False, num_experts=None,
    top_k_experts=None, moe_intermediate_size=None, global_head_dim=512,
    num_global_key_value_heads=None, vocab_size_per_layer_input=262144,
    use_double_wide_mlp=False,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {
            "rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6,
        },
    },
)}
# fmt: on


GEMMA4_UNIFIED = "gemma4_unified_text"
# transformers 5.25's Gemma4UnifiedTextConfig (the language model of gemma4_unified): Gemma 4's
# text config whose per-layer inputs and experts are gone (their fields raise), with a
# 1,024-key window and 262,144 positions by default; its layers Gemma 4's dense ones.
_UNIFIED = dict(
    GEMMA4_DEFAULTS[GEMMA4], sliding_window=1024, max_position_embeddings=262144,
    use_bidirectional_attention="vision",
)  # fmt: skip


def as_gemma4(hf: dict) -> dict:
    """A gemma4_unified_text config as the gemma4_text one it is (its class's defaults
    filled in, no per-layer inputs, no experts); other configs as they are."""
    if hf.get("model_type") != GEMMA4_UNIFIED:
        return hf
    return {**_UNIFIED, **hf, "model_type": GEMMA4, "hidden_size_per_layer_input": 0}


def _layer_kinds(f: Any, num_layers: int) -> list[str]:
    kinds = f.get("layer_types")
    if kinds is None:  # transformers: five windowed layers, then a full one
        kinds = [_KINDS[0] if (i + 1) % 6 else _KINDS[1] for i in range(num_layers)]
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    return [*kinds[:-1], _KINDS[1]]  # (transformers makes the last layer full, warning)


def _global_geometry(f: Any, kinds: list[str], kv_heads: int) -> tuple[int, int]:
    """(head width, KV heads) of the full-attention layers."""
    per_layer = f.hf.get("per_layer_config")
    if per_layer is None:
        heads = f.get("num_global_key_value_heads") if f.get("attention_k_eq_v") else None
        return int(f.required("global_head_dim")), int(heads or kv_heads)
    if not isinstance(per_layer, dict):
        raise ValueError(f"HF config per_layer_config={per_layer!r}: expected a JSON object")
    full = [i for i, k in enumerate(kinds) if k == _KINDS[1]]
    found = {int(i): v for i, v in per_layer.items()}
    if sorted(found) != full or any(
        set(v) - {"head_dim", "num_key_value_heads"} for v in found.values()
    ):
        raise ValueError(
            "HF config per_layer_config: only head_dim / num_key_value_heads of each "
            f"full_attention layer ({full}) are supported (found {per_layer})"
        )
    shapes = {
        (v.get("head_dim", f.get("head_dim")), v.get("num_key_value_heads", kv_heads))
        for v in found.values()
    }
    if len(shapes) != 1:
        raise ValueError(f"HF config per_layer_config: full_attention layers differ ({shapes})")
    head_dim, heads = shapes.pop()
    return int(head_dim), int(heads)


def kv_sources(kinds: list[str], shared: Any) -> list[int]:
    """Each layer's KV source (transformers' kv_sharing_modes): the last `shared`
    (num_kv_shared_layers) layers read the last earlier layer of their kind's K and V; the
    others their own. ValueError naming the field where no such layer exists."""
    n, shared = len(kinds), shared or 0
    if not isinstance(shared, int) or not 0 <= shared < n:
        raise ValueError(f"HF config num_kv_shared_layers={shared!r}: must be in [0, {n})")
    first = n - shared
    sources = list(range(n))
    for i in range(first, n):
        earlier = [j for j in range(first) if kinds[j] == kinds[i]]
        if not earlier:
            raise ValueError(
                f"HF config num_kv_shared_layers={shared}: layer {i} ({kinds[i]}) has no "
                "earlier layer of its kind to read K and V from"
            )
        sources[i] = earlier[-1]
    return sources


def gemma4_rope(f: Any) -> tuple[float, RopeScaling, dict]:
    """(rope_theta, RopeScaling, fields) of the full layers' proportional RoPE, with the
    windowed layers' base and the rotated fraction as ModelConfig fields."""
    params = f.get("rope_parameters") or {}
    full, sliding = params.get(_KINDS[1]) or {}, params.get(_KINDS[0]) or {}
    kinds = (full.get("rope_type", "default"), sliding.get("rope_type", "default"))
    if kinds[0] not in ("default", "proportional") or kinds[1] != "default":
        raise ValueError(
            f"HF config rope_parameters: rope_type {kinds[0]!r} (full_attention) and "
            f"{kinds[1]!r} (sliding_attention) not supported (proportional / default, default)"
        )
    factor = float(full.get("partial_rotary_factor", 1.0))
    fields = dict(
        sliding_rope_theta=float(sliding.get("rope_theta", 10_000.0)),
        rope_proportional=True,
        partial_rotary_factor=factor,
    )
    scaling = RopeScaling(factor=float(full.get("factor", 1.0)))
    return float(full.get("rope_theta", 10_000.0)), scaling, fields


def gemma4_fields(f: Any) -> dict:
    """ModelConfig's attention, window and feed-forward fields of a Gemma 4 text config;
    `f` is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError("HF config attention_bias=True: attention biases not supported")
    if f.get("use_bidirectional_attention") == "all":
        raise ValueError("HF config use_bidirectional_attention='all': only causal attention")
    if f.get("hidden_activation") != "gelu_pytorch_tanh":
        raise ValueError(
            f"HF config hidden_activation={f.get('hidden_activation')!r}: only "
            "'gelu_pytorch_tanh' (GeGLU) is supported"
        )
    num_layers = f.required("num_hidden_layers")
    kinds = _layer_kinds(f, num_layers)
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < num_layers
    kv_heads = f.required("num_key_value_heads")
    global_dim, global_heads = _global_geometry(f, kinds, kv_heads)
    moe = bool(f.get("enable_moe_block"))
    _, _, rope = gemma4_rope(f)
    sources = kv_sources(kinds, f.get("num_kv_shared_layers"))
    width = f.required("intermediate_size")
    wide = [2 * width if s != i else width for i, s in enumerate(sources)]
    per_layer = int(f.get("hidden_size_per_layer_input") or 0)
    return dict(
        kv_source_layers=tuple(sources) if sources != list(range(num_layers)) else (),
        layer_intermediate_sizes=tuple(wide) if f.get("use_double_wide_mlp") else (),
        per_layer_input_dim=per_layer,
        # (a larger table's rows past the vocabulary are never looked up: not read)
        per_layer_vocab_size=min(f.get("vocab_size_per_layer_input"), f.required("vocab_size"))
        if per_layer
        else 0,
        num_kv_heads=kv_heads,
        head_dim=f.required("head_dim"),
        global_head_dim=global_dim,
        global_num_kv_heads=global_heads,
        attention_k_eq_v=bool(f.get("attention_k_eq_v")),
        qk_norm=True,
        v_norm=True,
        attention_multiplier=1.0,
        sandwich_norms=True,
        layer_scalars=True,
        sliding_window=f.required("sliding_window") if windowed else None,
        full_attention_layers=full if windowed else (),
        **rope,
        mlp_act="geglu",
        expert_act="geglu",
        embedding_multiplier=math.sqrt(f.required("hidden_size")),
        final_logit_softcapping=float(f.get("final_logit_softcapping") or 0.0),
        num_experts=f.required("num_experts") if moe else 0,
        num_experts_per_tok=f.required("top_k_experts") if moe else 0,
        moe_intermediate_size=f.required("moe_intermediate_size") if moe else 0,
        norm_topk_prob=True,
        dense_beside_moe=moe,
    )
