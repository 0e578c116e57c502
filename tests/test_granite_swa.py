"""IBM Granite SWA (configs/hf_granite.py: granite_swa, granitemoe_swa): the fixtures'
configs read to their presets; transformers' default layer kinds; the per-layer RoPE bases
as ModelConfig's (the global layers', the windowed ones', none); the refusals; the MoE's
tensor names. HF parity: tests/test_hf_parity.py (granite_swa, granitemoe_swa)."""

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
    "arch, preset",
    [
        ("granite_swa", "tiny-granite-swa"),
        ("granitemoe_swa", "tiny-granitemoe-swa"),
        ("granite", "tiny-granite"),  # (Granite 3's dense models: no sinks, no window)
    ],
)
def test_fixtures_read_as_their_presets(arch, preset):
    assert arch_fields(config_from_hf(FIXTURES / arch)) == arch_fields(get_preset(preset))


def test_layer_kinds_and_rope_bases():
    """Every fourth layer from 0 global by default; layer_rope_theta: 0 a layer without
    positions, one base per layer kind (the global one as rope_theta, the windowed one as
    sliding_rope_theta where they differ); none given: the config's base everywhere."""
    hf = {k: v for k, v in saved_config("granite_swa").items() if k != "layer_types"}
    cfg = config_from_hf(dict(hf, num_hidden_layers=8, layer_rope_theta=[0, 7.0, 7.0, 7.0] * 2))
    assert cfg.full_attention_layers == cfg.nope_layers == (0, 4)
    assert (cfg.rope_theta, cfg.sliding_rope_theta) == (7.0, 0.0)
    cfg = config_from_hf(dict(hf, layer_rope_theta=[5.0, 7.0, 7.0, 0]))
    assert (cfg.rope_theta, cfg.sliding_rope_theta, cfg.nope_layers) == (5.0, 7.0, (3,))
    cfg = config_from_hf(dict(hf, layer_rope_theta=None, sliding_window=None))
    assert cfg.nope_layers == () and cfg.sliding_window is None and cfg.attention_sinks
    assert cfg.rope_theta == saved_config("granite_swa")["rope_parameters"]["rope_theta"]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(layer_rope_theta=[5.0, 7.0, 8.0, 7.0]), "one base for the global layers"),
        (dict(layer_rope_theta=[5.0, -1.0, 7.0, 7.0]), "layer_rope_theta: expected 4"),
        (dict(layer_types=["full_attention", "local"] * 2), "layer_types: expected 4"),
        (dict(mlp_bias=True), "mlp_bias=True"),
        (
            dict(
                layer_rope_theta=[5.0, 7.0, 7.0, 7.0],
                rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=5.0),
            ),
            "two bases with rope scaling",
        ),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("granite_swa"), **change})


def test_moe_tensor_names_are_transformers_own():
    """granitemoe_swa's experts and router under transformers' module names (it converts
    no Granite release names for this model type), its shared MLP and sinks as Granite's."""
    names = set(hf_tensor_names(get_preset("tiny-granitemoe-swa")))
    with safe_open(FIXTURES / "granitemoe_swa" / "model.safetensors", "np") as f:
        assert names == set(f.keys())
    pre = "model.layers.1."
    want = ("block_sparse_moe.experts.gate_up_proj", "block_sparse_moe.router.weight")
    assert {pre + n for n in want + ("self_attn.sinks", "shared_mlp.input_linear.weight")} <= names
