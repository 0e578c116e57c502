"""KV write: scatters a step's new K/V (or MLA latent) rows into the paged cache.

One program per (token, column chunk) copies its row chunk to `slot_mapping[t]`, the pages
aliased in place (`input_output_aliases`), so the cache is never copied when the caller
donates it. A page row is viewed as one flat row of `W = prod(row dims)` elements; chunks are
the largest power of two (up to 1024) dividing W, so every access is in bounds without masks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

MAX_CHUNK = 1024


def _chunk(width: int) -> int:
    return min(width & -width, MAX_CHUNK)


def _write_kernel(slot_ref, new_ref, pages_in_ref, pages_ref, *, chunk: int, num_slots: int):
    del pages_in_ref  # aliased with pages_ref
    t, c = pl.program_id(0), pl.program_id(1)
    slot = slot_ref[t]

    # Slot -1 (padding) and slots past the pool are dropped, as in the XLA path.
    @pl.when((slot >= 0) & (slot < num_slots))
    def _():
        cols = pl.ds(c * chunk, chunk)
        pages_ref[slot, cols] = new_ref[t, cols]


def _check(pages: jax.Array, new: jax.Array, slot_mapping: jax.Array) -> None:
    if new.shape[1:] != pages.shape[2:]:
        raise ValueError(
            f"new row shape {new.shape[1:]} does not match the page row shape {pages.shape[2:]}"
        )
    if slot_mapping.shape != new.shape[:1]:
        raise ValueError(f"slot_mapping {slot_mapping.shape}: expected [{new.shape[0]}]")


def write_kv(
    pages: jax.Array,  # [N, P, ...]
    new: jax.Array,  # [T, ...]
    slot_mapping: jax.Array,  # [T] int32, page * P + offset; -1 = skip
    *,
    interpret: bool = False,
) -> jax.Array:  # [N, P, ...]
    """Pages with row `slot_mapping[t]` set to `new[t]` (cast to the pages' dtype)."""
    _check(pages, new, slot_mapping)
    num_pages, page_size = pages.shape[:2]
    num_tokens = new.shape[0]
    width = 1
    for d in pages.shape[2:]:
        width *= d
    if num_tokens == 0:
        return pages
    chunk = _chunk(width)
    flat = pages.reshape(num_pages * page_size, width)
    kernel = functools.partial(_write_kernel, chunk=chunk, num_slots=num_pages * page_size)
    out = pl.pallas_call(
        kernel,
        grid=(num_tokens, width // chunk),
        out_shape=jax.ShapeDtypeStruct(flat.shape, flat.dtype),
        input_output_aliases={2: 0},
        compiler_params=pl_triton.CompilerParams(num_warps=1 if chunk <= 256 else 4),
        interpret=interpret,
        name="paged_kv_write",
    )(slot_mapping.astype(jnp.int32), new.reshape(num_tokens, width).astype(pages.dtype), flat)
    return out.reshape(pages.shape)


def write_kv_ref(
    pages: jax.Array,  # [N, P, ...]
    new: jax.Array,  # [T, ...]
    slot_mapping: jax.Array,  # [T] int32
) -> jax.Array:
    """Plain jnp twin: a scatter that drops padding and out-of-range slots."""
    _check(pages, new, slot_mapping)
    num_slots = pages.shape[0] * pages.shape[1]
    flat = pages.reshape(num_slots, *pages.shape[2:])
    slots = jnp.where(slot_mapping < 0, num_slots, slot_mapping)
    return flat.at[slots].set(new.astype(pages.dtype), mode="drop").reshape(pages.shape)
