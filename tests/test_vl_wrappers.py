"""Vision-language checkpoints served as their language model (configs/hf_wrappers.py
MULTIMODAL_WRAPPERS): Qwen2-VL and Qwen2.5-VL (_VL_TEXT: Qwen2's), LLaVA, LLaVA-NeXT,
Idefics3 and SmolVLM (Llama's), LLaVA-OneVision and InternVL (Qwen2's), and the wrappers of
configs/presets_vl.py (each its family's text fixture), with those whose language model,
names and reading are a fixture's read as that one's. The fixtures'
configs (text_config) and Qwen2-VL's releases' flat ones (the text fields at the top level,
rope_scaling of type "mrope") read as the presets; the wrappers that take a pre-v5 save's
tie_word_embeddings from text_config; Qwen2-VL's checkpoint in transformers 5.25's layout (as
released) and in the language_model one load alike; Cosmos3's in each of its layouts. HF
parity: tests/test_hf_parity.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from configs.presets_vl import VL_FIXTURES
from engine import LLM
from models.hf_loader import hf_tensor_names, load_hf_params
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config

ARCHS = ("qwen2_vl", "qwen2_5_vl", "llava", "llava_onevision", "internvl", "smolvlm")
ARCHS += VL_FIXTURES


def _flat(arch: str) -> dict:
    """The fixture's config.json as the releases lay it out: no text_config."""
    hf = saved_config(arch)
    text = dict(hf.pop("text_config"))
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    text["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    text.pop("model_type")
    return {**text, **hf}


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_configs_read_as_the_presets(arch):
    want = arch_fields(get_preset("tiny-" + arch.replace("_", "-")))
    assert arch_fields(config_from_hf(FIXTURES / arch)) == want
    if arch in ("qwen2_vl", "qwen2_5_vl"):  # (their releases: flat)
        assert arch_fields(config_from_hf(_flat(arch))) == want
    if arch in ("llava", "smolvlm"):  # (LLaVA-NeXT's config as LLaVA's, Idefics3's as SmolVLM's)
        other = {"llava": "llava_next", "smolvlm": "idefics3"}[arch]
        assert arch_fields(config_from_hf({**saved_config(arch), "model_type": other})) == want


# (wrapper, the fixture it reads as, whether its class ties when config.json says nothing):
# transformers 5.25's classes' defaults.
READ_AS = [
    ("llava_next_video", "llava", False),
    ("vipllava", "llava", False),
    ("video_llava", "llava", False),
    ("perception_lm", "llava", False),
    ("fast_vlm", "llava_onevision", False),
    ("janus", "deepseek_vl", True),
    ("deepseek_vl_hybrid", "deepseek_vl", True),
    ("got_ocr2", "internvl", True),
    ("ovis2", "internvl", True),
    ("video_llama_3", "llava_onevision", False),
    ("llava_onevision1_5", "lighton_ocr", False),
    ("ovis2_5", "lighton_ocr", False),
    ("qianfan_ocr", "lighton_ocr", False),
    ("minicpmv4_7", "minicpmv4_6", False),
    ("minicpm_ocr", "minicpmv4_6", True),
    ("glm46v", "glm4v", False),
    ("glmga", "glm4v", False),
    ("aya_vision", "aya_vision", True),
    ("lfm2_vl", "lfm2_vl", True),
    ("exaone4_5", "exaone4_5", False),
]


@pytest.mark.parametrize("wrapper, fixture, tied", READ_AS)
def test_wrappers_read_as_the_fixture_of_their_kind(wrapper, fixture, tied):
    """The same text_config in `wrapper`: the fixture's preset; without a top-level
    tie_word_embeddings, tied as the wrapper's class defaults."""
    want = arch_fields(get_preset("tiny-" + fixture.replace("_", "-")))
    hf = {**saved_config(fixture), "model_type": wrapper}
    assert arch_fields(config_from_hf(hf)) == want
    del hf["tie_word_embeddings"]
    hf["text_config"] = {k: v for k, v in hf["text_config"].items() if k != "tie_word_embeddings"}
    assert arch_fields(config_from_hf(hf)) == {**want, "tie_word_embeddings": tied}


def test_command_a_vision_reads_its_language_model_without_its_logit_scale():
    """Cohere2VisionForConditionalGeneration applies lm_head alone (Aya Vision's head, the
    text config's logit_scale): the same text_config reads with and without the scale."""
    hf = saved_config("cohere2_vision")
    assert hf["text_config"]["logit_scale"] == 0.25
    assert config_from_hf(hf).logit_scale == 1.0
    assert config_from_hf({**hf, "model_type": "aya_vision"}).logit_scale == 0.25


def test_hunyuan_ocr_reads_its_released_rope_spelling():
    """HunyuanOCR's release: rope type "xdrope" with xdrope_section, which its class reads as
    "dynamic" (NTK-alpha) with mrope_section, as transformers saves it."""
    hf = saved_config("hunyuan_vl")
    rope = hf["text_config"]["rope_parameters"]
    assert rope["rope_type"] == "dynamic"
    section = rope.pop("mrope_section")
    hf["text_config"]["rope_parameters"] = dict(rope, rope_type="xdrope", xdrope_section=section)
    assert arch_fields(config_from_hf(hf)) == arch_fields(get_preset("tiny-hunyuan-vl"))


def test_granite4_vision_serves_granite():
    """Granite 4 Vision's text model is Granite's (GraniteConfig's defaults, its forward
    without images), untied by its class whatever text_config says."""
    text = {**saved_config("granite"), "model_type": "granite4_vision_text"}
    want = arch_fields(get_preset("tiny-granite"))
    got = config_from_hf({"model_type": "granite4_vision", "text_config": text})
    assert arch_fields(got) == {**want, "tie_word_embeddings": False}
    bare = config_from_hf({"model_type": "granite4_vision"}, dtype="bfloat16")
    granite = config_from_hf({"model_type": "granite"}, dtype="bfloat16")
    assert arch_fields(bare, ("name",)) == arch_fields(granite, ("name",))


def test_lfm3_vl_serves_lfm3():
    hf = {"model_type": "lfm3_vl", "text_config": saved_config("lfm3")}
    hf["text_config"].pop("tie_word_embeddings")
    assert arch_fields(config_from_hf(hf)) == arch_fields(get_preset("tiny-lfm3"))  # (tied)


def test_glm4v_text_takes_its_class_defaults():
    """Glm4vTextConfig's: heads hidden_size / num_attention_heads wide whatever head_dim
    says, biased q/k/v, RoPE on the whole head unless partial_rotary_factor says otherwise,
    eps 1e-5 (GLM-4's: head_dim 128, half the head, 1.5625e-7)."""
    text = dict(saved_config("glm4v")["text_config"], head_dim=64)
    got = config_from_hf({"model_type": "glm4v", "text_config": text})
    assert (got.head_dim, got.partial_rotary_factor, got.attention_bias) == (16, 0.5, True)
    text = {k: v for k, v in text.items() if k not in ("rope_parameters", "rms_norm_eps")}
    got = config_from_hf({"model_type": "glm4v", "text_config": text})
    assert (got.partial_rotary_factor, got.rms_norm_eps, got.rope_theta) == (1.0, 1e-5, 1e4)


@pytest.mark.parametrize(
    "wrapper, carried",
    [
        ("qwen2_vl", True),
        ("qwen2_5_vl", True),
        ("llava", True),
        ("llava_onevision", True),
        ("llava_next_video", True),
        ("video_llama_3", True),
        ("glm4v", True),
        ("glm_ocr", True),
        ("hunyuan_vl", True),
        ("glm46v", False),
        ("granite_docling", False),
        ("llava_next", False),
        ("smolvlm", False),
        ("mistral3", False),
        ("vipllava", False),
        ("janus", False),
        ("lighton_ocr", False),
    ],
)
def test_a_pre_v5_save_ties_by_its_text_config_where_transformers_carries_it(wrapper, carried):
    """transformers' Qwen2-VL, Qwen2.5-VL, LLaVA, LLaVA-OneVision, LLaVA-NeXT-Video,
    VideoLLaMA3, GLM-4.1V, GLM-OCR and HunyuanOCR classes carry text_config's
    tie_word_embeddings to the top when the top's is false (Qwen2.5-VL-3B saved by
    transformers 4); the others tie by the top level alone."""
    hf = {**saved_config("llava"), "model_type": wrapper, "tie_word_embeddings": False}
    assert not config_from_hf(hf).tie_word_embeddings
    tied = {**hf, "text_config": {**hf["text_config"], "tie_word_embeddings": True}}
    assert config_from_hf(tied).tie_word_embeddings == carried


def test_internvl_ties_by_its_class_default():
    hf = saved_config("internvl")
    del hf["tie_word_embeddings"]
    assert config_from_hf(hf).tie_word_embeddings


def test_the_language_model_layout_loads_alike(tmp_path):
    """The same weights under model.language_model.* (transformers 5's in-memory names, as
    some converters save them), the vision tower under model.visual.*: the same logits."""
    cfg = get_preset("tiny-qwen2-vl")
    src = FIXTURES / "qwen2_vl"
    shutil.copytree(src, tmp_path / "m")
    tensors = load_file(str(src / "model.safetensors"))
    renamed = {
        ("model.language_model." + n[len("model.") :] if n.startswith("model.") else
         "model." + n if n.startswith("visual.") else n): t
        for n, t in tensors.items()
    }  # fmt: skip
    assert "model.language_model.embed_tokens.weight" in renamed
    save_file(renamed, str(tmp_path / "m" / "model.safetensors"))
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    got = last_prefill_logits(cfg, load_hf_params(tmp_path / "m", cfg), prompt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("omni", ["qwen3_omni_moe", "qwen2_5_omni"])
def test_an_omni_checkpoint_serves_its_thinker(omni, tmp_path):
    """Qwen3-Omni's and Qwen2.5-Omni's checkpoints: the thinker's config as thinker_config,
    its tensors under thinker. (transformers 5.25's Qwen3OmniMoeForConditionalGeneration:
    thinker.model.language_model.*, thinker.lm_head; the releases: thinker.model.*), a
    talker's beside them: the thinker fixture's preset and logits."""
    thinker = omni + "_thinker"
    cfg = get_preset("tiny-" + thinker.replace("_", "-"))
    hf = {"model_type": omni, "thinker_config": saved_config(thinker), "dtype": "float32"}
    hf["thinker_config"].pop("model_type")  # (the class's default)
    assert arch_fields(config_from_hf(hf)) == arch_fields(cfg)
    src = FIXTURES / thinker
    tensors = load_file(str(src / "model.safetensors"))
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    for text in ("thinker.model.language_model.", "thinker.model."):
        out = tmp_path / text
        out.mkdir()
        (out / "config.json").write_text(json.dumps(hf))
        renamed = {
            (text + n[len("model.") :] if n.startswith("model.") else "thinker." + n): t
            for n, t in tensors.items()
        }
        renamed["talker.model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"]
        save_file(renamed, str(out / "model.safetensors"))
        got = last_prefill_logits(cfg, load_hf_params(out, cfg), prompt)
        np.testing.assert_array_equal(got, want)


def test_omni_thinker_text_configs_take_their_classes_defaults():
    """Qwen3OmniMoeTextConfig renormalizes the top-k by default (Qwen3-MoE's does not)."""
    text = dict(saved_config("qwen3_omni_moe_thinker")["text_config"])
    del text["norm_topk_prob"]
    got = config_from_hf({"model_type": "qwen3_omni_moe_thinker", "text_config": text})
    assert got.norm_topk_prob
    assert not config_from_hf({**text, "model_type": "qwen3_moe"}).norm_topk_prob


def test_llama_3_2_vision_serves_its_self_attention_layers():
    """MllamaTextConfig's defaults (Llama-3.2-11B-Vision's shapes): 40 layers, 8 of them
    cross-attention, which transformers skips without an image: 32 decoder layers here, each
    named by its checkpoint index; never tied (the class ties nothing)."""
    cfg = config_from_hf({"model_type": "mllama", "text_config": {}, "tie_word_embeddings": True})
    assert cfg.num_layers == 32 and cfg.cross_attention_layers == tuple(range(3, 40, 5))
    assert not cfg.tie_word_embeddings and cfg.rope_theta == 500000.0
    names = hf_tensor_names(get_preset("tiny-mllama"))
    assert {n.split(".")[2] for n in names if n.startswith("model.layers.")} == {"0", "2"}
    assert names["model.embed_tokens.weight"].shape == (520, 64)
    with pytest.raises(ValueError, match="enable_lora: not supported for Llama 3.2 Vision"):
        LLM(str(FIXTURES / "mllama"), enable_lora=True, num_pages=16, max_model_len=64)


@pytest.mark.parametrize("layers", [[1, 1], [4], [0, 1, 2, 3], "1"])
def test_bad_cross_attention_layers_are_refused(layers):
    hf = saved_config("mllama")
    hf["text_config"]["cross_attention_layers"] = layers
    with pytest.raises(ValueError, match="cross_attention_layers="):
        config_from_hf(hf)


def test_nemotron_omni_reads_its_release_spelling_and_both_layouts(tmp_path):
    """Nemotron 3 Nano Omni's releases name the language model's config llm_config; its
    tensors as released (language_model.backbone.*, transformers 5.25's save) and as
    transformers holds them (language_model.model.*) load to the same logits."""
    hf = saved_config("nemotron_h_omni")
    legacy = {k: v for k, v in hf.items() if k != "text_config"} | {"llm_config": hf["text_config"]}
    cfg = get_preset("tiny-nemotron-h-omni")
    assert arch_fields(config_from_hf(legacy)) == arch_fields(cfg)
    src = FIXTURES / "nemotron_h_omni"
    shutil.copytree(src, tmp_path / "m")
    tensors = load_file(str(src / "model.safetensors"))
    old, new = "language_model.backbone.", "language_model.model."
    assert any(n.startswith(old) for n in tensors)
    renamed = {new + n[len(old) :] if n.startswith(old) else n: t for n, t in tensors.items()}
    save_file(renamed, str(tmp_path / "m" / "model.safetensors"))
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    got = last_prefill_logits(cfg, load_hf_params(tmp_path / "m", cfg), prompt)
    np.testing.assert_array_equal(got, want)


def test_cosmos3_reads_each_of_its_checkpoint_layouts(tmp_path):
    """Cosmos3's unified checkpoints keep the language model at the root, the newer ones its
    attention under Diffusers' names (to_q ... to_out, norm_q, norm_k: the fixture, as
    transformers 5.25 saves it); the older ones under Qwen3's, and transformers' own layout
    (model.language_model.*, model.visual.*): each loads to the same logits."""
    cfg = get_preset("tiny-cosmos3-omni")
    src = FIXTURES / "cosmos3_omni"
    assert arch_fields(config_from_hf(src)) == arch_fields(cfg)  # (untied by its class)
    tensors = load_file(str(src / "model.safetensors"))
    assert "layers.0.self_attn.to_q.weight" in tensors and "embed_tokens.weight" in tensors
    diffusers = (("to_q", "q_proj"), ("to_k", "k_proj"), ("to_v", "v_proj"), ("to_out", "o_proj"))
    diffusers += (("norm_q", "q_norm"), ("norm_k", "k_norm"))

    def qwen3_names(n: str) -> str:
        for old, new in diffusers:
            n = n.replace(f".self_attn.{old}.", f".self_attn.{new}.")
        return n

    older = {qwen3_names(n): t for n, t in tensors.items()}
    text = ("layers.", "embed_tokens.", "norm.")
    nested = {
        ("model.language_model." + n if n.startswith(text) else
         n if n.startswith("lm_head.") else "model.visual." + n): t
        for n, t in older.items()
    }  # fmt: skip
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    for i, layout in enumerate((older, nested)):
        shutil.copytree(src, tmp_path / str(i))
        save_file(layout, str(tmp_path / str(i) / "model.safetensors"))
        got = last_prefill_logits(cfg, load_hf_params(tmp_path / str(i), cfg), prompt)
        np.testing.assert_array_equal(got, want)


def test_ernie_vl_serves_its_text_experts(tmp_path):
    """ERNIE 4.5 VL: a bare config is ERNIE-4.5-VL-28B-A3B's language model, which
    transformers 5.25 builds with 21,825,437,888 parameters besides its vision experts and
    their router (meta device; tied by its class); its vision experts (stored after the
    text ones), their router and its correction bias (the second row) are not read: NaN
    there leaves the logits."""
    bare = config_from_hf({"model_type": "ernie4_5_vl_moe"}, dtype="bfloat16")
    assert (bare.num_experts, bare.moe_intermediate_size, bare.mlp_only_layers) == (64, 1536, (0,))
    assert bare.tie_word_embeddings and count_params(bare)[0] == 21_825_437_888
    cfg = get_preset("tiny-ernie4-5-vl-moe")
    src = FIXTURES / "ernie4_5_vl_moe"
    assert arch_fields(config_from_hf(src)) == arch_fields(cfg)
    shutil.copytree(src, tmp_path / "m")
    tensors = load_file(str(src / "model.safetensors"))
    vision = [n for n in tensors if n.endswith(".mlp.gate.weight_1")]
    vision += [n for n in tensors if any(f".mlp.experts.{e}." in n for e in range(8, 16))]
    assert len(vision) == 2 * (1 + 8 * 3)  # (layers 1 and 3: their router and 8 experts)
    for n in vision:
        tensors[n] = np.full_like(tensors[n], np.nan)
    for n in [n for n in tensors if n.endswith("moe_statics.e_score_correction_bias")]:
        tensors[n][1] = np.nan
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    got = last_prefill_logits(cfg, load_hf_params(tmp_path / "m", cfg), prompt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(moe_intermediate_size=24), r"moe_intermediate_size=24: \[text, vision\] widths"),
        (dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types: expected 4 of dense"),
        (dict(use_bias=True), "use_bias=True: not supported"),
    ],
)
def test_ernie_vl_refuses_bad_text_configs(change, match):
    hf = saved_config("ernie4_5_vl_moe")
    with pytest.raises(ValueError, match=match):
        config_from_hf({**hf, "text_config": {**hf["text_config"], **change}})


def _compass(**rope) -> dict:
    hf = saved_config("cohere_compass_text")
    return {**hf, "rope_parameters": {**hf["rope_parameters"], **rope}}


def test_cohere_compass_reads_its_rope_per_layer_type():
    """Compass (tests/fixtures/cohere_compass_text: its global layer without positions): in
    the cohere_compass wrapper, untied by the wrapper's class whatever text_config says; with
    the global layer rotated too (Llama 3's scaling there), the windowed layers' RoPE plain
    at their own base; logit_scale null is 1."""
    text = saved_config("cohere_compass_text")
    want = arch_fields(get_preset("tiny-cohere-compass"))
    wrapped = config_from_hf({"model_type": "cohere_compass", "text_config": text})
    assert text["tie_word_embeddings"] and arch_fields(wrapped) == {
        **want,
        "tie_word_embeddings": False,
    }
    scaled = dict(rope_type="llama3", rope_theta=1e6, factor=8.0, low_freq_factor=1.0,
                  high_freq_factor=4.0, original_max_position_embeddings=64)  # fmt: skip
    both = config_from_hf(_compass(full_attention=scaled))
    assert (both.nope_layers, both.rope_theta, both.sliding_rope_theta) == ((), 1e6, 5e4)
    assert both.rope_scaling.rope_type == "llama3" and both.rope_scaling_full_only
    assert both.sliding_full_rotary
    assert config_from_hf({**text, "logit_scale": None}).logit_scale == 1.0


@pytest.mark.parametrize(
    "hf, match",
    [
        (saved_config("cohere_compass_text") | {"rope_parameters": {}}, "no 'sliding_attention'"),
        (
            _compass(sliding_attention=dict(rope_theta=1e4, partial_rotary_factor=0.5)),
            "partial_rotary_factor=0.5: Compass rotates whole heads",
        ),
        ({"model_type": "cohere_compass_text"}, "no 'full_attention' entry"),
    ],
)
def test_cohere_compass_refuses_a_rope_it_cannot_read(hf, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf(hf)


def test_cosmos3_edge_serves_arcees_layers():
    """Cosmos3 Edge's language model is Arcee's (Llama's attention, a ReLU-squared MLP
    without a gate) with Cosmos3EdgeTextConfig's defaults (RoPE base 1e8, head_dim 128, eos
    11), untied by its class."""
    assert arch_fields(config_from_hf(FIXTURES / "cosmos3_edge")) == arch_fields(
        get_preset("tiny-cosmos3-edge")
    )
    bare = config_from_hf({"model_type": "cosmos3_edge"}, dtype="bfloat16")
    assert (bare.model_type, bare.mlp_act, bare.rope_theta) == ("arcee", "relu2", 1e8)
    assert (bare.head_dim, bare.num_kv_heads, bare.eos_token_ids) == (128, 8, (11,))
    assert not bare.tie_word_embeddings


def test_molmo2_reads_its_releases_embedding_split(tmp_path):
    """Molmo2's releases keep the text tokens' embedding rows (wte.embedding, vocab_size of
    them) apart from the image tokens' (wte.new_embedding); transformers 5.25 saves the
    whole in two equal halves under those names (the fixture): both load to the same logits.
    A bare config is Molmo2-8B's language model (q/k norms per head)."""
    cfg = get_preset("tiny-molmo2")
    src = FIXTURES / "molmo2"
    assert arch_fields(config_from_hf(src)) == arch_fields(cfg)
    tensors = load_file(str(src / "model.safetensors"))
    pre = "model.transformer.wte."
    whole = np.concatenate([tensors[pre + "embedding"], tensors[pre + "new_embedding"]])
    assert tensors[pre + "embedding"].shape[0] == 260 and whole.shape[0] == 512 + 8
    tensors[pre + "embedding"], tensors[pre + "new_embedding"] = whole[:512], whole[512:]
    shutil.copytree(src, tmp_path / "m")
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    prompt = json.loads((src / "reference.json").read_text())["prompts"][0]
    want = last_prefill_logits(cfg, load_hf_params(src, cfg), prompt)
    got = last_prefill_logits(cfg, load_hf_params(tmp_path / "m", cfg), prompt)
    np.testing.assert_array_equal(got, want)
    bare = config_from_hf({"model_type": "molmo2"}, dtype="bfloat16")
    assert (bare.num_layers, bare.hidden_size, bare.vocab_size) == (36, 4096, 151936)
    assert bare.qk_norm and not bare.qk_norm_full and not bare.tie_word_embeddings


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(norm_after=True), "norm_after=True: norms after the blocks"),
        (dict(qk_norm_type="gemma"), "qk_norm_type='gemma'"),
        (
            dict(rope_scaling_layers=[0], rope_parameters=dict(rope_type="linear", factor=2.0)),
            r"rope_scaling_layers=\[0\]: scaled RoPE on every layer or none",
        ),
    ],
)
def test_molmo2_refuses_what_it_cannot_serve(change, match):
    hf = saved_config("molmo2")
    with pytest.raises(ValueError, match=match):
        config_from_hf({**hf, "text_config": {**hf["text_config"], **change}})


