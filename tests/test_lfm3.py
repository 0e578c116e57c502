"""LiquidAI's LFM3 (configs/hf_lfm2.py): the fixture's config read to its preset,
transformers' default layer pattern, its RoPE per layer kind, its window on the attention
layers alone, the refusals; the release's tensor names. HF parity: tests/test_hf_parity.py
(reference path), tests/test_linear_attention.py (the engine, and prefix caching with state
snapshots and window pages together)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names
from tests.family_cases import arch_fields, saved_config

FIXTURES = Path(__file__).parent / "fixtures"


def test_config_layer_pattern_rope_and_windows():
    """The fixture reads as its preset; transformers' default kinds (per four layers: conv,
    conv, full, conv, the first of each four from the second windowed); the global layers'
    proportional RoPE and the windowed ones' base; the window on attention layers only."""
    cfg = config_from_hf(FIXTURES / "lfm3")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-lfm3"))
    assert cfg.windowed_layers == (4,) and cfg.hybrid_window == 8
    plain = {
        k: v for k, v in saved_config("lfm3").items() if k not in ("layer_types", "rope_parameters")
    }
    cfg = config_from_hf(dict(plain, num_hidden_layers=9))
    assert cfg.linear_attention_layers == (0, 1, 3, 5, 7) and cfg.full_attention_layers == (2, 6)
    assert cfg.windowed_layers == (4, 8)
    assert (cfg.rope_theta, cfg.sliding_rope_theta, cfg.partial_rotary_factor) == (1e6, 1e4, 0.5)
    cfg = config_from_hf(dict(plain, use_attention_gate=False, use_sandwich_norm=False))
    assert not cfg.head_gate and not cfg.sandwich_norms


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("lfm3", dict(attention_bias=True), "attention_bias=True"),
        ("lfm3", dict(sliding_window=None), "sliding_attention layers need a sliding_window"),
        ("lfm3", dict(layer_types=["conv"] * 6), "needs a full_attention layer"),
        ("lfm2", dict(layer_types=["sliding_attention", "full_attention"] * 2), "LFM3.s"),
        (
            "lfm3",
            dict(rope_parameters=dict(full_attention=dict(rope_type="yarn", factor=2.0))),
            "rope_type 'yarn'",
        ),
    ],
)
def test_bad_configs_are_refused_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})


def test_tensor_names_are_the_releases():
    """LFM2's block names (operator_norm, conv, feed_forward w1 / w3 / w2, embedding_norm),
    the norms after each block, the attention's per-head gate_proj: all in the fixture."""
    names = set(hf_tensor_names(get_preset("tiny-lfm3")))
    with safe_open(FIXTURES / "lfm3" / "model.safetensors", "np") as f:
        assert names == set(f.keys())
    layer = "model.layers.2."
    want = ("post_operator_norm.weight", "post_ffn_norm.weight", "self_attn.gate_proj.weight")
    assert {layer + n for n in want} <= names and "model.layers.0.conv.in_proj.weight" in names
