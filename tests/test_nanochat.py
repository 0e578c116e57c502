"""Karpathy's NanoChat (configs/hf_nanochat.py): the fixture's config reads as tiny-nanochat,
a bare config as NanoChatConfig's defaults, the releases' parameter count as their model
card's; each of its twists moves the fixture's logits (so HF parity, tests/test_hf_parity.py,
tests it); the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from models.rope import rope_layout
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config


def test_configs_read_as_the_presets_and_the_class_defaults():
    cfg = config_from_hf(FIXTURES / "nanochat")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-nanochat"))
    assert rope_layout(cfg) == "half_reversed"
    # A bare config: NanoChatConfig's defaults (12 layers 768 wide, 6 heads of 128, each its
    # own KV head, an 8,192-wide MLP, 50,304 tokens, logits capped at 15, bos 0, eos 1).
    bare = config_from_hf({"model_type": "nanochat"})
    want = dict(num_layers=12, hidden_size=768, num_heads=6, num_kv_heads=6, head_dim=128)
    want |= dict(intermediate_size=8192, vocab_size=50304, final_logit_softcapping=15.0)
    assert {k: getattr(bare, k) for k in want} == want
    assert (bare.bos_token_id, bare.eos_token_ids) == (0, (1,))
    assert bare.norm_weightless and bare.embed_norm and bare.qk_l2_norm
    assert not bare.tie_word_embeddings and bare.mlp_act == "relu2"


def test_the_d20_release_counts_its_model_cards_parameters():
    """nanochat-d20's model card: 560,988,160 parameters (20 layers 1,280 wide, 65,536
    tokens, untied)."""
    assert count_params(get_preset("nanochat-d20"))[0] == 560_988_160


def test_each_twist_moves_the_fixtures_logits():
    """RoPE by the opposite angle, the embeddings' norm and the logits' cap each move the
    last prefill logits of the fixture's longest prompt by more than 0.05."""
    cfg = get_preset("tiny-nanochat")
    params = load_hf_params(FIXTURES / "nanochat", cfg)
    prompt = json.loads((FIXTURES / "nanochat" / "reference.json").read_text())["prompts"][-1]
    want = last_prefill_logits(cfg, params, prompt)
    assert np.abs(want).max() <= 2.0  # (capped at 2)
    unrotated = cfg.replace(model_type="llama")  # (RoPE by the usual angle)
    assert rope_layout(unrotated) == "half"
    for other in (unrotated, cfg.replace(embed_norm=False), cfg.replace(final_logit_softcapping=0)):
        moved = np.abs(last_prefill_logits(other, params, prompt) - want).max()
        assert moved > 0.05, other


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(hidden_act="gelu"), "hidden_act='gelu': NanoChat takes 'relu2'"),
        (dict(attention_bias=True), "attention_bias=True: not supported"),
        (dict(final_logit_softcapping=-1.0), "final_logit_softcapping=-1.0: a number > 0"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("nanochat"), **change})
