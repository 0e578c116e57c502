"""Hunyuan 3 and MiniCPM5-MoE (configs/hf_hyv3.py): the fixtures' configs read to their
presets, the class defaults to the real-shape ones; Hunyuan 3's release tensor names; the
refusals. HF parity: tests/test_hf_parity.py (hy_v3, minicpm5_moe)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names
from tests.family_cases import arch_fields, saved_config

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "arch, preset, real",
    [("hy_v3", "tiny-hy-v3", "hy-v3"), ("minicpm5_moe", "tiny-minicpm5-moe", "minicpm5-15b-a2.5b")],
)
def test_configs_read_as_their_presets(arch, preset, real):
    assert arch_fields(config_from_hf(FIXTURES / arch)) == arch_fields(get_preset(preset))
    assert arch_fields(config_from_hf({"model_type": arch})) == arch_fields(get_preset(real))


def test_dense_layers_and_release_names():
    """mlp_layer_types picks the dense layers (MiniCPM5: else first_k_dense_replace);
    Hunyuan 3's router, correction bias and shared MLP under its release's names, all in
    the fixture."""
    hf = dict(saved_config("hy_v3"), mlp_layer_types=["sparse", "dense", "sparse"])
    assert config_from_hf(hf).mlp_only_layers == (1,)
    hf = {k: v for k, v in saved_config("minicpm5_moe").items() if k != "mlp_layer_types"}
    assert config_from_hf(dict(hf, first_k_dense_replace=2)).mlp_only_layers == (0, 1)
    names = set(hf_tensor_names(get_preset("tiny-hy-v3")))
    with safe_open(FIXTURES / "hy_v3" / "model.safetensors", "np") as f:
        assert names <= set(f.keys())
    layer = "model.layers.1.mlp."
    assert {layer + "router.gate.weight", layer + "expert_bias"} <= names
    assert layer + "shared_mlp.up_proj.weight" in names


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("hy_v3", dict(attention_bias=True), "attention_bias=True"),
        ("hy_v3", dict(mlp_bias=True), "mlp_bias=True"),
        ("hy_v3", dict(mlp_layer_types=["dense"]), "mlp_layer_types: expected 3"),
        ("minicpm5_moe", dict(use_gated_attention=False), "use_gated_attention=False"),
        ("minicpm5_moe", dict(hidden_act="gelu"), "hidden_act='gelu'"),
    ],
)
def test_bad_configs_are_refused_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})
