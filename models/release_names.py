"""Checkpoint tensor names as releases spell them: transformers' names (models/
checkpoint_names.py builds them) renamed per model type where a release (and transformers'
save, which reverses its load's renaming) names them otherwise, and Mistral's own format."""

from __future__ import annotations

import re

# Diffusers' attention names (q_proj as to_q, ...: Cosmos3's checkpoints), as
# checkpoint_names.ALTERNATE_NAMES pairs.
DIFFUSERS_ATTENTION = tuple(
    (f".self_attn.{ours}.", f".self_attn.{theirs}.")
    for ours, theirs in (("q_proj", "to_q"), ("k_proj", "to_k"), ("v_proj", "to_v"))
    + (("o_proj", "to_out"), ("q_norm", "norm_q"), ("k_norm", "norm_k"))
)
# transformers' names -> Ling 2.5's own (transformers 5.25's conversion_mapping reverses them
# on save): applied in order.
_BAILING_NATIVE = (
    (r"^model\.embed_tokens\.", "model.word_embeddings."),
    (r"\.self_attn\.", ".attention."),
    (r"\.attention\.o_proj\.", ".attention.dense."),
    (r"\.gate\.e_score_correction_bias$", ".gate.expert_bias"),
)
# LFM2-MoE's (transformers' Lfm2Moe modules: operator_norm, ffn_norm, feed_forward with w1 /
# w3 / w2, the correction bias beside the gate as expert_bias, the final embedding_norm).
_LFM2_NATIVE = (
    (r"^model\.norm\.", "model.embedding_norm."),
    (r"\.input_layernorm\.", ".operator_norm."),
    (r"\.post_attention_layernorm\.", ".ffn_norm."),
    (r"\.self_attn\.o_proj\.", ".self_attn.out_proj."),
    (r"\.self_attn\.([qk])_norm\.", r".self_attn.\1_layernorm."),
    (r"\.mlp\.gate\.e_score_correction_bias$", ".feed_forward.expert_bias"),
    (r"\.mlp\.", ".feed_forward."),
    (r"\.gate_proj\.", ".w1."),
    (r"\.up_proj\.", ".w3."),
    (r"\.down_proj\.", ".w2."),
)
# LFM3's (LFM2's block names, its attention's own, the norms after each block).
_LFM3_NATIVE = (
    (r"^model\.norm\.", "model.embedding_norm."),
    (r"\.input_layernorm\.", ".operator_norm."),
    (r"\.post_attention_layernorm\.", ".post_operator_norm."),
    (r"\.pre_mlp_layernorm\.", ".ffn_norm."),
    (r"\.post_mlp_layernorm\.", ".post_ffn_norm."),
    (r"\.mlp\.gate_proj\.", ".feed_forward.w1."),
    (r"\.mlp\.up_proj\.", ".feed_forward.w3."),
    (r"\.mlp\.down_proj\.", ".feed_forward.w2."),
    (r"\.self_attn\.g_proj\.", ".self_attn.gate_proj."),
)
# Jamba's (its final norm, the norm before the feed-forward block, feed_forward.router).
_JAMBA_NATIVE = (
    (r"^model\.norm\.", "model.final_layernorm."),
    (r"\.post_attention_layernorm\.", ".pre_ff_layernorm."),
    (r"\.mlp\.gate\.weight$", ".feed_forward.router.weight"),
    (r"\.mlp\.", ".feed_forward."),
)
# Sarvam-30B's and Param2's (Bailing's, with GQA: q / k norms named as Hunyuan's).
_SARVAM_NATIVE = _BAILING_NATIVE + (
    (r"\.attention\.q_norm\.", ".attention.query_layernorm."),
    (r"\.attention\.k_norm\.", ".attention.key_layernorm."),
)
# Hunyuan 3's (its router's gate, the correction bias beside it, the shared MLP).
_HY_V3_NATIVE = (
    (r"\.mlp\.gate\.weight$", ".mlp.router.gate.weight"),
    (r"\.mlp\.gate\.e_score_correction_bias$", ".mlp.expert_bias"),
    (r"\.mlp\.shared_experts\.", ".mlp.shared_mlp."),
)
# EXAONE 3's (its release's GPT-2-like names; transformers 5.25 saves them too).
_EXAONE_NATIVE = (
    (r"^model\.embed_tokens\.", "transformer.wte."),
    (r"^model\.norm\.", "transformer.ln_f."),
    (r"^model\.layers\.", "transformer.h."),
    (r"\.input_layernorm\.", ".ln_1."),
    (r"\.post_attention_layernorm\.", ".ln_2."),
    (r"\.self_attn\.o_proj\.", ".attn.attention.out_proj."),
    (r"\.self_attn\.", ".attn.attention."),
    (r"\.mlp\.gate_proj\.", ".mlp.c_fc_0."),
    (r"\.mlp\.up_proj\.", ".mlp.c_fc_1."),
    (r"\.mlp\.down_proj\.", ".mlp.c_proj."),
)
_GEMMA_NATIVE = (
    (r"\.pre_mlp_layernorm\.", ".pre_feedforward_layernorm."),
    (r"\.post_mlp_layernorm\.", ".post_feedforward_layernorm."),
)
NATIVE = {
    # GLM-4's sandwich norms (AFMoE's names, in order: the attention's output norm, then the
    # MLP's input norm).
    "glm4": (
        (r"\.post_attention_layernorm\.", ".post_self_attn_layernorm."),
        (r"\.pre_mlp_layernorm\.", ".post_attention_layernorm."),
    ),
    # Gemma 3's and Gemma 2's (AFMoE's names for the MLP's norms before and after it).
    "gemma3_text": _GEMMA_NATIVE,
    "gemma2": _GEMMA_NATIVE,
    # Apertus' (transformers' ApertusDecoderLayer's names for Llama's two norms)
    "apertus": (
        (r"\.input_layernorm\.", ".attention_layernorm."),
        (r"\.post_attention_layernorm\.", ".feedforward_layernorm."),
    ),
    "beam": _GEMMA_NATIVE,
    "exaone": _EXAONE_NATIVE,
    # HyperCLOVA X's Peri-LN norms (AFMoE's names, in order: the attention's output norm, the
    # MLP's input norm, its output norm).
    "hyperclovax": (
        (r"\.post_attention_layernorm\.", ".post_norm1."),
        (r"\.pre_mlp_layernorm\.", ".post_attention_layernorm."),
        (r"\.post_mlp_layernorm\.", ".post_norm2."),
    ),
    "starcoder2": ((r"\.mlp\.up_proj\.", ".mlp.c_fc."), (r"\.mlp\.down_proj\.", ".mlp.c_proj.")),
    "falcon": (
        (r"^model\.embed_tokens\.", "transformer.word_embeddings."),
        (r"^model\.norm\.", "transformer.ln_f."),
        (r"^model\.layers\.", "transformer.h."),
        (r"\.self_attn\.o_proj\.", ".self_attention.dense."),
        (r"\.self_attn\.", ".self_attention."),
        (r"\.mlp\.up_proj\.", ".mlp.dense_h_to_4h."),
        (r"\.mlp\.down_proj\.", ".mlp.dense_4h_to_h."),
    ),
    "gpt_bigcode": (
        (r"^model\.embed_tokens\.", "transformer.wte."),
        (r"^model\.embed_positions\.", "transformer.wpe."),
        (r"^model\.norm\.", "transformer.ln_f."),
        (r"^model\.layers\.", "transformer.h."),
        (r"\.input_layernorm\.", ".ln_1."),
        (r"\.post_attention_layernorm\.", ".ln_2."),
        (r"\.self_attn\.o_proj\.", ".attn.c_proj."),
        (r"\.self_attn\.", ".attn."),
        (r"\.mlp\.up_proj\.", ".mlp.c_fc."),
        (r"\.mlp\.down_proj\.", ".mlp.c_proj."),
    ),
    "opt": (
        (r"^model\.embed_tokens\.", "model.decoder.embed_tokens."),
        (r"^model\.embed_positions\.", "model.decoder.embed_positions."),
        (r"^model\.norm\.", "model.decoder.final_layer_norm."),
        (r"^model\.layers\.", "model.decoder.layers."),
        (r"\.input_layernorm\.", ".self_attn_layer_norm."),
        (r"\.post_attention_layernorm\.", ".final_layer_norm."),
        (r"\.self_attn\.o_proj\.", ".self_attn.out_proj."),
        (r"\.mlp\.up_proj\.", ".fc1."),
        (r"\.mlp\.down_proj\.", ".fc2."),
    ),
    "gptj": (
        (r"^model\.embed_tokens\.", "transformer.wte."),
        (r"^model\.norm\.", "transformer.ln_f."),
        (r"^model\.layers\.", "transformer.h."),
        (r"\.input_layernorm\.", ".ln_1."),
        (r"\.self_attn\.o_proj\.", ".attn.out_proj."),
        (r"\.self_attn\.", ".attn."),
        (r"\.mlp\.up_proj\.", ".mlp.fc_in."),
        (r"\.mlp\.down_proj\.", ".mlp.fc_out."),
    ),
    "gpt_neox": (
        (r"^model\.embed_tokens\.", "gpt_neox.embed_in."),
        (r"^model\.norm\.", "gpt_neox.final_layer_norm."),
        (r"^model\.layers\.", "gpt_neox.layers."),
        (r"^lm_head\.", "embed_out."),
        (r"\.self_attn\.o_proj\.", ".attention.dense."),
        (r"\.self_attn\.", ".attention."),
        (r"\.mlp\.up_proj\.", ".mlp.dense_h_to_4h."),
        (r"\.mlp\.down_proj\.", ".mlp.dense_4h_to_h."),
    ),
    "nanochat": (
        (r"\.mlp\.up_proj\.", ".mlp.fc1."),
        (r"\.mlp\.down_proj\.", ".mlp.fc2."),
    ),
    "phi": (
        (r"^model\.norm\.", "model.final_layernorm."),
        (r"\.self_attn\.o_proj\.", ".self_attn.dense."),
        (r"\.mlp\.up_proj\.", ".mlp.fc1."),
        (r"\.mlp\.down_proj\.", ".mlp.fc2."),
    ),
    # OLMo Hybrid's release (and transformers 5.25's save): a layer's first norm, and its
    # second (the MLP's input norm, or an attention layer's output norm).
    "olmo_hybrid": (
        (r"\.input_layernorm\.", ".attention_layer_norm."),
        (r"\.post_attention_layernorm\.", ".feedforward_layer_norm."),
    ),
    # VaultGemma's MLP input norm (no norms after the blocks).
    "vaultgemma": ((r"\.post_attention_layernorm\.", ".pre_feedforward_layernorm."),),
    "hy_v3": _HY_V3_NATIVE,
    "mimo_v2_flash": ((r"\.self_attn\.sinks$", ".self_attn.attention_sink_bias"),),
    "flint": ((r"\.self_attn\.sinks$", ".self_attn.softmax_offset"),),
    # Kolibri-1's release (and transformers 5.25's save): GLM-4's sandwich norms under its
    # own names, the router's correction bias outside the MLP.
    "kolibri1": (
        (r"\.post_attention_layernorm\.", ".post_attn_norm."),
        (r"\.pre_mlp_layernorm\.", ".post_attention_layernorm."),
        (r"\.post_mlp_layernorm\.", ".post_ffn_norm."),
        (r"\.mlp\.gate\.e_score_correction_bias$", ".moe.router.expert_bias"),
    ),
    "bailing_hybrid": _BAILING_NATIVE,
    "sarvam_moe": _SARVAM_NATIVE,
    "param2moe": _SARVAM_NATIVE,
    "lfm2_moe": _LFM2_NATIVE,
    "lfm2": _LFM2_NATIVE,
    "lfm3": _LFM3_NATIVE,
    "jamba": _JAMBA_NATIVE,
    "bamba": _JAMBA_NATIVE,  # (Jamba's layer names around Mamba-2 mixers, no experts)
}


