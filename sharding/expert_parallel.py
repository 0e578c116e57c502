"""Expert parallelism: routed experts split over `ep`, token copies exchanged all-to-all.

Inside `shard_map` each device holds T_l = T / (dp * ep) tokens and E_l = E / ep experts:

  dispatch  sort its T_l * k token copies by expert, so they are grouped by the device that
            owns the expert; place them in a send buffer [ep, C, D] (C rows per destination);
            all-to-all over `ep`, so row block s of the receive buffer came from device s
  compute   sort the received rows by local expert; grouped matmuls over the E_l local
            experts (models.moe.grouped_swiglu); with tp > 1 each device holds an F / tp slice of
            every expert's MLP and the partial down projections are summed over `tp`
  combine   unsort; all-to-all back; each copy's output returns to its sender's slot; the
            k outputs of a token are summed in slot order 0..k-1 in float32, the same fixed
            order as models.moe.routed_experts

Dropless. XLA:CPU has no `jax.lax.ragged_all_to_all`, so the exchange is a padded
`jax.lax.all_to_all` with buffers sized for the worst case: a token picks k distinct
experts, so at most min(k, E_l) of its copies go to one device, and C = T_l * min(k, E_l)
rows per destination hold every copy even when all tokens pick the same experts. Padding
rows carry the empty local-expert id E_l, sort last, and fall outside the grouped-matmul groups
(which return zeros there).

The worst case is far above what a step sends: a device's T_l * k copies spread over ep
peers average T_l * k / ep a peer, against C = T_l * min(k, E_l) (at DeepSeek-V3's top-8
over ep=8: 8x). So an exchange of BOUNDED_MIN_ROWS rows or more first counts the copies each
device sends each peer; when the largest count on the mesh (all-reduced, so every device
takes the same branch) fits `bounded_capacity` (twice the average), the exchange uses
buffers of that size, else the worst-case ones (`lax.cond`): dropless either way. A copy's
output is the same in both (its expert's rows keep their order, and the grouped matmul's
rows do not depend on the padding after them: bitwise on CPU, tests/test_sharding_mesh.py;
not yet run on a GPU, whose ragged_dot may tile by the row count). Batch-invariant mode keeps the
worst-case buffers only, so no step's shapes depend on what else is in the batch.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from configs.model_config import ModelConfig
from models.moe import ExpertAct, RoutedFn, expert_activation, grouped_swiglu
from sharding.mesh import EP, TP, mesh_config_of
from sharding.rules import logical_to_spec, rules_for

EXPERT_WEIGHTS = ("w_gate", "w_up", "w_down")
EXPERT_BIASES = ("b_gate", "b_up")  # gpt-oss; b_down is added outside (models.moe.moe_block)


class Dispatched(NamedTuple):
    """One device's view after the exchange (C rows per peer)."""

    recv_x: jax.Array  # [ep * C, D] rows received, block s from device s
    recv_expert: jax.Array  # [ep * C] int32 local expert of each row; E_l = empty row
    order: jax.Array  # [T_l * k] int32 sort of this device's copies by expert
    send_index: jax.Array  # [T_l * k] int32 row of each sorted copy in the send buffer


def capacity(num_tokens: int, top_k: int, num_local_experts: int) -> int:
    """Rows per destination that hold every copy in the worst case (see module docstring)."""
    return num_tokens * min(top_k, num_local_experts)


