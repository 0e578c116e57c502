"""Meituan's LongCat-Flash (configs/hf_longcat.py): its config read as two decoder layers a
LongCat layer, bad fields refused by name, the zero-computation experts of models/moe.py
against their definition written out, and the engine's expert load without them. The
fixture's HF parity: tests/test_hf_parity.py (reference path) and tests/test_engine.py
(paged engine)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.moe import moe_block, route
from models.specs import init_params
from tests.family_cases import arch_fields, saved_config

FIXTURE = Path(__file__).parent / "fixtures" / "longcat_flash"


def test_config_reads_as_the_preset_two_decoder_layers_a_layer():
    cfg = config_from_hf(FIXTURE)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-longcat-flash"))
    assert cfg.num_layers == 2 * saved_config("longcat_flash")["num_layers"]
    assert [cfg.is_moe_layer(i) for i in range(4)] == [True, False, True, False]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(head_dim=16), "head_dim=16: only 8"),
        (dict(qk_head_dim=32), "qk_head_dim=32: only 24"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(router_bias=True), "router_bias=True"),
        (dict(zero_expert_type="const"), "zero_expert_type='const'"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("longcat_flash"), **change})


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(topk_method="greedy"), "zero_experts: with the noaux_tc router only"),
        (dict(zero_experts=-1), "zero_experts=-1"),
        (dict(num_layers=3), "shortcut_moe=True: needs an even num_layers"),
        (dict(moe_layer_freq=1), "shortcut_moe=True"),
        (dict(q_lora_rank=0), "mla_lora_scales=True: needs MLA attention with a q LoRA"),
    ],
)
def test_bad_model_config_fields_are_refused_by_name(change, match):
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-longcat-flash").replace(**change)


def test_zero_computation_experts_add_the_token_times_their_weight():
    """moe_block on the tiny model's MoE: each token's chosen routed experts' SwiGLU outputs
    and, for each chosen zero-computation expert (id >= 8), the token itself, times the
    router's weights; written out per token in float64."""
    cfg = get_preset("tiny-longcat-flash")
    p = init_params(cfg, 0, 0.3, host=True)["layers"][0]["moe"]
    p = {k: np.asarray(v, np.float32) for k, v in p.items()}
    p["router_bias"] = np.random.default_rng(1).normal(0, 0.05, 12).astype(np.float32)
    x = np.random.default_rng(0).normal(size=(24, 64)).astype(np.float32)
    weights, experts = map(np.asarray, route(p, jnp.asarray(x), cfg))
    assert (experts >= 8).any() and (experts < 8).any()  # (both kinds chosen)
    got = np.asarray(moe_block({k: jnp.asarray(v) for k, v in p.items()}, jnp.asarray(x), cfg))
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    want = np.zeros(x.shape)
    for t, row in enumerate(x.astype(np.float64)):
        for w, e in zip(weights[t], experts[t], strict=True):
            if e >= 8:
                want[t] += w * row
            else:
                h = silu(row @ p["w_gate"][e]) * (row @ p["w_up"][e])
                want[t] += w * (h @ p["w_down"][e])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_engine_counts_no_load_for_zero_computation_experts():
    """The engine's expert load (LLM.stats) counts the copies routed experts compute: fewer
    than the tokens' top-3 choices, where some chose a zero-computation expert; its tokens
    transformers'."""
    from engine import LLM, SamplingParams

    ref = json.loads((FIXTURE / "reference.json").read_text())
    llm = LLM(str(FIXTURE), max_num_batched_tokens=64, num_pages=32, max_model_len=128)
    greedy = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    outs = llm.generate(ref["prompts"], greedy)
    assert [o.token_ids for o in outs] == [t[:4] for t in ref["greedy_tokens"]]
    load = np.asarray(llm.stats()["expert_load_total"])
    copies = 3 * (sum(len(p) for p in ref["prompts"]) + 3 * 3)
    assert load.shape == (2, 8) and 0 < load.sum(axis=1).min() and load.sum(axis=1).max() < copies
