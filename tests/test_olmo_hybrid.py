"""AllenAI's OLMo Hybrid (configs/hf_olmo_hybrid.py): the fixture's config read to its preset;
the class's defaults counted as transformers counts them; RoPE or none; the layer kinds'
default; the refusals; the DeltaNet conv read whole from its parts, in the release's sizes
or in transformers' equal thirds (models/hf_loader.py, release_names.JOINED). HF parity:
tests/test_hf_parity.py (olmo_hybrid); the engine: tests/test_linear_attention.py."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, saved_config

CONV = "model.layers.{}.linear_attn.{}conv1d.weight"


def test_fixture_config_reads_as_the_preset():
    cfg = config_from_hf(FIXTURES / "olmo_hybrid")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-olmo-hybrid"))
    assert cfg.nope_layers == (1, 3) and cfg.linear_beta_scale == 2.0


def test_class_defaults_count_as_transformers_counts_them():
    """A bare config is OlmoHybridConfig's defaults (Olmo-Hybrid-7B's shapes, with RoPE at
    1e4 as the class has it): transformers 5.25's OlmoHybridForCausalLM on the meta device
    has 7,430,870,688 parameters; the DeltaNet's widths follow the heads and hidden size."""
    cfg = config_from_hf({"model_type": "olmo_hybrid"})
    assert count_params(cfg)[0] == 7_430_870_688
    assert (cfg.linear_key_head_dim, cfg.linear_value_head_dim) == (96, 192)
    assert cfg.linear_attention_layers == tuple(i for i in range(32) if i % 4 != 3)
    assert cfg.nope_layers == () and cfg.rope_theta == 10000.0 and cfg.head_dim == 128


def test_rope_or_none_and_the_layer_kinds_default():
    """A null rope_theta, inside rope_parameters or beside it, is no RoPE on the attention
    layers (the releases'); two layers default to one DeltaNet layer then attention (the
    class makes the last layer attention when every fourth would leave none)."""
    for spelling in ({"rope_parameters": {"rope_theta": None}}, {"rope_theta": None}):
        cfg = config_from_hf({"model_type": "olmo_hybrid", "num_hidden_layers": 8, **spelling})
        assert cfg.nope_layers == (3, 7)
    cfg = config_from_hf({"model_type": "olmo_hybrid", "num_hidden_layers": 2})
    assert cfg.linear_attention_layers == (0,)
    cfg = config_from_hf({**saved_config("olmo_hybrid"), "linear_allow_neg_eigval": False})
    assert cfg.linear_beta_scale == 1.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attention_bias=True), "attention_bias=True: not supported"),
        (dict(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
        (dict(layer_types=["linear_attention"] * 3), "layer_types: expected 4 entries"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("olmo_hybrid"), **change})


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(linear_beta_scale=0.0), "linear_beta_scale=0.0: must be > 0"),
        (dict(linear_norm_eps=-1e-5), "linear_norm_eps=-1e-05: in"),
        (dict(linear_attention_layers=()), "hybrid_post_norms: needs linear_attention_layers"),
    ],
)
def test_model_config_refuses_bad_fields(change, match):
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-olmo-hybrid").replace(**change)


def _copy_with_convs(tmp_path, split) -> tuple:
    """The fixture with each DeltaNet layer's three conv tensors re-cut by `split` (the whole
    conv's rows -> its parts)."""
    out = tmp_path / "model"
    shutil.copytree(FIXTURES / "olmo_hybrid", out)
    tensors = load_file(out / "model.safetensors")
    for layer in (0, 2):
        parts = [tensors.pop(CONV.format(layer, x + "_")) for x in "qkv"]
        for name, part in split(np.concatenate(parts), layer).items():
            tensors[name] = part
    save_file(tensors, out / "model.safetensors")
    return out


def test_the_conv_reads_whole_from_its_parts_in_any_cut(tmp_path):
    """transformers 5.25 saves the conv as three equal thirds (the fixture: 64 rows each);
    the release keeps q's 32 rows, k's 32 and v's 128; a checkpoint may hold it whole."""
    cfg = config_from_hf(FIXTURES / "olmo_hybrid")
    thirds = load_hf_params(FIXTURES / "olmo_hybrid", cfg)

    def release(whole, layer):
        q, k, v = np.split(whole, [32, 64])
        return {CONV.format(layer, x + "_"): p for x, p in zip("qkv", (q, k, v), strict=True)}

    def unsplit(whole, layer):
        return {CONV.format(layer, ""): whole}

    for split in (release, unsplit):
        params = load_hf_params(_copy_with_convs(tmp_path / split.__name__, split), cfg)
        for layer in (0, 2):
            for leaf in ("conv_q", "conv_k", "conv_v"):
                got, want = params["layers"][layer]["linear"][leaf], thirds["layers"][layer]
                np.testing.assert_array_equal(got, want["linear"][leaf])


def test_parts_that_disagree_are_refused_naming_them(tmp_path):
    def mixed(whole, layer):
        q, k, v = np.split(whole, [32, 64])
        return {
            CONV.format(layer, "q_"): q.astype(np.float16),
            CONV.format(layer, "k_"): k,
            CONV.format(layer, "v_"): v,
        }

    model = _copy_with_convs(tmp_path, mixed)
    with pytest.raises(
        ValueError, match=r"layers\.0\.linear_attn\.q_conv1d\.weight \(32, 1, 4\) F16"
    ):
        load_hf_params(model, config_from_hf(FIXTURES / "olmo_hybrid"))
