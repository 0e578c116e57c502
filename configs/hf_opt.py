"""Meta's OPT HF config (transformers' opt: OPT-125M ... OPT-66B, the model vLLM's quickstart
serves), read whole.

Learned positions from a table two rows in (ModelConfig.learned_positions, position_offset 2:
position p reads row p + 2), no RoPE; LayerNorms (eps 1e-5) before each block; attention
with a KV head per query head, biases on q, k, v and out_proj where enable_bias; an MLP
without a gate, fc2(relu(fc1(x))), ffn_dim wide (biased); tied embeddings by default; the
model under model.decoder (models/release_names.py). Refused with a ValueError naming the
field: norms after the blocks (do_layer_norm_before false: OPT-350M), word_embed_proj_dim
other than hidden_size (project_in / project_out), a removed final norm, weightless
LayerNorms, another activation.

Microsoft's BioGPT (biogpt: BioGPT, BioGPT-Large) is OPT's model with the token embeddings
times sqrt(hidden_size) where scale_embedding (ModelConfig.embedding_multiplier, before the
positions join them), the erf GELU, LayerNorms at nn.LayerNorm's eps 1e-5 (transformers'
BioGPT does not pass layer_norm_eps to them), tied embeddings, the model under biogpt.

Meta's XGLM (xglm: 564M ... 7.5B) is BioGPT's model with fairseq's sinusoidal positions in
place of learned ones (ModelConfig.sinusoidal_positions, two rows in as OPT's table), under
its own field names (d_model, ffn_dim, num_layers, attention_heads, activation_function);
cross-attention refused."""

from __future__ import annotations

import math
from typing import Any

OPT, BIOGPT, XGLM = "opt", "biogpt", "xglm"
TYPES = (OPT, BIOGPT, XGLM)
ALIASES = {OPT: {"intermediate_size": ("ffn_dim",), "hidden_act": ("activation_function",)}}
ALIASES[BIOGPT] = {}
ALIASES[XGLM] = {
    "hidden_size": ("d_model",),
    "intermediate_size": ("ffn_dim",),
    "num_hidden_layers": ("num_layers",),
    "num_attention_heads": ("attention_heads",),
    "hidden_act": ("activation_function",),
}
# Defaults of transformers 5.25's OPTConfig for the fields read (OPT-125M's shapes).
DEFAULTS: dict[str, dict[str, Any]] = {
    OPT: dict(
        vocab_size=50272, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=2048, do_layer_norm_before=True,
        _remove_final_layer_norm=False, word_embed_proj_dim=None, hidden_act="relu",
        enable_bias=True, layer_norm_elementwise_affine=True, tie_word_embeddings=True,
        rope_theta=10000.0, bos_token_id=2, eos_token_id=2,
    )
}  # fmt: skip
# transformers 5.25's BioGptConfig (BioGPT's shapes).
DEFAULTS[BIOGPT] = dict(
    vocab_size=42384, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
    intermediate_size=4096, hidden_act="gelu", max_position_embeddings=1024,
    scale_embedding=True, tie_word_embeddings=True, rope_theta=10000.0, bos_token_id=0,
    eos_token_id=2,
)  # fmt: skip
# transformers 5.25's XGLMConfig (XGLM-564M's shapes).
DEFAULTS[XGLM] = dict(
    DEFAULTS[BIOGPT], vocab_size=256008, hidden_size=1024, intermediate_size=4096,
    num_hidden_layers=24, num_attention_heads=16, max_position_embeddings=2048,
    add_cross_attention=False,
)  # fmt: skip


def fields(f: Any, model_type: str) -> dict:
    """ModelConfig's embedding, attention, norm and MLP fields of an OPT, BioGPT or XGLM
    config; `f` is hf_config._Fields."""
    hidden = f.required("hidden_size")
    if model_type in (BIOGPT, XGLM):
        if f.get("hidden_act") != "gelu":
            name = "activation_function" if model_type == XGLM else "hidden_act"
            raise ValueError(f"HF config {name}={f.get('hidden_act')!r}: only 'gelu' (erf)")
        if f.get("add_cross_attention"):
            raise ValueError("HF config add_cross_attention=True: cross-attention is not supported")
        out = _opt_layers(f, hidden, True)
        if model_type == XGLM:  # (its table computed: no learned one)
            out.update(learned_positions=False, sinusoidal_positions=True)
        scale = math.sqrt(hidden) if f.get("scale_embedding") else 1.0
        return {**out, "mlp_act": "gelu_exact", "embedding_multiplier": scale}
    refusals = (
        ("do_layer_norm_before", True, "norms after the blocks (OPT-350M's)"),
        ("_remove_final_layer_norm", False, "a model without its final norm"),
        ("layer_norm_elementwise_affine", True, "LayerNorms without weights"),
        ("hidden_act", "relu", "another activation than ReLU"),
    )
    for key, want, what in refusals:
        if f.get(key) != want:
            name = "activation_function" if key == "hidden_act" else key  # (OPT's spelling)
            raise ValueError(f"HF config {name}={f.get(key)!r}: {what} not supported")
    proj = f.get("word_embed_proj_dim")
    if proj not in (None, hidden):
        raise ValueError(
            f"HF config word_embed_proj_dim={proj!r}: embeddings narrower than "
            f"hidden_size={hidden} (project_in / project_out) are not supported"
        )
    return _opt_layers(f, hidden, bool(f.get("enable_bias")))


def _opt_layers(f: Any, hidden: int, biased: bool) -> dict:
    """OPT's layers (BioGPT's, XGLM's): learned positions two rows into their table, a KV head
    per query head, biases where `biased`, LayerNorms with biases at eps 1e-5."""
    heads = f.required("num_attention_heads")
    return dict(
        num_kv_heads=heads,
        head_dim=hidden // heads,
        learned_positions=True,
        position_offset=2,
        nope_layers=tuple(range(f.required("num_hidden_layers"))),
        attention_bias=biased,
        o_proj_bias=biased,
        mlp_bias=biased,
        norm_kind="layer",
        norm_bias=True,
        rms_norm_eps=1e-5,  # (nn.LayerNorm's default: OPT's config has no field)
        mlp_act="relu",
        sliding_window=None,
        full_attention_layers=(),
    )
