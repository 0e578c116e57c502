"""Ling 2.5's configs (configs/hf_bailing.py): a release's config.json spelling (the KDA heads
from num_attention_heads / head_dim / short_conv_kernel_size, the layer kinds from
layer_group_size, the dense layers from first_k_dense_replace) read as transformers' saved
one, and bad fields refused by name (ModelConfig's Gemma 4 and Ling 2.5 fields too); the
ling-3-flash preset against transformers' defaults and parameter count. The fixture's HF
parity: tests/test_hf_parity.py and tests/test_linear_attention.py (engine, layer)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.specs import count_params
from tests.family_cases import arch_fields

FIXTURE = Path(__file__).parent / "fixtures" / "bailing_hybrid"


def _release() -> dict:
    """The fixture's config as a release spells it: head_dim the KDA heads' width (transformers
    saves the rope width there and the KDA fields as linear_*), no layer or MLP kinds."""
    saved = json.loads((FIXTURE / "config.json").read_text())
    drop = ("linear_head_dim", "linear_num_heads", "linear_conv_kernel_dim", "layer_types")
    release = {k: v for k, v in saved.items() if k not in drop + ("mlp_layer_types",)}
    return dict(release, head_dim=16)


def test_release_spelling_reads_as_the_saved_one():
    want = get_preset("tiny-bailing-hybrid")
    assert arch_fields(config_from_hf(_release())) == arch_fields(want)
    # transformers' defaults: the first two layers dense, every sixth layer MLA; no clips.
    plain = {k: v for k, v in _release().items() if k != "first_k_dense_replace"}
    plain.update(num_hidden_layers=12, expert_swiglu_limit_list=None)
    plain.pop("share_expert_swiglu_limit_list")
    cfg = config_from_hf(dict(plain, layer_group_size=6))
    assert cfg.mlp_only_layers == (0, 1)
    assert [i for i in range(12) if not cfg.is_linear_layer(i)] == [5, 11]
    assert (cfg.expert_clip_limits, cfg.shared_clip_limits) == ((), ())
    assert config_from_hf(dict(_release(), kda_safe_gate=False)).kda_gate_bound == 0.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(kda_lower_bound=1.0), "kda_lower_bound=1.0"),
        (dict(layer_group_size=0), "layer_group_size=0"),
        (dict(expert_swiglu_limit_list=[0, 1]), "expert_swiglu_limit_list: expected 4"),
        (dict(share_expert_swiglu_limit_list=[0, -1, 0, 0]), "share_expert_swiglu_limit_list"),
    ],
)
def test_bad_bailing_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**_release(), **change})


def test_ling_3_flash_is_transformers_default_shape():
    """The preset is what a config.json naming nothing but the model type reads as
    (transformers 5.25's BailingHybridConfig defaults; MaxText's ling3-flash-vl language
    model has these shapes too). transformers' BailingHybridForCausalLM with those defaults
    (and no MTP layer) on the meta device holds 124,414,191,072 parameters, 5,505,672,672
    active (the routed experts' 8 of 512): the preset's less the 40 MoE layers' 512
    correction biases, which transformers keeps as buffers."""
    want = get_preset("ling-3-flash")
    got = config_from_hf({"model_type": "bailing_hybrid"}, dtype="bfloat16")
    assert dataclasses.replace(got, name=want.name) == want
    biases = 40 * 512
    assert count_params(want) == (124_414_191_072 + biases, 5_505_672_672 + biases)


@pytest.mark.parametrize(
    "preset, change, match",
    [
        ("tiny-bailing-hybrid", dict(expert_clip_limits=(0.5,)), "expert_clip_limits"),
        ("tiny-bailing-hybrid", dict(shared_clip_limits=(0, -1, 0, 0)), "shared_clip_limits"),
        ("tiny-bailing-hybrid", dict(kda_gate_bound=2.0), "kda_gate_bound=2.0"),
        ("tiny-gemma4", dict(kda_full_rank=True), "kda_full_rank=True"),
        ("tiny-qwen3-next", dict(head_gate=True), "head_gate=True: not with attn_output_gate"),
        ("tiny-gemma4", dict(global_num_kv_heads=3), "global_num_kv_heads=3"),
        ("tiny-gemma4", dict(global_head_dim=-2), "global_head_dim=-2"),
        ("tiny-gemma4", dict(global_head_dim=33), "global_head_dim=33"),
        ("tiny-bailing-hybrid", dict(global_head_dim=32), "GQA attention only"),
        ("tiny-gemma4-dense", dict(dense_beside_moe=True), "dense_beside_moe=True"),
    ],
)
def test_bad_model_config_fields_are_refused_by_name(preset, change, match):
    """ModelConfig's Gemma 4 and Ling 2.5 fields (configs/model_checks.py)."""
    with pytest.raises(ValueError, match=match):
        get_preset(preset).replace(**change)
