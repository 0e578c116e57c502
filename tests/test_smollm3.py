"""Hugging Face's SmolLM3 (configs/hf_smollm3.py): the fixture's config read to its preset;
transformers' default NoPE layers and windows; the refusals. HF parity:
tests/test_hf_parity.py (smollm3)."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from tests.family_cases import FIXTURES, arch_fields, saved_config


def test_config_nope_layers_and_windows():
    """The fixture reads as its preset; by default every fourth layer takes no RoPE, and a
    window (with use_sliding_window) covers those layers alone; without it, no window."""
    assert arch_fields(config_from_hf(FIXTURES / "smollm3")) == arch_fields(
        get_preset("tiny-smollm3")
    )
    plain = {k: v for k, v in saved_config("smollm3").items() if k not in ("no_rope_layers",)}
    plain.pop("layer_types")
    cfg = config_from_hf(dict(plain, num_hidden_layers=8, no_rope_layer_interval=2))
    assert cfg.nope_layers == (1, 3, 5, 7) and cfg.full_attention_layers == (0, 2, 4, 6)
    cfg = config_from_hf(dict(plain, use_sliding_window=False))
    assert cfg.sliding_window is None and cfg.nope_layers == (3,)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(no_rope_layers=[1, 1, 2, 0]), "no_rope_layers: expected 4 entries of 0 / 1"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(layer_types=["local"] * 4), "layer_types: expected 4"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("smollm3"), **change})
