"""Requests that share a long prefix, with and without prefix caching.

  python -m scripts.bench_prefix_cache             # the figures in docs/benchmarks.md
  python -m scripts.bench_prefix_cache --model=tiny-llama --prefix_len=40 --n=3
  python -m scripts.bench_prefix_cache --model=bench-llama-20m-swa  # a sliding-window hybrid

`n` greedy requests of one random `prefix_len`-token prefix (a system prompt, few-shot
examples, a document) and a random `suffix_len`-token question each, all queued at once,
run three ways: without prefix caching, with it from an empty cache (the first request
computes the prefix; the others take its pages once it is written), and with it again (a
warm cache: every request finds the prefix; with `other_tokens`, after other traffic).
Each is timed after a first run compiled its steps: the mean time to a request's first
token, the whole run, the prompt tokens the steps computed, and how many requests give the
uncached run's tokens.
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
_PREFIX_LEN = flags.DEFINE_integer("prefix_len", 2048, "Tokens every prompt starts with.")
_SUFFIX_LEN = flags.DEFINE_integer("suffix_len", 64, "Tokens of each prompt's own end.")
_N = flags.DEFINE_integer("n", 16, "Requests.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "New tokens per request.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens.")
_MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
_OTHER_TOKENS = flags.DEFINE_integer(
    "other_tokens",
    0,
    "Before the warm-cache run, n other requests (suffix_len random tokens) decode this many "
    "tokens each: traffic that cycles the pools (a hybrid model's windowed pool first).",
)
_SWA_RATIO = flags.DEFINE_float(
    "swa_full_tokens_ratio", None, "Hybrid sliding-window models: the windowed pool's share."
)
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def run(llm: LLM, prompts: list[list[int]], mode: str) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    before = llm.stats()
    tokens: dict[str, list[int]] = {}
    first: dict[str, float] = {}
    start = time.perf_counter()
    for deltas in llm.stream(prompts, params):
        now = time.perf_counter() - start
        for d in deltas:
            tokens.setdefault(d.request_id, []).extend(d.token_ids)
            if d.token_ids:
                first.setdefault(d.request_id, now)
    seconds = time.perf_counter() - start
    after = llm.stats()
    hits = after.get("prefix_cache_hits", 0) - before.get("prefix_cache_hits", 0)
    return dict(
        mode=mode,
        mean_first_token_s=float(np.mean(list(first.values()))),
        seconds=seconds,
        prompt_tokens_computed=sum(map(len, prompts)) - hits,
        tokens=[tokens[k] for k in sorted(tokens, key=int)],
    )


def main(argv):
    del argv
    try:
        check_count("--prefix_len", _PREFIX_LEN.value, low=1, high=1 << 20)
        check_count("--suffix_len", _SUFFIX_LEN.value, low=1, high=1 << 20)
        check_count("--n", _N.value, low=2, high=1024)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        high = _PREFIX_LEN.value + _MAX_TOKENS.value  # (what max_model_len leaves them)
        check_count("--other_tokens", _OTHER_TOKENS.value, low=0, high=high)
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_prefix_cache: {e}")
    n, length = _N.value, _PREFIX_LEN.value + _SUFFIX_LEN.value
    own = pages_for_tokens(length + _MAX_TOKENS.value, _PAGE_SIZE.value)
    if _OTHER_TOKENS.value:  # and for the other requests' (they cycle a windowed pool only)
        own += pages_for_tokens(_SUFFIX_LEN.value + _OTHER_TOKENS.value, _PAGE_SIZE.value)
    kw = dict(
        page_size=_PAGE_SIZE.value,
        # Room for every request's own pages: no preemption, nothing evicted.
        num_pages=n * own,
        max_num_batched_tokens=_MAX_BATCHED.value,
        max_num_seqs=n,
        max_model_len=length + _MAX_TOKENS.value,
    )
    plain = LLM(model=_MODEL.value, **kw)
    ratio = _SWA_RATIO.value
    cached = LLM(model=_MODEL.value, enable_prefix_caching=True, swa_full_tokens_ratio=ratio, **kw)
    rng = np.random.default_rng(0)
    vocab = plain.config.vocab_size
    prefix = rng.integers(3, vocab, size=_PREFIX_LEN.value).tolist()
    prompts = [prefix + rng.integers(3, vocab, size=_SUFFIX_LEN.value).tolist() for _ in range(n)]
    run(plain, prompts, "")  # compiles the steps both engines run (the same programs)
    for _ in range(2):  # ... and those of the shapes hits make (from a cold, a warm cache)
        run(cached, prompts, "")
    rows = [run(plain, prompts, "no prefix caching")]
    cached.reset_prefix_cache()
    rows.append(run(cached, prompts, "prefix caching, empty cache"))
    warm = "prefix caching, warm cache"
    if _OTHER_TOKENS.value:
        others = [rng.integers(3, vocab, size=_SUFFIX_LEN.value).tolist() for _ in range(n)]
        cached.generate(others, SamplingParams(max_tokens=_OTHER_TOKENS.value, ignore_eos=True))
        warm += f" after {n} others of {_OTHER_TOKENS.value} tokens"
    rows.append(run(cached, prompts, warm))
    for r in rows:
        r["same_tokens"] = sum(a == b for a, b in zip(r["tokens"], rows[0]["tokens"], strict=True))
    print(
        f"{plain.config.name}: {n} requests of a {_PREFIX_LEN.value}-token prefix + "
        f"{_SUFFIX_LEN.value} tokens, {_MAX_TOKENS.value} greedy tokens each"
    )
    print("| mode | mean s to first token | s in all | prompt tokens computed | same tokens |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['mean_first_token_s']:.2f} | {r['seconds']:.2f} | "
            f"{r['prompt_tokens_computed']} | {r['same_tokens']}/{n} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "tokens"} for r in rows], f, indent=1)


if __name__ == "__main__":
    app.run(main)
