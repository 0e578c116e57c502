"""The ALiBi families: BLOOM and MPT (bloom, mpt: configs/hf_alibi.py) and Falcon-RW (falcon
with alibi: configs/hf_falcon.py). The fixtures' configs read to their presets; the slopes
equal transformers' own functions' for head counts the fixtures do not have; the classes'
defaults and the released shapes counted as transformers counts them; the slopes move the
fixture's logits; the refusals, by field. HF parity: tests/test_hf_parity.py (each of them);
the paged attention with slopes against a float64 one: tests/test_paged_attention.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from configs.hf_alibi import bloom_slopes, mpt_slopes
from configs.hf_config import config_from_hf
from configs.hf_falcon import falcon_slopes
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config

ARCHS = ("bloom", "mpt", "falcon_rw")
SLOPES = {
    "bloom": bloom_slopes,
    "mpt": lambda heads: mpt_slopes(heads, 8),
    "falcon_rw": lambda heads: falcon_slopes(heads, 8),  # (as FalconModel adds them: / sqrt(8))
}


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_configs_read_as_their_presets(arch):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-" + arch.replace("_", "-")))


@pytest.mark.parametrize("arch", ARCHS)
def test_slopes_are_transformers(arch):
    """Per head count, powers of two and not (1, 6, 8, 12, 16, 32, 64, 71, 112), the slopes
    transformers' _get_alibi_slopes, build_mpt_alibi_tensor and build_alibi_tensor gave
    (tests/fixtures/hf_fixture_archs_alibi.py wrote them to reference.json)."""
    want = json.loads((FIXTURES / arch / "reference.json").read_text())["alibi_slopes"]
    assert len(want) == 9
    for heads, slopes in want.items():
        # (within a float32 step, 1.2e-7: torch's float32 pow rounds BLOOM's powers its way)
        np.testing.assert_allclose(SLOPES[arch](int(heads)), slopes, rtol=2.4e-7, atol=0)


_BLOOM = dict(model_type="bloom", vocab_size=250880)
_MPT = dict(model_type="mpt", vocab_size=50432, bos_token_id=0, eos_token_id=0)
_FALCON_RW = dict(
    model_type="falcon", alibi=True, multi_query=False, parallel_attn=False, bias=True
)


@pytest.mark.parametrize(
    "hf, total",
    [
        # transformers 5.25's <Arch>ForCausalLM with the class's defaults (and Falcon-RW's
        # switches) on the meta device; tied embeddings counted once
        (dict(model_type="bloom"), 16_156_544),
        (dict(model_type="mpt"), 1_311_213_568),
        (dict(_FALCON_RW, bias=False), 8_224_867_200),
    ],
)  # fmt: skip
def test_class_defaults_count_as_transformers_counts_them(hf, total):
    assert count_params(config_from_hf(hf, dtype="bfloat16")) == (total, total)


@pytest.mark.parametrize(
    "preset, hf, total",
    [
        # The releases' config.json shapes (BLOOM's n_embed spelling), each preset's count
        # the one transformers 5.25 gives those shapes on the meta device
        ("bloom-560m", dict(_BLOOM, n_embed=1024, n_layer=24, n_head=16), 559_214_592),
        ("bloom-1b7", dict(_BLOOM, n_embed=2048, n_layer=24, n_head=16), 1_722_408_960),
        ("bloom-7b1", dict(_BLOOM, n_embed=4096, n_layer=30, n_head=32), 7_069_016_064),
        ("bloom", dict(_BLOOM, n_embed=14336, n_layer=70, n_head=112), 176_247_271_424),
        ("mpt-7b", dict(_MPT, d_model=4096, n_layers=32, n_heads=32), 6_649_286_656),
        (
            "mpt-30b",
            dict(_MPT, d_model=7168, n_layers=48, n_heads=64, max_seq_len=8192),
            29_957_200_896,
        ),
        (
            "falcon-rw-1b",
            dict(_FALCON_RW, vocab_size=50304, hidden_size=2048, num_hidden_layers=24,
                 num_attention_heads=32),
            1_311_625_216,
        ),
        (
            "falcon-rw-7b",
            dict(_FALCON_RW, vocab_size=65024, hidden_size=4096, num_hidden_layers=36,
                 num_attention_heads=64),
            7_516_020_736,
        ),
    ],
)  # fmt: skip
def test_real_presets_are_what_the_readers_make_of_their_shapes(preset, hf, total):
    cfg = get_preset(preset)
    skip = ("name", "bos_token_id", "eos_token_ids")
    assert arch_fields(config_from_hf(hf, dtype="bfloat16"), skip) == arch_fields(cfg, skip)
    assert count_params(cfg) == (total, total)


def test_the_slopes_move_the_fixtures_logits():
    """tiny-bloom's logits at prompt 0's last position equal transformers' with its slopes;
    at the longest prompt's (33 tokens) they are far from those without (every slope 0:
    attention blind to distance), so the fixture's parity tests the bias."""
    cfg = get_preset("tiny-bloom")
    ref = json.loads((FIXTURES / "bloom" / "reference.json").read_text())
    params = load_hf_params(FIXTURES / "bloom", cfg)
    want = np.asarray(ref["last_prefill_logits_prompt0"], np.float32)
    got = last_prefill_logits(cfg, params, ref["prompts"][0])
    np.testing.assert_allclose(got, want, atol=1e-4)
    flat = cfg.replace(alibi_slopes=(0.0,) * cfg.num_heads)
    longest = ref["prompts"][-1]
    moved = last_prefill_logits(flat, params, longest) - last_prefill_logits(cfg, params, longest)
    assert np.abs(moved).max() > 0.05  # (25x test_hf_parity's tolerance, 2e-3)


