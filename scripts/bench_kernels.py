"""Pallas paged-attention kernels against the memory roofline and JAX's bundled kernel.

  python -m scripts.bench_kernels --out=bench_kernels.json     # GPU: the full table
  python -m scripts.bench_kernels --smoke                      # CPU: tiny, interpret mode

What each row measures: pallas_kernels/benchmark.py.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import jax
from absl import app, flags

from engine import attention_ops
from pallas_kernels import (
    GQA_CONFIG,
    GQA_DECODE_CONFIG,
    MOSAIC_GQA_CONFIG,
    MOSAIC_MLA_CONFIG,
)
from pallas_kernels.benchmark import GPU_SUITE, SMOKE_SUITE, check_suite, format_table, run
from scripts.flag_checks import check_output_file

_SMOKE = flags.DEFINE_bool("smoke", False, "Tiny shapes (interpret mode off GPU).")
_OUT = flags.DEFINE_string("out", "/tmp/bench_kernels.json", "Write the results here as JSON.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "Tokens per KV page.")
_BATCHES = flags.DEFINE_list("batches", None, "Decode batch sizes (default: the suite's).")
_CONTEXTS = flags.DEFINE_list("contexts", None, "Decode context lengths (default: the suite's).")
_BUNDLED = flags.DEFINE_bool("bundled", True, "Also time JAX's bundled paged_attention.")
_FP8 = flags.DEFINE_bool(
    "fp8", True, "Also time fp8 (e4m3) pages with row scales, at the target context."
)
_SWEEP = flags.DEFINE_bool(
    "sweep", False, "Also time each kernel's SWEEP configs at the target decode shape."
)
_PREFILL = flags.DEFINE_bool("prefill", True, "Also time the prefill-chunk row.")
_MOSAIC = flags.DEFINE_bool(
    "mosaic", True, "Also time the Mosaic GPU MLA decode kernel beside the Triton one."
)
_FAST_SOFTMAX = flags.DEFINE_bool(
    "fast_softmax",
    None,
    "KernelConfig.fast_softmax for every Triton row (default: the engine's configs, False).",
)
_TUNING = {
    name: flags.DEFINE_integer(
        name,
        None,
        f"KernelConfig.{name} for every row (default: the engine's configs, GQA_DECODE_CONFIG "
        "for GQA decode, GQA_CONFIG for the prefill chunk, the engine's MLA decode config).",
    )
    for name in (
        "block_rows",
        "block_kv",
        "kv_split",
        "max_heads_per_program",
        "num_warps",
        "num_stages",
    )
}


def main(argv):
    del argv
    suite = SMOKE_SUITE if _SMOKE.value else GPU_SUITE
    try:
        if _BATCHES.value:
            suite = dataclasses.replace(suite, batches=tuple(int(b) for b in _BATCHES.value))
        if _CONTEXTS.value:
            suite = dataclasses.replace(suite, contexts=tuple(int(c) for c in _CONTEXTS.value))
    except ValueError as e:
        sys.exit(f"bench_kernels: --batches and --contexts take integers ({e})")
    if (error := check_suite(suite, _PAGE_SIZE.value)) is not None:
        sys.exit(f"bench_kernels: {error}")
    # Each row allocates KV pages for batch x context tokens: refuse a count no device holds
    # (it failed as a numpy MemoryError traceback after the other rows had run).
    if max(suite.batches) * max(suite.contexts) >= 2**31:
        sys.exit(
            f"bench_kernels: --batches={','.join(map(str, suite.batches))}, --contexts="
            f"{','.join(map(str, suite.contexts))}: batch x context must be < 2**31 tokens"
        )
    try:  # written after the run: checked before it
        check_output_file("--out", _OUT.value)
    except ValueError as e:
        sys.exit(f"bench_kernels: {e}")
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not _SMOKE.value:
        sys.exit("bench_kernels: no GPU; run with --smoke for the interpret-mode check")
    overrides = {name: flag.value for name, flag in _TUNING.items() if flag.value is not None}
    if _FAST_SOFTMAX.value is not None:
        overrides["fast_softmax"] = _FAST_SOFTMAX.value
    if _SMOKE.value:  # several blocks and splits even at the tiny shapes
        overrides = dict(block_rows=16, block_kv=16, kv_split=32) | overrides
    try:  # KernelConfig names the field a tuning flag set wrong
        configs = {
            "gqa": dataclasses.replace(GQA_DECODE_CONFIG, **overrides),
            "gqa_prefill": dataclasses.replace(GQA_CONFIG, **overrides),
            "mla": dataclasses.replace(attention_ops.mla_config(decode=True), **overrides),
        }
    except ValueError as e:
        sys.exit(f"bench_kernels: {e}")
    if _MOSAIC.value:
        configs["mosaic"] = MOSAIC_MLA_CONFIG
        configs["mosaic_prefill"] = MOSAIC_GQA_CONFIG
    result = run(
        suite,
        configs,
        _PAGE_SIZE.value,
        interpret=not on_gpu,
        bundled=_BUNDLED.value,
        fp8=_FP8.value,
        sweep=_SWEEP.value,
        prefill=_PREFILL.value,
        mosaic=_MOSAIC.value,
    )
    print(format_table(result))
    with open(_OUT.value, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
    app.run(main)
