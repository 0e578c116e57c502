"""Disaggregated prefill / decode against one engine doing both (engine/kv_transfer.py).

  python -m scripts.bench_disagg                     # the figures in docs/benchmarks.md
  python -m scripts.bench_disagg --models=tiny-llama --prompt_len=64 --decodes=2 \
      --decode_tokens=24 --arrivals=2 --every=4

The traffic: `decodes` requests with short prompts decode `decode_tokens` greedy tokens
each; while they run, `arrivals` requests with `prompt_len`-token prompts arrive, one every
`every` steps, and decode `long_tokens`. Colocated, one engine prefills the long prompts in
the steps that carry the running decodes (chunked prefill: up to `max_num_batched_tokens`
a step), so those steps take longer and the running requests' tokens come late.
Disaggregated, a producer engine prefills each long prompt (one token, its KV stored) and a
consumer engine runs the same traffic, loading the stored KV and computing one prompt token
per arrival. On one CPU the two cannot run at once without sharing its cores, so the
producer runs first (its time per prompt is the prefill share of a request's time to first
token) and the consumer's run is timed alone: the decode engine's view of a deployment whose
prefill runs elsewhere. Reported: the running requests' time between tokens (p50, p99, max),
the long requests' time to first token on the decode engine (and with the producer's
prefill added), whether the tokens equal the colocated run's, and the transfer itself:
stored bytes per prompt token (and a linear-attention model's state bytes a prompt), and
the rates of a store (gather, read back, file write) and a load (file read, scatter into
pages) of one prompt's KV. Every engine first runs the
traffic once on other prompts (compiling its steps), then the timed run.
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys
import tempfile
import time

import jax
import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from engine.kv_pages import pages_for_tokens
from engine.kv_transfer import STATE, KVStore
from scripts.flag_checks import check_count, check_output_file

_MODELS = flags.DEFINE_list(
    "models", ["bench-llama-20m", "bench-deepseek-v3-35m"], "Presets, HF dirs or orbax dirs."
)
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 2048, "Tokens of each arriving prompt.")
_DECODES = flags.DEFINE_integer("decodes", 8, "Requests decoding while the prompts arrive.")
_DECODE_TOKENS = flags.DEFINE_integer("decode_tokens", 128, "Tokens each of those decodes.")
_ARRIVALS = flags.DEFINE_integer("arrivals", 4, "Long prompts arriving.")
_EVERY = flags.DEFINE_integer("every", 24, "Steps between arrivals.")
_LONG_TOKENS = flags.DEFINE_integer("long_tokens", 16, "Tokens each arriving request decodes.")
_MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")

_SHORT_PROMPT = 32


def _greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def traffic(llm: LLM, background: list, arrivals: list) -> dict:
    """Run the traffic; the running requests' gaps between tokens, the arrivals' times to
    first token (from their arrival), every request's tokens (background first)."""
    order = [llm.add_request(p, _greedy(_DECODE_TOKENS.value)) for p in background]
    running = set(order)
    pending, arrived = collections.deque(arrivals), {}
    last, gaps, first = {}, [], {}
    tokens = collections.defaultdict(list)
    steps = 0
    while llm.has_unfinished() or pending:
        if pending and steps and steps % _EVERY.value == 0:
            rid = llm.add_request(pending.popleft(), _greedy(_LONG_TOKENS.value))
            order.append(rid)
            arrived[rid] = time.perf_counter()
        deltas = llm.step()
        now = time.perf_counter()
        steps += 1
        for d in deltas:
            if not d.token_ids:
                continue
            tokens[d.request_id].extend(d.token_ids)
            if d.request_id in running:
                if d.request_id in last:
                    gaps.append(now - last[d.request_id])
                last[d.request_id] = now
            else:
                first.setdefault(d.request_id, now - arrived[d.request_id])
    gaps_ms = np.asarray(gaps) * 1e3
    return dict(
        itl_p50_ms=float(np.percentile(gaps_ms, 50)),
        itl_p99_ms=float(np.percentile(gaps_ms, 99)),
        itl_max_ms=float(gaps_ms.max()),
        ttft_ms=float(np.mean(list(first.values())) * 1e3),
        tokens=[tokens[r] for r in order],
    )


def prefill(llm: LLM, arrivals: list) -> float:
    """Mean seconds of the producer's one-token request per prompt, one at a time."""
    start = time.perf_counter()
    for prompt in arrivals:
        llm.generate([prompt], _greedy(1))
    return (time.perf_counter() - start) / len(arrivals)


