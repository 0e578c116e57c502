"""DeepSeek-OCR 2's language model (configs/hf_deepseek_ocr.py): the fixture's config (its
deepseek_ocr2 wrapper) reads as tiny-deepseek-ocr2; its group limit and routed scale each move
the fixture's logits (so HF parity, tests/test_hf_parity.py, tests them); the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config


def test_the_fixture_reads_as_the_preset():
    cfg = config_from_hf(FIXTURES / "deepseek_ocr2")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-deepseek-ocr2"))
    # (its head hidden / heads wide, as the class sets it, whatever head_dim says)
    hf = saved_config("deepseek_ocr2")
    hf["text_config"]["head_dim"] = 128
    assert config_from_hf(hf).head_dim == 16


def test_the_group_limit_and_the_routed_scale_move_the_logits():
    cfg = get_preset("tiny-deepseek-ocr2")
    params = load_hf_params(FIXTURES / "deepseek_ocr2", cfg)
    ref = json.loads((FIXTURES / "deepseek_ocr2" / "reference.json").read_text())
    prompt = ref["prompts"][-1]
    want = last_prefill_logits(cfg, params, prompt)
    for other in (cfg.replace(topk_method="greedy"), cfg.replace(routed_scaling_factor=1.0)):
        assert np.abs(last_prefill_logits(other, params, prompt) - want).max() > 0.05, other


def _text(**change) -> dict:
    hf = saved_config("deepseek_ocr2")
    return {**hf, "text_config": {**hf["text_config"], **change}}


@pytest.mark.parametrize(
    "hf, match",
    [
        (_text(mlp_layer_types=None), "mlp_layer_types=None: expected 3 entries"),
        (_text(num_experts_per_tok=None), "'num_experts_per_tok' is missing"),
        (_text(topk_method="noaux_tc"), "topk_method='noaux_tc': transformers' DeepSeek-V2"),
        (_text(mlp_bias=True), "mlp_bias=True: not supported"),
        (_text(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
    ],
)
def test_bad_configs_are_refused_by_field(hf, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf(hf)
