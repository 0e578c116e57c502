"""Xiaomi MiMo-V2-Flash's configs, cache and kernels' fallback (configs/hf_mimo.py): the fixture's
config.json (transformers 5.25's save) and the released checkpoints' spelling (the remote
code's hybrid_layer_pattern, swa_* fields, sliding_window_size) read to the same model, bad
fields refused by name, the real shapes' cache, and the Pallas path's fallback for values
narrower than the keys. The fixture's HF parity: tests/test_hf_parity.py (reference path) and
tests/test_engine.py (paged engine)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from tests.family_cases import arch_fields, saved_config

FIXTURE = Path(__file__).parent / "fixtures" / "mimo_v2_flash"


def _released() -> dict:
    """The fixture's config as the released checkpoints spell it (their remote code's
    fields, which vLLM and SGLang read), none of transformers' own per-layer fields."""
    hf = {
        k: v
        for k, v in saved_config("mimo_v2_flash").items()
        if k
        not in (
            "layer_types",
            "mlp_layer_types",
            "rope_parameters",
            "sliding_window",
            "rms_norm_eps",
        )
    }
    return dict(
        hf,
        hybrid_layer_pattern=[0, 1, 1, 0],
        moe_layer_freq=[0, 1, 1, 1],
        swa_num_attention_heads=4,
        swa_num_key_value_heads=2,
        swa_head_dim=32,
        swa_v_head_dim=16,
        rope_theta=5000000.0,
        swa_rope_theta=10000.0,
        partial_rotary_factor=0.334,
        sliding_window_size=7,
        layernorm_epsilon=1e-5,
        add_swa_attention_sink_bias=True,
        add_full_attention_sink_bias=False,
        n_shared_experts=None,
    )


def test_saved_and_released_spellings_read_as_the_preset():
    want = arch_fields(get_preset("tiny-mimo-v2-flash"))
    assert arch_fields(config_from_hf(FIXTURE)) == want
    assert arch_fields(config_from_hf(_released())) == want
    # The released config stores a null routed_scaling_factor: transformers reads 1.0.
    released = config_from_hf(dict(_released(), routed_scaling_factor=None))
    assert released.routed_scaling_factor == 1.0
    # The windowed layers' KV heads, without the hub's field: transformers' twice the full's.
    hf = {k: v for k, v in _released().items() if k != "swa_num_key_value_heads"}
    assert config_from_hf(hf).num_kv_heads == 2


def test_transformers_defaults_for_the_layer_kinds_rope_and_value_scale():
    """Without layer_types / hybrid_layer_pattern: the first layer and every sixth global;
    without mlp_layer_types / moe_layer_freq: the first layer dense; no rope_parameters:
    transformers' 5e6 / 1e4 on 0.334 of each head; no attention_value_scale: 0.707."""
    hf = {
        k: v
        for k, v in saved_config("mimo_v2_flash").items()
        if k not in ("layer_types", "mlp_layer_types")
    }
    hf = {k: v for k, v in hf.items() if k not in ("rope_parameters", "attention_value_scale")}
    cfg = config_from_hf(dict(hf, num_hidden_layers=12))
    assert cfg.full_attention_layers == (0, 5, 11)
    assert cfg.mlp_only_layers == (0,)
    assert (cfg.rope_theta, cfg.sliding_rope_theta) == (5e6, 1e4)
    assert cfg.rotary_dim == 10 and cfg.attention_value_scale == 0.707
    assert config_from_hf(dict(hf, attention_value_scale=None)).attention_value_scale == 1.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(add_full_attention_sink_bias=True), "add_full_attention_sink_bias=True"),
        (dict(swa_head_dim=64), "swa_head_dim=64"),
        (dict(swa_num_attention_heads=8), "swa_num_attention_heads=8"),
        (dict(hybrid_layer_pattern=[0, 1, 2, 0]), r"hybrid_layer_pattern: expected 4 entries"),
        (dict(moe_layer_freq=[0, 1]), r"moe_layer_freq: expected 4 entries"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), "rope_scaling="),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn"}}),
            r"rope_parameters\['full_attention'\]",
        ),
        (
            dict(
                rope_parameters={
                    "full_attention": {"rope_theta": 5e6, "partial_rotary_factor": 0.5},
                    "sliding_attention": {"rope_theta": 1e4, "partial_rotary_factor": 0.334},
                }
            ),
            "partial_rotary_factor 0.5",
        ),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**_released(), **change})


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attention_value_scale=0.0), "attention_value_scale=0.0"),
        (dict(v_head_dim=-1), "v_head_dim=-1"),
        (dict(attention_sinks=False), "windowed_sinks_only=True: needs attention_sinks"),
    ],
)
def test_bad_model_config_fields_are_refused_by_name(change, match):
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-mimo-v2-flash").replace(**change)


