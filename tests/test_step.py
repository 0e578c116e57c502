"""StepFun's Step 3.5 / 3.7 Flash (configs/hf_step.py): the fixture's config (tests/fixtures/
step3p7, a Step3p7 wrapper) as saved and in the releases' spelling (config.legacy.json) reads
as tiny-step3p7, the text config alone (Step 3.5 Flash's releases) alike; a bare config counts
what transformers 5.25 builds from its class defaults; each of its twists moves the fixture's
logits (so HF parity, tests/test_hf_parity.py, tests it); the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config

LEGACY = FIXTURES / "step3p7" / "config.legacy.json"


def _legacy() -> dict:
    return json.loads(LEGACY.read_text())


def test_configs_read_as_the_preset_in_either_spelling():
    want = arch_fields(get_preset("tiny-step3p7"))
    assert arch_fields(config_from_hf(FIXTURES / "step3p7")) == want
    legacy = _legacy()
    text = legacy["text_config"]
    assert "moe_layers_enum" in text and len(text["rope_theta"]) == 5  # (+ the MTP layer's)
    assert arch_fields(config_from_hf(legacy)) == want
    # Step 3.5 Flash's releases: the text config alone (model_type step3p5)
    assert arch_fields(config_from_hf({**text, "model_type": "step3p5"})) == want
    # (the wrapper drops its text_config's model_type, as Step3p7Config)
    renamed = {**legacy, "text_config": {**text, "model_type": "step3p5v"}}
    assert arch_fields(config_from_hf(renamed)) == want


def test_a_bare_config_counts_what_transformers_builds():
    """Step3p7TextConfig's defaults: 45 layers 4,096 wide, the first three dense, top-8 of
    288 experts; transformers 5.25 builds 195,843,833,088 parameters from them (meta device,
    embedding and lm_head) and 12,096 correction-bias buffers (42 x 288)."""
    for model_type in ("step3p5", "step3p7"):
        cfg = config_from_hf({"model_type": model_type}, dtype="bfloat16")
        assert (cfg.num_layers, cfg.mlp_only_layers, cfg.num_experts) == (45, (0, 1, 2), 288)
        assert count_params(cfg)[0] == 195_843_833_088 + 12_096
        assert not cfg.tie_word_embeddings and cfg.num_nextn_predict_layers == 0


def test_each_twist_moves_the_fixtures_logits():
    """The dense layer's clip, the shared expert's, the experts', the scores' scale and the
    windowed layers' RoPE base each move the last prefill logits of the fixture's longest
    prompt by more than 0.05."""
    cfg = get_preset("tiny-step3p7")
    params = load_hf_params(FIXTURES / "step3p7", cfg)
    prompt = json.loads((FIXTURES / "step3p7" / "reference.json").read_text())["prompts"][-1]
    want = last_prefill_logits(cfg, params, prompt)
    for other in (
        cfg.replace(shared_clip_limits=(0.0, 0.5, 0.0, 0.0)),
        cfg.replace(shared_clip_limits=(0.6, 0.0, 0.0, 0.0)),
        cfg.replace(expert_clip_limits=()),
        cfg.replace(attention_multiplier=0.0),
        cfg.replace(sliding_rope_theta=500000.0),
    ):
        moved = np.abs(last_prefill_logits(other, params, prompt) - want).max()
        assert moved > 0.05, other


def _text(**change) -> dict:
    hf = saved_config("step3p7")
    return {**hf, "text_config": {**hf["text_config"], **change}}


@pytest.mark.parametrize(
    "hf, match",
    [
        (_text(attention_bias=True), "attention_bias=True: attention biases not supported"),
        (_text(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (_text(gating=False), "gating=False: expected true"),
        (
            _text(layer_types=["minimax_m3_sparse"] * 4),
            r"layer_types: \['minimax_m3_sparse'\] not supported",
        ),
        (_text(swiglu_limits=[0.0, 0.5]), "swiglu_limits: expected 4 entries"),
        (_text(swiglu_limits=[0.0, -1.0, 0.0, 0.0]), "swiglu_limits: expected numbers >= 0"),
        (_text(sliding_window=None), "sliding_attention layers need a sliding_window"),
        (_text(per_layer_config={"1": {"head_dim": 8}}), r"per_layer_config\['1'\]"),
    ],
)
def test_bad_configs_are_refused_by_field(hf, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf(hf)
