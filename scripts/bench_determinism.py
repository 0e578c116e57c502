"""Cost of batch-invariant mode: the same offline workload with the mode off and on.

  python -m scripts.bench_determinism                      # the docs/benchmarks.md figures
  python -m scripts.bench_determinism --model=tiny-llama --num_requests=8 --max_tokens=4

Both engines get the same requests (random prompts and lengths, greedy); each is warmed up
on the same workload first so compilation is not timed, then the two are timed in turn,
`repeats` runs each, alternating (so a slow spell on a shared machine hits both), best of.
Prints tok/s for both and the ratio on / off.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from scripts.flag_checks import MAX_PROMPTS

_MODEL = flags.DEFINE_string("model", "bench-llama-20m", "Preset, HF dir or orbax dir.")
_NUM_REQUESTS = flags.DEFINE_integer("num_requests", 64, "Concurrent requests.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 64, "Longest prompt (tokens).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "Tokens generated per request.")
_MAX_SEQS = flags.DEFINE_integer("max_num_seqs", 64, "Sequences per step.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed runs per mode (best is kept).")


def time_once(llm: LLM, prompts, params) -> float:
    start = time.perf_counter()
    llm.generate(prompts, params)
    return time.perf_counter() - start


def check_flags() -> None:
    """app.UsageError naming the flag and its limit, before any engine is built."""
    for flag in (_NUM_REQUESTS, _PROMPT_LEN, _MAX_TOKENS, _MAX_SEQS, _REPEATS):
        if flag.value < 1:
            raise app.UsageError(f"--{flag.name}={flag.value}: must be >= 1")
    if _NUM_REQUESTS.value > MAX_PROMPTS:  # the random prompts are built before they run
        raise app.UsageError(f"--num_requests={_NUM_REQUESTS.value}: must be <= {MAX_PROMPTS}")


def main(argv):
    del argv
    try:
        _main()
    except (ValueError, FileNotFoundError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"bench_determinism: {e}")


def _main() -> None:
    check_flags()
    rng = np.random.default_rng(0)
    engines = {
        mode: LLM(
            model=_MODEL.value,
            batch_invariant=mode,
            max_num_seqs=_MAX_SEQS.value,
            max_model_len=_PROMPT_LEN.value + _MAX_TOKENS.value + 8,
        )
        for mode in (False, True)
    }
    vocab = engines[False].config.vocab_size
    prompts = [
        rng.integers(3, vocab, int(rng.integers(1, _PROMPT_LEN.value + 1))).tolist()
        for _ in range(_NUM_REQUESTS.value)
    ]
    params = SamplingParams(max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    for llm in engines.values():  # warm-up: compile every step shape of the workload
        llm.generate(prompts, params)
    best = {mode: float("inf") for mode in engines}
    for _ in range(_REPEATS.value):
        for mode, llm in engines.items():
            best[mode] = min(best[mode], time_once(llm, prompts, params))
    results = {mode: _NUM_REQUESTS.value * _MAX_TOKENS.value / best[mode] for mode in engines}
    for mode in engines:
        print(f"batch_invariant={mode}: {results[mode]:.0f} tok/s ({best[mode]:.2f} s)")
    print(
        f"{_MODEL.value}: {_NUM_REQUESTS.value} requests x {_MAX_TOKENS.value} tokens; "
        f"batch-invariant / default throughput = {results[True] / results[False]:.2f}"
    )


if __name__ == "__main__":
    app.run(main)