NATIVE["gpt2"] = NATIVE["gpt_bigcode"]  # (GPT-BigCode keeps GPT-2's names)
NATIVE["codegen"] = NATIVE["gptj"]
NATIVE["apertus1p5_text"] = NATIVE["apertus"]
# Molmo2's (its q, k, v and its up, gate rows fused already: checkpoint_names.FUSED).
NATIVE["molmo2_text"] = (
    (r"^model\.embed_tokens\.", "model.transformer.wte."),
    (r"^model\.norm\.", "model.transformer.ln_f."),
    (r"^model\.layers\.", "model.transformer.blocks."),
    (r"\.input_layernorm\.", ".attn_norm."),
    (r"\.post_attention_layernorm\.", ".ff_norm."),
    (r"\.self_attn\.qkv_proj\.", ".self_attn.att_proj."),
    (r"\.self_attn\.o_proj\.", ".self_attn.attn_out."),
    (r"\.mlp\.up_gate_proj\.", ".mlp.ff_proj."),
    (r"\.mlp\.down_proj\.", ".mlp.ff_out."),
)
# BioGPT: OPT's layer names under biogpt, its final norm layer_norm, its head output_projection.
NATIVE["biogpt"] = (
    (r"^model\.norm\.", "biogpt.layer_norm."),
    (r"^lm_head\.", "output_projection."),
    *((p, r.replace("model.decoder.", "biogpt.")) for p, r in NATIVE["opt"][:4]),
    *NATIVE["opt"][4:],
)
# XGLM: OPT's layer names under model, its final norm layer_norm (no position table held).
NATIVE["xglm"] = ((r"^model\.norm\.", "model.layer_norm."), *NATIVE["opt"][4:])
NATIVE["persimmon"] = (
    (r"^model\.norm\.", "model.final_layernorm."),
    (r"\.self_attn\.o_proj\.", ".self_attn.dense."),
    (r"\.self_attn\.([qk])_norm\.", r".self_attn.\1_layernorm."),
    (r"\.mlp\.up_proj\.", ".mlp.dense_h_to_4h."),
    (r"\.mlp\.down_proj\.", ".mlp.dense_4h_to_h."),
)  # (its attention's one qkv_proj beside GPT-J's out_proj)
# GPT-Neo: GPT-2's, its attention's q, k, v and output projections apart under attn.attention.
NATIVE["gpt_neo"] = (
    *NATIVE["gpt_bigcode"][:6],
    (r"\.self_attn\.o_proj\.", ".attn.attention.out_proj."),
    (r"\.self_attn\.", ".attn.attention."),
    *NATIVE["gpt_bigcode"][8:],
)
# BLOOM keeps Falcon's names (Falcon's came from it), and LayerNorms its embeddings.
NATIVE["bloom"] = (
    (r"^model\.embed_norm\.", "transformer.word_embeddings_layernorm."),
    *NATIVE["falcon"],
)
NATIVE["mpt"] = (
    (r"^model\.embed_tokens\.", "transformer.wte."),
    (r"^model\.norm\.", "transformer.norm_f."),
    (r"^model\.layers\.", "transformer.blocks."),
    (r"\.input_layernorm\.", ".norm_1."),
    (r"\.post_attention_layernorm\.", ".norm_2."),
    (r"\.self_attn\.o_proj\.", ".attn.out_proj."),
    (r"\.self_attn\.", ".attn."),
    (r"\.mlp\.", ".ffn."),
)

