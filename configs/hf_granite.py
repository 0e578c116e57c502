"""IBM Granite 4.0's hybrid HF config (transformers' granitemoehybrid: Granite-4.0-H-Small,
-H-Tiny, -H-Micro): Mamba-2 layers (ModelConfig's linear_attention_kind "mamba2", as
Nemotron-H's) and attention layers, RoPE on them only with position_embedding_type "rope"
(the H releases: "nope"), each followed by a SwiGLU shared MLP and, with experts, a
softmax-over-the-top-k router's SwiGLU experts beside it; the embeddings, each block's
output, the attention scores and the logits scaled by the config's multipliers.

`layer_types` names each layer "mamba" / "attention" (the releases) or, as transformers 5
saves them, "linear_attention" / "full_attention".

Granite 3's MoE models (transformers' granitemoe: granite-3.1-3b-a800m, -1b-a400m, PowerMoE)
and granitemoeshared are the same blocks without Mamba: every layer attention with RoPE,
then the experts (granitemoeshared: beside a shared MLP where shared_intermediate_size > 0),
under the same multipliers and checkpoint names.

Granite 3's dense models (transformers' granite: granite-3.x-2b / 8b) are Llama's layers
under the same multipliers, Llama's names.

The SWA models (granite_swa, dense; granitemoe_swa, granitemoeshared's MoE) add a learnable
sink per head on every layer (gpt-oss's) and sliding windows on the "sliding_attention"
layers (`layer_types`, else every fourth layer from 0 global), and take a RoPE base per
layer (`layer_rope_theta`, 0 for none): one for the global layers and one for the windowed
ones at most (rope scaling with two bases is refused). granite_swa's MLP is Llama's, under
its names."""

from __future__ import annotations

import math
from typing import Any

from configs.hf_nemotron_h import dt_limit

GRANITE = "granitemoehybrid"
GRANITE_MOE, GRANITE_MOE_SHARED = "granitemoe", "granitemoeshared"
GRANITE_SWA, GRANITE_MOE_SWA, GRANITE_DENSE = "granite_swa", "granitemoe_swa", "granite"
# Granite's attention-only families (every layer attention, then experts or an MLP).
GRANITE_ATTN_TYPES = (GRANITE_MOE, GRANITE_MOE_SHARED, GRANITE_SWA, GRANITE_MOE_SWA, GRANITE_DENSE)

_KINDS = {"mamba": "linear_attention", "attention": "full_attention"}

# Defaults of transformers 5.25's GraniteMoeHybridConfig for the fields read.
# fmt: off
GRANITE_DEFAULTS: dict[str, dict[str, Any]] = {GRANITE: dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
    max_position_embeddings=2048, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
    tie_word_embeddings=False, embedding_multiplier=1.0, logits_scaling=1.0,
    residual_multiplier=1.0, attention_multiplier=1.0, num_local_experts=8,
    num_experts_per_tok=2, shared_intermediate_size=1024, position_embedding_type=None,
    layer_types=None, mamba_n_heads=128, mamba_n_groups=1, mamba_d_state=256,
    mamba_d_head="auto", mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True,
    time_step_limit=(0.0, math.inf),
)}
# transformers 5.25's GraniteMoeConfig and GraniteMoeSharedConfig (its one more field).
GRANITE_DEFAULTS[GRANITE_MOE] = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
    max_position_embeddings=2048, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
    tie_word_embeddings=False, embedding_multiplier=1.0, logits_scaling=1.0,
    residual_multiplier=1.0, attention_multiplier=1.0, num_local_experts=8,
    num_experts_per_tok=2,
)
GRANITE_DEFAULTS[GRANITE_MOE_SHARED] = dict(
    GRANITE_DEFAULTS[GRANITE_MOE], shared_intermediate_size=0
)
# transformers 5.25's GraniteMoeSWAConfig and GraniteSWAConfig.
_SWA = dict(sliding_window=128, layer_types=None, layer_rope_theta=None)
GRANITE_DEFAULTS[GRANITE_MOE_SWA] = dict(GRANITE_DEFAULTS[GRANITE_MOE_SHARED], **_SWA)
# transformers 5.25's GraniteConfig (Granite 3's dense models: Llama's layers, the multipliers).
GRANITE_DEFAULTS[GRANITE_DENSE] = dict(
    GRANITE_DEFAULTS[GRANITE_MOE], num_key_value_heads=32, mlp_bias=False
)
GRANITE_DEFAULTS[GRANITE_SWA] = dict(
    _SWA, vocab_size=100352, hidden_size=2560, intermediate_size=8192, num_hidden_layers=24,
    num_attention_heads=20, num_key_value_heads=4, hidden_act="silu",
    max_position_embeddings=8192, rms_norm_eps=1e-5, bos_token_id=100257,
    eos_token_id=100257, tie_word_embeddings=True, embedding_multiplier=1.0,
    logits_scaling=1.0, residual_multiplier=1.0, attention_multiplier=1.0, mlp_bias=False,
)
# fmt: on


