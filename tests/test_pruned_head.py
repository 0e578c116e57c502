"""A head pruned to the vocabulary's first ids (ModelConfig.output_vocab_size): Apertus 1.5's
language model (apertus1p5_text, configs/hf_llama_kin.py), whose embedding keeps every id.
Its config read alone and in its wrapper; the releases' pruned count as transformers' own;
sampling never reaches the pruned ids; the refusals. HF parity: tests/test_hf_parity.py."""

from __future__ import annotations

import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from engine import LLM, SamplingParams
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, saved_config


def test_configs_read_with_the_pruned_head():
    want = arch_fields(get_preset("tiny-apertus1p5"))
    assert arch_fields(config_from_hf(FIXTURES / "apertus1p5_text")) == want
    text = saved_config("apertus1p5_text")
    assert text["output_vocab_size"] == 400
    assert arch_fields(config_from_hf({"model_type": "apertus1p5", "text_config": text})) == want
    whole = config_from_hf({**text, "output_vocab_size": text["vocab_size"]})
    assert whole.output_vocab_size == 0  # (a head of every id: not pruned)


def test_a_pruned_release_counts_what_transformers_builds():
    """Apertus1p5TextForCausalLM at its class's shapes (32 layers 4,096 wide, 266,752 ids)
    with its head pruned to 131,072 rows: 7,535,341,632 parameters on the meta device, and
    its xIELU's beta and eps (buffers there, read as parameters here: 2 per layer)."""
    cfg = config_from_hf({"model_type": "apertus1p5_text", "output_vocab_size": 131072})
    assert count_params(cfg)[0] == 7_535_341_632 + 2 * 32


def test_sampling_never_reaches_the_pruned_ids():
    """Sampled at temperature 2 (the head's 400 ids all likely), every token is one of the
    head's and its logprob finite."""
    llm = LLM(model=str(FIXTURES / "apertus1p5_text"), num_pages=32, max_model_len=128)
    params = SamplingParams(temperature=2.0, max_tokens=24, ignore_eos=True, n=4, seed=7)
    (out,) = llm.generate([[5, 300, 450, 511]], params)
    tokens = [t for s in out.samples for t in s.token_ids]
    logprobs = [x for s in out.samples for x in s.logprobs]
    assert len(tokens) == 4 * 24 and max(tokens) < 400 and len(set(tokens)) > 24
    assert np.all(np.isfinite(logprobs))


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(output_vocab_size=600), r"output_vocab_size=600: an int in \[1, 512\]"),
        (dict(output_vocab_size=0), r"output_vocab_size=0: an int in \[1, 512\]"),
        (dict(tie_word_embeddings=True), "output_vocab_size=400: at most vocab_size=512, untied"),
    ],
)
def test_bad_heads_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("apertus1p5_text"), **change})