def transfer_rates(producer: LLM, consumer: LLM, prompt: list[int]) -> dict:
    """A store and a load of one prompt's KV, each timed on its second call (the first
    compiles): the engines' own gather, store and scatter."""
    n, made, c = len(prompt), producer._transfer, consumer._transfer
    # Any slots (the rates do not depend on which): the prompt's n positions (a
    # linear-attention model's n - 1, and state row 1), and a hybrid model's windowed
    # layers their last window of them.
    stored = n - 1 if made._states else n
    window = min(stored, made._window or stored)
    slots = (
        np.arange(stored, dtype=np.int32),
        np.arange(window, dtype=np.int32),
        np.ones(1, np.int32),
    )
    loads = (slots[0][: n - 1], slots[1][: n - 1 - made._first(n - 1)], slots[2])
    with tempfile.TemporaryDirectory() as d:
        store = KVStore(d, {k: v for k, v in made.store.meta.items() if k != "format"})
        for _ in range(2):
            start = time.perf_counter()
            rows = [np.asarray(r) for r in jax.device_get(made._gather(producer._kv, slots))]
            store.file(prompt).unlink(missing_ok=True)
            store.write(prompt, "", rows, stored)
            store_s = time.perf_counter() - start
        for _ in range(2):
            start = time.perf_counter()
            read = store.read(prompt, "", n - 1, made._starts(n - 1))
            consumer._kv = c._scatter(consumer._kv, loads, read)
            jax.block_until_ready(consumer._kv)
            load_s = time.perf_counter() - start
    state = sum(r.nbytes for r, pool in zip(rows, made._pools, strict=True) if pool == STATE)
    nbytes = sum(r.nbytes for r in rows)
    return dict(
        kv_bytes_per_token=(nbytes - state) / stored,
        state_bytes=state,
        store_mb_s=nbytes / store_s / 1e6,
        load_mb_s=sum(r.nbytes for r in read) / load_s / 1e6,
    )


def bench(model: str) -> dict:
    num_prompts = _DECODES.value + _ARRIVALS.value
    longest = max(_PROMPT_LEN.value, _SHORT_PROMPT) + max(_DECODE_TOKENS.value, _LONG_TOKENS.value)
    kw = dict(
        num_pages=num_prompts * pages_for_tokens(longest, 16),  # never short of pages
        max_num_batched_tokens=_MAX_BATCHED.value,
        max_num_seqs=num_prompts,
        max_model_len=longest,
    )
    with tempfile.TemporaryDirectory() as store:
        config = {"kv_connector_extra_config": {"shared_storage_path": store}}
        colocated = LLM(model=model, **kw)
        producer = LLM(model=model, **kw, kv_transfer_config={**config, "kv_role": "kv_producer"})
        consumer = LLM(model=model, **kw, kv_transfer_config={**config, "kv_role": "kv_consumer"})
        vocab = colocated.config.vocab_size
        rng = np.random.default_rng(0)
        runs = []
        for _ in range(2):  # compiling, then timed
            background = [
                rng.integers(3, vocab, _SHORT_PROMPT).tolist() for _ in range(_DECODES.value)
            ]
            arrivals = [
                rng.integers(3, vocab, _PROMPT_LEN.value).tolist() for _ in range(_ARRIVALS.value)
            ]
            together = traffic(colocated, background, arrivals)
            prefill_s = prefill(producer, arrivals)
            apart = traffic(consumer, background, arrivals)
            runs.append((together, prefill_s, apart))
        together, prefill_s, apart = runs[-1]
        rates = transfer_rates(producer, consumer, arrivals[0])
    same = sum(a == b for a, b in zip(together.pop("tokens"), apart.pop("tokens"), strict=True))
    return dict(
        model=colocated.config.name,
        colocated=together,
        disaggregated=dict(apart, producer_prefill_ms=prefill_s * 1e3),
        same_tokens=f"{same}/{num_prompts}",
        **rates,
    )


def main(argv):
    del argv
    try:
        check_count("--prompt_len", _PROMPT_LEN.value, low=2, high=1 << 20)
        check_count("--decodes", _DECODES.value, low=1, high=1024)
        check_count("--decode_tokens", _DECODE_TOKENS.value, low=2, high=1 << 16)
        check_count("--arrivals", _ARRIVALS.value, low=1, high=1024)
        check_count("--every", _EVERY.value, low=1, high=1 << 16)
        check_count("--long_tokens", _LONG_TOKENS.value, low=1, high=1 << 16)
        if _ARRIVALS.value * _EVERY.value >= _DECODE_TOKENS.value:
            raise ValueError(
                f"--decode_tokens={_DECODE_TOKENS.value}: must exceed --arrivals x --every="
                f"{_ARRIVALS.value * _EVERY.value}, so the decodes run while prompts arrive"
            )
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_disagg: {e}")
    rows = [bench(m) for m in _MODELS.value]
    print(
        f"{_DECODES.value} requests decode {_DECODE_TOKENS.value} tokens while {_ARRIVALS.value} "
        f"prompts of {_PROMPT_LEN.value} tokens arrive (one every {_EVERY.value} steps, "
        f"{_LONG_TOKENS.value} tokens each)"
    )
    print(
        "| model | mode | ITL p50 ms | p99 ms | max ms | TTFT ms (decode engine) | "
        "TTFT ms with the producer's prefill |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for mode in ("colocated", "disaggregated"):
            m = r[mode]
            extra = m.get("producer_prefill_ms")
            total = "" if extra is None else f"{m['ttft_ms'] + extra:.1f}"
            print(
                f"| {r['model']} | {mode} | {m['itl_p50_ms']:.2f} | {m['itl_p99_ms']:.2f} | "
                f"{m['itl_max_ms']:.2f} | {m['ttft_ms']:.1f} | {total} |"
            )
    print("| model | same tokens | KV bytes / token | state bytes | store MB/s | load MB/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['same_tokens']} | {r['kv_bytes_per_token']:.0f} | "
            f"{r['state_bytes']:,} | {r['store_mb_s']:.0f} | {r['load_mb_s']:.0f} |"
        )
    if _JSON.value:
        pathlib.Path(_JSON.value).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    app.run(main)
