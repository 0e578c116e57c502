"""Which paged-attention implementation the step uses: plain XLA or the Pallas kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

from engine import paged_attention as pa

IMPLS = ("auto", "xla", "pallas")


class AttentionOps(NamedTuple):
    """The three operations the step needs, with the signatures of engine.paged_attention."""

    write_kv: Callable  # (pages [N, P, ...], new [T, ...], slot_mapping [T]) -> pages
    gqa: Callable  # (q, k_pages, v_pages, meta, scale, kv_block_pages) -> [T, H, Dh]
    mla: Callable  # (q_lat, q_pe, latent_pages, meta, scale, kv_block_pages) -> [T, H, R]


XLA_OPS = AttentionOps(pa.write_kv, pa.paged_attention_gqa, pa.paged_attention_mla)


def resolve_impl(impl: str) -> str:
    """'auto' -> 'pallas' on GPU, 'xla' elsewhere; validates the name."""
    if impl not in IMPLS:
        raise ValueError(f"attention_impl={impl!r}: expected one of {IMPLS}")
    if impl == "auto":
        return "pallas" if jax.default_backend() == "gpu" and _pallas_available() else "xla"
    if impl == "pallas" and not _pallas_available():
        raise ValueError("attention_impl='pallas': the Pallas kernels are not built yet; use 'xla'")
    return impl


def _pallas_available() -> bool:
    return False


def get_attention_ops(impl: str) -> AttentionOps:
    """The ops for a resolved implementation name ('xla' or 'pallas')."""
    if impl == "xla":
        return XLA_OPS
    raise ValueError(f"attention_impl={impl!r}: not available")
