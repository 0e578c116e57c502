"""TII's Falcon-H1 (falcon_h1: configs/hf_falcon_h1.py): attention and Mamba-2 side by side
in each layer, served as pairs of decoder layers (ModelConfig.parallel_hybrid), its µP
multipliers folded into the weights on load (load_scales). The fixture's config reads as its
preset; the class's defaults count as transformers counts them; every multiplier, the pair's
held attention output and the missing gated norm move the fixture's logits; the refusals, by
field. HF parity: tests/test_hf_parity.py; the engine's chunks, preemption and shared state
rows: tests/test_linear_attention.py."""

from __future__ import annotations

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from engine import LLM
from models.hf_loader import load_hf_params
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config

FIXTURE = FIXTURES / "falcon_h1"


def test_fixture_config_reads_as_its_preset():
    assert arch_fields(config_from_hf(FIXTURE)) == arch_fields(get_preset("tiny-falcon-h1"))


@pytest.mark.parametrize(
    "hf, total",
    [
        # transformers 5.25's FalconH1ForCausalLM with the class's defaults on the meta
        # device, without and with the mixer's gated norm
        (dict(model_type="falcon_h1"), 8_514_961_408),
        (dict(model_type="falcon_h1", mamba_rms_norm=True, mamba_norm_before_gate=False),
         8_514_994_176),
    ],
)  # fmt: skip
def test_class_defaults_count_as_transformers_counts_them(hf, total):
    assert count_params(config_from_hf(hf, dtype="bfloat16")) == (total, total)


def test_every_multiplier_and_the_parallel_pair_move_the_logits():
    """Read with one multiplier at 1 (each of the twelve folded ones, the embeddings', the
    logits') or with the pair run one after the other (the attention's output joining the
    stream before the Mamba-2 layer reads it): a 33-token prompt's last logits move by more
    than test_hf_parity's tolerance (2e-3) every time. (The folded ones change the weights
    alone: one compiled forward for them.)"""
    hf = saved_config("falcon_h1")
    cfg = config_from_hf(hf)
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 500, 33)]
    want = last_prefill_logits(cfg, load_hf_params(FIXTURE, cfg), prompt)
    changes = [{k: 1.0} for k in ("embedding_multiplier", "lm_head_multiplier")]
    changes += [{"ssm_multipliers": [1.0 if i == j else m for j, m in enumerate(
        hf["ssm_multipliers"])]} for i in range(5)]  # fmt: skip
    changes += [{"mlp_multipliers": [1.0, hf["mlp_multipliers"][1]]}]
    changes += [{"mlp_multipliers": [hf["mlp_multipliers"][0], 1.0]}]
    for key in ("key_multiplier", "attention_in_multiplier", "attention_out_multiplier"):
        changes.append({key: 1.0})
    changes += [{"ssm_in_multiplier": 1.0}, {"ssm_out_multiplier": 1.0}]
    assert len(changes) == 14
    for change in changes:
        other = config_from_hf({**hf, **change})
        folded = other.replace(load_scales=cfg.load_scales) == cfg  # (the same forward)
        params = load_hf_params(FIXTURE, other)
        moved = np.abs(last_prefill_logits(cfg if folded else other, params, prompt) - want).max()
        assert moved > 2e-3, change
    params = load_hf_params(FIXTURE, cfg)
    serial = np.abs(
        last_prefill_logits(cfg.replace(parallel_hybrid=False), params, prompt) - want
    ).max()
    assert serial > 2e-3


def test_the_missing_gated_norm_is_read_and_refusals_name_the_field():
    hf = saved_config("falcon_h1")
    normed = config_from_hf({**hf, "mamba_rms_norm": True})
    assert normed.mamba_gated_norm and not config_from_hf(hf).mamba_gated_norm
    for change, match in [
        ({"mamba_rms_norm": True, "mamba_norm_before_gate": True}, "mamba_norm_before_gate"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"projectors_bias": True}, "projectors_bias=True"),
        ({"mlp_multipliers": [1.0]}, "mlp_multipliers"),
        ({"ssm_multipliers": [1.0, 2.0]}, "ssm_multipliers"),
        ({"mamba_d_head": 16}, "mamba_d_head=16"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ]:
        with pytest.raises(ValueError, match=match):
            config_from_hf({**hf, **change})
    with pytest.raises(ValueError, match="parallel_hybrid"):
        get_preset("tiny-falcon-h1").replace(no_ffn_layers=(0, 2))
    with pytest.raises(ValueError, match="enable_lora: not supported for falcon_h1"):
        LLM(str(FIXTURE), enable_lora=True, num_pages=8, max_model_len=64)
