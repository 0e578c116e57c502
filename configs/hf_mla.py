"""The MLA families' `config.json` fields (configs/hf_config.py reads the rest): DeepSeek V2 and
V3, GLM-4.7-Flash, A.X K1, and the sparse-attention ones, DeepSeek-V3.2 and GLM-5 (their lightning
indexer: engine/sparse_mla.py), as transformers' config classes and modeling code read them.
`f` is hf_config's view of one config (its class defaults and attribute_map applied).
"""

from __future__ import annotations

from typing import Any

MLA_MODEL_TYPES = (
    "axk1",
    "axk2",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "mistral4",
    "mistral_large4_text",
)
# DeepSeek Sparse Attention: transformers' V3.2 and GLM-5 classes (the latter's indexer
# ropes interleaved pairs; V3.2's rotate halves).
DSA_MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa", "mistral_large4_text", "axk2")
_NOAUX_TC = ("deepseek_v3", "glm4_moe_lite", "deepseek_v32", "glm_moe_dsa", "axk1", "axk2")
# SK Telecom's A.X K1 and K2: a q LoRA always; dense layers by their legacy fields too.
_AXK = ("axk1", "axk2")
# transformers' classes that place the dense MLPs by mlp_layer_types.
_MLP_LAYER_TYPES = ("glm4_moe_lite", "axk1", *DSA_MODEL_TYPES)


