"""Lowers a function for an NVIDIA GPU without one, to check the kernels' GPU path on CPU.

JAX can trace and lower for a platform it is not running on when an abstract mesh names the
target device. For Pallas kernels with the Triton lowering this runs the whole
Pallas-to-Triton-IR lowering (block shapes, dot shapes, indexing, dtypes); for the Mosaic GPU
lowering, Pallas' lowering to Mosaic GPU IR with Mosaic's layout inference and shared-memory
check (the target is taken as compute capability 9.0 without a GPU). Only the compilation to
PTX, which happens inside XLA:GPU at compile time, is left for a real GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.sharding import AbstractDevice, AbstractMesh, AxisType, use_abstract_mesh

HOPPER = "NVIDIA H200"


def lower_for_gpu(fn: Callable, *args, device_kind: str = HOPPER, **kwargs) -> str:
    """StableHLO text of `jax.jit(fn)(*args, **kwargs)` lowered for CUDA on `device_kind`.

    `args` may be arrays or `jax.ShapeDtypeStruct`s; the Triton kernels appear as
    `__gpu$xla.gpu.triton` custom calls carrying their Triton IR, Mosaic GPU kernels as
    `mosaic_gpu_v2` custom calls carrying their module.
    """
    device = AbstractDevice(device_kind=device_kind, num_cores=None, platform="cuda")
    mesh = AbstractMesh((1,), ("x",), (AxisType.Explicit,), abstract_device=device)
    with use_abstract_mesh(mesh):
        traced = jax.jit(fn, static_argnames=tuple(kwargs)).trace(*args, **kwargs)
        return traced.lower(lowering_platforms=("cuda",)).as_text()
