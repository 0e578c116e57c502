"""Databricks' DBRX (configs/hf_dbrx.py): the fixture's config read to its preset, the
release's spelling (its RoPE base in attn_config), the refusals, the release's tensor names.
HF parity: tests/test_hf_parity.py (dbrx)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names
from tests.family_cases import arch_fields, saved_config

FIXTURE = Path(__file__).parent / "fixtures" / "dbrx"


def test_config_spellings():
    """The fixture reads as its preset; the release's config (no rope_parameters, its base
    in attn_config) to the same model; null moe_normalize_expert_weights: not renormalized."""
    assert arch_fields(config_from_hf(FIXTURE)) == arch_fields(get_preset("tiny-dbrx"))
    release = {k: v for k, v in saved_config("dbrx").items() if k != "rope_parameters"}
    assert arch_fields(config_from_hf(release)) == arch_fields(get_preset("tiny-dbrx"))
    ffn = dict(saved_config("dbrx")["ffn_config"], moe_normalize_expert_weights=None)
    assert not config_from_hf(dict(saved_config("dbrx"), ffn_config=ffn)).norm_topk_prob


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(tie_word_embeddings=True), "tie_word_embeddings=True"),
        (dict(ffn_config=dict(moe_normalize_expert_weights=2.0)), "weights=2.0: only 1"),
        (dict(ffn_config=dict(ffn_act_fn=dict(name="gelu"))), "ffn_act_fn.name='gelu'"),
        (dict(attn_config=[1]), "attn_config=\\[1\\]: expected a JSON object"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("dbrx"), **change})


def test_tensor_names_are_the_releases():
    names = set(hf_tensor_names(get_preset("tiny-dbrx")))
    with safe_open(FIXTURE / "model.safetensors", "np") as f:
        assert names == set(f.keys())
    block = "transformer.blocks.2."
    assert {block + "norm_attn_norm.attn.Wqkv.weight", block + "ffn.experts.mlp.w2"} <= names
