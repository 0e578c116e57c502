"""The device mesh: parsed from a string like "dp=2,tp=2,ep=2", checked against the model.

Mesh axes (always all three, in this order, so every layout compiles the same program shape):
  dp  data-parallel attention replicas; each holds a slice of the step's tokens
  tp  tensor parallelism: attention heads, dense-MLP and expert-MLP widths, vocabulary
  ep  expert parallelism: routed experts split across devices, tokens exchanged all-to-all
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from configs.model_config import ModelConfig

DP, TP, EP = "dp", "tp", "ep"
AXES = (DP, TP, EP)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device counts per mesh axis; the product is the number of devices the mesh uses."""

    dp: int = 1  # data-parallel attention replicas
    tp: int = 1  # tensor-parallel shards of heads and MLP widths
    ep: int = 1  # expert-parallel shards of the routed experts

    def __post_init__(self):
        for axis in AXES:
            count = getattr(self, axis)
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"mesh axis {axis}={count!r}: count must be an integer >= 1")

    @property
    def size(self) -> int:
        return self.dp * self.tp * self.ep

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.dp, self.tp, self.ep)


def parse_mesh(spec: str) -> MeshConfig:
    """ "dp=2,tp=2,ep=2" -> MeshConfig; axes may be omitted (count 1); "" is one device."""
    if not isinstance(spec, str):
        raise ValueError(f"mesh={spec!r}: expected a string like 'dp=2,tp=2,ep=2'")
    counts: dict[str, int] = {}
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or name not in AXES:
            raise ValueError(f"mesh={spec!r}: {part!r} is not 'axis=count' with axis one of {AXES}")
        if name in counts:
            raise ValueError(f"mesh={spec!r}: axis {name} given twice")
        digits = value.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()):  # int() takes "1_6", "+2", "２"
            raise ValueError(f"mesh={spec!r}: axis {name} count {value!r} is not an integer")
        count = int(value)
        if count < 1:
            raise ValueError(f"mesh={spec!r}: axis {name} count {count} must be >= 1")
        counts[name] = count
    return MeshConfig(**counts)


def check_layout(cfg: ModelConfig, mc: MeshConfig) -> None:
    """ValueError naming the axis and the count when the model cannot be split this way.

    Heads and experts are checked here by name; every other width (MLP, vocabulary, ...) is
    checked per parameter by `sharding.rules.param_partition_specs`.
    """
    for heads in sorted(set(cfg.heads_per_layer) | {cfg.num_heads}):  # (Laguna's per layer)
        if heads % mc.tp and not cfg.attention_free:
            raise ValueError(f"mesh axis tp={mc.tp} does not divide num_heads={heads}")
    if mc.ep > 1 and not cfg.num_experts:
        raise ValueError(
            f"mesh axis ep={mc.ep}: model {cfg.name!r} has no routed experts; use dp or tp"
        )
    if cfg.num_experts and cfg.num_experts % mc.ep:
        raise ValueError(f"mesh axis ep={mc.ep} does not divide num_experts={cfg.num_experts}")


def make_mesh(mc: MeshConfig, devices: list | None = None) -> Mesh:
    """A (dp, tp, ep) mesh over the first mc.size devices (all of them across processes).

    Axes are `Auto`: outside shard_map, XLA's partitioner places activations from the
    parameter shardings and the layer-boundary constraints.
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    if n % mc.size:
        raise ValueError(
            f"mesh dp={mc.dp},tp={mc.tp},ep={mc.ep}: dp*tp*ep={mc.size} does not divide the "
            f"{n} devices"
        )
    if jax.process_count() > 1 and mc.size != n:
        # A smaller mesh would leave some processes without a device in it.
        raise ValueError(
            f"mesh dp*tp*ep={mc.size} must use all {n} devices of the "
            f"{jax.process_count()} processes"
        )
    grid = np.asarray(devices[: mc.size], dtype=object).reshape(mc.shape)
    return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def mesh_config_of(mesh: Mesh) -> MeshConfig:
    return MeshConfig(**{axis: int(mesh.shape[axis]) for axis in AXES})
