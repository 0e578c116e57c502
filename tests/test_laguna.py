"""Poolside's Laguna (configs/hf_laguna.py): the fixtures' configs (XS.2's layout and M.1's)
read to their presets; the class's defaults counted as transformers counts them; the
released config's spelling of its per-kind RoPE; the refusals, by field, in the reader, in
ModelConfig and in a mesh. HF parity: tests/test_hf_parity.py (laguna, laguna_m); the
paged engine: tests/test_engine.py (laguna)."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.specs import count_params
from sharding.mesh import MeshConfig, check_layout
from tests.family_cases import FIXTURES, arch_fields, saved_config


@pytest.mark.parametrize("arch, preset", [("laguna", "tiny-laguna"), ("laguna_m", "tiny-laguna-m")])
def test_fixture_configs_read_as_the_presets(arch, preset):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset(preset))
    assert cfg.attn_gate_act == "softplus" and cfg.qk_norm and cfg.num_shared_experts == 1


def test_class_defaults_count_as_transformers_counts_them():
    """A bare config is LagunaConfig's defaults (XS.2's shapes, every layer global, 48 heads
    on each): transformers 5.25's LagunaForCausalLM on the meta device has 33,189,975,808
    parameters (the card's "33B total")."""
    cfg = config_from_hf({"model_type": "laguna"})
    assert count_params(cfg)[0] == 33_189_975_808
    assert cfg.heads_per_layer == () and cfg.mlp_only_layers == (0,) and cfg.head_gate
    assert cfg.partial_rotary_factor == 0.5 and cfg.rope_theta == 500000.0


def test_the_released_spelling_of_the_rope_kinds():
    """Laguna XS.2's config.json: YaRN (factor 32 over 4,096 positions, attention factor 1,
    betas 64 / 1) on half of each global layer's head at base 5e5, the windowed layers'
    plain RoPE over the whole head at 1e4, a stray length beside the kinds; 3 windowed
    layers to 1 global one."""
    released = dict(
        model_type="laguna",
        num_hidden_layers=8,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        sliding_window=512,
        rope_parameters={
            "full_attention": {
                "rope_theta": 500000.0,
                "rope_type": "yarn",
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "beta_slow": 1.0,
                "beta_fast": 64.0,
                "attention_factor": 1.0,
                "partial_rotary_factor": 0.5,
            },
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 1.0,
            },
            "original_max_position_embeddings": 4096,
        },
    )
    released["layer_types"] *= 2
    cfg = config_from_hf(released)
    scaling = cfg.rope_scaling
    assert (scaling.rope_type, scaling.factor) == ("yarn", 32.0)
    assert scaling.original_max_position_embeddings == 4096 and scaling.attention_factor == 1.0
    assert (scaling.beta_fast, scaling.beta_slow) == (64.0, 1.0)
    assert cfg.rope_theta == 500000.0 and cfg.rotary_dim == 64
    assert cfg.sliding_rope_theta == 10000.0 and cfg.sliding_full_rotary
    assert cfg.full_attention_layers == (3, 7) and cfg.sliding_window == 512


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(moe_apply_router_weight_on_input=True), "moe_apply_router_weight_on_input=True"),
        (dict(attention_bias=True), "attention_bias=True: attention biases"),
        (dict(gating=False), "gating=False: Laguna's attention always"),
        (dict(gating="per-token"), "gating='per-token': expected"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(layer_types=["full_attention"]), "layer_types: expected 4 entries"),
        (dict(mlp_layer_types=["dense"] * 3 + ["moe"]), "mlp_layer_types: expected 4 entries"),
        (dict(num_attention_heads_per_layer=[4, 8]), "num_attention_heads_per_layer: expected 4"),
        (dict(num_attention_heads_per_layer=[4, 3, 4, 8]), r"heads_per_layer\[1\]=3: must be"),
        (dict(rope_parameters={"rope_theta": 1e4}), "rope_parameters=.*an entry per layer type"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("laguna"), **change})


def test_a_kind_no_layer_has_needs_no_rope_entry():
    """M.1's layout (every layer global) reads with only a full_attention entry; XS.2's
    (windowed layers) without a sliding_attention one is refused by name."""
    m1 = saved_config("laguna_m")
    full_only = {"full_attention": m1["rope_parameters"]["full_attention"]}
    cfg = config_from_hf({**m1, "rope_parameters": full_only})
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-laguna-m"))
    xs2 = saved_config("laguna")
    full_only = {"full_attention": xs2["rope_parameters"]["full_attention"]}
    with pytest.raises(ValueError, match="rope_parameters: no 'sliding_attention' entry"):
        config_from_hf({**xs2, "rope_parameters": full_only})


def test_the_windowed_layers_rope_is_plain_and_whole_or_the_global_layers_share():
    rope = saved_config("laguna")["rope_parameters"]
    yarn = dict(rope, sliding_attention=dict(rope["full_attention"]))
    with pytest.raises(ValueError, match="sliding_attention.rope_type='yarn': only 'default'"):
        config_from_hf({**saved_config("laguna"), "rope_parameters": yarn})
    quarter = dict(rope, sliding_attention={"rope_theta": 100.0, "partial_rotary_factor": 0.25})
    with pytest.raises(ValueError, match="partial_rotary_factor=0.25: 1, or the full layers'"):
        config_from_hf({**saved_config("laguna"), "rope_parameters": quarter})
    # The same fraction as the global layers': their partial rotation, plain, at its base.
    half = dict(rope, sliding_attention={"rope_theta": 100.0, "partial_rotary_factor": 0.5})
    cfg = config_from_hf({**saved_config("laguna"), "rope_parameters": half})
    assert not cfg.sliding_full_rotary and cfg.sliding_rope_theta == 100.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attn_gate_act="tanh"), "attn_gate_act='tanh': expected"),
        (dict(heads_per_layer=(4, 8)), "heads_per_layer: GQA attention only, one entry per"),
        (dict(heads_per_layer=(4, 8, 0, 8)), r"heads_per_layer\[2\]=0: must be a multiple"),
        (dict(router_logit_softcapping=-1.0), "router_logit_softcapping=-1.0: must be"),
        (dict(rope_scaling_full_only=False), "sliding_full_rotary: the windowed layers' RoPE"),
    ],
)
def test_model_config_refuses_bad_laguna_fields(change, match):
    change = {**change, "sliding_rope_theta": 0.0} if "rope_scaling_full_only" in change else change
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-laguna").replace(**change)


def test_a_mesh_must_split_every_layers_query_heads():
    cfg = get_preset("tiny-laguna")  # 4 heads on the windowed layers, 8 on the global ones
    check_layout(cfg, MeshConfig(tp=4))
    with pytest.raises(ValueError, match="tp=8 does not divide num_heads=4"):
        check_layout(cfg, MeshConfig(tp=8))
    with pytest.raises(ValueError, match="tp=8 does not divide num_heads=4"):
        check_layout(cfg.replace(num_heads=8), MeshConfig(tp=8))
