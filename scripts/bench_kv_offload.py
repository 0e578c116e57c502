"""Documents asked about in turns, more of them than the device's KV pages hold: prefix
caching alone, and with a host tier (`kv_offloading_size`).

  python -m scripts.bench_kv_offload               # the figures in docs/benchmarks.md
  python -m scripts.bench_kv_offload --model=tiny-llama --doc_len=64 --docs=4 --rounds=2

`docs` random `doc_len`-token documents; each round queues one question per document (the
document + a random `question_len`-token question, `max_tokens` greedy tokens), all at
once, and waits for their answers; `rounds` rounds. The device pool holds
`device_docs` requests' pages, so by the time a document comes round again the device has
given its pages to the others. Run three ways: without prefix caching, with it (device
pages only), and with it over a host tier of `kv_offloading_size` GiB. Each engine first
runs the same workload on other documents (compiling every step and copy program), then
the prefix cache is reset and the run is timed: the whole run, the mean time to a
request's first token, the prompt tokens the steps computed, the pages copied to and from
host memory and the host's time in those copies, and how many requests give the uncached
run's tokens.
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
_DOCS = flags.DEFINE_integer("docs", 8, "Documents.")
_DOC_LEN = flags.DEFINE_integer("doc_len", 2048, "Tokens per document.")
_QUESTION_LEN = flags.DEFINE_integer("question_len", 64, "Tokens per question.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Questions per document (one a round).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "New tokens per request.")
_DEVICE_DOCS = flags.DEFINE_integer("device_docs", 3, "Requests the device pool holds.")
_SIZE = flags.DEFINE_float("kv_offloading_size", 1.0, "GiB of host memory for the host tier.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens.")
_MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def workload(rng: np.random.Generator, vocab: int) -> list[list[list[int]]]:
    """Each round's prompts: a question on every document."""
    docs = [rng.integers(3, vocab, _DOC_LEN.value).tolist() for _ in range(_DOCS.value)]
    return [
        [doc + rng.integers(3, vocab, _QUESTION_LEN.value).tolist() for doc in docs]
        for _ in range(_ROUNDS.value)
    ]


def run(llm: LLM, rounds: list[list[list[int]]], mode: str) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    before = llm.stats()
    tokens, waits = [], []
    start = time.perf_counter()
    for prompts in rounds:
        begin, first, got = time.perf_counter(), {}, {}
        for deltas in llm.stream(prompts, params):
            now = time.perf_counter() - begin
            for d in deltas:
                got.setdefault(d.request_id, []).extend(d.token_ids)
                if d.token_ids:
                    first.setdefault(d.request_id, now)
        waits.extend(first.values())
        tokens.extend(got[k] for k in sorted(got, key=int))
    seconds = time.perf_counter() - start
    after = llm.stats()
    delta = lambda key: after.get(key, 0) - before.get(key, 0)  # noqa: E731
    return dict(
        mode=mode,
        seconds=seconds,
        mean_first_token_s=float(np.mean(waits)),
        prompt_tokens_computed=sum(len(p) for r in rounds for p in r) - delta("prefix_cache_hits"),
        pages_to_host=delta("kv_offload_stored_pages"),
        pages_from_host=delta("kv_offload_loaded_pages"),
        copy_seconds=delta("kv_offload_seconds"),
        tokens=tokens,
    )


def main(argv):
    del argv
    try:
        check_count("--docs", _DOCS.value, low=1, high=1024)
        check_count("--doc_len", _DOC_LEN.value, low=1, high=1 << 20)
        check_count("--question_len", _QUESTION_LEN.value, low=1, high=1 << 20)
        check_count("--rounds", _ROUNDS.value, low=1, high=1024)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        check_count("--device_docs", _DEVICE_DOCS.value, low=1, high=1024)
        if not _SIZE.value > 0:
            raise ValueError(f"--kv_offloading_size={_SIZE.value}: must be > 0 GiB")
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_kv_offload: {e}")
    length = _DOC_LEN.value + _QUESTION_LEN.value + _MAX_TOKENS.value
    kw = dict(
        page_size=_PAGE_SIZE.value,
        num_pages=_DEVICE_DOCS.value * pages_for_tokens(length, _PAGE_SIZE.value),
        max_num_batched_tokens=_MAX_BATCHED.value,
        max_num_seqs=_DOCS.value,
        max_model_len=length,
    )
    engines = [
        ("no prefix caching", {}),
        ("prefix caching, device pages only", {"enable_prefix_caching": True}),
        (
            f"prefix caching + kv_offloading_size={_SIZE.value:g}",
            {"enable_prefix_caching": True, "kv_offloading_size": _SIZE.value},
        ),
    ]
    rows = []
    for mode, options in engines:
        llm = LLM(model=_MODEL.value, **kw, **options)
        vocab = llm.config.vocab_size
        run(llm, workload(np.random.default_rng(1), vocab), mode)  # compiles
        llm.reset_prefix_cache()
        rows.append(run(llm, workload(np.random.default_rng(0), vocab), mode))
        del llm
    for r in rows:
        r["same_tokens"] = sum(a == b for a, b in zip(r["tokens"], rows[0]["tokens"], strict=True))
    n = _DOCS.value * _ROUNDS.value
    print(
        f"{_MODEL.value}: {_DOCS.value} documents of {_DOC_LEN.value} tokens, {_ROUNDS.value} "
        f"rounds of a {_QUESTION_LEN.value}-token question on each ({_MAX_TOKENS.value} greedy "
        f"tokens); device pages for {_DEVICE_DOCS.value} requests ({kw['num_pages']} pages)"
    )
    print(
        "| mode | s in all | mean s to first token | prompt tokens computed | pages to / from "
        "host | s copying (host) | same tokens |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['seconds']:.2f} | {r['mean_first_token_s']:.2f} | "
            f"{r['prompt_tokens_computed']:,} | {r['pages_to_host']:,} / {r['pages_from_host']:,} "
            f"| {r['copy_seconds']:.3f} | {r['same_tokens']}/{n} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "tokens"} for r in rows], f, indent=1)


if __name__ == "__main__":
    app.run(main)
