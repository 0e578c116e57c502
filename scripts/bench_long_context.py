"""Long-context benchmarks: TTFT and peak memory of long prompts; decode ITL under a long prefill.

  git show c4ae706:engine/paged_attention.py > /tmp/pa_before.py
  python -m scripts.bench_long_context --part=attention --attention_before=/tmp/pa_before.py
  python -m scripts.bench_long_context --part=ttft      # (a) the TTFT / RSS table
  python -m scripts.bench_long_context --part=itl       # (b) the ITL sweep and its PNG
  python -m scripts.bench_long_context --part=ttft --models=tiny-llama --prompt_lens=512 \
      --budget=128                                      # a quick check
  python -m scripts.bench_long_context --part=pack      # host: packing 64 decodes
  python -m scripts.bench_long_context --part=host      # host: schedule + pack + update
  python -m scripts.bench_long_context --part=mla       # MLA prefill: absorbed vs expanded
  python -m scripts.bench_long_context --part=window    # sliding-window attention

attention: one layer of paged attention per scenario, best of 3, and XLA's temp bytes, for
the engine's engine/paged_attention.py and optionally an older copy of it.
(a) Each (model, prompt length) runs in a fresh process, so its peak RSS is its own: one
prompt, chunked by --budget, after a warm-up prompt compiled the step; RSS is compared
with the weights + the KV pool (sized for the prompt) + 1 GiB.
mla: one MLA layer's attention as the step runs it, at DeepSeek-V3's per-head shapes with
--mla_heads heads, absorbed for every token against the engine's choice (long prefill spans
expanded), the two run in turn, best of 3 each, with XLA's temp bytes and the largest
difference between the two.
On a GPU, --mla_impls=xla,pallas --mla_heads=128 --mla_dtype=bfloat16 also times the
Pallas MLA kernel against it with the long spans on the XLA expanded path (gpu_check.sh's
optional `mla` stage): the measurement that would decide the engine's GPU route.
window: one GQA layer of the engine's paged attention at long contexts with each
--windows sliding window ("none": full causal), best of 3 (WINDOW_SCENARIOS).
pack: the host's runner.pack of --num_pack_seqs decodes at each --pack_contexts in an
engine of 131,072 positions, with the engine's carried page rows and without.
host: a decode step's whole host share without a model (Scheduler.schedule, runner.pack,
Scheduler.update), --num_host_seqs decodes at each --host_contexts, median of 50 steps.
(b) --num_streams requests decode; their ITL is measured while a --itl_prompt_len prompt
prefills until its first token, then over as many steps of the same streams restarted
without it (same contexts, same decode cost). Swept over budgets
(max_num_batched_tokens): --policy_budgets with the default long-prefill policy, --budgets
with the token budget alone; and over --slowdowns (the policy's max_decode_slowdown) at
--budget.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import jax.numpy as jnp
from absl import app, flags

from engine import paged_attention
from long_context.latency import (
    ATTENTION_SCENARIOS,
    MLA_SCENARIOS,
    check_itl_args,
    measure_itl,
    measure_ttft,
    plot_itl_vs_ttft,
    time_attention,
    time_host_step,
    time_mla_attention,
    time_pack,
    time_window_attention,
)
from long_context.policy import LongPrefillPolicy
from models.load import model_config
from scripts.flag_checks import check_input_file, check_output_file, parse_floats, parse_ints

PARTS = ("attention", "ttft", "itl", "pack", "host", "mla", "window")
_PART = flags.DEFINE_list("part", ["ttft", "itl"], f"Which benchmarks: {', '.join(PARTS)}.")
_MLA_HEADS = flags.DEFINE_integer("mla_heads", 8, "(mla) attention heads (DeepSeek-V3: 128).")
_MLA_IMPLS = flags.DEFINE_list(
    "mla_impls", ["xla"], "(mla) xla and/or pallas (the Pallas MLA kernel for the absorbed part)."
)
_MLA_DTYPE = flags.DEFINE_enum("mla_dtype", "float32", ["float32", "bfloat16"], "(mla) dtype.")
_WINDOWS = flags.DEFINE_list(
    "windows", ["none", "4096", "1024"], "(window) sliding windows in tokens; none: full."
)
_PACK_SEQS = flags.DEFINE_integer("num_pack_seqs", 64, "(pack) decodes in the step.")
_PACK_CONTEXTS = flags.DEFINE_list(
    "pack_contexts", ["2048", "8192", "32768", "131072"], "(pack) their context lengths."
)
_HOST_SEQS = flags.DEFINE_integer("num_host_seqs", 256, "(host) decodes in the step.")
_HOST_CONTEXTS = flags.DEFINE_list(
    "host_contexts", ["80", "2048", "32768"], "(host) their context lengths."
)
_HOST_WINDOW = flags.DEFINE_integer(
    "host_window",
    None,
    "(host) a hybrid model's sliding window: its windowed layers' own page pool and table.",
)
_ATTN_BEFORE = flags.DEFINE_string(
    "attention_before", None, "attention: an older paged_attention.py to compare with."
)
_ATTN_BEFORE_BLOCK = flags.DEFINE_integer(
    "attention_before_block", 32, "attention: KV block tokens of the older file (its engine's)."
)
_ATTN_CONFIGS = flags.DEFINE_list(
    "attention_configs",
    ["128:256:512"],
    "attention: engine settings to time, decode block:query tile:prefill block (tokens).",
)
_ATTN_SKIP_BEFORE = flags.DEFINE_list(
    "attention_skip_before",
    ["2048-token chunk at 30k + 8 decodes", "2048-token chunk at 126k"],
    "attention: scenarios too slow for the older file.",
)
_MODELS = flags.DEFINE_list("models", ["small-llama-long", "small-mla-long"], "(a) presets.")
_PROMPT_LENS = flags.DEFINE_list("prompt_lens", ["8192", "32768", "131072"], "(a) lengths.")
_BUDGET = flags.DEFINE_integer("budget", 2048, "max_num_batched_tokens (the engine default).")
_KV_CACHE_DTYPE = flags.DEFINE_enum(
    "kv_cache_dtype", "auto", ["auto", "fp8"], "(a) KV pages: the model dtype, or fp8."
)
_ITL_MODEL = flags.DEFINE_string("itl_model", "small-llama-long", "(b) preset.")
_ITL_PROMPT_LEN = flags.DEFINE_integer("itl_prompt_len", 32768, "(b) long prompt tokens.")
_NUM_STREAMS = flags.DEFINE_integer("num_streams", 8, "(b) decoding requests.")
_STREAM_TOKENS = flags.DEFINE_integer("stream_tokens", 16384, "(b) tokens a stream may decode.")
_BUDGETS = flags.DEFINE_list(
    "budgets", ["512", "1024", "2048", "4096", "8192"], "(b) token budget only: budgets."
)
_POLICY_BUDGETS = flags.DEFINE_list(
    "policy_budgets", ["2048", "512", "8192"], "(b) default policy: budgets (first: headline)."
)
_SLOWDOWNS = flags.DEFINE_list("slowdowns", ["1.5", "3", "5"], "(b) policy sweep at --budget.")
_JSON = flags.DEFINE_string("json_out", None, "Write all results here as JSON.")
_PNG = flags.DEFINE_string("png_out", "docs/long_context_itl.png", "(b) p99 ITL vs TTFT plot.")
_ITL_FROM = flags.DEFINE_string(
    "itl_from", None, "(b) table and plot from a --json_out file instead of measuring."
)
_SINGLE = flags.DEFINE_string("single_ttft", None, "Internal: MODEL:LEN, one (a) run.")

GIB = 1 << 30


def _ttft_in_subprocess(model: str, prompt_len: int, budget: int, kv_cache_dtype: str) -> dict:
    cmd = [sys.executable, "-m", "scripts.bench_long_context"]
    cmd += [f"--single_ttft={model}:{prompt_len}", f"--budget={budget}"]
    cmd += [f"--kv_cache_dtype={kv_cache_dtype}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    refusal = proc.stderr.strip().splitlines()[-1:] if proc.returncode == 1 else []
    if refusal and refusal[0].startswith("bench_long_context: "):
        # The run refused its input (main's one line, exit status 1): say it as that line.
        # Anything else (killed, an XLA abort, a traceback) is a crash, shown with its log.
        raise ValueError(f"{model} at {prompt_len} tokens: {refusal[0]}")
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load_module(path: str):
    spec = importlib.util.spec_from_file_location("paged_attention_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _attention_rows() -> list[dict]:
    """Times every scenario for the older file and each --attention_configs of the engine's."""
    before = _load_module(_ATTN_BEFORE.value) if _ATTN_BEFORE.value else None
    configs = [tuple(int(x) for x in c.split(":")) for c in _ATTN_CONFIGS.value]
    rows = []
    for name, scenario in ATTENTION_SCENARIOS.items():
        row = dict(scenario=name)
        if before is not None and name not in _ATTN_SKIP_BEFORE.value:
            row["before"] = time_attention(before, scenario, _ATTN_BEFORE_BLOCK.value)
        for decode_block, tile, prefill_block in configs:
            row[f"{decode_block}:{tile}:{prefill_block}"] = time_attention(
                paged_attention,
                scenario,
                decode_block,
                query_tile=tile,
                prefill_block_tokens=prefill_block,
            )
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    keys = (["before"] if before is not None else []) + [":".join(map(str, c)) for c in configs]
    print(
        "ms (XLA temp MiB) of one GQA layer, 4 q / 2 kv heads x 32; columns: the older file, "
        "then decode block:query tile:prefill block tokens"
    )
    print("| scenario | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for r in rows:
        cells = [
            f"{1e3 * r[k]['seconds']:.1f} ({r[k]['temp_bytes'] / 2**20:.1f})" if k in r else "-"
            for k in keys
        ]
        print(f"| {r['scenario']} | " + " | ".join(cells) + " |")
    return rows


def _windows() -> list[int | None]:
    """--windows as integers >= 1 (None for "none"); UsageError naming the flag otherwise."""
    windows = []
    for w in _WINDOWS.value:
        if w == "none":
            windows.append(None)
        elif w.isdigit() and int(w) >= 1:
            windows.append(int(w))
        else:
            raise app.UsageError(f"--windows={','.join(_WINDOWS.value)}: {w!r} is not none or >= 1")
    if not windows:
        raise app.UsageError("--windows: give at least one window")
    return windows


def _window_rows(windows: list[int | None]) -> list[dict]:
    rows = time_window_attention(windows)
    keys = [str(w) for w in windows]
    print("ms (XLA temp MiB) of one GQA layer, 4 q / 2 kv heads x 32, by sliding window")
    print("| scenario | " + " | ".join("full" if k == "None" else k for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for r in rows:
        cells = [f"{1e3 * r[k]['seconds']:.1f} ({r[k]['temp_bytes'] / 2**20:.1f})" for k in keys]
        print(f"| {r['scenario']} | " + " | ".join(cells) + " |")
    return rows


def _mla_rows() -> list[dict]:
    print(
        f"ms (XLA temp MiB) of one MLA layer's attention, {_MLA_HEADS.value} heads of "
        f"DeepSeek-V3's shapes, {_MLA_DTYPE.value}"
    )
    print("| impl | scenario | absorbed | engine | expanded spans | speedup | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    dtype = jnp.dtype(_MLA_DTYPE.value)
    for impl in _MLA_IMPLS.value:
        for name, scenario in MLA_SCENARIOS.items():
            r = time_mla_attention(scenario, _MLA_HEADS.value, impl=impl, dtype=dtype)
            rows.append(dict(impl=impl, scenario=name) | r)
            a, e = r["absorbed"], r["engine"]
            cells = [f"{1e3 * w['seconds']:.1f} ({w['temp_bytes'] / 2**20:.1f})" for w in (a, e)]
            print(
                f"| {impl} | {name} | {cells[0]} | {cells[1]} "
                f"| {'yes' if r['expanded'] else 'no'} "
                f"| {a['seconds'] / e['seconds']:.2f}x | {r['max_abs_diff']:.1e} |",
                flush=True,
            )
    return rows


def _ttft_table(rows: list[dict]) -> None:
    print(
        "| model | KV | prompt tokens | TTFT s | prefill tok/s | weights MiB | KV pool MiB "
        "| peak RSS MiB | bound MiB | within |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bound = r["weight_bytes"] + r["kv_pool_bytes"] + GIB
        print(
            f"| {r['model']} | {r['kv_cache_dtype']} | {r['prompt_len']:,} | {r['ttft_s']:.1f} | "
            f"{r['prompt_len'] / r['ttft_s']:.0f} | {r['weight_bytes'] / 2**20:.0f} | "
            f"{r['kv_pool_bytes'] / 2**20:.0f} | {r['peak_rss_bytes'] / 2**20:.0f} | "
            f"{bound / 2**20:.0f} | {'yes' if r['peak_rss_bytes'] <= bound else 'NO'} |"
        )


def _itl_table(rows: list[dict]) -> None:
    print(
        "| policy | budget | TTFT s | ITL p50 / p99 ms without | ITL p50 / p99 ms with "
        "| p99 ratio | steps |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["itl_without"], r["itl_with"]
        print(
            f"| {r['policy']} | {r['budget']} | {r['ttft_s']:.1f} | "
            f"{a['p50_ms']:.1f} / {a['p99_ms']:.1f} | {b['p50_ms']:.1f} / {b['p99_ms']:.1f} | "
            f"{b['p99_ms'] / a['p99_ms']:.1f}x | {r['steps']} |"
        )


def main(argv):
    del argv
    try:
        _main()
    except (ValueError, OSError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"bench_long_context: {e}")


def _check_models(flag: str, models: list[str], lengths: list[int]) -> None:
    """Every model's config (no weights) holds the longest length, before anything runs."""
    if not models or "" in models:
        raise ValueError(f"{flag}={','.join(models)}: must name one or more models")
    for model in models:
        limit = model_config(model).max_position_embeddings
        if max(lengths) > limit:
            raise ValueError(
                f"{flag}={model}: {max(lengths)} tokens exceed its max_position_embeddings={limit}"
            )


def _check_flags() -> None:
    """ValueError naming the flag for every bad value the chosen parts would read, so that no
    part runs (for minutes) before a later one finds its flags wrong."""
    part = set(_PART.value)
    if _JSON.value is not None:
        check_output_file("--json_out", _JSON.value)
    if "attention" in part:
        if _ATTN_BEFORE.value:
            check_input_file("--attention_before", _ATTN_BEFORE.value)
        # Empty: only the --attention_before column. A triple may repeat a size (128:128:512).
        for c in _ATTN_CONFIGS.value:
            parts = c.split(":")
            if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
                raise ValueError(
                    f"--attention_configs={c}: expected decode block:query tile:prefill block, "
                    "each an integer >= 1 (tokens)"
                )
    if "mla" in part:
        if _MLA_HEADS.value < 1:
            raise ValueError(f"--mla_heads={_MLA_HEADS.value}: must be >= 1")
        impls = _MLA_IMPLS.value
        if not impls or any(i not in ("xla", "pallas") for i in impls):
            raise ValueError(f"--mla_impls={','.join(impls)}: expected xla and/or pallas")
    if "pack" in part:
        if _PACK_SEQS.value < 1:
            raise ValueError(f"--num_pack_seqs={_PACK_SEQS.value}: must be >= 1")
        parse_ints("--pack_contexts", _PACK_CONTEXTS.value, high=131072)  # the engine's length
    if "host" in part:
        if _HOST_SEQS.value < 1:
            raise ValueError(f"--num_host_seqs={_HOST_SEQS.value}: must be >= 1")
        parse_ints("--host_contexts", _HOST_CONTEXTS.value)
    if _BUDGET.value < 1:
        raise ValueError(f"--budget={_BUDGET.value}: must be >= 1")
    if "ttft" in part:
        lengths = parse_ints("--prompt_lens", _PROMPT_LENS.value)
        _check_models("--models", _MODELS.value, lengths)
    if "itl" in part and _ITL_FROM.value:
        check_input_file("--itl_from", _ITL_FROM.value)
    elif "itl" in part:
        check_itl_args(_NUM_STREAMS.value, _STREAM_TOKENS.value, _ITL_PROMPT_LEN.value)
        runs = parse_ints("--policy_budgets", _POLICY_BUDGETS.value, allow_empty=True)
        runs += parse_ints("--budgets", _BUDGETS.value, allow_empty=True)
        runs += parse_floats("--slowdowns", _SLOWDOWNS.value)
        if not runs:
            raise ValueError("--policy_budgets, --budgets, --slowdowns: all empty, nothing to run")
        _check_models("--itl_model", [_ITL_MODEL.value], [_ITL_PROMPT_LEN.value])
    if "itl" in part and _PNG.value:
        check_output_file("--png_out", _PNG.value)


def _main() -> None:
    if _SINGLE.value:
        model, _, length = _SINGLE.value.rpartition(":")
        if not model or not length.isdigit():
            raise ValueError(f"--single_ttft={_SINGLE.value}: expected MODEL:LENGTH")
        result = measure_ttft(
            model, int(length), _BUDGET.value, kv_cache_dtype=_KV_CACHE_DTYPE.value
        )
        print(json.dumps(result))
        return
    unknown = [p for p in _PART.value if p not in PARTS]
    if unknown or not _PART.value:
        raise app.UsageError(
            f"--part={','.join(_PART.value)}: {', '.join(unknown) or 'no part'} is not one of "
            f"{', '.join(PARTS)}"
        )
    windows = _windows() if "window" in _PART.value else []
    _check_flags()
    results = {}
    if "attention" in _PART.value:
        results["attention"] = _attention_rows()
    if "mla" in _PART.value:
        results["mla"] = _mla_rows()
    if "window" in _PART.value:
        results["window"] = _window_rows(windows)
    if "pack" in _PART.value:
        rows = []
        print("| context | pack ms, carried page rows | pack ms, converted afresh |")
        print("|---|---|---|")
        for context in _PACK_CONTEXTS.value:
            row = dict(context=int(context), num_seqs=_PACK_SEQS.value)
            for carried in (True, False):
                seconds = time_pack(_PACK_SEQS.value, int(context), 131072, carried)
                row["carried_s" if carried else "fresh_s"] = seconds
            rows.append(row)
            print(
                f"| {int(context):,} | {1e3 * row['carried_s']:.2f} | {1e3 * row['fresh_s']:.2f} |"
            )
        results["pack"] = rows
    if "host" in _PART.value:
        print("| decodes | context | schedule ms | pack ms | update ms | host ms a step |")
        print("|---|---|---|---|---|---|")
        rows = [
            time_host_step(_HOST_SEQS.value, int(c), window=_HOST_WINDOW.value)
            for c in _HOST_CONTEXTS.value
        ]
        for r in rows:
            parts = [1e3 * r[k] for k in ("schedule_s", "pack_s", "update_s")]
            cells = " | ".join(f"{x:.2f}" for x in [*parts, sum(parts)])
            print(f"| {r['num_seqs']} | {r['context']:,} | {cells} |")
        results["host"] = rows
    if "ttft" in _PART.value:
        rows = []
        for model in _MODELS.value:
            for length in _PROMPT_LENS.value:
                rows.append(
                    _ttft_in_subprocess(model, int(length), _BUDGET.value, _KV_CACHE_DTYPE.value)
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        results["ttft"] = rows
        _ttft_table(rows)
    if "itl" in _PART.value:
        default = (
            f"default policy (max_decode_slowdown={LongPrefillPolicy().max_decode_slowdown:g})"
        )
        runs = [(int(b), None, default, b) for b in _POLICY_BUDGETS.value]
        runs += [
            (int(b), LongPrefillPolicy.token_budget_only(), "token budget only", b)
            for b in _BUDGETS.value
        ]
        runs += [
            (
                _BUDGET.value,
                LongPrefillPolicy(max_decode_slowdown=float(s)),
                f"policy at budget {_BUDGET.value}, other max_decode_slowdown",
                f"{float(s):g}x",
            )
            for s in _SLOWDOWNS.value
        ]
        rows = []
        for budget, policy, series, label in [] if _ITL_FROM.value else runs:
            row = measure_itl(
                _ITL_MODEL.value,
                _ITL_PROMPT_LEN.value,
                budget,
                policy,
                num_streams=_NUM_STREAMS.value,
                stream_tokens=_STREAM_TOKENS.value,
            )
            rows.append(row | dict(series=series, label=str(label)))
            print(json.dumps(row), file=sys.stderr, flush=True)
        if _ITL_FROM.value:
            with open(_ITL_FROM.value) as f:
                rows = json.load(f)["itl"]
        results["itl"] = rows
        _itl_table(rows)
        if _PNG.value:
            title = (
                f"{_ITL_MODEL.value}: {_NUM_STREAMS.value} decoding streams, "
                f"{_ITL_PROMPT_LEN.value:,}-token prompt (labels: budget or slowdown)"
            )
            plot_itl_vs_ttft(rows, _PNG.value, title)
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    app.run(main)
