"""One linear-attention layer (Qwen3-Next's and Qwen3.5's gated DeltaNet, Kimi-Linear's KDA):
prefill in the chunked form vs row by row, and a decode batch.

  python -m scripts.bench_linear_attention
  python -m scripts.bench_linear_attention --model=qwen3.5-397b-a17b --num_tokens=512,2048
  python -m scripts.bench_linear_attention --model=kimi-linear-48b-a3b

Random weights of the first linear-attention layer of `--model` (its real shapes) and
random hidden states. For each `--num_tokens` L, one sequence's L-token prefill span runs
through models/linear_attention.gated_delta_net twice: in chunks of 64 rows (what the
engine runs for a prefill) and one row per iteration (the batch-invariant mode's form),
each timed as the median of `--iters` calls after a compiling one; the two outputs'
largest difference is reported beside them. Then `--batch` sequences decode one token each
(one row each, from their states). Prints a table; `--json_out` writes the rows.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from configs.presets import get_preset
from models.linear_attention import (
    CHUNK,
    Segments,
    gated_delta_net,
    segments_from_spans,
    zero_state,
)
from models.specs import is_spec, param_specs
from pallas_kernels.benchmark import time_call
from scripts.flag_checks import check_output_file

_MODEL = flags.DEFINE_string("model", "qwen3-next-80b-a3b", "Preset with linear attention.")
_TOKENS = flags.DEFINE_list("num_tokens", ["256", "1024"], "Prefill span lengths.")
_BATCH = flags.DEFINE_integer("batch", 16, "Sequences of the decode batch.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Weights, activations.")
_ITERS = flags.DEFINE_integer("iters", 3, "Timed calls per case (their median reported).")
_JSON = flags.DEFINE_string("json_out", None, "Write the rows here as JSON.")


def _segments(lengths: list[int], rows: int, chunk: int | None) -> Segments:
    """Sequences of these span lengths, each continuing (its state row read: slot i)."""
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    held = jnp.asarray(lengths, jnp.int32) + 1  # (more than the span: not fresh)
    return segments_from_spans(cu, held, jnp.arange(len(lengths), dtype=jnp.int32), rows, chunk)


def _timed(fn, *args) -> tuple[float, jax.Array]:
    """(median seconds of --iters calls after a compiling one: time_call's, the output)."""
    seconds = time_call(fn, args, iters=1, repeats=_ITERS.value)
    return seconds, fn(*args)


def main(argv: list[str]) -> None:
    del argv
    lengths = [int(n) for n in _TOKENS.value]
    for name, value in (("--num_tokens", min(lengths)), ("--batch", _BATCH.value)):
        if value < 2:
            raise app.UsageError(f"{name}={value}: must be >= 2")
    if _ITERS.value < 1:
        raise app.UsageError(f"--iters={_ITERS.value}: must be >= 1")
    if _JSON.value is not None:
        check_output_file("--json_out", _JSON.value)
    cfg = get_preset(_MODEL.value).replace(dtype=_DTYPE.value)
    if not cfg.linear_attention_layers:
        raise app.UsageError(f"--model={_MODEL.value}: has no linear-attention layers")
    layer = cfg.linear_attention_layers[0]
    specs = param_specs(cfg)["layers"][layer]["linear"]
    rng = np.random.default_rng(0)
    p = jax.tree.map(lambda s: jnp.asarray(s.init(rng, s.shape, s.dtype)), specs, is_leaf=is_spec)
    dt = jnp.dtype(_DTYPE.value)

    def layer_fn(lengths: list[int], chunk: int | None):
        """The layer over spans of `lengths` (their rows first), jitted."""

        def run(x, state):
            return gated_delta_net(p, x, cfg, state, _segments(lengths, x.shape[0], chunk))

        return jax.jit(run)

    rows = []
    for n in lengths:
        x = jnp.asarray(rng.normal(size=(n, cfg.hidden_size)), dt)
        state = zero_state(cfg, 2)  # (a row for each sequence of the batch)
        seconds, outs = {}, {}
        for form, chunk in (("chunked", CHUNK), ("row_by_row", None)):
            # One sequence of n rows in a batch of 2 sequences (a padding one), so the
            # batch has more rows than sequences: the chunk setting decides the form.
            seconds[form], (outs[form], _) = _timed(layer_fn([n, 0], chunk), x, state)
        diff = float(jnp.max(jnp.abs(outs["chunked"] - outs["row_by_row"]).astype(jnp.float32)))
        rows.append(dict(case=f"prefill {n}", tokens=n, seconds=seconds, max_abs_diff=diff))
    b = _BATCH.value
    x = jnp.asarray(rng.normal(size=(b, cfg.hidden_size)), dt)
    state = tuple(jnp.asarray(rng.normal(size=a.shape) * 0.1, a.dtype) for a in zero_state(cfg, b))
    decode, _ = _timed(layer_fn([1] * b, CHUNK), x, state)
    rows.append(dict(case=f"decode x{b}", tokens=b, seconds={"row_by_row": decode}))
    print(
        f"{cfg.name}, layer {layer} (value heads {cfg.linear_num_value_heads} x "
        f"{cfg.linear_key_head_dim} x {cfg.linear_value_head_dim}), {_DTYPE.value}, "
        f"{jax.devices()[0].platform}"
    )
    print("| case | chunked (ms) | row by row (ms) | tokens/s (faster form) | max abs diff |")
    print("|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        best = min(s.values())
        chunked = f"{s['chunked'] * 1e3:.1f}" if "chunked" in s else "-"
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "-"
        print(
            f"| {r['case']} | {chunked} | {s['row_by_row'] * 1e3:.1f} | "
            f"{r['tokens'] / best:,.0f} | {diff} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(rows, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    app.run(main)
