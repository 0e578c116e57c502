"""Databricks' DBRX (configs/hf_dbrx.py): the fixture's config read to its preset, the
release's spelling (its RoPE base in attn_config), the refusals, the release's tensor names.
HF parity: tests/test_hf_parity.py (dbrx)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.checkpoint_names import hf_tensor_names

FIXTURE = Path(__file__).parent / "fixtures" / "dbrx"


def _saved() -> dict:
    return json.loads((FIXTURE / "config.json").read_text())


def _arch(cfg) -> dict:
    skip = ("name", "dtype", "bos_token_id", "eos_token_ids")
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in skip}


def test_config_spellings():
    """The fixture reads as its preset; the release's config (no rope_parameters, its base
    in attn_config) to the same model; null moe_normalize_expert_weights: not renormalized."""
    assert _arch(config_from_hf(FIXTURE)) == _arch(get_preset("tiny-dbrx"))
    release = {k: v for k, v in _saved().items() if k != "rope_parameters"}
    assert _arch(config_from_hf(release)) == _arch(get_preset("tiny-dbrx"))
    ffn = dict(_saved()["ffn_config"], moe_normalize_expert_weights=None)
    assert not config_from_hf(dict(_saved(), ffn_config=ffn)).norm_topk_prob


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
        config_from_hf({**_saved(), **change})


def test_tensor_names_are_the_releases():
    names = set(hf_tensor_names(get_preset("tiny-dbrx")))
    with safe_open(FIXTURE / "model.safetensors", "np") as f:
        assert names == set(f.keys())
    block = "transformer.blocks.2."
    assert {block + "norm_attn_norm.attn.Wqkv.weight", block + "ffn.experts.mlp.w2"} <= names