def test_paddleocr_vl_rotates_halves_not_ernies_pairs():
    """PaddleOCR-VL's language model is ERNIE 4.5 dense's but for its RoPE (on halves: its
    attention's, Qwen2.5-Omni's): served as ERNIE's (pairs) the fixture's logits move; tied by
    the wrapper's class whatever text_config says."""
    cfg = get_preset("tiny-paddleocr-vl")
    src = FIXTURES / "paddleocr_vl"
    assert arch_fields(config_from_hf(src)) == arch_fields(cfg)
    hf = saved_config("paddleocr_vl")
    assert not hf["text_config"]["tie_word_embeddings"]
    assert config_from_hf(
        {k: v for k, v in hf.items() if k != "tie_word_embeddings"}
    ).tie_word_embeddings
    params = load_hf_params(src, cfg)
    prompt = json.loads((src / "reference.json").read_text())["prompts"][-1]
    want = last_prefill_logits(cfg, params, prompt)
    ernie = last_prefill_logits(cfg.replace(model_type="ernie4_5"), params, prompt)
    assert np.abs(ernie - want).max() > 0.05


def test_emu3_serves_its_llama_text_model():
    """Emu3's language model is Llama's (its decoder layers' dropout aside) with
    Emu3TextConfig's defaults (RoPE base 1e6, 184,622 ids), untied by its class whatever
    text_config says."""
    hf = saved_config("emu3")
    assert arch_fields(config_from_hf(FIXTURES / "emu3")) == arch_fields(get_preset("tiny-emu3"))
    tied = {**hf, "text_config": {**hf["text_config"], "tie_word_embeddings": True}}
    del tied["tie_word_embeddings"]
    assert not config_from_hf(tied).tie_word_embeddings
    bare = config_from_hf({"model_type": "emu3"}, dtype="bfloat16")
    assert (bare.model_type, bare.vocab_size, bare.rope_theta) == ("llama", 184622, 1e6)
    assert (bare.num_kv_heads, bare.eos_token_ids) == (8, (151850,))
