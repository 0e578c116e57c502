"""Which paged-attention implementation the step uses: plain XLA or the Pallas kernels.

`pallas` runs pallas_kernels/ (ragged GQA attention, MLA latent attention, KV write) compiled
for the GPU, or in interpret mode on any other backend (slow; for tests). A shape the kernels
do not take (pallas_kernels.UnsupportedShapeError) falls back to the XLA path for that call,
with a warning naming the reason; the choice is made while tracing, so it costs nothing at run
time. The kernels' own block sizes replace `kv_block_pages`, which only the XLA path uses.

`mosaic` (opt-in, Hopper GPUs only) is `pallas` with the Mosaic GPU kernels where they are
built to win: GQA steps that carry prefill chunks (ragged_paged_attention_mosaic) and MLA
steps that are all decodes (mla_decode_mosaic). The other step shapes, and shapes those two
kernels refuse (fp8 pages, float32, small head dims), take the `pallas` path, and from there
XLA. It is not the default: the two kernels have not been timed on a GPU yet
(docs/benchmarks.md). Batch-invariant mode refuses it (the MLA kernel's split count follows
the step shape). Off GPU it is refused too: Pallas' GPU interpreter runs each warpgroup as
a thread whose barrier waits block XLA:CPU threads, and inside a whole engine step on a
2-core machine that deadlocked (measured; it finished with NPROC=8). MOSAIC_OPS themselves
run in interpret mode anywhere, which is how make test checks them.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax

# Pallas' fuser registers a JAX config value that is part of every jit's tracing context
# (pallas_fuser_disable_nested_fuse, jax 0.11.2) when it is first imported, and
# pallas_kernels (imported on first use, below) imports it: every step an engine compiled
# before that import would miss the cache and compile again (measured: an XLA engine's 5
# MTP steps compiled twice after a Pallas engine was built in the same process). Importing
# the fuser here (74 ms) fixes the context before any step is traced.
import jax.experimental.pallas.fuser  # noqa: F401

from engine import kv_quant, mla_expanded
from engine import paged_attention as pa


@functools.cache
def _kernels():
    """pallas_kernels, imported on first use (0.8 s of imports, most of them Mosaic GPU's,
    that a process on the XLA path never needs: every engine test file and script run on
    CPU), or None in a JAX without the Pallas Triton backend."""
    try:
        import pallas_kernels
    except ImportError:
        return None
    return pallas_kernels


class _LazyKernels:
    """`pk.name` is pallas_kernels.name, the module imported at the first such lookup."""

    def __getattr__(self, name: str):
        return getattr(_kernels(), name)


pk = _LazyKernels()

IMPLS = ("auto", "xla", "pallas", "mosaic")


class AttentionOps(NamedTuple):
    """The three operations the step needs, with the signatures of engine.paged_attention."""

    # pages below may be kv_quant.QuantizedPages (fp8 with per-row scales) as well as arrays
    write_kv: Callable  # (pages [N, P, ...], new [T, ...], slot_mapping [T]) -> pages
    # (q, k_pages, v_pages, meta, scale, kv_block_pages, window=None, sinks=None,
    # softcap=0.0, alibi=None) -> [T, H, Dh]; window: the layer's sliding window
    # (ModelConfig.attention_window) or None; sinks: [H] per-head logits joining every
    # softmax (ModelConfig.attention_sinks) or None; softcap: the scores' tanh cap
    # (ModelConfig.attn_logit_softcapping; 0: none); alibi: [H] ALiBi slopes
    # (ModelConfig.alibi_slopes) or None
    gqa: Callable
    mla: Callable  # (q_lat, q_pe, latent_pages, meta, scale, kv_block_pages) -> [T, H, R]
    # MLA prefill spans in expanded form, or None (absorbed everywhere):
    # (q_nope, q_pe, latent_pages, w_kv_b, meta, scale, kv_block_pages) -> [T, H, Dv]
    mla_expanded: Callable | None = None


# The XLA path attends long MLA prefill spans expanded (less work at real head shapes; see
# paged_attention_mla_expanded). Not in batch-invariant mode, where a token's attention must
# be the same math whether it is decoded or recomputed in a chunk of any size, nor on the
# Pallas routes, whose MLA kernel is absorbed and whose GPU timings this has not been
# measured against.
XLA_OPS = AttentionOps(
    pa.write_kv,
    pa.paged_attention_gqa,
    pa.paged_attention_mla,
    mla_expanded.paged_attention_mla_expanded,
)
# Batch-invariant mode: decodes go through the same query tiles as prefill chunks, so a
# token's attention is one matmul shape whether it is decoded or recomputed in a chunk.
XLA_INVARIANT_OPS = AttentionOps(
    pa.write_kv,
    functools.partial(pa.paged_attention_gqa, **pa.INVARIANT_OPTIONS),
    functools.partial(pa.paged_attention_mla, **pa.INVARIANT_OPTIONS),
)


def resolve_impl(impl: str, batch_invariant: bool = False) -> str:
    """'auto' -> 'pallas' on a GPU the kernels support, 'xla' elsewhere; validates the name
    and what the device and mode allow."""
    if impl not in IMPLS:
        raise ValueError(f"attention_impl={impl!r}: expected one of {IMPLS}")
    if impl == "auto":
        return "pallas" if jax.default_backend() == "gpu" and _pallas_available() else "xla"
    if impl in ("pallas", "mosaic") and not _pallas_available():
        raise ValueError(
            f"attention_impl={impl!r}: the Pallas kernels cannot run here (jax.experimental."
            "pallas with the Triton backend, and on GPU compute capability >= 8.0, are needed); "
            "use 'xla'"
        )
    if impl == "mosaic":
        _check_mosaic_mode(batch_invariant)
        if _interpret() or not _hopper():
            device = jax.devices()[0]
            capability = getattr(device, "compute_capability", "none")
            raise ValueError(
                "attention_impl='mosaic': needs a Hopper GPU (compute capability 9.x, for "
                f"warpgroup MMA); this device is {device.device_kind!r}, compute capability "
                f"{capability}; use 'pallas'"
            )
    return impl


def _check_mosaic_mode(batch_invariant: bool) -> None:
    if batch_invariant:
        raise ValueError(
            "attention_impl='mosaic' with batch_invariant=True: the Mosaic GPU MLA kernel "
            "splits keys by step shape; use 'pallas' or 'xla'"
        )


def _pallas_available() -> bool:
    """Kernels importable, and on GPU a device the Triton lowering handles (Ampere or newer)."""
    if _kernels() is None:
        return False
    if jax.default_backend() != "gpu":
        return True  # interpret mode
    # A ROCm "gfx..." string: Triton lowers for it.
    return _capability_at_least(8.0, unknown=True)


def _capability_at_least(version: float, unknown: bool) -> bool:
    """The GPU's CUDA compute capability >= `version`; `unknown` when it is not a number."""
    capability = getattr(jax.devices()[0], "compute_capability", None)
    try:
        return capability is None or float(capability) >= version
    except (TypeError, ValueError):
        return unknown