def test_a_releases_spellings_read_the_same():
    """BLOOM's config.json names its width n_embed (transformers' BloomConfig takes it over
    hidden_size), MPT's its MLP by expansion_ratio and its attention in attn_config."""
    bloom = {k: v for k, v in saved_config("bloom").items() if k != "hidden_size"}
    got = config_from_hf({**bloom, "n_embed": 48})
    assert arch_fields(got) == arch_fields(get_preset("tiny-bloom"))
    mpt = saved_config("mpt")
    clipped = config_from_hf({**mpt, "attn_config": {**mpt["attn_config"], "clip_qkv": 6.0}})
    assert clipped.clip_qkv == 6.0
    scaled = config_from_hf({**mpt, "attn_config": {"softmax_scale": 0.25}})
    assert scaled.attention_multiplier == 0.25 and scaled.alibi_slopes == mpt_slopes(6, 8)
    steep = config_from_hf({**mpt, "attn_config": {"alibi_bias_max": 16}})
    assert steep.alibi_slopes == mpt_slopes(6, 16) != mpt_slopes(6, 8)


@pytest.mark.parametrize(
    "arch, change, message",
    [
        ("bloom", dict(apply_residual_connection_post_layernorm=True), "post_layernorm=True: res"),
        ("bloom", dict(pretraining_tp=4, slow_but_exact=True), "slow_but_exact=True \\(pretr"),
        ("mpt", dict(attn_config={"alibi": False}), "attn_config.alibi=False: models without"),
        ("mpt", dict(attn_config={"attn_type": "multiquery_attention"}), "attn_type='multiq"),
        ("mpt", dict(attn_config={"prefix_lm": True}), "attn_config.prefix_lm=True: prefix-LM"),
        ("mpt", dict(attn_config={"qk_ln": True}), "attn_config.qk_ln=True: q/k LayerNorms"),
        ("mpt", dict(expansion_ratio=2), "expansion_ratio=2: transformers' MptMLP is 4 x"),
        ("mpt", dict(logit_scale=0.5), "logit_scale=0.5: not supported"),
        ("falcon_rw", dict(new_decoder_architecture=True), "alibi=True: not with new_decoder"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(arch, change, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf({**saved_config(arch), **change})


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(alibi_slopes=(0.5,) * 5), "alibi_slopes: expected 6 finite numbers .*got 5"),
        (dict(alibi_slopes=(0.5,) * 5 + (float("nan"),)), "alibi_slopes: expected 6 finite"),
        (dict(nope_layers=(0, 1)), "alibi_slopes: GQA with every layer in nope_layers"),
        (dict(learned_positions=True), "alibi_slopes: not beside a position table"),
        (dict(sinusoidal_positions=True), "alibi_slopes: not beside a position table"),
    ],
)
def test_bad_config_fields_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        get_preset("tiny-bloom").replace(**change)