def bounded_capacity(num_tokens: int, top_k: int, num_local_experts: int, ep_size: int) -> int:
    """Rows per destination of the usual exchange: twice an even share of the T_l * k copies,
    rounded up to a multiple of 8, at most the worst case."""
    share = -(-num_tokens * top_k // ep_size)
    return min(capacity(num_tokens, top_k, num_local_experts), -(-2 * share // 8) * 8)


def dispatch(
    x: jax.Array,  # [T_l, D]
    experts: jax.Array,  # [T_l, k] int32 global expert ids; >= E means "not a token"
    num_local_experts: int,
    ep_size: int,
    cap: int | None = None,  # rows per destination; None: the worst case (capacity)
) -> Dispatched:
    """Sort copies by expert and send each to the device owning its expert (inside shard_map).
    A `cap` below the worst case must hold every destination's copies (the caller checks)."""
    t, k = experts.shape
    if cap is None:
        cap = capacity(t, k, num_local_experts)
    flat = experts.reshape(-1)  # [T_l * k]
    order = jnp.argsort(flat, stable=True)
    sorted_experts = flat[order]
    dest = sorted_experts // num_local_experts  # [T_l * k]; ep_size or more: not sent
    # dest is sorted, so the copies for device d start at the first index with dest >= d.
    starts = jnp.searchsorted(dest, jnp.arange(ep_size), side="left")  # [ep]
    slot = jnp.arange(t * k) - starts[jnp.minimum(dest, ep_size - 1)]
    send_index = jnp.where(dest < ep_size, dest * cap + slot, ep_size * cap)
    send_x = jnp.zeros((ep_size * cap, x.shape[-1]), x.dtype)
    send_x = send_x.at[send_index].set(x[order // k], mode="drop")  # [ep * C, D]
    send_expert = jnp.full((ep_size * cap,), num_local_experts, jnp.int32)
    send_expert = send_expert.at[send_index].set(
        (sorted_experts - dest * num_local_experts).astype(jnp.int32), mode="drop"
    )
    recv_x = jax.lax.all_to_all(send_x, EP, 0, 0, tiled=True)
    recv_expert = jax.lax.all_to_all(send_expert, EP, 0, 0, tiled=True)
    return Dispatched(recv_x, recv_expert, order.astype(jnp.int32), send_index.astype(jnp.int32))


def expert_compute(
    p_local: dict,  # w_gate/w_up [E_l, D, F_l], w_down [E_l, F_l, D] (b_gate/b_up [E_l, F_l])
    recv_x: jax.Array,  # [R, D]
    recv_expert: jax.Array,  # [R] int32, E_l = empty row
    act: ExpertAct | None = None,  # the experts' activation; None: SwiGLU
) -> jax.Array:  # [R, D], zeros at empty rows
    """SwiGLU of every received row through its local expert (grouped matmuls); without
    w_gate, the experts' act(None, up) (relu2)."""
    num_local = p_local["w_up"].shape[0]
    order = jnp.argsort(recv_expert, stable=True)  # empty rows last
    group_sizes = jnp.bincount(recv_expert, length=num_local).astype(jnp.int32)  # [E_l]
    xs = recv_x[order]
    extra = {} if act is None else {"act": act}
    ys = grouped_swiglu(  # [R, D]
        xs,
        p_local.get("w_gate"),
        p_local["w_up"],
        p_local["w_down"],
        group_sizes,
        b_gate=p_local.get("b_gate"),
        b_up=p_local.get("b_up"),
        **extra,
    )
    ys = jax.lax.psum(ys, TP)  # partial sums over the F slices
    return jnp.zeros_like(ys).at[order].set(ys)


def combine(
    ys: jax.Array,  # [ep * C, D] outputs in the receive layout
    d: Dispatched,
    weights: jax.Array,  # [T_l, k] f32
) -> jax.Array:  # [T_l, D]
    """Return outputs to their senders and sum each token's k copies in slot order."""
    t, k = weights.shape
    back = jax.lax.all_to_all(ys, EP, 0, 0, tiled=True)  # [ep * C, D] in the send layout
    y_sorted = back.at[d.send_index].get(mode="fill", fill_value=0)  # [T_l * k, D]
    y = jnp.zeros_like(y_sorted).at[d.order].set(y_sorted).reshape(t, k, -1)  # [T_l, k, D]
    out = jnp.zeros((t, ys.shape[-1]), jnp.float32)
    for j in range(k):
        out = out + weights[:, j, None] * y[:, j].astype(jnp.float32)
    return out.astype(ys.dtype)


def expert_weight_specs(cfg: ModelConfig, mesh: Mesh) -> dict:
    """PartitionSpecs of the stacked expert weights, from their logical axes."""
    rules = rules_for(cfg, mesh_config_of(mesh))
    specs = {
        "w_gate": logical_to_spec(("experts", "embed", "expert_mlp"), rules),
        "w_up": logical_to_spec(("experts", "embed", "expert_mlp"), rules),
        "w_down": logical_to_spec(("experts", "expert_mlp", "embed"), rules),
    }
    if cfg.expert_bias:
        for name in EXPERT_BIASES:
            specs[name] = logical_to_spec(("experts", "expert_mlp"), rules)
    if cfg.expert_act == "relu2":  # (no gate projection)
        del specs["w_gate"]
    return specs


def pad_tokens(
    x: jax.Array,  # [T, D]
    weights: jax.Array,  # [T, k]
    experts: jax.Array,  # [T, k]
    multiple: int,
    num_experts: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pad T to a multiple of the token shards; pad rows pick expert E, i.e. go nowhere."""
    pad = -x.shape[0] % multiple
    return (
        jnp.pad(x, ((0, pad), (0, 0))),
        jnp.pad(weights, ((0, pad), (0, 0))),
        jnp.pad(experts, ((0, pad), (0, 0)), constant_values=num_experts),
    )


def most_sent_to_one_peer(experts: jax.Array, num_local_experts: int, ep_size: int) -> jax.Array:
    """[] int32: the most copies this device's `experts` [T_l, k] send to one ep device."""
    dest = jnp.minimum(experts.reshape(-1) // num_local_experts, ep_size)  # ep_size: not sent
    return jnp.max(jnp.zeros(ep_size + 1, jnp.int32).at[dest].add(1)[:ep_size])


# The bounded exchange costs a count, an all-reduce of one integer and a second compiled
# exchange under lax.cond; below this many rows in a device's worst-case buffer (ep * C:
# decode steps, small batches) the one worst-case exchange is kept. An estimate, not a
# measurement (no GPU yet): DeepSeek-V3's rows are 14 KiB in bfloat16, so 2,048 rows are
# ~29 MiB, ~65 us at 450 GB/s, against ~10 us for the all-reduce.
BOUNDED_MIN_ROWS = 2048


def make_routed_experts_ep(
    cfg: ModelConfig,
    mesh: Mesh,
    min_rows: int | None = BOUNDED_MIN_ROWS,
    num_experts: int | None = None,
) -> RoutedFn:
    """A drop-in for models.moe.routed_experts that runs the experts over the mesh.
    An exchange whose worst-case buffer has `min_rows` rows or more goes through
    bounded_capacity buffers when every device's copies fit them (the module docstring);
    None: always the worst-case ones (batch-invariant mode). `num_experts`: the stacks'
    experts when they are not the config's (physical slots, sharding/eplb.py); the ids
    given index them."""
    mc = mesh_config_of(mesh)
    num_experts = num_experts or cfg.num_experts
    num_local = num_experts // mc.ep
    rules = rules_for(cfg, mc)
    tokens = logical_to_spec(("expert_batch", None), rules)
    # The axes the tokens are split over (the others hold the same tokens, so agree already).
    split = tokens[0] if isinstance(tokens[0], tuple) else (tokens[0],)
    token_axes = tuple(axis for axis in split if axis is not None)
    w_specs = expert_weight_specs(cfg, mesh)
    by_limit = {}  # the exchange of each layer's clip limit (ModelConfig.clip_limit)

    def exchange(p_local, x, weights, experts, cap, act):
        d = dispatch(x, experts, num_local, mc.ep, cap)
        ys = expert_compute(p_local, d.recv_x, d.recv_expert, act)
        return combine(ys, d, weights)

    def local(p_local, x, weights, experts, act):
        t, k = experts.shape
        worst = capacity(t, k, num_local)
        usual = bounded_capacity(t, k, num_local, mc.ep)
        if min_rows is None or mc.ep * worst < min_rows or usual >= worst:
            return exchange(p_local, x, weights, experts, worst, act)
        most = most_sent_to_one_peer(experts, num_local, mc.ep)
        most = jax.lax.pmax(most, token_axes)  # one branch for the whole mesh
        return jax.lax.cond(
            most > usual,
            lambda: exchange(p_local, x, weights, experts, worst, act),
            lambda: exchange(p_local, x, weights, experts, usual, act),
        )

    def sharded(limit):
        if limit not in by_limit:
            act = expert_activation(cfg, limit)
            by_limit[limit] = jax.shard_map(
                functools.partial(local, act=act),
                mesh=mesh,
                in_specs=(w_specs, tokens, tokens, tokens),
                out_specs=tokens,
            )
        return by_limit[limit]

    def routed(
        p_moe: dict,
        x: jax.Array,  # [T, D]
        weights: jax.Array,  # [T, k] f32
        experts: jax.Array,  # [T, k] int32
        limit: float | None = None,  # the layer's SwiGLU clip (ModelConfig.clip_limit)
    ) -> jax.Array:  # [T, D]
        num_tokens = x.shape[0]
        xp, wp, ep_ = pad_tokens(x, weights, experts, mc.dp * mc.ep, num_experts)
        p_local = {name: p_moe[name] for name in w_specs}
        return sharded(limit)(p_local, xp, wp, ep_)[:num_tokens]

    return routed