def _interpret() -> bool:
    return jax.default_backend() != "gpu"


def _hopper() -> bool:
    """Compute capability 9.x (an unknown one is not assumed to be)."""
    return _capability_at_least(9.0, unknown=False) and not _capability_at_least(10.0, True)


def _fallback(kernel: str, err: Exception, instead: str = "the XLA path") -> None:
    warnings.warn(f"Pallas {kernel}: {err}; using {instead} for this shape", stacklevel=3)


def _pallas_write_kv(pages, new, slot_mapping):
    if kv_quant.is_quantized(pages):
        rows = kv_quant.quantize_rows(new)
        return kv_quant.QuantizedPages(
            pk.write_kv(pages.data, rows.data, slot_mapping, interpret=_interpret()),
            pk.write_kv(pages.scale, rows.scale, slot_mapping, interpret=_interpret()),
        )
    return pk.write_kv(pages, new, slot_mapping, interpret=_interpret())


def _spans(meta: pa.AttnMetadata) -> tuple[jax.Array, ...]:
    """The kernels' step description: cu_q_lens, positions, kv_lens, page_table."""
    return meta.cu_q_lens, meta.positions, meta.kv_lens, meta.page_table


def _split(pages) -> tuple[jax.Array, jax.Array | None]:
    """(page data, per-row scales or None) of plain or fp8 pages."""
    if kv_quant.is_quantized(pages):
        return pages.data, pages.scale  # uint8 e4m3 bits: the kernels bitcast them
    return pages, None