# Falcon-40B's and -180B's two norms beside each other (the others': input_layernorm alone, or
# with post_attention_layernorm in sequential layers).
FALCON_PARALLEL_NORMS = (
    (r"\.input_layernorm\.", ".ln_attn."),
    (r"\.post_attention_layernorm\.", ".ln_mlp."),
)


# Where noaux_tc routers' correction biases are kept when not in the gate (checkpoint_names):
# beside it (MiniMax-M2, K-EXAONE, AFMoE), or in the experts (Laguna).
ROUTER_BIAS = {
    "minimax_m2": "e_score_correction_bias",
    "exaone_moe": "e_score_correction_bias",
    "afmoe": "expert_bias",
    "laguna": "experts.e_score_correction_bias",
}


# Tensors a checkpoint keeps in parts, per model type: (the whole's name, as checkpoint_names
# gives it, and its parts' names), each a suffix; the loader reads the parts' rows in order as
# the whole. OLMo Hybrid's DeltaNet conv, released as its q, k and v convs (transformers 5.25
# saves three equal thirds of it under those names: the same rows, in the same order).
JOINED = {
    "olmo_hybrid": (
        (".linear_attn.conv1d.weight", tuple(f".linear_attn.{x}_conv1d.weight" for x in "qkv")),
    ),
    # Molmo2's embedding: the text tokens' rows (embedding), then the image tokens'
    # (new_embedding; transformers 5.25 saves the whole in two equal halves under those names).
    "molmo2_text": ((".wte.weight", (".wte.embedding", ".wte.new_embedding")),),
}


