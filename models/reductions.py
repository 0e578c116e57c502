"""Reductions whose summation order is fixed by the reduced length alone.

XLA:CPU picks a reduce's summation order by the whole array's shape, so the same row summed
inside a [T, D] array can change in the last bit when T changes (measured on jax 0.11.2:
jnp.sum over 1000 values differed between 1..4 and >= 5 rows; qk-norm statistics over 16
values differed between T = 64 and T = 128 inside the engine step). Spelling the sum out as
a pairwise tree of elementwise adds makes each row's result depend on that row only, which
the batch-invariant mode needs; it costs log2(D) elementwise passes.

The model code sums rows with `row_sum` / `row_mean`: the fixed-order tree by default, XLA's
own reduce inside a `native_row_sums()` block, which the engine's step opens when it is
compiled without batch invariance (engine/step.py), as does the one-sequence reference
forward. The tree is three HLO ops a level: over a tiny model's step its row sums were 5-20%
of XLA:CPU's compile time (docs/benchmarks.md "Row sums in XLA's order ...").

`narrow_product` is the other half: a product with few output columns (a router, a gate)
whose dot kernel changes regime at more rows than the rest of the step's, computed over
the rows `narrow_product_rows()` asks for (the batch-invariant step's NARROW_ROWS a shard).
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp

# Whether row_sum spells its sums in fixed order (read at trace time).
_FIXED_ORDER = contextvars.ContextVar("fixed_order_row_sums", default=True)
# The rows narrow_product pads its input to (read at trace time; 0: none).
_NARROW_ROWS = contextvars.ContextVar("narrow_product_rows", default=0)
# Products with fewer output columns than this are narrow (engine/batch_invariant.py).
NARROW_COLUMNS = 16


@contextlib.contextmanager
def native_row_sums(native: bool = True):
    """While tracing inside it, row_sum / row_mean are XLA's reduce (no batch invariance)."""
    token = _FIXED_ORDER.set(not native)
    try:
        yield
    finally:
        _FIXED_ORDER.reset(token)


def fixed_order_sum(x: jax.Array) -> jax.Array:  # [..., V] -> [...]
    """Sum over the last axis as a pairwise tree fixed by V alone (not by the batch)."""
    n = x.shape[-1]
    width = 1 << (n - 1).bit_length()
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - n)])
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x[..., 0]


def fixed_order_mean(x: jax.Array) -> jax.Array:  # [..., V] -> [...]
    return fixed_order_sum(x) / x.shape[-1]


def row_sum(x: jax.Array) -> jax.Array:  # [..., V] -> [...]
    """Sum over the last axis: fixed_order_sum, or XLA's reduce inside native_row_sums()."""
    return fixed_order_sum(x) if _FIXED_ORDER.get() else jnp.sum(x, axis=-1)


def row_mean(x: jax.Array) -> jax.Array:  # [..., V] -> [...]
    return row_sum(x) / x.shape[-1]


@contextlib.contextmanager
def narrow_product_rows(rows: int):
    """While tracing inside it, narrow_product computes over at least `rows` rows."""
    token = _NARROW_ROWS.set(rows)
    try:
        yield
    finally:
        _NARROW_ROWS.reset(token)


def precise_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w in full float32 (HF's), never TF32 (XLA:GPU's default for float32 dots): a
    router's 1e-3 error can flip a close expert choice."""
    return jnp.matmul(x, w, precision="highest")


def narrow_product(product, x: jax.Array, w: jax.Array) -> jax.Array:
    """product(x, w), a product over x's leading axis of rows: where w has fewer than
    NARROW_COLUMNS output columns (its last axis; one for a vector) and x fewer rows than
    narrow_product_rows() asks (the batch-invariant step), x is zero-padded to that many
    rows first and the padding's rows dropped after. XLA:CPU's dot kernel for such
    products changes regime at more rows than the step's others (engine/batch_invariant.py)."""
    rows, t = _NARROW_ROWS.get(), x.shape[0]
    if t >= rows or (w.shape[-1] if w.ndim > 1 else 1) >= NARROW_COLUMNS:
        return product(x, w)
    return product(jnp.pad(x, [(0, rows - t)] + [(0, 0)] * (x.ndim - 1)), w)[:t]
