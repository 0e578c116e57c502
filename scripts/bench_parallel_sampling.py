"""n samples of one long prompt: shared prompt pages (SamplingParams.n) against n requests.

  python -m scripts.bench_parallel_sampling            # the figures in docs/benchmarks.md
  python -m scripts.bench_parallel_sampling --model=tiny-llama --prompt_len=40 --n=2

One random prompt of `prompt_len` tokens, `n` sampled continuations of `max_tokens` tokens,
run two ways on one engine: as one request with n samples (they share the prompt's whole
pages; engine/samples.py) and as n requests with the same seeds (each computes its prompt).
Both must give the same tokens. Each is timed after a first run compiled its steps: the
time until every sample has its first token, the whole run, the prompt tokens the steps
computed, and the most KV pages held at once.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from engine.kv_pages import pages_for_tokens
from scripts.flag_checks import check_count, check_output_file

_MODEL = flags.DEFINE_string("model", "bench-llama-20m", "Preset name, HF dir or orbax dir.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 4096, "Prompt tokens.")
_N = flags.DEFINE_integer("n", 8, "Samples of the prompt.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "New tokens per sample.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens.")
_MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def run(llm: LLM, prompt: list[int], n: int, shared: bool) -> dict:
    params = dict(temperature=1.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    if shared:
        args = [prompt], SamplingParams(n=n, seed=0, **params)
    else:
        args = [prompt] * n, [SamplingParams(seed=k, **params) for k in range(n)]
    before = llm.stats()
    total = before["num_pages_total"]
    tokens: dict[str, list[int]] = {}
    peak, first_token_s = 0, None
    start = time.perf_counter()
    for deltas in llm.stream(*args):
        for d in deltas:
            tokens.setdefault(d.request_id, []).extend(d.token_ids)
        peak = max(peak, total - llm.stats()["num_pages_free"])
        if first_token_s is None and len(tokens) == n and all(tokens.values()):
            first_token_s = time.perf_counter() - start
    seconds = time.perf_counter() - start
    skipped = llm.stats()["num_prompt_tokens_shared"] - before["num_prompt_tokens_shared"]
    return dict(
        mode="n samples" if shared else "n requests",
        first_tokens_s=first_token_s,
        seconds=seconds,
        prompt_tokens_computed=n * len(prompt) - skipped,
        peak_pages=peak,
        tokens=[tokens[k] for k in sorted(tokens, key=lambda r: (len(r), r))],
    )


def main(argv):
    del argv
    try:
        check_count("--prompt_len", _PROMPT_LEN.value, low=2, high=1 << 20)
        check_count("--n", _N.value, low=2, high=128)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_parallel_sampling: {e}")
    n, length = _N.value, _PROMPT_LEN.value
    per_sample = pages_for_tokens(length + _MAX_TOKENS.value, _PAGE_SIZE.value)
    llm = LLM(
        model=_MODEL.value,
        page_size=_PAGE_SIZE.value,
        num_pages=n * per_sample,  # room for n unshared samples: no preemption either way
        max_num_batched_tokens=_MAX_BATCHED.value,
        max_num_seqs=n,
        max_model_len=length + _MAX_TOKENS.value,
    )
    prompt = np.random.default_rng(0).integers(3, llm.config.vocab_size, size=length).tolist()
    rows = []
    for shared in (True, False):
        run(llm, prompt, n, shared)  # compiles this mode's steps
        rows.append(run(llm, prompt, n, shared))
    if rows[0]["tokens"] != rows[1]["tokens"]:
        sys.exit("bench_parallel_sampling: the n samples differ from the n requests")
    print(f"{llm.config.name}: prompt {length} tokens, n={n}, {_MAX_TOKENS.value} tokens each")
    print("| mode | s to every first token | s in all | prompt tokens computed | peak pages |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['first_tokens_s']:.2f} | {r['seconds']:.2f} | "
            f"{r['prompt_tokens_computed']} | {r['peak_pages']} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "tokens"} for r in rows], f, indent=1)


if __name__ == "__main__":
    app.run(main)