def renamed(name: str, table) -> str:
    """`name` through each (pattern, replacement) of `table` in turn."""
    for pattern, repl in table:
        name = re.sub(pattern, repl, name)
    return name


# transformers' names -> Mistral's own, in which Mistral Large 4's checkpoints are stored
# (transformers 5.25 renames them on load and back on save: conversion_mapping.py's
# "mistral_large4" and "mistral_large4_text"); applied in order.
_MISTRAL_NATIVE = (
    (r"^model\.embed_tokens\.", "tok_embeddings."),
    (r"^model\.rotary_emb\.alpha$", "lerope.alpha"),
    (r"^model\.norm\.", "norm."),
    (r"^lm_head\.", "output."),
    (r"^model\.layers\.", "layers."),
    (r"\.self_attn\.", ".attention."),
    (r"\.q_proj\.", ".wq."),
    (r"\.kv_a_proj_with_mqa\.", ".wkv_a_with_mqa."),
    (r"\.kv_b_proj\.", ".wkv_b."),
    (r"\.o_proj\.", ".wo."),
    (r"\.input_layernorm\.", ".attention_norm."),
    (r"\.post_attention_layernorm\.", ".ffn_norm."),
    (r"\.kv_a_layernorm\.", ".kv_a_norm."),
    (r"\.softmax_scaling\.scale$", ".ssmax_scaling.s"),
    (r"\.softmax_scaling\.bias$", ".ssmax_scaling.b"),
    (r"\.mlp\.(gate|experts|shared_experts)\.", r".\1."),
    (r"\.mlp\.", ".feed_forward."),
    (r"\.gate_proj\.", ".w1."),
    (r"\.up_proj\.", ".w3."),
    (r"\.down_proj\.", ".w2."),
)


def mistral_native_name(name: str) -> str:
    """A tensor's name in Mistral's own checkpoint format (_MISTRAL_NATIVE)."""
    return renamed(name, _MISTRAL_NATIVE)