# Defaults of the transformers config classes for the fields read (configs/hf_config.py's
# _DEFAULTS takes these beside the GQA families').
# fmt: off
MLA_DEFAULTS: dict[str, dict[str, Any]] = {
    # GLM-4.7-Flash: DeepSeek-V3's MLA attention and GLM-4.5's MoE (V3's router), the dense
    # layers named by mlp_layer_types (default: layer 0).
    "glm4_moe_lite": dict(
        vocab_size=154880, hidden_size=2048, intermediate_size=10240, num_hidden_layers=47,
        num_attention_heads=20, num_key_value_heads=20, max_position_embeddings=202752,
        rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1, q_lora_rank=768, kv_lora_rank=512,
        qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, n_routed_experts=64,
        n_shared_experts=1, num_experts_per_tok=4, moe_intermediate_size=1536, n_group=1,
        topk_group=1, norm_topk_prob=True, routed_scaling_factor=1.8, rope_interleave=True,
        mlp_layer_types=None,
    ),
    # SK Telecom's A.X K1: DeepSeek-V3 (always a q LoRA, no MTP module read), each MoE
    # layer's output RMS-normed (post_mlp_layernorm); its dense layers by mlp_layer_types,
    # else by first_k_dense_replace and moe_layer_freq (read once, into mlp_layer_types).
    "axk1": dict(
        vocab_size=163840, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
        num_attention_heads=64, num_key_value_heads=64, max_position_embeddings=32768,
        rms_norm_eps=1e-6, bos_token_id=163691, eos_token_id=163691, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        n_routed_experts=192, n_shared_experts=1, num_experts_per_tok=8,
        moe_intermediate_size=2048, n_group=8, topk_group=4, norm_topk_prob=True,
        routed_scaling_factor=2.5, rope_interleave=True, mlp_layer_types=None,
    ),
    # DeepSeek V2: `scoring_func` and `moe_layer_freq` are fields of the original remote-code
    # config only (transformers hard-codes softmax and MoE on every layer >= first_k).
    "deepseek_v2": dict(
        vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=None,
        moe_intermediate_size=1407, n_group=None, topk_group=None, topk_method="greedy",
        scoring_func="softmax", norm_topk_prob=False, routed_scaling_factor=1.0,
        first_k_dense_replace=0, moe_layer_freq=1, rope_interleave=True,
    ),
    # DeepSeek V3: transformers hard-codes sigmoid scores with the noaux_tc correction bias.
    "deepseek_v3": dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
        num_attention_heads=128, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8,
        moe_intermediate_size=2048, n_group=8, topk_group=4, topk_method="noaux_tc",
        scoring_func="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5,
        first_k_dense_replace=3, moe_layer_freq=1, rope_interleave=True,
        num_nextn_predict_layers=1,
    ),
    # DeepSeek-V3.2-Exp: V3's fields (interleaved rope, noaux_tc, always a q LoRA) and the
    # sparse attention indexer's; transformers' class takes GLM-4.7-Flash's mlp_layer_types.
    "deepseek_v32": dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
        num_attention_heads=128, max_position_embeddings=163840, bos_token_id=0,
        eos_token_id=1, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=8, moe_intermediate_size=2048, n_group=8, topk_group=4,
        norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=3,
        mlp_layer_types=None, index_topk=2048, index_n_heads=64, index_head_dim=128,
    ),
    # SK Telecom's A.X K2: V3.2's class (A.X-K2-Light's sizes, no expert groups) with its
    # queries and a gate per value channel from [normed, raw] q LoRA latent through
    # q_gate_proj, and gated input norms (and MoE layers' second norms) of gated_norm_rank;
    # its dense layers by mlp_layer_types, else first_k_dense_replace / moe_layer_freq.
    "axk2": dict(
        vocab_size=163840, hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=131072,
        rms_norm_eps=1e-6, bos_token_id=163691, eos_token_id=163691, q_lora_rank=384,
        kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8,
        moe_intermediate_size=512, n_group=None, topk_group=None, norm_topk_prob=True,
        routed_scaling_factor=2.5, mlp_layer_types=None, index_topk=2048, index_n_heads=16,
        index_head_dim=128, gated_norm_rank=16,
    ),
    # GLM-5: V3.2's class with GLM's sizes (and its indexer's rope on interleaved pairs).
    "glm_moe_dsa": dict(
        vocab_size=154880, hidden_size=6144, intermediate_size=12288, num_hidden_layers=78,
        num_attention_heads=64, max_position_embeddings=202752, rms_norm_eps=1e-5,
        bos_token_id=0, eos_token_id=1, q_lora_rank=2048, kv_lora_rank=512,
        qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, n_routed_experts=256,
        n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=2048, n_group=1,
        topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=3,
        mlp_layer_types=None, index_topk=2048, index_n_heads=32, index_head_dim=128,
        indexer_types=None,
    ),
    # Mistral Small 4: DeepSeek-V3's MLA (q LoRA optional) and MoE with a softmax router
    # (V3's groups, no bias), Llama 4's query temperature from its rope_parameters.
    "mistral4": dict(
        vocab_size=131072, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=2048,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=32, n_shared_experts=1,
        n_routed_experts=128, routed_scaling_factor=1.0, kv_lora_rank=256, q_lora_rank=1024,
        qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=64, n_group=1, topk_group=1,
        num_experts_per_tok=4, first_k_dense_replace=0, norm_topk_prob=True,
        max_position_embeddings=1048576, bos_token_id=1, eos_token_id=2, rope_interleave=True,
        rope_parameters=dict(
            type="yarn", rope_theta=10000.0, factor=128.0, original_max_position_embeddings=8192,
            beta_fast=32.0, beta_slow=1.0, mscale_all_dim=1.0, mscale=1.0,
            llama_4_scaling_beta=0.1,
        ),
    ),
    # Mistral Large 4 (in its mistral_large4 wrapper): GLM-5's sparse MLA without a q LoRA,
    # every 4th layer without RoPE, LeRoPE, a learned query scale, logits soft-capped at 30.
    "mistral_large4_text": dict(
        vocab_size=204800, hidden_size=6144, intermediate_size=24576, moe_intermediate_size=6144,
        num_hidden_layers=72, num_attention_heads=64, num_key_value_heads=64, n_shared_experts=1,
        n_routed_experts=128, routed_scaling_factor=1.0, kv_lora_rank=512, qk_rope_head_dim=64,
        v_head_dim=128, qk_nope_head_dim=64, n_group=1, topk_group=1, num_experts_per_tok=4,
        max_position_embeddings=1048576, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        index_topk=2048, index_head_dim=128, index_n_heads=32, first_k_dense_replace=1,
        no_rope_layers=None, kv_source_layers=None, final_logit_softcapping=30.0,
        mlp_layer_types=None, indexer_types=None,
        rope_parameters=dict(
            rope_type="yarn", rope_theta=10000.0, factor=2048.0,
            original_max_position_embeddings=512, beta_fast=32.0, beta_slow=1.0,
            attention_factor=1.0,
        ),
    ),
}
# fmt: on


