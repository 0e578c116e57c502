"""Putting host or single-device arrays onto a (possibly multi-process) mesh.

Every process holds the same full values (same checkpoint, same seed, same scheduler
decisions), so each builds the global array from its own copy: `make_array_from_callback`
asks only for the shards of this process's devices, which works for one process and many.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from configs.model_config import ModelConfig
from sharding.mesh import MeshConfig, check_layout, make_mesh
from sharding.rules import param_partition_specs, param_shardings


def put_global(x, sharding: NamedSharding) -> jax.Array:
    """One array, identical on every process, placed with `sharding`."""
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def put_tree(tree, shardings):
    """`put_global` over a pytree; `shardings` has the same structure with NamedShardings."""
    return jax.tree.map(put_global, tree, shardings)


def put_replicated(tree, mesh: Mesh):
    """Every leaf of `tree` (host arrays, the same on every process) replicated on `mesh`."""
    rep = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: put_global(x, rep), tree)


def check_model_layout(cfg: ModelConfig, mc: MeshConfig) -> Mesh:
    """The mesh `mc` builds for this model; a ValueError naming the axis and the count if it
    cannot split the model (heads, experts, every other width) or the devices."""
    check_layout(cfg, mc)
    param_partition_specs(cfg, mc)  # ValueError on a width the mesh does not divide
    return make_mesh(mc)


def shard_model(cfg: ModelConfig, params: dict, mc: MeshConfig, balancer=None) -> tuple[Mesh, dict]:
    """Check that `mc` can split this model, build the mesh, and place the params on it.
    `balancer` (engine.eplb.ExpertBalancer): the experts expanded to its physical slots.

    Every check runs before anything is placed, so a bad layout raises a ValueError naming
    the axis and the count and leaves nothing half-sharded.
    """
    mesh = check_model_layout(cfg, mc)
    if balancer is not None:
        return mesh, put_tree(balancer.expand(params), balancer.shardings(cfg, mesh))
    return mesh, put_tree(params, param_shardings(cfg, mesh))
