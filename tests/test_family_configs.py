"""IBM Granite 3's MoE configs (transformers' granitemoe and granitemoeshared), AllenAI's
FlexOlmo (flex_olmo), OLMo 2 (olmo2) and OLMo 3 (olmo3), and LG's EXAONE 4.0 (exaone4) read
as served: the fixtures' HF parity is tests/test_hf_parity.py's; here, the fields around
them."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names
from models.specs import init_params

FIXTURES = Path(__file__).parent / "fixtures"


def _hf(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "config.json").read_text())


def test_a_shared_config_without_its_shared_mlp_is_granitemoe():
    """granitemoeshared with shared_intermediate_size 0 (its class default) builds no shared
    MLP in transformers: the granitemoe model, reading no shared_mlp weights."""
    want = get_preset("tiny-granitemoe").replace(model_type="granitemoeshared")
    for size in (0, None):
        hf = {**_hf("granitemoe"), "model_type": "granitemoeshared"}
        hf = {**hf, "shared_intermediate_size": size} if size is not None else hf
        assert config_from_hf(hf).replace(name=want.name) == want
    # granitemoe's class has no such field: one in its config is not read.
    granitemoe = config_from_hf({**_hf("granitemoe"), "shared_intermediate_size": 32})
    assert granitemoe.num_shared_experts == 0 and granitemoe.shared_expert_width == 0
    shared = config_from_hf(_hf("granitemoeshared"))
    assert (shared.num_shared_experts, shared.shared_expert_width) == (1, 32)


def test_unrepresented_granite_moe_fields_are_refused_by_name():
    for arch, change, match in [
        ("granitemoe", dict(num_local_experts=0), "num_local_experts=0: granitemoe needs >= 1"),
        ("granitemoe", dict(num_local_experts=None), "num_local_experts=None"),
        ("granitemoe", dict(attention_bias=True), "attention_bias=True"),
        ("granitemoe", dict(hidden_act="gelu"), "hidden_act='gelu'"),
        ("granitemoeshared", dict(shared_intermediate_size=-1), "shared_intermediate_size=-1"),
        ("granitemoeshared", dict(shared_intermediate_size=1.5), "shared_intermediate_size=1.5"),
        ("granitemoe", dict(rope_parameters={"rope_type": "dynamic"}), "rope"),
    ]:
        with pytest.raises(ValueError, match=match):
            config_from_hf({**_hf(arch), **change})


@pytest.mark.parametrize(
    "arch, ffn", [("flex_olmo", "moe"), ("olmo2", "mlp"), ("olmo3", "mlp"), ("exaone4", "mlp")]
)
def test_olmo2_layers_norm_the_blocks_outputs_alone(arch, ffn):
    """OLMo 2's layers (FlexOlmo's, EXAONE 4.0's) have no norm before a block: the param tree
    and the checkpoint names hold the outputs' norms only (every norm scaled in float32 in
    OLMo 2's RMSNorm, after the cast in EXAONE's); a model normed nowhere is refused."""
    cfg = config_from_hf(_hf(arch))
    assert (cfg.pre_norms, cfg.sandwich_norms) == (False, True)
    assert cfg.norm_scale_in_float32 == (arch != "exaone4")
    layer = init_params(cfg, jax.random.key(0))["layers"][0]
    assert "attn_norm" not in layer and "mlp_norm" not in layer
    assert {"attn_post_norm", "mlp_post_norm", ffn} <= set(layer)
    names = [n for n in hf_tensor_names(cfg) if n.startswith("model.layers.0.") and "norm" in n]
    assert sorted(names) == [
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.post_feedforward_layernorm.weight",
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.0.self_attn.q_norm.weight",
    ]
    with pytest.raises(ValueError, match="pre_norms=False: needs sandwich_norms"):
        cfg.replace(sandwich_norms=False)


def test_flex_olmo_reads_no_clip_qkv():
    """OLMoE's clip_qkv is not OLMo 2's: transformers' FlexOlmo attention clips nothing."""
    assert config_from_hf({**_hf("flex_olmo"), "clip_qkv": 1.0}).clip_qkv is None


def test_exaone4_windows_and_positions():
    """EXAONE 4.0's layer kinds as K-EXAONE's reader takes them: every fourth layer global
    and without positions (sliding_window_pattern 4), the others windowed with RoPE; no
    window at all: every layer global, and rotated; bad patterns refused by name."""
    hf = _hf("exaone4")
    cfg = config_from_hf(hf)
    assert (cfg.full_attention_layers, cfg.nope_layers, cfg.sliding_window) == ((3,), (3,), 8)
    no_layer_types = config_from_hf({k: v for k, v in hf.items() if k != "layer_types"})
    assert no_layer_types.replace(name=cfg.name) == cfg
    plain = config_from_hf({**hf, "sliding_window": None, "layer_types": None})
    assert (plain.sliding_window, plain.nope_layers) == (None, ())
    for change, match in [
        (dict(layer_types=None, sliding_window_pattern="LLLG"), "sliding_window_pattern='LLLG'"),
        (dict(layer_types=["full_attention"] * 3), "layer_types: expected 4"),
        (dict(sliding_window=None), "sliding_attention layers need a sliding_window"),
    ]:
        with pytest.raises(ValueError, match=match):
            config_from_hf({**hf, **change})


def test_olmo3_rope_per_layer_kind():
    """OLMo 3's RoPE per layer kind: the full layers' (YaRN in the fixture) is the model's,
    the windowed layers' plain at the same theta (rope_scaling_full_only); the legacy form
    (rope_scaling and rope_theta at the top) reads the same; anything else refused by name.
    Without a window every layer is global; the default layer kinds every fourth global."""
    hf = _hf("olmo3")
    cfg = config_from_hf(hf)
    assert cfg.rope_scaling_full_only and cfg.rope_scaling.rope_type == "yarn"
    assert (cfg.rope_theta, cfg.sliding_window, cfg.full_attention_layers) == (5e5, 8, (3,))
    full = hf["rope_parameters"]["full_attention"]
    legacy = {**hf, "rope_parameters": None, "rope_theta": 5e5, "rope_scaling": full}
    assert config_from_hf(legacy).replace(name=cfg.name) == cfg
    no_kinds = config_from_hf({k: v for k, v in hf.items() if k != "layer_types"})
    assert no_kinds.replace(name=cfg.name) == cfg
    plain = config_from_hf({**hf, "sliding_window": None, "layer_types": None})
    assert (plain.sliding_window, plain.full_attention_layers) == (None, ())
    for sliding in (dict(rope_type="yarn", factor=8.0), dict(rope_type="default", rope_theta=1e4)):
        params = {**hf["rope_parameters"], "sliding_attention": sliding}
        with pytest.raises(ValueError, match="rope_parameters.sliding_attention="):
            config_from_hf({**hf, "rope_parameters": params})
