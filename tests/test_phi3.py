"""Microsoft's Phi-3 (configs/hf_phi3.py) and LongRoPE (configs/hf_rope.py,
models/rope.py): the fixtures' configs read to their presets; LongRoPE's factors chosen once
per engine by its max_model_len (short up to the pretraining length, long past it, as
vLLM does) and the engine on the long factors giving transformers' tokens; the older rope
spellings; the refusals. HF parity of both regimes: tests/test_hf_parity.py (phi3,
phi3_long)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from engine import LLM, SamplingParams
from models.rope import for_max_model_len, rope_frequencies
from tests.family_cases import arch_fields, saved_config

FIXTURES = Path(__file__).parent / "fixtures"


def test_configs_and_the_factors_an_engine_takes():
    """phi3 (pretraining length 64) reads as tiny-phi3 and keeps its short factors in an
    engine of up to 64 tokens, its long ones past that; phi3_long (4) as tiny-phi3-long in
    any engine longer than 4; LongRoPE's attention factor sqrt(1 + ln 32 / ln 64)."""
    short = config_from_hf(FIXTURES / "phi3")
    assert arch_fields(for_max_model_len(short, 64)) == arch_fields(get_preset("tiny-phi3"))
    assert for_max_model_len(short, 65).rope_scaling.long_factors
    long = for_max_model_len(config_from_hf(FIXTURES / "phi3_long"), 56)
    assert arch_fields(long) == arch_fields(get_preset("tiny-phi3-long"))
    inv_short, factor = rope_frequencies(1e4, 12, short.rope_scaling)
    inv_long, _ = rope_frequencies(1e4, 12, long.rope_scaling)
    np.testing.assert_allclose(factor, np.sqrt(1 + np.log(32) / np.log(64)), rtol=1e-7)
    ratio = np.array([1.0, 1.5, 2.5, 4.0, 6.0, 9.0]) / np.array([1.0, 1.1, 1.3, 1.6, 2.0, 2.5])
    np.testing.assert_allclose(inv_short / inv_long, ratio, rtol=1e-6)


def test_engine_on_the_long_factors_gives_transformers_tokens():
    """phi3_long's engine (128 tokens, past its length of 4: long factors) in 16-token
    chunks: transformers' greedy tokens, which it computed on the long factors too."""
    ref = json.loads((FIXTURES / "phi3_long" / "reference.json").read_text())
    llm = LLM(str(FIXTURES / "phi3_long"), max_model_len=128, max_num_batched_tokens=16)
    assert llm.config.rope_scaling.long_factors
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in ref["prompts"]], params)
    assert [o.token_ids for o in outs] == ref["greedy_tokens"]


def test_older_rope_spellings():
    """rope_scaling with type "su" (or "yarn", Phi3Config's reading) and a top-level
    rope_theta mean the same LongRoPE."""
    hf = saved_config("phi3")
    rope = dict(hf.pop("rope_parameters"))
    theta, partial = rope.pop("rope_theta"), rope.pop("partial_rotary_factor")
    for kind in ("su", "yarn"):
        legacy = dict(hf, rope_theta=theta, partial_rotary_factor=partial)
        legacy["rope_scaling"] = dict(
            {k: v for k, v in rope.items() if k != "rope_type"}, type=kind
        )
        assert arch_fields(config_from_hf(legacy)) == arch_fields(config_from_hf(FIXTURES / "phi3"))


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(short_factor=[1.0, 2.0]), "short_factor / long_factor: 2 / 6 entries"),
        (dict(long_factor="long"), "long_factor='long': a list of numbers"),
        (dict(partial_rotary_factor=1.5), "partial_rotary_factor=1.5"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    hf = saved_config("phi3")
    hf["rope_parameters"] = {**hf["rope_parameters"], **change}
    with pytest.raises(ValueError, match=match):
        config_from_hf(hf)


def test_longrope_elsewhere_is_refused():
    hf = json.loads((FIXTURES / "llama" / "config.json").read_text())
    hf["rope_parameters"] = dict(rope_type="longrope", short_factor=[1.0], long_factor=[1.0])
    with pytest.raises(ValueError, match="rope_type='longrope': only for phi3, phimoe"):
        config_from_hf(hf)


def test_phimoe_config_mscales_and_its_router_refusals():
    """Phi-3.5-MoE reads as tiny-phimoe (its rope dict's pretraining length first, its
    mscales); the sparsemixer routes exactly two experts."""
    hf = saved_config("phimoe")
    assert arch_fields(config_from_hf(hf)) == arch_fields(get_preset("tiny-phimoe"))
    rope = config_from_hf(dict(hf, original_max_position_embeddings=8)).rope_scaling
    assert (rope.original_max_position_embeddings, rope.short_mscale, rope.long_mscale) == (
        64,
        1.2,
        1.4,
    )
    _, mscale = rope_frequencies(1e4, 16, dataclasses.replace(rope, long_factors=True))
    assert mscale == 1.4
    with pytest.raises(ValueError, match="sparsemixer': needs num_experts_per_tok=2"):
        config_from_hf(dict(hf, num_experts_per_tok=3))
    with pytest.raises(ValueError, match="norm_bias=True: needs norm_kind='layer'"):
        get_preset("tiny-phimoe").replace(norm_kind="rms")


def test_longrope_config_survives_a_json_round_trip():
    """An orbax checkpoint's config.json (models/orbax_io): LongRoPE's factor lists come
    back as the tuples a step's cache key hashes."""
    from models.orbax_io import config_from_dict, config_to_dict

    for name in ("tiny-phi3-long", "tiny-phimoe"):
        cfg = get_preset(name)
        back = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
        assert back == cfg and hash(back.rope_scaling) == hash(cfg.rope_scaling)
