"""AllenAI's OLMo Hybrid HF config (transformers' olmo_hybrid: Olmo-Hybrid-7B).

Gated DeltaNet layers ("linear_attention" in `layer_types`; by default three of four) beside
OLMo 3's attention layers ("full_attention": q/k RMSNorms over all heads' channels, no
window). The DeltaNet is Qwen3-Next's rule with a projection of its own for each of q, k, v,
a, b and the output gate (g_proj), its write strength beta = 2 sigmoid(b) where
`linear_allow_neg_eigval` (ModelConfig.linear_beta_scale), its gated norm's epsilon FLA's
1e-5 (linear_norm_eps). Norms by layer kind (ModelConfig.hybrid_post_norms): the attention
layers norm each block's output and nothing before it (OLMo 2's), the DeltaNet layers each
block's input (Llama's); every norm scaled in float32 (OLMo 2's RMSNorm). RoPE on the
attention layers unless the config's rope_theta is null (the releases': no positions,
ModelConfig.nope_layers)."""

from __future__ import annotations

from typing import Any

from configs.hf_qwen3_next import check_layer_kinds

OLMO_HYBRID = "olmo_hybrid"
TYPES, ALIASES = (OLMO_HYBRID,), {}
# FLA's FusedRMSNormGated epsilon, which transformers' DeltaNet output norm keeps.
GATED_NORM_EPS = 1e-5
# Defaults of transformers 5.25's OlmoHybridConfig for the fields read (the linear heads'
# and widths' follow num_attention_heads and hidden_size there: derived below).
DEFAULTS: dict[str, dict[str, Any]] = {
    OLMO_HYBRID: dict(
        vocab_size=100352, hidden_size=3840, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=30, num_key_value_heads=None, hidden_act="silu",
        max_position_embeddings=65536, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=100257, attention_bias=False, layer_types=None,
        rope_theta=10000.0, linear_num_key_heads=None, linear_num_value_heads=None,
        linear_key_head_dim=None, linear_value_head_dim=None, linear_conv_kernel_dim=4,
        linear_allow_neg_eigval=True,
    )
}  # fmt: skip


def _rope_theta(f: Any) -> Any:
    """The config's rope_theta, inside rope_parameters or beside it (null: no RoPE)."""
    params = f.hf.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return f.get("rope_theta")


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's attention, DeltaNet and norm fields of an OLMo Hybrid config; `f` is
    hf_config._Fields."""
    if f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias={f.get('attention_bias')!r}: not supported")
    if f.get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={f.get('hidden_act')!r}: only 'silu'")
    num_layers = f.required("num_hidden_layers")
    heads = f.required("num_attention_heads")
    kinds = f.get("layer_types")
    if kinds is None:  # transformers: every fourth layer full, the last one if none is
        kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(num_layers)]
        kinds[-1] = kinds[-1] if "full_attention" in kinds else "full_attention"
    check_layer_kinds(kinds, num_layers)
    linear = tuple(i for i, k in enumerate(kinds) if k == "linear_attention")
    key_heads = f.get("linear_num_key_heads") or heads
    key_dim = f.get("linear_key_head_dim") or int(0.75 * f.required("hidden_size") / key_heads)
    full = tuple(i for i in range(num_layers) if i not in linear)
    return dict(
        num_kv_heads=f.get("num_key_value_heads") or heads,
        head_dim=f.required("hidden_size") // heads,
        qk_norm=True,
        qk_norm_full=True,
        nope_layers=full if _rope_theta(f) is None else (),
        linear_attention_layers=linear,
        linear_num_key_heads=key_heads,
        linear_num_value_heads=f.get("linear_num_value_heads") or heads,
        linear_key_head_dim=key_dim,
        linear_value_head_dim=f.get("linear_value_head_dim") or 2 * key_dim,
        linear_conv_kernel=f.required("linear_conv_kernel_dim"),
        linear_beta_scale=2.0 if f.get("linear_allow_neg_eigval") else 1.0,
        linear_norm_eps=GATED_NORM_EPS,
        hybrid_post_norms=True,
    )
