"""HF config.json fields a config leaves out or names another way, read as transformers 5.24's
config classes read them: class defaults, and each class's attribute_map (tests/test_hf_config.py
covers the released configs and the fixtures)."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset


def test_class_defaults_fill_absent_fields():
    cfg = config_from_hf({"model_type": "qwen3", "hidden_size": 64})
    # Qwen3Config defaults: head_dim 128 (not hidden/heads), 32 kv heads, no bos/eos.
    assert (cfg.head_dim, cfg.num_heads, cfg.num_kv_heads) == (128, 32, 32)
    assert cfg.bos_token_id is None and cfg.eos_token_ids == ()
    llama = config_from_hf({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})
    assert (llama.head_dim, llama.num_kv_heads) == (16, 4)
    assert (llama.bos_token_id, llama.eos_token_ids) == (1, (2,))
    assert config_from_hf({"model_type": "mixtral"}).rope_theta == 1000000.0


# What transformers 5.24's config classes make of an expert count given under another name
# (AutoConfig.for_model(model_type, **{name: 8}).<its own field>, run by hand 2026-12-03):
# each class maps only the names of its attribute_map; any other name is ignored and the
# class default stays (Qwen2-MoE maps none).
@pytest.mark.parametrize(
    "model_type, name, want",
    [
        ("qwen2_moe", "num_local_experts", 60),
        ("qwen3_moe", "num_local_experts", 8),
        ("mixtral", "num_experts", 8),
        ("gpt_oss", "num_experts", 8),
        ("olmoe", "num_local_experts", 8),
        ("glm4_moe", "num_local_experts", 8),
        ("glm4_moe", "num_experts", 128),
        ("glm4_moe_lite", "num_local_experts", 8),
        ("glm4_moe_lite", "num_experts", 64),
        ("deepseek_v3", "num_local_experts", 8),
        ("deepseek_v3", "num_experts", 256),
        ("deepseek_v32", "num_local_experts", 8),
        ("deepseek_v32", "num_experts", 8),
        ("deepseek_v2", "num_experts", 8),
        ("deepseek_v2", "num_local_experts", 64),
        ("ernie4_5_moe", "num_experts", 8),
        ("ernie4_5_moe", "num_local_experts", 64),
        # (run by hand 2026-12-05, transformers 5.25)
        ("mistral4", "num_local_experts", 8),
        ("mistral_large4_text", "num_local_experts", 8),
        ("mistral_large4_text", "num_experts", 8),
    ],
)
def test_expert_count_names_are_read_as_transformers_reads_them(model_type, name, want):
    hf = {
        "model_type": model_type,
        name: 8,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
    }
    if model_type == "glm4_moe":
        hf["head_dim"] = 128  # the class default (4096 / 96 = 42) rotates an odd 21 channels
    assert config_from_hf(hf).num_experts == want


def test_gpt_oss_default_yarn_only_where_rope_parameters_is_absent_or_null():
    # GptOssConfig (transformers 5.24): rope_parameters {} is plain RoPE; absent, null or a
    # legacy rope_scaling of {} gets the class's YaRN (factor 32).
    def rope_type(**hf):
        return config_from_hf({"model_type": "gpt_oss", **hf}).rope_scaling.rope_type

    assert rope_type(rope_parameters={}) == "default"
    assert rope_type() == rope_type(rope_parameters=None) == rope_type(rope_scaling={}) == "yarn"


def test_ernie_class_defaults_and_top_k_name():
    # Ernie4_5_MoeConfig: default_theta 500000; num_experts_per_tok is its moe_k.
    assert config_from_hf({"model_type": "ernie4_5_moe"}).rope_theta == 500000.0
    hf = {"model_type": "ernie4_5_moe", "num_experts_per_tok": 3}
    assert config_from_hf(hf).num_experts_per_tok == 3


def test_hunyuan_moe_fields_and_refusals():
    """Hunyuan-A13B (transformers' HunYuanMoEV1Config, read by hand 2026-12-05): its
    checkpoints' "dynamic" rope with an alpha is a fixed NTK base; num_experts and moe_topk
    may be per-layer lists (one value for all here); every layer is MoE with a shared MLP
    as wide as each expert (intermediate_size)."""
    base = {"model_type": "hunyuan_v1_moe", "num_experts": 8, "moe_topk": 2}
    cfg = config_from_hf(base)
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.rope_scaling.rope_type) == (128, 32, "default")
    assert cfg.qk_norm and cfg.qk_norm_after_rope and cfg.norm_topk_prob
    assert cfg.moe_intermediate_size == cfg.shared_intermediate_size == 11008
    assert [cfg.is_moe_layer(i) for i in (0, 31)] == [True, True]
    alpha = dict(base, rope_scaling={"type": "dynamic", "alpha": 1000.0, "factor": 1.0})
    assert config_from_hf(alpha).rope_scaling.alpha == 1000.0
    lists = dict(base, num_experts=[8] * 32, moe_topk=[2] * 32)
    assert config_from_hf(lists) == cfg
    for change, message in [
        (dict(moe_topk=[2] * 31 + [4]), r"moe_topk=\[2, .*only the same value on every layer"),
        (dict(num_experts=[8] * 3), r"num_experts=\[8, 8, 8\]: only the same value"),
        (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "alpha=None: hunyuan_v1_moe's"),
        (dict(attention_bias=True), "attention_bias=True"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf({**base, **change})


def test_llama4_fields_and_refusals():
    """Llama 4 (transformers' Llama4TextConfig, in its llama4 wrapper): the class defaults
    are Scout's shapes (every 4th layer without RoPE and with full attention, the others in
    8,192-key chunks; MoE on every layer); moe_layers / interleave_moe_layer_step place the
    experts; top-1 routing only (the router's weight scales the expert's input)."""
    cfg = config_from_hf({"model_type": "llama4", "text_config": {}})
    assert (cfg.model_type, cfg.num_layers, cfg.attention_chunk_size) == ("llama4_text", 48, 8192)
    assert cfg.nope_layers == cfg.full_attention_layers == tuple(range(3, 48, 4))
    assert [cfg.layer_chunked(i) for i in range(4)] == [True, True, True, False]
    assert (cfg.intermediate_size, cfg.moe_intermediate_size, cfg.shared_expert_width) == (
        16384,
        8192,
        8192,
    )
    assert all(cfg.is_moe_layer(i) for i in range(48)) and cfg.router_weight_on_input
    assert (cfg.attn_scale_beta, cfg.attn_scale_positions, cfg.attn_scale_offset) == (0.1, 8192, 1)
    assert cfg.replace(name="llama-4-scout", dtype="bfloat16") == get_preset("llama-4-scout")
    maverick = config_from_hf(
        {"model_type": "llama4_text", "num_local_experts": 128, "interleave_moe_layer_step": 2},
        name="llama-4-maverick",
        dtype="bfloat16",
    )
    assert maverick == get_preset("llama-4-maverick")
    text = {"model_type": "llama4_text", "num_hidden_layers": 4}
    maverick = config_from_hf(dict(text, interleave_moe_layer_step=2))
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    no_chunks = config_from_hf(dict(text, attention_chunk_size=None))
    assert no_chunks.attention_chunk_size is None and no_chunks.full_attention_layers == ()
    cold = config_from_hf(dict(text, attn_temperature_tuning=False, use_qk_norm=False))
    assert cold.attn_scale_beta == 0 and not cold.qk_l2_norm
    for change, message in [
        (dict(num_experts_per_tok=2), "router_weight_on_input: needs num_experts_per_tok=1"),
        (dict(layer_types=["full_attention"] * 3), "layer_types: expected num_hidden_layers=4"),
        (
            dict(attention_chunk_size=None, layer_types=["chunked_attention"] * 4),
            "chunked layers need an attention_chunk_size",
        ),
        (dict(no_rope_layers=[1, 1, 2, 0]), "no_rope_layers: expected a list of >= "),
        (dict(attention_bias=True), "attention_bias=True"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf({**text, **change})


def test_vision_language_text_configs_read_as_their_family():
    """Qwen3-VL(-MoE)'s and GLM-4.5V's text configs are Qwen3(-MoE)'s and GLM-4.5's, with
    their own classes' defaults (read by hand from transformers 5.25) and the fields those
    classes fix whatever the config says."""
    moe = config_from_hf({"model_type": "qwen3_vl_moe", "text_config": {}})
    assert (moe.model_type, moe.num_experts, moe.moe_intermediate_size) == ("qwen3_moe", 60, 1408)
    assert (moe.rope_theta, moe.max_position_embeddings, moe.norm_topk_prob) == (5e5, 128000, True)
    text = {"norm_topk_prob": False, "use_sliding_window": True, "sliding_window": 8}
    fixed = config_from_hf({"model_type": "qwen3_vl_moe_text", **text})
    assert fixed.norm_topk_prob and fixed.sliding_window is None
    dense = config_from_hf({"model_type": "qwen3_vl", "text_config": {}})
    assert (dense.model_type, dense.hidden_size, dense.num_experts) == ("qwen3", 4096, 0)
    glm = {
        "model_type": "glm4v_moe_text",
        "head_dim": 128,
        "use_qk_norm": True,
        "num_mtp_layers": 1,
    }
    cfg = config_from_hf(glm)
    assert (cfg.model_type, cfg.vocab_size, cfg.attention_bias, cfg.qk_norm) == (
        "glm4_moe",
        151424,
        True,
        False,
    )
    assert cfg.num_nextn_predict_layers == 0 and cfg.max_position_embeddings == 65536
