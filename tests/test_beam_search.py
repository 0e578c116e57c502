"""Beam search (LLM.beam_search, engine/beam_search.py).

Against transformers: tests/fixtures/sampler/hf_beam_search.json (make_beam_search_fixture.py)
holds `generate(num_beams=W, num_return_sequences=W)` on the llama, qwen3_moe and
deepseek_v3 fixtures with the EOS off, where both searches keep the W best continuations of
every step: the same beams in the same order, summed logprobs within 2e-3. The rules for
finished beams (vLLM's: an EOS candidate leaves the search, the ranking divides by the
length to a power) on a fake engine with exact expectations.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from engine import LLM, BeamSearchParams
from engine.beam_search import BeamSearchSequence, beam_search, score
from engine.sampling_params import RequestOutput
from tests.sampler_cases import POOL

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CASES = json.loads((FIXTURES / "sampler" / "hf_beam_search.json").read_text())["cases"]


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
def test_beams_are_transformers_beams(arch):
    cases = [c for c in CASES if c["arch"] == arch]
    llm = LLM(
        model=str(FIXTURES / arch),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,  # a beam computes its newest token only
        **POOL,
    )
    params = BeamSearchParams(
        beam_width=cases[0]["beam_width"],
        max_tokens=cases[0]["max_tokens"],
        ignore_eos=True,
        length_penalty=0.0,
    )
    outs = llm.beam_search([c["prompt"] for c in cases], params)
    for out, case in zip(outs, cases, strict=True):
        got = [s.tokens[len(case["prompt"]) :] for s in out.sequences]
        assert got == case["sequences"]
        for seq, want in zip(out.sequences, case["scores"], strict=True):
            assert seq.tokens[: len(case["prompt"])] == case["prompt"]
            assert math.isclose(seq.cum_logprob, want, abs_tol=2e-3)
            assert math.isclose(sum(seq.logprobs), seq.cum_logprob, abs_tol=1e-5)
            assert seq.finish_reason == "length" and len(seq.logprobs) == params.max_tokens
    assert llm.stats()["prefix_cache_hits"] > 0


class FakeLLM:
    """Next-token logprobs from a table keyed by the last token (EOS = 0)."""

    class config:  # noqa: N801 (what the search reads of an LLM's config)
        eos_token_ids = (0,)

    max_model_len = 64
    tokenizer = None

    def __init__(self, table: dict[int, list[tuple[int, float]]]):
        self.table = table
        self.calls = 0

    def tokenize(self, prompt):
        return list(prompt)

    def generate(self, prompts, params):
        self.calls += 1
        k = params.logprobs
        outs = []
        for p in prompts:
            out = RequestOutput("x", p)
            out.top_logprobs = [sorted(self.table[p[-1]], key=lambda t: -t[1])[:k]]
            outs.append(out)
        return outs


def test_eos_candidates_finish_and_are_ranked_with_the_live_beams():
    lg = math.log
    table = {
        1: [(0, lg(0.5)), (2, lg(0.3)), (3, lg(0.2))],  # EOS first: a finished beam
        2: [(4, lg(0.9)), (0, lg(0.1))],
        3: [(4, lg(0.6)), (5, lg(0.4))],
        4: [(6, lg(1.0))],
        5: [(6, lg(1.0))],
        6: [(6, lg(1.0))],
    }
    fake = FakeLLM(table)
    params = BeamSearchParams(beam_width=2, max_tokens=3, length_penalty=1.0)
    (out,) = beam_search(fake, [[1]], params)
    # Step 1: [1, 0] finishes (0.5); beams [1, 2] (0.3), [1, 3] (0.2).
    # Step 2: [1, 2, 4] 0.27, [1, 3, 4] 0.12, [1, 3, 5] 0.08, [1, 2, 0] 0.03 (finishes).
    # Step 3: [1, 2, 4, 6] 0.27, [1, 3, 4, 6] 0.12.
    # Scores: log p / len, len less a final EOS: [1, 0] ln 0.5 / 1 = -0.69;
    # [1, 2, 4, 6] ln 0.27 / 4 = -0.33; [1, 3, 4, 6] ln 0.12 / 4 = -0.53; [1, 2, 0] -1.75.
    assert [s.tokens for s in out.sequences] == [[1, 2, 4, 6], [1, 3, 4, 6]]
    assert [s.finish_reason for s in out.sequences] == ["length", "length"]
    assert math.isclose(out.sequences[0].cum_logprob, lg(0.27))
    # Without the length normalization the finished [1, 0] (ln 0.5) ranks first.
    (out,) = beam_search(fake, [[1]], BeamSearchParams(2, 3, length_penalty=0.0))
    assert [s.tokens for s in out.sequences] == [[1, 0], [1, 2, 4, 6]]
    assert out.sequences[0].finish_reason == "stop"
    assert fake.calls == 6  # one generate a step
    # ignore_eos: EOS is a token like another.
    (out,) = beam_search(fake, [[1]], BeamSearchParams(2, 1, ignore_eos=True))
    assert [s.tokens for s in out.sequences] == [[1, 0], [1, 2]]


def test_score_is_vllms():
    seq = BeamSearchSequence([5, 6, 7, 0], [-1.0, -2.0], -3.0)
    assert score(seq, frozenset({0}), 1.0) == -3.0 / 3
    assert score(seq, frozenset(), 2.0) == -3.0 / 16


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"beam_width": 0, "max_tokens": 4}, r"beam_width=0: must be an int in \[1, 10\]"),
        ({"beam_width": 11, "max_tokens": 4}, r"beam_width=11"),
        ({"beam_width": 2, "max_tokens": 0}, r"max_tokens=0"),
        ({"beam_width": 2, "max_tokens": 4, "length_penalty": math.nan}, "length_penalty=nan"),
    ],
)
def test_params_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BeamSearchParams(**kwargs)


def test_use_beam_search_over_http_gives_the_transformers_beams():
    """vLLM's use_beam_search on /v1/completions: each prompt's n beams as its choices,
    best first, the texts of transformers' beams; a plain request beside it is served."""
    import threading

    from tokenizers import Tokenizer

    from engine.server import Server
    from tests.test_server import post

    cases = [c for c in CASES if c["arch"] == "llama"]
    llm = LLM(
        model=str(FIXTURES / "llama"),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,
        **POOL,
    )
    srv = Server(("127.0.0.1", 0), llm, "llama")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        width, max_tokens = cases[0]["beam_width"], cases[0]["max_tokens"]
        body = {"prompt": [c["prompt"] for c in cases], "use_beam_search": True, "n": width}
        body.update(max_tokens=max_tokens, ignore_eos=True, length_penalty=0.0, logprobs=0)
        plain = {}
        beside = threading.Thread(
            target=lambda: plain.update(
                got=post(srv, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 3})
            )
        )
        beside.start()
        status, resp = post(srv, "/v1/completions", body)
        beside.join()
        assert status == 200, resp
        assert plain["got"][0] == 200 and len(plain["got"][1]["choices"]) == 1
        decode = Tokenizer.from_file(str(FIXTURES / "llama" / "tokenizer.json")).decode
        choices = sorted(resp["choices"], key=lambda c: c["index"])
        assert len(choices) == width * len(cases)
        # The offline search on the same engine, for each token's logprob.
        offline = BeamSearchParams(width, max_tokens, ignore_eos=True, length_penalty=0.0)
        offline = llm.beam_search([c["prompt"] for c in cases], offline)
        for i, case in enumerate(cases):
            got = choices[i * width : (i + 1) * width]
            assert [c["text"] for c in got] == [decode(s) for s in case["sequences"]]
            for c, want, seq in zip(got, case["scores"], offline[i].sequences, strict=True):
                assert c["finish_reason"] == "length"
                assert math.isclose(sum(c["logprobs"]["token_logprobs"]), want, abs_tol=2e-3)
                # (other batches, other cache hits: not bitwise)
                assert (
                    max(map(abs, np.subtract(c["logprobs"]["token_logprobs"], seq.logprobs))) < 1e-4
                )
        assert resp["usage"]["completion_tokens"] == width * max_tokens * len(cases)
        refused = [
            ({**body, "stream": True}, "stream: not supported with use_beam_search"),
            ({**body, "temperature": 0.5}, "temperature=0.5: beam search ranks"),
            ({**body, "n": 11}, "n=11: at most 10 beams"),
            ({**body, "length_penalty": "x"}, "length_penalty='x'"),
        ]
        for bad, message in refused:
            status, resp = post(srv, "/v1/completions", bad)
            assert status == 400 and message in resp["error"]["message"], resp
    finally:
        srv.shutdown()
        srv.close()