def mla_fields(f: Any, model_type: str) -> dict:
    if model_type == "deepseek_v2" and f.get("norm_topk_prob"):
        # transformers' DeepSeek-V2 never renormalizes the top-k weights (DeepSeek's own
        # code does, and then skips routed_scaling_factor): the two disagree, so refuse.
        raise ValueError(
            "HF config norm_topk_prob=true: deepseek_v2 routing here follows transformers, "
            "which does not renormalize the top-k weights; only false is supported"
        )
    # transformers hard-codes DeepSeek-V2's softmax scores and V3's sigmoid scores with the
    # noaux_tc correction bias (the config fields are the original remote code's), and MoE on
    # every layer from first_k_dense_replace, where DeepSeek's own code reads moe_layer_freq.
    # A config asking otherwise means a different model to the two references: refuse it.
    softmax = model_type in ("deepseek_v2", "mistral4", "mistral_large4_text")
    hard_coded = dict(scoring_func="softmax" if softmax else "sigmoid", moe_layer_freq=1)
    if model_type in _AXK:  # (their moe_layer_freq places the dense layers: _dense_layers)
        del hard_coded["moe_layer_freq"]
    if model_type in _NOAUX_TC:
        hard_coded["topk_method"] = "noaux_tc"
    for name, want in hard_coded.items():
        value = f.get(name)
        if value is not None and value != want:
            raise ValueError(
                f"HF config {name}={value!r}: transformers' {model_type} always uses "
                f"{want!r} (only that is supported)"
            )
    topk_method = (
        f.get("topk_method") or hard_coded.get("topk_method") or f.defaults.get("topk_method")
    )
    if model_type in ("mistral4", "mistral_large4_text"):
        # Mistral4TopkRouter: V3's groups over softmax scores, no correction bias (it reads
        # no topk_method field).
        topk_method = "group_top2"
    if model_type == "deepseek_v2" and topk_method not in ("greedy", "group_limited_greedy"):
        raise ValueError(
            f"HF config topk_method={topk_method!r}: transformers' deepseek_v2 takes greedy "
            "or group_limited_greedy"
        )
    fields = dict(
        attention_type="mla",
        q_lora_rank=f.get("q_lora_rank") or 0,
        kv_lora_rank=f.required("kv_lora_rank"),
        qk_nope_head_dim=f.required("qk_nope_head_dim"),
        qk_rope_head_dim=f.required("qk_rope_head_dim"),
        v_head_dim=f.required("v_head_dim"),
        # transformers' DeepSeek-V2 always rotates interleaved pairs (complex multiply), its
        # V3.2 and GLM-5 always the V3 way (no rope_interleave field).
        rope_interleave=model_type in ("deepseek_v2", *DSA_MODEL_TYPES)
        or bool(f.get("rope_interleave")),
        num_experts=f.required("n_routed_experts"),
        num_experts_per_tok=f.required("num_experts_per_tok"),
        moe_intermediate_size=f.required("moe_intermediate_size"),
        num_shared_experts=f.get("n_shared_experts") or 0,
        scoring_func=hard_coded["scoring_func"],
        topk_method=topk_method,
        n_group=f.get("n_group") or 1,
        topk_group=f.get("topk_group") or 1,
        norm_topk_prob=bool(f.get("norm_topk_prob")),
        routed_scaling_factor=float(f.get("routed_scaling_factor")),
        first_k_dense_replace=f.get("first_k_dense_replace") or 0,
    )
    if model_type in _MLP_LAYER_TYPES:
        fields.update(first_k_dense_replace=0, mlp_only_layers=_dense_layers(f, model_type))
    if model_type in _AXK and not fields["q_lora_rank"]:
        raise ValueError(
            f"HF config q_lora_rank: {model_type}'s attention always has a q LoRA (> 0)"
        )
    if model_type == "axk1":
        fields["moe_post_norm"] = True
    if model_type == "axk2":
        rank = f.required("gated_norm_rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"HF config gated_norm_rank={rank!r}: axk2 needs an int >= 1")
        fields.update(mla_query_gate=True, gated_norm_rank=rank)
    if model_type == "mistral_large4_text":
        fields.update(_mistral_large4_fields(f))
    if model_type in DSA_MODEL_TYPES:
        fields.update(_dsa_fields(f, model_type, fields["q_lora_rank"]))
    return fields


def _mistral_large4_fields(f: Any) -> dict:
    """Mistral Large 4 beyond GLM-5's fields, as transformers' MistralLarge4Text classes read
    them: no q LoRA and top-k weights always renormalized (the class has neither field),
    interleaved rope with LeRoPE, the learned query scale, its nope layers (no_rope_layers:
    0 = no RoPE; default every no_rope_layer_interval-th), the logits' soft cap, and the
    layers reading an earlier layer's KV (kv_source_layers; ModelConfig checks them)."""
    num_layers = f.required("num_hidden_layers")
    flags = f.get("no_rope_layers")
    if flags is None:
        interval = f.hf.get("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if (
        not isinstance(flags, list)
        or len(flags) < num_layers
        or any(v not in (0, 1) for v in flags[:num_layers])
    ):
        raise ValueError(
            f"HF config no_rope_layers: expected a list of >= num_hidden_layers={num_layers} "
            "entries, each 0 (no RoPE) or 1"
        )
    sources = f.get("kv_source_layers")
    if sources is None or list(sources) == list(range(num_layers)):
        sources = ()
    elif not isinstance(sources, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in sources
    ):
        raise ValueError(f"HF config kv_source_layers={sources!r}: expected a list of ints")
    cap = f.get("final_logit_softcapping")
    if not isinstance(cap, int | float) or isinstance(cap, bool) or cap <= 0:
        raise ValueError(
            f"HF config final_logit_softcapping={cap!r}: mistral_large4 needs a number > 0"
        )
    return dict(
        q_lora_rank=0,
        norm_topk_prob=True,
        rope_interleave=True,
        nope_layers=tuple(i for i in range(num_layers) if not flags[i]),
        learned_rope_scale=True,
        query_log_scale=True,
        final_logit_softcapping=float(cap),
        kv_source_layers=tuple(sources),
    )


def _dsa_fields(f: Any, model_type: str, q_lora_rank: int) -> dict:
    """The indexer's sizes, and GLM-5's (and Mistral Large 4's) per-layer indexer_types:
    "shared", a layer reusing the previous full layer's top-k with no indexer of its own
    (ModelConfig.shared_indexer_layers); the released GLM-5 config has every layer "full"
    (no indexer_types, pattern or frequency)."""
    if not q_lora_rank and model_type != "mistral_large4_text":
        raise ValueError(f"HF config q_lora_rank: {model_type}'s indexer needs one (> 0)")
    fields = {}
    for name in ("index_topk", "index_n_heads", "index_head_dim"):
        value = f.required(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"HF config {name}={value!r}: {model_type} needs an int >= 1")
        fields[name] = value
    if model_type in ("glm_moe_dsa", "mistral_large4_text"):
        types = _indexer_types(f)
        if types[0] == "shared":  # (transformers fails on it)
            raise ValueError(
                "HF config indexer_types: layer 0 is 'shared', but there is no earlier layer's "
                "top-k to reuse"
            )
        fields["shared_indexer_layers"] = tuple(i for i, t in enumerate(types) if t == "shared")
        fields["index_rope_interleave"] = True
    return fields


def _indexer_types(f: Any) -> list[str]:
    """GlmMoeDsaConfig's indexer_types: as given, else from index_topk_pattern ("F" / "S"
    per layer), else from index_topk_freq and index_skip_topk_offset (defaults 1 and 2:
    every layer full)."""
    num_layers = f.required("num_hidden_layers")
    types = f.get("indexer_types")
    if types is None and f.hf.get("index_topk_pattern") is not None:
        pattern = f.hf["index_topk_pattern"]
        if isinstance(pattern, str):
            types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
        else:
            types = pattern
    if types is None:
        freq = max(f.hf.get("index_topk_freq", 1), 1)
        offset = f.hf.get("index_skip_topk_offset", 2)
        types = [
            "full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(num_layers)
        ]
    return _per_layer("indexer_types", types, num_layers, ("full", "shared"))


def _dense_layers(f: Any, model_type: str) -> tuple[int, ...]:
    """GLM-4.7-Flash's, DeepSeek-V3.2's and GLM-5's mlp_layer_types ("dense" / "sparse" per
    layer; transformers' default: GLM-4.7-Flash layer 0 dense, the others the first
    first_k_dense_replace, the rest sparse) as the dense layers' indices."""
    num_layers = f.required("num_hidden_layers")
    types = f.get("mlp_layer_types")
    if types is None and model_type in _AXK:  # (their legacy fields, once)
        first, freq = f.hf.get("first_k_dense_replace", 1), f.hf.get("moe_layer_freq", 1)
        for name, v in (("first_k_dense_replace", first), ("moe_layer_freq", freq)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (name == "moe_layer_freq"):
                raise ValueError(f"HF config {name}={v!r}: expected an integer >= 0 (freq >= 1)")
        types = ["sparse" if i >= first and i % freq == 0 else "dense" for i in range(num_layers)]
    if types is None:
        dense = 1 if model_type == "glm4_moe_lite" else f.required("first_k_dense_replace")
        dense = min(dense, num_layers)
        types = ["dense"] * dense + ["sparse"] * (num_layers - dense)
    types = _per_layer("mlp_layer_types", types, num_layers, ("dense", "sparse"))
    return tuple(i for i, t in enumerate(types) if t == "dense")


def _per_layer(name: str, types: Any, num_layers: int, allowed: tuple[str, str]) -> list[str]:
    """A per-layer list field, checked: one of `allowed` for each layer."""
    if not isinstance(types, list) or len(types) != num_layers:
        raise ValueError(
            f"HF config {name}: expected a list of num_hidden_layers={num_layers} entries"
        )
    bad = [t for t in types if t not in allowed]
    if bad:
        raise ValueError(f"HF config {name}: {bad[0]!r} is not {allowed[0]!r} or {allowed[1]!r}")
    return types
