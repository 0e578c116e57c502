"""Offline decode throughput against the measured memory-bandwidth roofline.

  python -m scripts.bench_throughput                       # the table in docs/benchmarks.md
  python -m scripts.bench_throughput --models=tiny-llama --batch_sizes=1,2 --decode_steps=4

For each model and batch size B: B random prompts are prefilled, then `decode_steps` steps
in which every sequence decodes one token are timed (each step reads its tokens back, so
the time is the whole host + device step). The roofline divides the bytes one decode step
must read (the weights it touches plus the KV cache) by the bandwidth of a timed large
device array copy (read + write bytes counted). Beside the step time, the engine's own
split of it (`LLM.stats()`): host ms (schedule, pack, launch, update, outputs) and wait ms
(blocked reading the step's tokens back).

`--sampling` repeats the runs per sampling mode: greedy (the default), sampled
(temperature 0.8, top-k 50, top-p 0.95, min-p 0.05, a seed per request) and logprobs
(greedy plus the top 5 logprobs of every token: the step variant that returns them) and
penalties (greedy under repetition 1.1, presence 0.5 and frequency 0.5: the step variant
that keeps the device-side token counts) and logit_bias (greedy with 300 biased tokens per
request, the OpenAI API's limit: the step variant that takes per-row token lists).
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams, kv_quant
from models.load import model_config
from models.quantization import is_quantized, with_gptq_fields
from scripts.flag_checks import check_output_file, parse_ints

_MODELS = flags.DEFINE_list("models", ["bench-llama-20m", "bench-deepseek-v3-35m"], "Presets.")
_BATCHES = flags.DEFINE_list("batch_sizes", ["1", "8", "32", "64"], "Decode batch sizes.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 32, "Prompt tokens per sequence.")
_STEPS = flags.DEFINE_integer("decode_steps", 32, "Timed decode steps per batch size.")
_COPY_MB = flags.DEFINE_integer("copy_mb", 512, "Size of the timed bandwidth copy (MiB).")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")
_SAMPLING = flags.DEFINE_list(
    "sampling",
    ["greedy"],
    "Sampling modes to time: greedy, sampled, logprobs, penalties, logit_bias.",
)
_KV_CACHE_DTYPE = flags.DEFINE_enum(
    "kv_cache_dtype", "auto", ["auto", "fp8"], "KV pages: the model dtype, or fp8 (+ row scales)."
)
_QUANTIZATION = flags.DEFINE_list(
    "quantization",
    ["none"],
    "Weights to time, each a run: none (the model dtype), fp8 (block-scaled e4m3), int4 "
    "(packed, a scale per 128 inputs) and/or int4-gptq (the same weights held as a GPTQ "
    "checkpoint with act order is: zero points and group indices too).",
)


def copy_bandwidth(num_bytes: int, repeats: int = 5) -> float:
    """Bytes per second moved by a large array copy into a preallocated, already-touched
    buffer (read + write counted): the memory roofline for a decode step on this machine."""
    src = np.ones(num_bytes // 4, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def decode_bytes(llm: LLM, batch: int, context: int) -> int:
    """Bytes one decode step reads: every dense weight, the experts B tokens can reach, KV."""
    cfg = llm.config
    total = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(llm.params):
        # (an fp8 weight's leaves are its .data and .scale: GetAttrKeys)
        keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        if "moe" in keys and {"w_gate", "w_up", "w_down"} & set(keys):
            # Expected distinct experts among B * k uniform picks out of E.
            e, k = cfg.num_experts, cfg.num_experts_per_tok
            touched = e * (1 - (1 - k / e) ** batch)
            total += leaf.nbytes * touched / e
        elif keys[0] == "embed" and not cfg.tie_word_embeddings:
            total += batch * leaf.shape[1] * leaf.dtype.itemsize  # only B rows are gathered
        else:
            total += leaf.nbytes
    return int(total + batch * context * kv_quant.bytes_per_token(cfg, llm.kv_dtype))


def _progress(label: str, i: int, n: int) -> None:
    bar = "#" * (20 * i // n)
    print(f"\r  {label:<32} [{bar:<20}] {i}/{n}", end="", file=sys.stderr, flush=True)


SAMPLING_MODES = {
    "greedy": {},
    "sampled": dict(temperature=0.8, top_k=50, top_p=0.95, min_p=0.05),
    "logprobs": dict(logprobs=5),
    "penalties": dict(repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.5),
    # The OpenAI API's largest logit_bias: 300 tokens (ids 0-299, in every preset's vocab).
    "logit_bias": dict(logit_bias=dict.fromkeys(range(300), -1.0)),
}


def bench_model(
    model: str,
    batches: list[int],
    prompt_len: int,
    steps: int,
    bw: float,
    kv_cache_dtype: str,
    sampling: str = "greedy",
    quantization: str = "none",
) -> list:
    rows = []
    max_b = max(batches)
    llm = LLM(
        model=model,
        kv_cache_dtype=kv_cache_dtype,
        quantization={"none": None, "int4-gptq": "int4"}.get(quantization, quantization),
        max_num_seqs=max_b,
        max_num_batched_tokens=max(2048, max_b),
        max_model_len=prompt_len + 2 * steps + 8,
    )
    if quantization == "int4-gptq":
        llm.params = jax.tree.map(with_gptq_fields, llm.params, is_leaf=is_quantized)
    rng = np.random.default_rng(0)
    for b in batches:
        ids = [
            llm.add_request(
                rng.integers(3, llm.config.vocab_size, prompt_len).tolist(),
                SamplingParams(
                    max_tokens=2 * steps, ignore_eos=True, seed=i, **SAMPLING_MODES[sampling]
                ),
            )
            for i in range(b)
        ]
        # Until every prompt is prefilled (a long prompt takes several chunked steps).
        decoding = set()
        while len(decoding) < b:
            decoding.update(d.request_id for d in llm.step() if d.token_ids)
        llm.step()  # first all-decode step: compile the (B, B) bucket outside the timing
        before = llm.stats()
        start = time.perf_counter()
        for i in range(steps):
            llm.step()
            _progress(f"{model} {sampling} B={b}", i + 1, steps)
        elapsed = time.perf_counter() - start
        after = llm.stats()
        print(file=sys.stderr)
        for rid in ids:
            llm.abort(rid)
        llm.step()
        tok_s = b * steps / elapsed
        nbytes = decode_bytes(llm, b, prompt_len + steps)
        roof_tok_s = b / (nbytes / bw)
        rows.append(
            dict(
                model=model,
                sampling=sampling,
                weights=quantization if quantization != "none" else llm.config.dtype,
                kv_cache_dtype=llm.kv_dtype.name,
                batch=b,
                tok_s=tok_s,
                step_ms=1e3 * elapsed / steps,
                # The engine's own account (LLM.stats): host work, and time blocked on the
                # device's tokens, per step.
                host_ms=1e3 * (after["host_seconds"] - before["host_seconds"]) / steps,
                wait_ms=1e3 * (after["wait_seconds"] - before["wait_seconds"]) / steps,
                bytes_per_step=nbytes,
                roofline_tok_s=roof_tok_s,
                frac_roofline=tok_s / roof_tok_s,
            )
        )
    return rows


def parse_flags() -> list[int]:
    """The batch sizes; app.UsageError naming the flag and its limit for a bad value (checked
    before any engine is built)."""
    try:
        batches = parse_ints("--batch_sizes", _BATCHES.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    # Each sequence may decode max_tokens = 2 * decode_steps tokens: the prefill's token, the
    # untimed warm-up step and the timed steps need decode_steps + 2 <= 2 * decode_steps, so
    # every timed step has work only from decode_steps >= 2 (at 0 no prompt ever yields a
    # token, so the wait for prefill never ends; at 1 the timed step has nothing to decode).
    bad = [m for m in _SAMPLING.value if m not in SAMPLING_MODES]
    if bad or not _SAMPLING.value or len(set(_SAMPLING.value)) < len(_SAMPLING.value):
        raise app.UsageError(
            f"--sampling={','.join(_SAMPLING.value)}: must list one or more of "
            f"{', '.join(SAMPLING_MODES)}, none repeated"
        )
    bad = [q for q in _QUANTIZATION.value if q not in ("none", "fp8", "int4", "int4-gptq")]
    if bad or not _QUANTIZATION.value or len(set(_QUANTIZATION.value)) < len(_QUANTIZATION.value):
        raise app.UsageError(
            f"--quantization={','.join(_QUANTIZATION.value)}: must list none, fp8, int4 and/or "
            "int4-gptq, none repeated"
        )
    if _STEPS.value < 2:
        raise app.UsageError(f"--decode_steps={_STEPS.value}: must be >= 2")
    if _PROMPT_LEN.value < 1:
        raise app.UsageError(f"--prompt_len={_PROMPT_LEN.value}: must be >= 1")
    # Two buffers of copy_mb each: more than the host holds fails in numpy (a traceback).
    host_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    if not 1 <= _COPY_MB.value <= host_mib // 4:
        raise app.UsageError(
            f"--copy_mb={_COPY_MB.value}: must be in [1, {host_mib // 4}] (a quarter of this "
            "host's memory: the timed copy holds two buffers of that size)"
        )
    if not _MODELS.value or "" in _MODELS.value or len(set(_MODELS.value)) < len(_MODELS.value):
        raise app.UsageError(
            f"--models={','.join(_MODELS.value)}: must name one or more models, none repeated"
        )
    # Every model's config (no weights) before the first is benchmarked: a bad name or a
    # length past a model's positions fails now, not after the models before it have run.
    max_len = _PROMPT_LEN.value + 2 * _STEPS.value + 8  # bench_model's max_model_len
    for model in _MODELS.value:
        cfg = model_config(model)
        if max_len > cfg.max_position_embeddings:
            raise ValueError(
                f"--prompt_len={_PROMPT_LEN.value}, --decode_steps={_STEPS.value}: sequences "
                f"reach {max_len} tokens (prompt_len + 2 * decode_steps + 8), more than "
                f"{model}'s max_position_embeddings={cfg.max_position_embeddings}"
            )
    return batches


def main(argv):
    del argv
    try:
        _main()
    except (ValueError, OSError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"bench_throughput: {e}")


def _main() -> None:
    if _JSON.value is not None:
        check_output_file("--json_out", _JSON.value)
    batches = parse_flags()
    bw = copy_bandwidth(_COPY_MB.value << 20)
    print(f"device {jax.devices()[0].device_kind}; copy bandwidth {bw / 1e9:.1f} GB/s")
    rows = []
    for model in _MODELS.value:
        for sampling in _SAMPLING.value:
            for quantization in _QUANTIZATION.value:
                rows += bench_model(
                    model,
                    batches,
                    _PROMPT_LEN.value,
                    _STEPS.value,
                    bw,
                    _KV_CACHE_DTYPE.value,
                    sampling,
                    quantization,
                )
    # Speedup over the smallest batch size's row of the same model (batch 1 by default).
    base_batch = min(batches)
    print(
        "| model | weights | sampling | batch | tok/s | step ms | host ms | wait ms |"
        f" MB read/step | roofline tok/s | of roofline | vs batch {base_batch} |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = next(
            x
            for x in rows
            if (x["model"], x["weights"], x["sampling"], x["batch"])
            == (r["model"], r["weights"], r["sampling"], base_batch)
        )
        base = base["tok_s"]
        print(
            f"| {r['model']} | {r['weights']} | {r['sampling']} | {r['batch']} | "
            f"{r['tok_s']:.0f} | "
            f"{r['step_ms']:.2f} | "
            f"{r['host_ms']:.2f} | {r['wait_ms']:.2f} | {r['bytes_per_step'] / 1e6:.1f} | "
            f"{r['roofline_tok_s']:.0f} | "
            f"{100 * r['frac_roofline']:.0f}% | {r['tok_s'] / base:.1f}x |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(dict(copy_bandwidth=bw, rows=rows), f, indent=1)


if __name__ == "__main__":
    app.run(main)
