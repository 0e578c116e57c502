"""config_from_hf for the MLA families whose fields configs/hf_mla.py reads: GLM-4.7-Flash's
dense layers, DeepSeek-V3.2's and GLM-5's sparse-attention indexer, Mistral Small 4 (and
Ministral 3's query temperature) and Mistral Large 4, in their multimodal wrappers."""

import json
import os

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_glm4_moe_lite_dense_layers_and_refusals():
    """GLM-4.7-Flash: mlp_layer_types names the dense layers (transformers' default: layer 0);
    the router is V3's whatever the config says, and a partial rotary factor is refused
    (DeepSeek-V3's attention rotates the whole rope part)."""
    hf = json.loads(open(os.path.join(FIXTURES, "glm4_moe_lite", "config.json")).read())
    cfg = config_from_hf(hf)
    assert cfg.is_mla and [cfg.is_moe_layer(i) for i in range(3)] == [True, False, True]
    del hf["mlp_layer_types"]
    assert [config_from_hf(hf).is_moe_layer(i) for i in range(3)] == [False, True, True]
    for change, message in [
        (dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types: expected a list of "),
        (dict(mlp_layer_types=["dense", "moe", "sparse"]), "'moe' is not 'dense' or 'sparse'"),
        (dict(topk_method="greedy"), "topk_method='greedy': transformers' glm4_moe_lite"),
        (dict(scoring_func="softmax"), "scoring_func='softmax'"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(partial_rotary_factor=0.5), "partial_rotary_factor=0.5"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf({**hf, **change})


def test_deepseek_v32_dense_layers_indexer_and_refusals():
    """DeepSeek-V3.2: V3's attention (always interleaved rope) with the indexer's fields;
    transformers' class makes the first first_k_dense_replace layers dense unless
    mlp_layer_types names them."""
    hf = json.loads(open(os.path.join(FIXTURES, "deepseek_v32", "config.json")).read())
    cfg = config_from_hf(hf)
    assert (cfg.index_topk, cfg.index_n_heads, cfg.index_head_dim) == (12, 8, 16)
    assert cfg.sparse_attention and cfg.rope_interleave and cfg.topk_method == "noaux_tc"
    assert cfg.layer_kv_widths(0) == (32 + 8, 16)
    del hf["mlp_layer_types"]
    assert [config_from_hf(hf).is_moe_layer(i) for i in range(3)] == [False, True, True]
    hf["first_k_dense_replace"] = 2
    assert [config_from_hf(hf).is_moe_layer(i) for i in range(3)] == [False, False, True]
    for change, message in [
        (dict(q_lora_rank=None), "q_lora_rank: deepseek_v32's indexer needs one"),
        (dict(index_head_dim=4), "index_head_dim=4: must hold the rope part"),
        (dict(index_topk=0), "index_topk=0: deepseek_v32 needs an int >= 1"),
        (dict(index_n_heads=2.5), "index_n_heads=2.5: deepseek_v32 needs an int >= 1"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(scoring_func="softmax"), "scoring_func='softmax'"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf({**hf, **change})
    assert config_from_hf({**hf, "num_nextn_predict_layers": 1}).num_nextn_predict_layers == 1


def test_glm5_indexer_layers_and_defaults():
    """GLM-5 (glm_moe_dsa): the indexer ropes interleaved pairs; GlmMoeDsaConfig's
    indexer_types (given, or from index_topk_pattern, or from index_topk_freq and
    index_skip_topk_offset) name the "shared" layers, which reuse the nearest earlier full
    layer's top-k (a shared layer 0 is refused: transformers fails on it). Class defaults:
    GLM-5's shapes, every layer full."""
    hf = json.loads(open(os.path.join(FIXTURES, "glm_moe_dsa", "config.json")).read())
    cfg = config_from_hf(hf)
    assert cfg.index_rope_interleave and cfg.sparse_attention and cfg.n_group == 1
    assert cfg.shared_indexer_layers == ()
    # (save_pretrained wrote the class's indexer_types, which win over the other fields.)
    bare = {k: v for k, v in hf.items() if k != "indexer_types"}
    assert config_from_hf({**hf, "index_topk_pattern": "FFS"}) == cfg
    assert config_from_hf({**bare, "index_topk_pattern": "FFF"}) == cfg
    for change, layers in [
        (dict(indexer_types=["full", "shared", "full"]), (1,)),
        (dict(index_topk_pattern="FFS"), (2,)),
        # transformers' rule: layer i full where max(i - offset + 1, 0) % freq == 0.
        (dict(index_topk_freq=2, index_skip_topk_offset=1), (1,)),
        (dict(index_topk_freq=2, index_skip_topk_offset=2), (2,)),
    ]:
        shared = config_from_hf({**bare, **change})
        assert shared.shared_indexer_layers == layers
        assert [shared.indexes(i) for i in range(3)] == [i not in layers for i in range(3)]
        assert [len(shared.layer_kv_widths(i)) for i in range(3)] == [
            1 if i in layers else 2 for i in range(3)
        ]
    with pytest.raises(ValueError, match="indexer_types: layer 0 is 'shared', but there is no"):
        config_from_hf({**bare, "indexer_types": ["shared", "full", "full"]})
    with pytest.raises(ValueError, match="'half' is not 'full' or 'shared'"):
        config_from_hf({**hf, "indexer_types": ["full", "half", "full"]})
    default = config_from_hf({"model_type": "glm_moe_dsa"})
    assert (default.num_layers, default.hidden_size, default.index_n_heads) == (78, 6144, 32)
    assert (default.v_head_dim, default.mlp_only_layers) == (256, (0, 1, 2))


def test_mistral4_in_its_wrapper_and_refusals():
    """Mistral Small 4 ships as a Mistral 3 wrapper: its text_config is the model, with the top
    level's tie_word_embeddings (Mistral3Config's default: tied), dtype and quantization. Its
    rope dict's llama_4_scaling_beta and original_max_position_embeddings make the query
    temperature; a partial_rotary_factor other than rope / (nope + rope) is another model."""
    wrapped = json.loads(open(os.path.join(FIXTURES, "mistral4", "config.json")).read())
    cfg = config_from_hf(wrapped)
    assert (cfg.model_type, cfg.attn_scale_beta, cfg.attn_scale_positions) == ("mistral4", 0.5, 16)
    assert (cfg.scoring_func, cfg.topk_method, cfg.tie_word_embeddings) == (
        "softmax",
        "group_top2",
        False,
    )
    # transformers ties a Mistral 3 model by its top-level field, whose default is true.
    untied_text = dict(wrapped["text_config"], tie_word_embeddings=False)
    bare = {k: v for k, v in wrapped.items() if k != "tie_word_embeddings"}
    assert config_from_hf(dict(bare, text_config=untied_text)).tie_word_embeddings
    assert config_from_hf(dict(wrapped, dtype="bfloat16"), dtype="auto").dtype == "bfloat16"
    # The text config alone is the same model; Mistral4Config's defaults fill a bare one.
    assert config_from_hf(wrapped["text_config"]) == cfg.replace(name="hf-mistral4")
    default = config_from_hf({"model_type": "mistral4"})
    assert (default.attn_scale_beta, default.attn_scale_positions) == (0.1, 8192)
    assert (default.q_lora_rank, default.kv_lora_rank, default.num_experts) == (1024, 256, 128)
    # The class defaults are the release's shapes: the mistral-small-4 preset.
    real = config_from_hf({"model_type": "mistral4"}, name="mistral-small-4", dtype="bfloat16")
    assert real == get_preset("mistral-small-4")
    text, rope = wrapped["text_config"], wrapped["text_config"]["rope_parameters"]
    for change, message in [
        (dict(rope, llama_4_scaling_beta=None), "llama_4_scaling_beta=None: mistral4 needs"),
        (dict(rope, partial_rotary_factor=0.5), r"partial_rotary_factor=0.5: .* = 8/24"),
        (
            {k: v for k, v in rope.items() if k != "original_max_position_embeddings"}
            | dict(rope_type="default", type="default"),
            "original_max_position_embeddings=None: mistral4's query temperature",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf(dict(wrapped, text_config=dict(text, rope_parameters=change)))
    assert config_from_hf(dict(text, rope_parameters=dict(rope, llama_4_scaling_beta=0))) == (
        cfg.replace(name="hf-mistral4", attn_scale_beta=0.0, attn_scale_positions=0)
    )
    # Ministral 3 (dense, GQA) takes the same temperature from the same fields.
    ministral = config_from_hf(
        {"model_type": "mistral3", "text_config": {"model_type": "ministral3"}}
    )
    assert (ministral.attn_scale_beta, ministral.attn_scale_positions) == (0.1, 16384)
    assert ministral.tie_word_embeddings and ministral.sliding_window is None
    no_beta = {"model_type": "ministral3", "rope_parameters": {"rope_type": "default"}}
    with pytest.raises(ValueError, match="llama_4_scaling_beta=None: ministral3 needs"):
        config_from_hf(no_beta)
    with pytest.raises(ValueError, match=r"text_config.model_type \(of 'mistral3'\)='gemma3'"):
        config_from_hf(dict(wrapped, text_config=dict(text, model_type="gemma3")))
    with pytest.raises(ValueError, match="text_config=\\[\\]: expected a JSON object"):
        config_from_hf(dict(wrapped, text_config=[]))


def test_mistral_large4_fields_and_refusals():
    """Mistral Large 4 (its own wrapper around a mistral_large4_text model): no q LoRA (the
    class has no such field), its nope layers from no_rope_layers (default: every
    no_rope_layer_interval-th, 4), the soft cap, shared indexers, layers reading an earlier
    layer's latent (only the one transformers hands them: the latest of their kind that
    keeps its own); a missing cap is refused."""
    wrapped = json.loads(open(os.path.join(FIXTURES, "mistral_large4", "config.json")).read())
    cfg = config_from_hf(wrapped)
    assert (cfg.model_type, cfg.q_lora_rank, cfg.nope_layers) == ("mistral_large4_text", 0, (1,))
    assert cfg.learned_rope_scale and cfg.query_log_scale and cfg.final_logit_softcapping == 2.0
    assert not cfg.tie_word_embeddings  # MistralLarge4Config's default: untied
    text = wrapped["text_config"]
    per_layer = ("no_rope_layers", "kv_source_layers", "indexer_types", "mlp_layer_types")
    eight = {k: v for k, v in text.items() if k not in per_layer} | dict(num_hidden_layers=8)
    assert config_from_hf(eight).nope_layers == (3, 7)
    assert config_from_hf(dict(eight, no_rope_layer_interval=2)).nope_layers == (1, 3, 5, 7)
    assert config_from_hf(dict(text, q_lora_rank=64)).q_lora_rank == 0
    default = config_from_hf({"model_type": "mistral_large4"})
    assert (default.num_layers, default.nope_layers[:2], default.index_topk) == (72, (3, 7), 2048)
    assert default.final_logit_softcapping == 30.0 and default.latent_norm_eps == 1e-5
    real = config_from_hf(
        {"model_type": "mistral_large4"}, name="mistral-large-4", dtype="bfloat16"
    )
    assert real == get_preset("mistral-large-4")
    assert (cfg.kv_source_layers, cfg.shared_indexer_layers) == ((0, 1, 0), (1,))
    assert [cfg.layer_kv_widths(i) for i in range(3)] == [(40, 16), (40,), (16,)]
    own = config_from_hf(dict(wrapped, text_config=dict(text, kv_source_layers=[0, 1, 2])))
    assert own.kv_source_layers == () and own.layer_kv_widths(2) == (40, 16)
    for change, message in [
        # Layer 1 has no RoPE, layer 0 has: transformers would hand it no latent.
        (dict(kv_source_layers=[0, 0, 2]), r"kv_source_layers\[1\]=0: a layer reads"),
        (dict(kv_source_layers=[0, 1, 1]), r"kv_source_layers\[2\]=1: a layer reads"),
        (dict(kv_source_layers=[0, 1]), r"kv_source_layers: MLA or GQA .*per layer \(3\)"),
        (dict(kv_source_layers=[0, 1, "0"]), "kv_source_layers=\\[0, 1, '0'\\]: expected"),
        (dict(indexer_types=["shared", "full", "full"]), "indexer_types: layer 0 is 'shared'"),
        (dict(final_logit_softcapping=None), "final_logit_softcapping=None: mistral_large4"),
        (dict(no_rope_layers=[1, 2, 1]), "no_rope_layers: expected a list of >= "),
        (dict(no_rope_layers=[1, 0]), "no_rope_layers: expected a list of >= "),
        (dict(attention_bias=True), "attention_bias=True"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf(dict(wrapped, text_config=dict(text, **change)))