def _check_fp8_device(pages) -> None:
    """Triton casts float8_e4m3fn only on compute capability 8.9+ (Ada, Hopper)."""
    if not kv_quant.is_quantized(pages) or _interpret():
        return
    if not _capability_at_least(8.9, unknown=False):
        capability = getattr(jax.devices()[0], "compute_capability", None)
        raise pk.UnsupportedShapeError(
            f"float8_e4m3fn pages on compute capability {capability}: needs 8.9 or newer"
        )


def _gqa_config(num_tokens: int, num_seqs: int, batch_invariant: bool):
    """The decode tiling for a step bucket with T <= S, else the general one.

    T <= S holds for every decode-only step; otherwise only for steps with fewer than two
    tokens per sequence, or of at most runner.SEQ_FLOOR tokens (S is padded up to T there):
    short spans that the decode tiling serves as well.

    Batch-invariant mode keeps one query tile for every step, so that a token decoded alone
    and the same token recomputed inside a prefill chunk go through the same program shape.
    """
    if batch_invariant:
        return _invariant(pk.GQA_CONFIG)
    if num_tokens <= num_seqs:
        return pk.GQA_DECODE_CONFIG
    return pk.GQA_CONFIG


def _invariant(config):
    """`config` without what makes a token's reduction order depend on its batch:
    `fast_softmax`, whose loop body for a key block depends on the other rows of the tile
    (off in every engine config today; this keeps the mode bitwise if a GPU measurement
    turns it on), `max_partial_bytes`, which lengthens the KV splits of steps with many
    tokens, and `splits_follow_length`, which cuts a tile's splits by its own key count (a
    chunk's last token, not the token's). So every split is the fixed one the page table's
    width sets, and the split partials are up to `max_splits` times the step's f32
    attention output (8 GiB for an unsharded 128-head MLA step of 2048 tokens)."""
    return dataclasses.replace(
        config, fast_softmax=False, max_partial_bytes=0, splits_follow_length=False
    )


def _pallas_gqa(
    q,
    k_pages,
    v_pages,
    meta,
    scale,
    kv_block_pages,
    window=None,
    batch_invariant=False,
    sinks=None,
    softcap=0.0,
    alibi=None,
):
    (k_data, k_scales), (v_data, v_scales) = _split(k_pages), _split(v_pages)
    try:
        _check_fp8_device(k_pages)
        pk.check_gqa_supported(q, k_data, v_data, k_scales, v_scales)
    except pk.UnsupportedShapeError as err:
        _fallback("GQA attention", err)
        xla = XLA_INVARIANT_OPS if batch_invariant else XLA_OPS
        return xla.gqa(
            q,
            k_pages,
            v_pages,
            meta,
            scale,
            kv_block_pages,
            window=window,
            sinks=sinks,
            softcap=softcap,
            alibi=alibi,
        )
    return pk.ragged_paged_attention(
        q,
        k_data,
        v_data,
        *_spans(meta),
        scale=scale,
        window=window,
        k_scales=k_scales,
        v_scales=v_scales,
        config=_gqa_config(q.shape[0], meta.kv_lens.shape[0], batch_invariant),
        interpret=_interpret(),
        sinks=sinks,
        softcap=softcap,
        alibi=alibi,
    )


def mla_config(batch_invariant: bool = False, decode: bool = False):
    """MLA_HOPPER_CONFIG on a Hopper GPU (compute capability 9.x, where it was measured and
    its shared memory fits), else MLA_CONFIG; their decode variants (splits shortened for
    small batches) for a bucket of decodes only, outside the batch-invariant mode."""
    hopper = not _interpret() and _hopper()
    if batch_invariant:
        return _invariant(pk.MLA_HOPPER_CONFIG if hopper else pk.MLA_CONFIG)
    if decode:
        return pk.MLA_HOPPER_DECODE_CONFIG if hopper else pk.MLA_DECODE_CONFIG
    return pk.MLA_HOPPER_CONFIG if hopper else pk.MLA_CONFIG


