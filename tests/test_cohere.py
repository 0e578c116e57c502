"""Cohere's Command models (configs/hf_cohere.py): the fixtures' configs read to their
presets; transformers' rules for the layer kinds, head width, rotated dense layers, router
and shared experts; the refusals; Cohere's LayerNorm against its definition. HF parity:
tests/test_hf_parity.py (cohere2, cohere2_moe)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.layers import model_norm
from tests.family_cases import arch_fields, saved_config

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "arch, preset", [("cohere2", "tiny-cohere2"), ("cohere2_moe", "tiny-cohere2-moe")]
)
def test_fixtures_read_as_their_presets(arch, preset):
    assert arch_fields(config_from_hf(FIXTURES / arch)) == arch_fields(get_preset(preset))


def test_transformers_rules():
    """Layer kinds from sliding_window_pattern (cohere2_moe's dense prefix by its own
    pattern); cohere2's head width hidden / heads whatever head_dim says; a dense layer's
    global attention rotated only under prefix pattern 1; the sigmoid router renormalized
    with norm_topk_prob; "sum" adds the shared output."""
    dense = {k: v for k, v in saved_config("cohere2").items() if k != "layer_types"}
    cfg = config_from_hf(dict(dense, num_hidden_layers=8, sliding_window_pattern=2, head_dim=99))
    assert cfg.full_attention_layers == cfg.nope_layers == (1, 3, 5, 7) and cfg.head_dim == 16
    moe = {k: v for k, v in saved_config("cohere2_moe").items() if "layer_types" not in k}
    moe.update(first_k_dense_replace=2, num_hidden_layers=6, sliding_window_pattern=4)
    cfg = config_from_hf(dict(moe, prefix_dense_sliding_window_pattern=1))
    assert cfg.full_attention_layers == (0, 1, 5) and cfg.nope_layers == (5,)
    assert cfg.mlp_only_layers == (0, 1)
    cfg = config_from_hf(dict(moe, prefix_dense_sliding_window_pattern=2))
    assert cfg.full_attention_layers == cfg.nope_layers == (1, 5)
    cfg = config_from_hf(
        dict(moe, expert_selection_fn="sigmoid", shared_expert_combination_strategy="sum")
    )
    assert (cfg.scoring_func, cfg.norm_topk_prob, cfg.shared_expert_average) == (
        "sigmoid",
        True,
        False,
    )
    cfg = config_from_hf(dict(moe, rms_norm_eps=None, num_shared_experts=0))
    assert cfg.norm_kind == "layer" and cfg.num_shared_experts == 0
    assert not cfg.shared_expert_average


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("cohere2", dict(attention_bias=True), "attention_bias=True"),
        ("cohere2", dict(sliding_window=None), "sliding_window: null"),
        ("cohere2", dict(hidden_act="gelu"), "hidden_act='gelu'"),
        ("cohere2", dict(logit_scale=0), "logit_scale=0"),
        ("cohere2", dict(layer_types=["full_attention"]), "layer_types: expected 4"),
        ("cohere2_moe", dict(expert_selection_fn="tanh"), "expert_selection_fn='tanh'"),
        ("cohere2_moe", dict(shared_expert_combination_strategy="max"), "strategy='max'"),
        ("cohere2_moe", dict(mlp_layer_types=["dense"] * 3), "mlp_layer_types: expected 4"),
        (
            "cohere2_moe",
            dict(layer_types=None, sliding_window_pattern=0),
            "sliding_window_pattern=0",
        ),
    ],
)
def test_bad_configs_are_refused_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})


def test_layer_norm_is_coheres():
    """(x - mean) / sqrt(var + eps) * weight over the last axis, in float32, then cast."""
    cfg = get_preset("tiny-cohere2")
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, (5, 64)).astype(np.float32)
    w = rng.normal(1.0, 0.1, 64).astype(np.float32)
    got = np.asarray(model_norm(jnp.asarray(x), jnp.asarray(w), cfg))
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    want = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert (
        np.abs(
            got
            - np.asarray(model_norm(jnp.asarray(x), jnp.asarray(w), cfg.replace(norm_kind="rms")))
        ).max()
        > 0.1
    )
    with pytest.raises(ValueError, match="norm_kind='batch'"):
        cfg.replace(norm_kind="batch")
