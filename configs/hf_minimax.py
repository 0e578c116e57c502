"""MiniMax-01's HF config (transformers' minimax: MiniMax-Text-01, MiniMax-M1).

Its layers: lightning attention (linear_attention_kind "lightning": as many heads as the
attention's, head_dim wide, a fixed decay per head and layer) where layer_types says
"linear_attention", GQA with RoPE elsewhere (the releases: every eighth layer); Mixtral's
MoE on every layer (a softmax router's top k, renormalized); each block's normed input
joining the stream times an alpha, its output times a beta (ModelConfig.residual_normed,
DeepNorm's (2 x layers)^0.25 in the releases).

Both spellings are read: transformers' (layer_types, {full_attn,linear_attn,mlp}_{alpha,
beta}_factor) and the released remote code's (attn_type_list with 1 for softmax attention,
layernorm_{full_attention,linear_attention,mlp}_{alpha,beta}, postnorm, rotary_dim).
rotary_dim rotates that many channels of each head (the releases' 64 of 128, as their code
and vLLM do; transformers' MiniMax rotates whole heads and ignores the field)."""

from __future__ import annotations

from typing import Any

MINIMAX = "minimax"

# Defaults of transformers 5.25's MiniMaxConfig for the fields read.
# fmt: off
DEFAULTS: dict[str, dict[str, Any]] = {MINIMAX: dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
    max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
    tie_word_embeddings=False, sliding_window=None, num_experts_per_tok=2,
    num_local_experts=8, rope_theta=1000000.0, layer_types=None,
)}
# fmt: on
TYPES, ALIASES = (MINIMAX,), {MINIMAX: {"num_local_experts": ("num_experts",)}}
_BLOCKS = ("full_attn", "linear_attn", "mlp")
_RELEASE_BLOCKS = ("full_attention", "linear_attention", "mlp")


def _layer_kinds(f: Any, num_layers: int) -> list[str]:
    kinds = f.get("layer_types")
    if kinds is None and f.hf.get("attn_type_list") is not None:
        codes = f.hf["attn_type_list"]
        if not isinstance(codes, list) or any(c not in (0, 1) for c in codes):
            raise ValueError(f"HF config attn_type_list={codes!r}: a list of 0 and 1")
        kinds = ["full_attention" if c else "linear_attention" for c in codes]
    if kinds is None:  # transformers' default: full attention on even layers
        kinds = ["linear_attention" if i % 2 else "full_attention" for i in range(num_layers)]
    if len(kinds) != num_layers or set(kinds) - {"full_attention", "linear_attention"}:
        raise ValueError(
            f"HF config layer_types={kinds!r}: {num_layers} of 'full_attention' and "
            "'linear_attention'"
        )
    return kinds


def _scales(f: Any, which: str) -> tuple[float, ...]:
    out = []
    for block, release in zip(_BLOCKS, _RELEASE_BLOCKS, strict=True):
        value = f.hf.get(f"{block}_{which}_factor", f.hf.get(f"layernorm_{release}_{which}", 1))
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"HF config {block}_{which}_factor={value!r}: expected a number")
        out.append(float(value))
    return tuple(out)


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's layer, lightning-attention, residual and MoE fields of a MiniMax-01
    config; `f` is hf_config._Fields."""
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    if f.hf.get("postnorm") is False:
        raise ValueError(
            "HF config postnorm=False: not supported (transformers' MiniMax always joins the "
            "normed input to the stream)"
        )
    if f.hf.get("shared_intermediate_size"):
        raise ValueError(
            f"HF config shared_intermediate_size={f.hf['shared_intermediate_size']}: only 0 "
            "(no shared expert)"
        )
    if f.get("sliding_window") is not None:
        raise ValueError("HF config sliding_window: not supported beside lightning attention")
    num_layers, heads = f.required("num_hidden_layers"), f.required("num_attention_heads")
    kinds = _layer_kinds(f, num_layers)
    head_dim = f.get("head_dim") or f.required("hidden_size") // heads
    rotary = f.hf.get("rotary_dim", head_dim)  # (the releases' RoPE width per head)
    if isinstance(rotary, bool) or not isinstance(rotary, int) or not 0 < rotary <= head_dim:
        raise ValueError(f"HF config rotary_dim={rotary!r}: an int in (0, head_dim={head_dim}]")
    kv_heads = f.get("num_key_value_heads")
    return dict(
        num_kv_heads=heads if kv_heads is None else kv_heads,
        head_dim=head_dim,
        partial_rotary_factor=rotary / head_dim,
        linear_attention_layers=tuple(i for i, k in enumerate(kinds) if k == "linear_attention"),
        linear_attention_kind="lightning",
        linear_num_key_heads=heads,
        linear_num_value_heads=heads,
        linear_key_head_dim=head_dim,
        linear_value_head_dim=head_dim,
        residual_normed=True,
        residual_alphas=_scales(f, "alpha"),
        residual_betas=_scales(f, "beta"),
        num_experts=f.required("num_local_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("intermediate_size"),
        norm_topk_prob=True,
    )
