"""Two MoE families of windowed and global layers whose global layers take no positions
(transformers 5.25's flint and kolibri1), read whole, their windows too.

Recursive's Flint (flint): Qwen3-MoE's attention (q/k RMSNorms per head) with gpt-oss's
learned sinks per query head (stored `softmax_offset`, float32), RoPE on the
"sliding_attention" layers alone (the "full_attention" ones: none); default layer kinds
global on layers 0, 1, every i % 4 == 1 and the last, windowed elsewhere. Its MoE layers
(Qwen3-MoE's: not in mlp_only_layers, default [0, 1], and (i + 1) % decoder_sparse_step ==
0) route by sigmoid scores without a bias, top-k, renormalized when norm_topk_prob, from a
float32 router, beside one ungated shared expert (`shared_expert`); GptOssRMSNorm's norms.

Aleph Alpha's Kolibri-1 (kolibri1): EXAONE 4's attention (q/k RMSNorms; with a window the
"sliding_attention" layers rotated, the global ones without positions; default layer kinds
every fifth layer global) in GLM-4's sandwich-normed layers, an MoE on every layer:
DeepSeek-V3's block (a shared expert `shared_expert_intermediate_size` wide) whose router
picks the top-k of logits + correction bias and weighs each pick by sigmoid(logit),
renormalized when norm_topk_prob (ModelConfig.router_bias_on_logits). Its release's names
(post_attn_norm, post_ffn_norm, the bias as moe.router.expert_bias): models/release_names.
Kolibri 1.1 (kolibri1_1: a sparse indexer on some layers) is not read."""

from __future__ import annotations

from typing import Any

from configs.hf_heads import silu_gqa_heads

FLINT, KOLIBRI1 = "flint", "kolibri1"
TYPES = (FLINT, KOLIBRI1)
ALIASES = {KOLIBRI1: {"num_experts": ("num_local_experts",)}}
_KINDS = ("sliding_attention", "full_attention")
# Defaults of transformers 5.25's FlintConfig and Kolibri1Config for the fields read.
DEFAULTS: dict[str, dict[str, Any]] = {
    FLINT: dict(
        vocab_size=150144, hidden_size=2048, intermediate_size=6144, num_hidden_layers=49,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, hidden_act="silu",
        max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
        sliding_window=513, attention_bias=False, layer_types=None, mlp_only_layers=None,
        decoder_sparse_step=1, num_experts=256, num_experts_per_tok=6,
        moe_intermediate_size=512, shared_expert_intermediate_size=1024, norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=None, eos_token_id=None,
    ),
    KOLIBRI1: dict(
        vocab_size=128000, hidden_size=2560, num_hidden_layers=50, num_attention_heads=48,
        num_key_value_heads=4, head_dim=128, hidden_act="silu",
        max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
        sliding_window=513, layer_types=None, num_experts=384, num_experts_per_tok=6,
        moe_intermediate_size=512, shared_expert_intermediate_size=512, norm_topk_prob=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=None, eos_token_id=None,
    ),
}  # fmt: skip


def _default_kinds(model_type: str, num_layers: int) -> list[str]:
    if model_type == FLINT:
        full = lambda i: i < 2 or i % 4 == 1 or i == num_layers - 1  # noqa: E731
    else:
        full = lambda i: (i + 1) % 5 == 0  # noqa: E731
    return [_KINDS[1] if full(i) else _KINDS[0] for i in range(num_layers)]


def _window_fields(f: Any, model_type: str) -> dict:
    """The window, the global layers, and the layers RoPE skips (Flint's global layers
    always; Kolibri-1's where a window is set, EXAONE 4's rule)."""
    num_layers = f.required("num_hidden_layers")
    kinds = f.get("layer_types")
    kinds = _default_kinds(model_type, num_layers) if kinds is None else kinds
    if not isinstance(kinds, list) or len(kinds) != num_layers or set(kinds) - set(_KINDS):
        raise ValueError(f"HF config layer_types: expected {num_layers} entries of {_KINDS}")
    window = f.get("sliding_window")
    full = tuple(i for i, k in enumerate(kinds) if k == _KINDS[1])
    windowed = len(full) < num_layers
    if windowed and not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
        raise ValueError(
            f"HF config sliding_window={window!r}: sliding_attention layers need one (an int > 0)"
        )
    nope = full if model_type == FLINT or window is not None else ()
    return dict(
        sliding_window=window if windowed else None,
        full_attention_layers=full if windowed else (),
        nope_layers=nope,
    )


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, window, norm and MoE fields of a Flint or Kolibri-1 config;
    `f` is hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    num_layers = f.required("num_hidden_layers")
    common = dict(
        **silu_gqa_heads(f),
        qk_norm=True,
        **_window_fields(f, model_type),
        num_experts=f.required("num_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=f.required("shared_expert_intermediate_size"),
        scoring_func="sigmoid",
        norm_topk_prob=bool(f.get("norm_topk_prob")),
    )
    if model_type == KOLIBRI1:  # (no dense layer: intermediate_size only fills the field)
        return dict(
            common,
            intermediate_size=f.required("shared_expert_intermediate_size"),
            sandwich_norms=True,
            topk_method="noaux_tc",
            router_bias_on_logits=True,
        )
    step = f.get("decoder_sparse_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"HF config decoder_sparse_step={step!r}: expected an integer >= 1")
    dense = f.get("mlp_only_layers")
    dense = [0, 1] if dense is None else dense
    if not isinstance(dense, list) or any(
        isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers for i in dense
    ):
        raise ValueError(
            f"HF config mlp_only_layers={dense!r}: expected a list of layer indices in "
            f"[0, {num_layers})"
        )
    dense = {*dense, *(i for i in range(num_layers) if (i + 1) % step)}
    return dict(common, attention_sinks=True, mlp_only_layers=tuple(sorted(dense)))
