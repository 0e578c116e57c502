"""Speculative decoding with n-gram, MTP or draft-model drafts: the same requests with
and without.

  python -m scripts.bench_speculative          # the figures in docs/benchmarks.md
  python -m scripts.bench_speculative --model=tiny-llama --n=2 --max_tokens=8
  python -m scripts.bench_speculative --temperature=0.8      # sampled requests
  python -m scripts.bench_speculative --method=mtp --model=bench-deepseek-v3-35m
  python -m scripts.bench_speculative --method=draft_model   # the model drafting for itself
  python -m scripts.bench_speculative --method=draft_model --draft_quantization=int4

With --method=draft_model a second engine runs --draft_model (default: the model itself,
whose drafts are nearly always right: the price of drafting with a model of the target's
size, and the steps it saves) before every step with drafts (engine/draft_model.py).

With --method=mtp the drafts come from the model's MTP module (engine/mtp.py), run inside
every step: here a random one, so the figures give its price per step, not its gain.
--drafts=oracle (mtp) feeds instead the tokens the plain engine made (the MTP pass still
runs): what drafts that are always right would buy; --drafts=none feeds none: the price of
the MTP pass alone.

`n` greedy (or, with --temperature, seeded sampled) requests of `max_tokens` tokens, on
two engines of one model (one with `speculative_config={"method": "ngram", ...}`), for
two kinds of prompt: random tokens, and
a random span repeated (text that quotes itself, where prompt lookup finds drafts). Each
is timed after a first run compiled its steps: the whole run, steps, drafts fed and kept,
and how many requests give the plain engine's tokens (all, up to float rounding: a draft
is checked in a wider step than the decode that would make its token; bitwise in
batch-invariant mode, tests/test_speculative.py); then the first run's time and the step
programs it compiled (a speculating engine's: one per bucket, whether a step carries
drafts or not, speculative.scored_rows).
Random weights decide what is accepted here, not language: the figures show what a kept
or a rejected draft costs, not a real model's acceptance rate.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from scripts.flag_checks import check_count

_MODEL = flags.DEFINE_string("model", "bench-llama-20m", "Preset name, HF dir or orbax dir.")
_N = flags.DEFINE_integer("n", 8, "Requests.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 128, "Prompt tokens.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 128, "New tokens per request.")
_K = flags.DEFINE_integer("num_speculative_tokens", 4, "Drafts per decode at most.")
_LOOKUP_MAX = flags.DEFINE_integer("prompt_lookup_max", 4, "Longest n-gram looked up.")
_METHOD = flags.DEFINE_enum(
    "method", "ngram", ["ngram", "mtp", "draft_model"], "Where drafts come from."
)
_DRAFT_MODEL = flags.DEFINE_string(
    "draft_model", None, "draft_model: the draft model (default: --model itself)."
)
_DRAFT_QUANT = flags.DEFINE_enum(
    "draft_quantization", None, ["fp8", "int4"], "draft_model: its weights quantized on load."
)
_DRAFTS = flags.DEFINE_enum(
    "drafts",
    "model",
    ["model", "oracle", "none"],
    "mtp: the MTP module's drafts, the plain engine's tokens (always right), or none fed.",
)
_TEMPERATURE = flags.DEFINE_float(
    "temperature", 0.0, "0: greedy; else sampled (seeded per request, top-k 50)."
)


def run(llm: LLM, prompts: list[list[int]]) -> dict:
    t = _TEMPERATURE.value
    params = [
        SamplingParams(
            temperature=t,
            top_k=50 if t else 0,
            seed=i,
            max_tokens=_MAX_TOKENS.value,
            ignore_eos=True,
        )
        for i in range(len(prompts))
    ]
    before = llm.stats()
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    after = llm.stats()
    diff = {
        k: after[k] - before.get(k, 0)
        for k in after
        if k.startswith("num_") and isinstance(after[k], int)
    }
    return dict(
        seconds=seconds,
        compiles=diff["num_compiles"],
        steps=diff["num_steps"],
        drafts=diff.get("num_draft_tokens", 0),
        kept=diff.get("num_accepted_tokens", 0),
        tokens=[o.token_ids for o in outs],
    )


def replace_drafts(llm: LLM, prompts, outputs, none: bool) -> None:
    """`llm`'s MTP drafts replaced by the tokens that follow in `outputs` (per prompt), or
    by none."""
    full = {tuple(p): list(p) + list(o) for p, o in zip(prompts, outputs, strict=True)}

    def drafts(seq, cap):
        tokens = full[tuple(seq.prompt_token_ids)]
        return () if none else tuple(tokens[seq.num_tokens : seq.num_tokens + cap])

    llm._scheduler.speculative.drafts = drafts


def main(argv):
    del argv
    try:
        check_count("--n", _N.value, low=1, high=256)
        check_count("--prompt_len", _PROMPT_LEN.value, low=2, high=1 << 16)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        if _DRAFTS.value != "model" and _METHOD.value != "mtp":
            raise ValueError(f"--drafts={_DRAFTS.value}: only with --method=mtp")
        for name, flag in (("draft_model", _DRAFT_MODEL), ("draft_quantization", _DRAFT_QUANT)):
            if flag.value and _METHOD.value != "draft_model":
                raise ValueError(f"--{name}={flag.value}: only with --method=draft_model")
    except ValueError as e:
        sys.exit(f"bench_speculative: {e}")
    n, length = _N.value, _PROMPT_LEN.value
    kw = dict(model=_MODEL.value, max_num_seqs=n, max_model_len=length + _MAX_TOKENS.value)
    config = {"method": _METHOD.value, "num_speculative_tokens": _K.value}
    if _METHOD.value == "ngram":
        config["prompt_lookup_max"] = _LOOKUP_MAX.value
    if _METHOD.value == "draft_model":
        config["model"] = _DRAFT_MODEL.value or _MODEL.value
        config["quantization"] = _DRAFT_QUANT.value
    try:
        plain, spec = LLM(**kw), LLM(speculative_config=config, **kw)
    except ValueError as e:
        sys.exit(f"bench_speculative: {e}")
    rng = np.random.default_rng(0)
    vocab = plain.config.vocab_size
    span = max(1, length // 4)
    workloads = {
        "random prompts": [rng.integers(3, vocab, size=length).tolist() for _ in range(n)],
        "self-quoting prompts": [
            (rng.integers(3, vocab, size=span).tolist() * 4)[:length] for _ in range(n)
        ],
    }
    print(
        f"{plain.config.name}: {n} "
        + (f"sampled (temperature {_TEMPERATURE.value})" if _TEMPERATURE.value else "greedy")
        + f" requests, {length}-token prompts, "
        f"{_MAX_TOKENS.value} tokens each, k={_K.value}"
    )
    print(
        "| prompts | engine | s | steps | drafts fed | drafts kept | same tokens "
        "| first run s | step programs compiled |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, prompts in workloads.items():
        rows = {}
        for label, llm in (("plain", plain), (_METHOD.value, spec)):
            if label != "plain" and _DRAFTS.value != "model":
                replace_drafts(spec, prompts, rows["plain"]["tokens"], _DRAFTS.value == "none")
            first = run(llm, prompts)  # compiles its steps
            rows[label] = {**run(llm, prompts), "first": first}
        pairs = zip(rows[_METHOD.value]["tokens"], rows["plain"]["tokens"], strict=True)
        same = sum(a == b for a, b in pairs)
        for label, r in rows.items():
            print(
                f"| {name} | {label} | {r['seconds']:.2f} | {r['steps']} | {r['drafts']} | "
                f"{r['kept']} | {same}/{n} | {r['first']['seconds']:.2f} | "
                f"{r['first']['compiles']} |"
            )


if __name__ == "__main__":
    app.run(main)
