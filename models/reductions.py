"""Reductions whose summation order is fixed by the reduced length alone.

XLA:CPU picks a reduce's summation order by the whole array's shape, so the same row summed
inside a [T, D] array can change in the last bit when T changes (measured on jax 0.11.2:
jnp.sum over 1000 values differed between 1..4 and >= 5 rows; qk-norm statistics over 16
values differed between T = 64 and T = 128 inside the engine step). Spelling the sum out as
a pairwise tree of elementwise adds makes each row's result depend on that row only, which
the batch-invariant mode needs; it costs log2(D) elementwise passes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