def test_params_and_cache_take_each_layers_geometry():
    """Values 16 wide beside 32-wide keys in the projections and the pages; the sinks on the
    windowed layers only; the windowed layers' pages in a pool of their own."""
    from engine.step import init_kv_pages
    from models.specs import param_specs

    cfg = get_preset("tiny-mimo-v2-flash")
    attn = [param_specs(cfg)["layers"][i]["attn"] for i in range(cfg.num_layers)]
    assert [a["wv"].shape for a in attn] == [(64, 1, 16), (64, 2, 16), (64, 2, 16), (64, 1, 16)]
    assert [a["wo"].shape for a in attn] == [(4, 16, 64)] * 4
    assert ["sinks" in a for a in attn] == [False, True, True, False]
    kv = init_kv_pages(cfg, 12, 8, window_num_pages=5)
    shapes = [tuple(x.shape for x in layer) for layer in kv]
    assert shapes[0] == ((12, 8, 1, 32), (12, 8, 1, 16))
    assert shapes[1] == ((5, 8, 2, 32), (5, 8, 2, 16))
    assert cfg.kv_bytes_per_token() == (2 * (32 + 16) + 2 * 2 * (32 + 16)) * 4


def test_real_shapes_cache():
    """MiMo-V2-Flash: 9 global layers of 4 KV heads (keys 192, values 128 wide) and 39
    windowed ones of 8 (129 keys each, in their own pool)."""
    cfg = get_preset("mimo-v2-flash")
    assert len(cfg.full_attention_layers) == 9 and cfg.hybrid_window == 129
    assert cfg.kv_bytes_per_token(2) == (9 * 4 + 39 * 8) * (192 + 128) * 2
    assert cfg.rotary_dim == 64


def test_pallas_path_falls_back_to_xla_for_narrow_values():
    """The Pallas GQA kernels take values as wide as the keys only: the engine's Pallas
    attention refuses the shape and computes the XLA path's result instead."""
    import pallas_kernels as pk
    from engine import paged_attention as pa
    from engine.attention_ops import get_attention_ops

    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(5, 4, 32)), jnp.float32)
    k_pages = jnp.asarray(rng.normal(size=(6, 8, 2, 32)), jnp.float32)
    v_pages = jnp.asarray(rng.normal(size=(6, 8, 2, 16)), jnp.float32)
    with pytest.raises(pk.UnsupportedShapeError, match="v_pages head dim 16"):
        pk.check_gqa_supported(q, k_pages, v_pages)
    # Two sequences: a 3-token prefill chunk after 4 cached tokens, and one decode at 9.
    meta = pa.build_metadata(
        jnp.array([0, 3, 4], jnp.int32),
        jnp.array([4, 5, 6, 9, 0], jnp.int32),
        jnp.array([7, 10], jnp.int32),
        jnp.array([[0, 1], [2, 3]], jnp.int32),
        5,
    )
    sinks = jnp.asarray(rng.normal(size=(4,)), jnp.float32)
    args = (q, k_pages, v_pages, meta, 32**-0.5, 2)
    xla = get_attention_ops("xla", False).gqa(*args, window=4, sinks=sinks)
    got = get_attention_ops("pallas", False).gqa(*args, window=4, sinks=sinks)
    assert got.shape == (5, 4, 16)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(xla))
    # Written out: query head h reads KV head h // 2; keys p - 3 .. p and the head's sink.
    k, v = np.asarray(k_pages), np.asarray(v_pages)
    for t, (pos, pages) in enumerate([(4, (0, 1)), (5, (0, 1)), (6, (0, 1)), (9, (2, 3))]):
        keys = [j for j in range(pos + 1) if j > pos - 4]
        for h in range(4):
            rows = [(pages[j // 8], j % 8) for j in keys]
            scores = np.array([q[t, h] @ k[n, o, h // 2] for n, o in rows]) * 32**-0.5
            weights = np.exp(np.append(scores, sinks[h]) - max(scores.max(), sinks[h]))
            want = (weights[:-1] / weights.sum()) @ np.array([v[n, o, h // 2] for n, o in rows])
            np.testing.assert_allclose(np.asarray(got[t, h]), want, rtol=1e-5, atol=1e-6)
