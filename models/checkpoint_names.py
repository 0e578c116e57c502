"""Where a Hugging Face checkpoint keeps the tensors models/hf_loader.py names: the "model." /
"lm_head." prefixes of a causal LM, or a multimodal wrapper's (configs/hf_config.py
MULTIMODAL_WRAPPERS), and Mistral's own names, in which Mistral Large 4 ships.
"""

from __future__ import annotations

import re

# Where a checkpoint keeps the language model: (its "model." prefix, its lm_head's), as
# causal LMs save it, then multimodal wrappers (configs/hf_config.MULTIMODAL_WRAPPERS) as
# transformers 5 and as transformers 4 (and released Mistral 3 checkpoints) lay them out.
# The other tensors (a vision tower, its projector) are not read.
NAME_PREFIXES = (
    ("model.", "lm_head."),
    ("model.language_model.", "lm_head."),
    ("language_model.model.", "language_model.lm_head."),
)


def prefixes_of(headers) -> tuple[str, str]:
    """The NAME_PREFIXES entry whose embedding the checkpoint holds (the first if none)."""
    for model, head in NAME_PREFIXES:
        if f"{model}embed_tokens.weight" in headers:
            return model, head
    return NAME_PREFIXES[0]


def with_prefixes(names: dict, prefixes: tuple[str, str]) -> dict:
    """hf_tensor_names' `names` under a checkpoint's prefixes (prefixes_of)."""
    model, head = prefixes
    if (model, head) == NAME_PREFIXES[0]:
        return names
    return {
        head + n[len("lm_head.") :] if n.startswith("lm_head.") else model + n[len("model.") :]: t
        for n, t in names.items()
    }


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
    for pattern, repl in _MISTRAL_NATIVE:
        name = re.sub(pattern, repl, name)
    return name
