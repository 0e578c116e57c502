"""Beam search (engine/beam_search.py) with and without prefix caching.

  python -m scripts.bench_beam_search            # the figures in docs/benchmarks.md
  python -m scripts.bench_beam_search --model=tiny-llama --prompt_len=16 --n=2 --max_tokens=3

`n` random prompts of `prompt_len` tokens, beam width `beam_width`, `max_tokens` steps; each
step is one engine request per live beam. Without prefix caching every step computes every
beam's whole sequence; with it a beam takes the cached pages of its prefix and computes the
rest (its newest token, and the part of its last page not yet full). Each engine runs the
search once (compilations), then the timed run; reported: seconds, the prompt tokens the
steps computed (queued less cache hits), and whether both gave the same beams.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np
from absl import app, flags

from engine import LLM, BeamSearchParams
from engine.kv_pages import pages_for_tokens
from scripts.flag_checks import check_count, check_output_file

_MODEL = flags.DEFINE_string("model", "bench-llama-20m", "Preset name, HF dir or orbax dir.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 512, "Tokens of each prompt.")
_N = flags.DEFINE_integer("n", 4, "Prompts.")
_WIDTH = flags.DEFINE_integer("beam_width", 4, "Beams per prompt.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "Steps (new tokens per beam).")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def run(llm: LLM, prompts: list[list[int]], params: BeamSearchParams) -> dict:
    before = llm.stats()
    start = time.perf_counter()
    outs = llm.beam_search(prompts, params)
    seconds = time.perf_counter() - start
    after = llm.stats()
    hits = after.get("prefix_cache_hits", 0) - before.get("prefix_cache_hits", 0)
    # Step k queues every live beam whole: one a prompt at k = 0, W after (no EOS).
    width = params.beam_width
    steps = range(1, params.max_tokens)
    queued = sum(len(p) + sum(width * (len(p) + k) for k in steps) for p in prompts)
    return dict(
        seconds=seconds,
        tokens_computed=queued - hits,
        beams=[[s.tokens for s in o.sequences] for o in outs],
    )


def main(argv):
    del argv
    try:
        check_count("--prompt_len", _PROMPT_LEN.value, low=1, high=1 << 20)
        check_count("--n", _N.value, low=1, high=256)
        check_count("--beam_width", _WIDTH.value, low=1, high=10)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 12)
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_beam_search: {e}")
    width, longest = _WIDTH.value, _PROMPT_LEN.value + _MAX_TOKENS.value
    seqs = _N.value * 2 * width  # the candidates of a step: 2W a prompt
    kw = dict(
        num_pages=2 * seqs * pages_for_tokens(longest, 16),  # room for cached pages too
        max_num_batched_tokens=max(2048, seqs),
        max_num_seqs=seqs,
        max_model_len=longest + 1,
    )
    params = BeamSearchParams(beam_width=width, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    llms = {
        cached: LLM(model=_MODEL.value, enable_prefix_caching=bool(cached), **kw)
        for cached in (0, 1)
    }
    rng, vocab = np.random.default_rng(0), llms[0].config.vocab_size
    warm, timed = (
        [rng.integers(3, vocab, _PROMPT_LEN.value).tolist() for _ in range(_N.value)]
        for _ in range(2)
    )
    rows = {}
    for cached, llm in llms.items():
        run(llm, warm, params)  # compiles
        rows[cached] = run(llm, timed, params)
    same = rows[0]["beams"] == rows[1]["beams"]
    print(
        f"{_MODEL.value}: {_N.value} prompts of {_PROMPT_LEN.value} tokens, beam width {width}, "
        f"{_MAX_TOKENS.value} tokens"
    )
    print("| prefix caching | s | tokens computed | same beams |")
    print("|---|---|---|---|")
    for cached in (0, 1):
        r = rows[cached]
        print(f"| {('off', 'on')[cached]} | {r['seconds']:.2f} | {r['tokens_computed']} | {same} |")
    if _JSON.value:
        out = [{k: v for k, v in rows[c].items() if k != "beams"} | {"cached": c} for c in (0, 1)]
        pathlib.Path(_JSON.value).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    app.run(main)