def granite_fields(f: Any, model_type: str) -> dict:
    """ModelConfig's fields of a Granite config; `f` is hf_config._Fields."""
    if model_type == GRANITE:
        return _hybrid_fields(f)
    if model_type in (GRANITE_SWA, GRANITE_DENSE):
        if f.get("mlp_bias"):
            raise ValueError(f"HF config mlp_bias=True: not supported for {model_type}")
        heads = f.required("num_attention_heads")
        out = dict(
            num_kv_heads=f.get("num_key_value_heads") or heads,
            head_dim=f.required("hidden_size") // heads,
            **_multipliers(f),
        )
    else:
        out = _moe_fields(f, model_type)
    return dict(out, **_swa_fields(f)) if model_type in (GRANITE_SWA, GRANITE_MOE_SWA) else out


def _swa_fields(f: Any) -> dict:
    """The SWA models' layer kinds, sinks and RoPE bases (rope_theta: the global layers')."""
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    if kinds is None:
        kinds = ["sliding_attention" if i % 4 else "full_attention" for i in range(num_layers)]
    allowed = ("full_attention", "sliding_attention")
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(allowed):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {allowed}")
    thetas = f.get("layer_rope_theta")
    if thetas is not None and (
        not isinstance(thetas, list)
        or len(thetas) != num_layers
        or any(isinstance(t, bool) or not isinstance(t, int | float) or t < 0 for t in thetas)
    ):
        raise ValueError(f"HF config layer_rope_theta: expected {num_layers} numbers >= 0")
    out: dict = dict(attention_sinks=True)
    if thetas is not None:
        bases = [{t for t, k in zip(thetas, kinds, strict=True) if t and k == a} for a in allowed]
        if any(len(b) > 1 for b in bases):
            raise ValueError(
                f"HF config layer_rope_theta={thetas}: one base for the global layers and one "
                "for the windowed ones at most"
            )
        (full,), (windowed,) = (b or {0.0} for b in bases)
        rope = f.hf.get("rope_parameters") or f.hf.get("rope_scaling") or {}
        if full and windowed and full != windowed and rope.get("rope_type", "default") != "default":
            raise ValueError("HF config layer_rope_theta: two bases with rope scaling")
        out.update(
            nope_layers=tuple(i for i, t in enumerate(thetas) if not t),
            **({"rope_theta": float(full or windowed)} if full or windowed else {}),
            sliding_rope_theta=float(windowed) if full and windowed != full else 0.0,
        )
    window = f.get("sliding_window")
    if window is None or "sliding_attention" not in kinds:
        return dict(out, sliding_window=None, full_attention_layers=())
    full_layers = tuple(i for i, k in enumerate(kinds) if k == "full_attention")
    return dict(out, sliding_window=window, full_attention_layers=full_layers)


def _moe_fields(f: Any, model_type: str) -> dict:
    """Granite 3's MoE models (granitemoe, granitemoeshared); their attention_bias (o_proj's
    too) and activation are refused where every family's are (hf_config._refuse_unsupported)."""
    experts = f.get("num_local_experts")
    if not isinstance(experts, int) or isinstance(experts, bool) or experts < 1:
        raise ValueError(
            f"HF config num_local_experts={experts!r}: {model_type} needs >= 1 (every layer "
            "is a MoE layer)"
        )
    shared = f.get("shared_intermediate_size") if model_type != GRANITE_MOE else 0
    shared = 0 if shared is None else shared
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise ValueError(f"HF config shared_intermediate_size={shared!r}: must be an int >= 0")
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        num_experts=experts,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        scoring_func="softmax_topk",
        num_shared_experts=1 if shared else 0,
        shared_intermediate_size=shared,
        **_multipliers(f),
    )