def _pallas_mla(q_lat, q_pe, latent_pages, meta, scale, kv_block_pages, batch_invariant=False):
    data, scales = _split(latent_pages)
    try:
        _check_fp8_device(latent_pages)
        pk.check_mla_supported(q_lat, q_pe, data, scales)
    except pk.UnsupportedShapeError as err:
        _fallback("MLA attention", err)
        xla = XLA_INVARIANT_OPS if batch_invariant else XLA_OPS
        return xla.mla(q_lat, q_pe, latent_pages, meta, scale, kv_block_pages)
    return pk.mla_paged_attention(
        q_lat,
        q_pe,
        data,
        *_spans(meta),
        scale=scale,
        latent_scales=scales,
        config=mla_config(batch_invariant, decode=_decode_only(q_lat.shape[0], meta)),
        interpret=_interpret(),
    )


def _decode_only(num_tokens: int, meta) -> bool:
    """A step bucket with no more tokens than sequences holds only decodes."""
    return num_tokens <= meta.kv_lens.shape[0]


def _mosaic_gqa(
    q,
    k_pages,
    v_pages,
    meta,
    scale,
    kv_block_pages,
    window=None,
    sinks=None,
    softcap=0.0,
    alibi=None,
):
    """Steps with prefill chunks on the Mosaic GPU kernel; decodes (one token in its 128-row
    tile), layers with a sliding window, sinks, a softcap or ALiBi (the Mosaic kernel has
    none of them) and shapes it refuses on the Triton one."""
    plain = window is None and sinks is None and not softcap and alibi is None
    if _decode_only(q.shape[0], meta) or not plain:
        return _pallas_gqa(
            q,
            k_pages,
            v_pages,
            meta,
            scale,
            kv_block_pages,
            window,
            sinks=sinks,
            softcap=softcap,
            alibi=alibi,
        )
    (k_data, k_scales), (v_data, v_scales) = _split(k_pages), _split(v_pages)
    try:
        pk.check_gqa_mosaic_supported(q, k_data, v_data, k_scales, v_scales)
    except pk.UnsupportedShapeError as err:
        _fallback("Mosaic GQA attention", err, instead="the Triton kernel")
        return _pallas_gqa(q, k_pages, v_pages, meta, scale, kv_block_pages)
    return pk.ragged_paged_attention_mosaic(
        q,
        k_pages,
        v_pages,
        *_spans(meta),
        scale=scale,
        interpret=_interpret(),
    )


def _mosaic_mla(q_lat, q_pe, latent_pages, meta, scale, kv_block_pages):
    """Decode-only steps on the Mosaic GPU kernel (one program per token re-reads a prefill
    chunk's keys for every token, so chunks stay on Triton), and shapes it refuses."""
    if not _decode_only(q_lat.shape[0], meta):
        return _pallas_mla(q_lat, q_pe, latent_pages, meta, scale, kv_block_pages)
    try:
        pk.check_mla_mosaic_supported(q_lat, q_pe, *_split(latent_pages))
    except pk.UnsupportedShapeError as err:
        _fallback("Mosaic MLA attention", err, instead="the Triton kernel")
        return _pallas_mla(q_lat, q_pe, latent_pages, meta, scale, kv_block_pages)
    return pk.mla_decode_mosaic(
        q_lat,
        q_pe,
        latent_pages,
        *_spans(meta),
        scale=scale,
        interpret=_interpret(),
    )


PALLAS_OPS = AttentionOps(_pallas_write_kv, _pallas_gqa, _pallas_mla)
PALLAS_INVARIANT_OPS = AttentionOps(
    _pallas_write_kv,
    functools.partial(_pallas_gqa, batch_invariant=True),
    functools.partial(_pallas_mla, batch_invariant=True),
)
MOSAIC_OPS = AttentionOps(_pallas_write_kv, _mosaic_gqa, _mosaic_mla)


def get_attention_ops(impl: str, batch_invariant: bool = False) -> AttentionOps:
    """The ops for a resolved implementation name ('xla' or 'pallas')."""
    if impl == "xla":
        return XLA_INVARIANT_OPS if batch_invariant else XLA_OPS
    if impl == "pallas":
        return PALLAS_INVARIANT_OPS if batch_invariant else PALLAS_OPS
    if impl == "mosaic":
        _check_mosaic_mode(batch_invariant)
        return MOSAIC_OPS
    raise ValueError(f"attention_impl={impl!r}: not available")
