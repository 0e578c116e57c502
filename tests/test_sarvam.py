"""Sarvam-30B, Param2 and Sarvam-105B (configs/hf_sarvam.py): read as their families
(GLM-4.5's, DeepSeek-V3's) with their own classes' defaults, names and the releases'
spellings; the releases' tensor names. HF parity: tests/test_hf_parity.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf
from configs.model_config import RopeScaling
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names
from tests.family_cases import arch_fields, saved_config

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "arch, preset",
    [
        ("sarvam_moe", "tiny-sarvam-moe"),
        ("param2moe", "tiny-param2moe"),
        ("sarvam_mla", "tiny-sarvam-mla"),
    ],
)
def test_fixtures_read_as_their_presets_keeping_their_model_type(arch, preset):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset(preset)) and cfg.model_type == arch


def test_release_names_of_fields_and_class_defaults():
    """The releases' num_experts / num_shared_experts / use_qkv_bias / num_mtp_layers mean
    the family's fields; an empty config is the class's defaults (the real presets)."""
    hf = saved_config("param2moe")
    for name, field in (
        ("num_experts", "n_routed_experts"),
        ("num_shared_experts", "n_shared_experts"),
    ):
        hf[name] = hf.pop(field)
    hf["use_qkv_bias"] = hf.pop("attention_bias")
    hf["num_mtp_layers"] = hf.pop("num_nextn_predict_layers")
    assert arch_fields(config_from_hf(hf)) == arch_fields(get_preset("tiny-param2moe"))
    for model_type, preset in (
        ("sarvam_moe", "sarvam-30b"),
        ("param2moe", "param2-17b-a2.4b"),
        ("sarvam_mla", "sarvam-105b"),
    ):
        cfg = config_from_hf({"model_type": model_type}, dtype="bfloat16")
        assert arch_fields(cfg) == arch_fields(get_preset(preset)), model_type


def test_sarvam_105b_remote_code_spelling():
    """Sarvam-105B's remote-code config: head_dim (kv_lora_rank + qk_rope_head_dim, vLLM's
    MLA cache width) and q_head_dim dropped, rope_scaling "deepseek_yarn" read as YaRN."""
    yarn = dict(factor=40.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1)
    yarn.update(mscale=1.0, mscale_all_dim=1.0)
    base = dict(saved_config("sarvam_mla"), rope_scaling=dict(yarn, rope_type="yarn"))
    base.pop("rope_parameters")
    release = dict(base, head_dim=40, q_head_dim=24, rope_scaling=dict(yarn, type="deepseek_yarn"))
    got, want = config_from_hf(release), config_from_hf(base)
    assert arch_fields(got) == arch_fields(want)
    assert got.rope_scaling.rope_type == "yarn" and got.rope_scaling.factor == 40.0
    assert want.rope_scaling != RopeScaling()


def test_tensor_names_are_the_releases():
    """Sarvam-30B's and Param2's attention under Bailing's names, q/k/v fused (with their
    biases where there are); Sarvam-105B's DeepSeek-V3's: every name in the fixtures."""
    for arch, preset in (("param2moe", "tiny-param2moe"), ("sarvam_mla", "tiny-sarvam-mla")):
        names = set(hf_tensor_names(get_preset(preset)))
        with safe_open(FIXTURES / arch / "model.safetensors", "np") as f:
            assert names <= set(f.keys()), sorted(names - set(f.keys()))
    layer = "model.layers.1.attention."
    want = {"query_key_value.weight", "query_key_value.bias", "dense.weight"}
    want |= {"query_layernorm.weight", "key_layernorm.weight"}
    names = set(hf_tensor_names(get_preset("tiny-param2moe")))
    assert {layer + n for n in want} <= names and "model.word_embeddings.weight" in names
    assert not any("q_proj" in n or "self_attn" in n for n in names)
    assert "model.layers.1.mlp.gate.expert_bias" in names