def _multipliers(f: Any) -> dict:
    return dict(
        embedding_multiplier=float(f.required("embedding_multiplier")),
        residual_multiplier=float(f.required("residual_multiplier")),
        attention_multiplier=float(f.required("attention_multiplier")),
        logits_scaling=float(f.required("logits_scaling")),
    )


def _hybrid_fields(f: Any) -> dict:
    """Granite 4.0's hybrid models (granitemoehybrid)."""
    for key in ("attention_bias", "mamba_proj_bias"):
        if f.hf.get(key):
            raise ValueError(f"HF config {key}=True: not supported for {GRANITE}")
    if f.get("hidden_act") not in ("silu", "swish"):
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu' (SwiGLU)")
    position = f.get("position_embedding_type")
    if position not in (None, "nope", "rope"):
        raise ValueError(f"HF config position_embedding_type={position!r}: expected rope or nope")
    num_layers, hidden = f.required("num_hidden_layers"), f.required("hidden_size")
    kinds = f.get("layer_types")
    kinds = ["linear_attention"] * num_layers if kinds is None else kinds
    kinds = [_KINDS.get(k, k) for k in kinds] if isinstance(kinds, list) else kinds
    if (
        not isinstance(kinds, list)
        or len(kinds) != num_layers
        or any(k not in _KINDS.values() for k in kinds)
    ):
        raise ValueError(
            f"HF config layer_types: expected {num_layers} entries, each 'mamba' or 'attention'"
        )
    attention = tuple(i for i, k in enumerate(kinds) if k == "full_attention")
    experts = f.get("num_local_experts") or 0
    shared = f.required("shared_intermediate_size")
    moe = dict(
        num_experts=experts,
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        scoring_func="softmax_topk",
        num_shared_experts=1,
        shared_intermediate_size=shared,
    )
    return dict(
        # (the shared MLP alone without experts: the dense MLP)
        **(moe if experts else dict(intermediate_size=shared)),
        num_kv_heads=f.get("num_key_value_heads") or f.required("num_attention_heads"),
        head_dim=hidden // f.required("num_attention_heads"),
        nope_layers=() if position == "rope" else attention,
        **mamba2_fields(f, attention),
        **_multipliers(f),
    )


def mamba2_fields(
    f: Any, attention: tuple[int, ...], num_layers: int | None = None, inner: int | None = None
) -> dict:
    """The Mamba-2 layers of a hybrid whose `num_layers` layers (num_hidden_layers) but
    `attention` are Mamba-2 mixers with Bamba's fields (mamba_n_heads, mamba_d_head,
    mamba_n_groups, mamba_d_state, mamba_d_conv, mamba_expand, mamba_conv_bias,
    time_step_limit), `inner` channels (mamba_expand x hidden_size): Granite 4.0's, Bamba's,
    Falcon-H1's."""
    num_layers = num_layers or f.required("num_hidden_layers")
    heads = f.required("mamba_n_heads")
    inner = inner or f.required("mamba_expand") * f.required("hidden_size")
    head_dim = f.get("mamba_d_head")
    head_dim = inner // heads if head_dim == "auto" else head_dim
    if not isinstance(head_dim, int) or head_dim * heads != inner:
        raise ValueError(
            f"HF config mamba_d_head={head_dim!r}: mamba_n_heads={heads} of it must make "
            f"the mixer's {inner} channels"
        )
    return dict(
        linear_attention_layers=tuple(i for i in range(num_layers) if i not in attention),
        linear_attention_kind="mamba2",
        linear_num_key_heads=f.required("mamba_n_groups"),
        linear_num_value_heads=heads,
        linear_key_head_dim=f.required("mamba_d_state"),
        linear_value_head_dim=head_dim,
        linear_conv_kernel=f.required("mamba_d_conv"),
        linear_conv_bias=bool(f.get("mamba_conv_bias")),
        mamba_dt_limit=dt_limit(f.get("time_step_limit")),
    )
