"""The Hugging Face sampler-fixture cases (tests/fixtures/sampler/hf_penalties.json and
hf_token_lists.json) and the SamplingParams each one was decoded with, for the tests on one
device and the mesh worker (tests/sharding_worker.py)."""

from __future__ import annotations

import json
import pathlib

from engine import SamplingParams

SAMPLER_FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "sampler"
# The KV pool of the engines these cases run on (their prompts and outputs are short):
# tests/test_engine.py's, so engines of the same model and token budget compile the same
# step programs, shared across test files by the suite's compilation cache.
POOL = {"num_pages": 32, "max_model_len": 128}


def cases(name: str, arch: str | None = None) -> list[dict]:
    """The cases of sampler/<name>.json (of one arch if given)."""
    all_cases = json.loads((SAMPLER_FIXTURES / f"{name}.json").read_text())["cases"]
    return [c for c in all_cases if arch is None or c["arch"] == arch]


def penalty_params(case: dict, **kw) -> SamplingParams:
    """A hf_penalties case: greedy, its length, its three penalties (plus `kw`)."""
    return SamplingParams(
        max_tokens=len(case["tokens"]),
        ignore_eos=True,
        repetition_penalty=case["repetition_penalty"],
        presence_penalty=case["presence_penalty"],
        frequency_penalty=case["frequency_penalty"],
        **kw,
    )


def token_list_params(case: dict) -> SamplingParams:
    """A hf_token_lists case: greedy, up to 20 tokens, its lists, stops and penalty."""
    return SamplingParams(
        max_tokens=20,
        ignore_eos=case["ignore_eos"],
        logit_bias={t: b for t, b in case.get("logit_bias", ())} or None,
        allowed_token_ids=case.get("allowed_token_ids"),
        min_tokens=case.get("min_tokens", 0),
        stop_token_ids=case.get("stop_token_ids", ()),
        repetition_penalty=case.get("repetition_penalty", 1.0),
    )
