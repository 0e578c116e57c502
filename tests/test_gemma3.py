"""Google's Gemma 3 (configs/hf_gemma3.py): the fixtures' configs (the text model, and the
same in its multimodal wrapper) read to their preset; the released configs' older
spelling of the RoPE and the window pattern; the refusals. HF parity:
tests/test_hf_parity.py (gemma3_text, gemma3)."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from tests.family_cases import FIXTURES, arch_fields, saved_config


@pytest.mark.parametrize("arch", ["gemma3_text", "gemma3"])
def test_fixture_configs_read_as_the_preset(arch):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-gemma3"))
    assert cfg.model_type == "gemma3_text" and cfg.norm_offset == 1.0


def test_the_released_spelling_of_rope_and_windows():
    """Gemma 3 27B's config.json: rope_theta and rope_scaling for the global layers,
    rope_local_base_freq for the windowed ones, sliding_window_pattern for the kinds."""
    released = dict(
        model_type="gemma3_text",
        num_hidden_layers=12,
        query_pre_attn_scalar=168,
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
        sliding_window=1024,
        sliding_window_pattern=6,
    )
    cfg = config_from_hf(released)
    assert cfg.full_attention_layers == (5, 11) and cfg.sliding_window == 1024
    assert cfg.rope_theta == 1e6 and cfg.sliding_rope_theta == 1e4
    assert cfg.rope_scaling.rope_type == "linear" and cfg.rope_scaling.factor == 8.0
    assert cfg.attention_multiplier == pytest.approx(168**-0.5, rel=1e-12)
    # Every layer global (a pattern of 1): no window.
    cfg = config_from_hf(dict(released, sliding_window_pattern=1))
    assert cfg.sliding_window is None and cfg.full_attention_layers == ()


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0: soft-capped"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
        (dict(query_pre_attn_scalar=0), "query_pre_attn_scalar=0: must be a number > 0"),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0}}),
            "rope_type 'yarn' \\(full_attention\\)",
        ),
        (dict(layer_types=["global"] * 2), "layer_types: expected 2 entries"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("gemma3_text"), **change})
