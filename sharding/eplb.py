"""Expert-parallel load balancing (EPLB): redundant copies of the busiest experts, placed so
that every ep device receives about the same number of token copies.

The router's E logical experts are served by E_p = E + R physical experts, E_p / ep on each
device. Per MoE layer `phys_to_log` [E_p] says which logical expert each physical slot holds
(a copy of its weights). Routing is unchanged; a copy bound for logical expert e is sent to
one of e's replicas, chosen by the token's position (`to_physical`), so the copies for e
spread evenly over them. Replicas hold the same weights, so what a copy gets back does not
depend on which replica served it.

A placement is computed from measured loads (token copies per logical expert over a window
of steps; `rebalance`), in the two stages DeepSeek's EPLB describes:
  replicate  extra slots go, one at a time, to the expert with the highest load per replica
             so far (`replica_counts`);
  pack       the replicas, heaviest first (load / replicas each), each to the least-loaded
             device that has a free slot (and, where one can, no replica of that expert
             yet), every device taking exactly E_p / ep (`pack`).
A replica count that does not split over the devices can pack worse than fewer replicas, so
the hot experts are given 0, 1, 2, 4, ... or all of the extra slots (the rest go to the
least-loaded experts) and the most even packing is kept (`balanced_members`).
Within a device, an expert that stays keeps its slot, so a rebalance moves only the experts
that change devices (`move_plan`, `move_experts`: one ppermute per device distance, each
carrying m rows, the most any device sends at any distance rounded up to a power of two,
so a few programs serve every rebalance).

Everything here but `to_physical` and `move_experts` is host-side numpy.
"""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from models.tree import decoder_layers, with_decoder_layers
from sharding.mesh import EP
from sharding.placement import put_global

# The per-layer placement tables a MoE layer's params carry when EPLB is on (replicated).
SLOTS = "eplb_slots"  # [E, R + 1] int32: the physical slots of each logical expert (repeated)
COUNT = "eplb_count"  # [E] int32: how many of them
PHYSICAL_LEAVES = ("w_gate", "w_up", "w_down", "b_gate", "b_up")  # [E_p, ...] once expanded


def replica_counts(load: np.ndarray, num_physical: int, hot: int | None = None) -> np.ndarray:
    """[E] int: replicas per logical expert: one each, then `hot` extra slots (None: all of
    them) one at a time to the expert with the highest load per replica so far (ties: the
    lowest id), then the slots left to the least-loaded experts (by load, then id), so they
    split no busy expert's copies."""
    load = np.asarray(load, np.float64)
    counts = np.ones(load.shape[0], np.int64)
    extra = num_physical - load.shape[0]
    hot = extra if hot is None else hot
    for _ in range(hot):
        counts[int(np.argmax(load / counts))] += 1
    coldest = np.lexsort((np.arange(load.shape[0]), load))
    for i in range(extra - hot):
        counts[coldest[i % len(coldest)]] += 1
    return counts


def pack(load: np.ndarray, counts: np.ndarray, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """(members [ep, E_p / ep]: the logical expert of each replica per device, device_load
    [ep]): heaviest replica (load / replicas) first, to the least-loaded device with room
    (ties: the lowest device), a device holding no replica of that expert yet where one has
    room."""
    load = np.asarray(load, np.float64)
    per = int(counts.sum()) // ep
    expert = np.repeat(np.arange(len(counts)), counts)
    weight = load[expert] / counts[expert]
    members = np.zeros((ep, per), np.int64)
    fill = np.zeros(ep, np.int64)
    holds = np.zeros((ep, len(counts)), bool)
    device_load = np.zeros(ep)
    for j in np.lexsort((expert, -weight)):
        e = expert[j]
        room = fill < per
        fresh = room & ~holds[:, e]
        d = int(np.argmin(np.where(fresh if fresh.any() else room, device_load, np.inf)))
        members[d, fill[d]] = e
        fill[d] += 1
        holds[d, e] = True
        device_load[d] += weight[j]
    return members, device_load


def balanced_members(load: np.ndarray, num_physical: int, ep: int) -> np.ndarray:
    """members [ep, E_p / ep] of the most even packing among replica counts that give the
    hot experts 0, 1, 2, 4, ... or all of the extra slots (a replica count that does not
    split evenly over the devices can pack worse than fewer replicas: two experts with all
    the copies, four devices, four extra slots: three replicas each leave two devices two
    of them, two each put one on every device). Ties: the more hot replicas."""
    extra = num_physical - len(load)
    tries = sorted({0, extra, *(1 << i for i in range(extra.bit_length()) if 1 << i < extra)})
    best = None
    for hot in reversed(tries):
        members, device_load = pack(load, replica_counts(load, num_physical, hot), ep)
        if best is None or device_load.max() < best[1] - 1e-9 * max(best[1], 1.0):
            best = (members, device_load.max())
    return best[0]


def assign_slots(members, old: np.ndarray) -> np.ndarray:
    """[E_p] int32 phys_to_log with device d's slots holding members[d]; an expert a device
    held before keeps its slot there."""
    ep = len(members)
    per = len(old) // ep
    new = np.full(len(old), -1, np.int64)
    for d in range(ep):
        want = collections.Counter(int(e) for e in members[d])
        slots = range(d * per, (d + 1) * per)
        for s in slots:
            if want[old[s]] > 0:
                new[s] = old[s]
                want[old[s]] -= 1
        rest = sorted(want.elements())
        for s in slots:
            if new[s] < 0:
                new[s] = rest.pop(0)
    return new.astype(np.int32)


def initial_placement(num_logical: int, num_physical: int, ep: int) -> np.ndarray:
    """[E_p] int32 before any load is measured: equal loads placed as `rebalance` places
    them (experts 0..E-1 first in slots 0..E-1, kept where the packing leaves them on
    their slot's device)."""
    members = balanced_members(np.ones(num_logical), num_physical, ep)
    identity = np.concatenate([np.arange(num_logical), np.full(num_physical - num_logical, -1)])
    return assign_slots(members, identity)


def rebalance(load: np.ndarray, old: np.ndarray, ep: int) -> np.ndarray:
    """New phys_to_log [L, E_p] for measured loads [L, E] (a layer that saw no token keeps its
    placement)."""
    new = np.array(old, np.int32)
    for i, layer_load in enumerate(np.asarray(load, np.float64)):
        if layer_load.sum() > 0:
            new[i] = assign_slots(balanced_members(layer_load, old.shape[1], ep), old[i])
    return new


def slot_tables(phys_to_log: np.ndarray, num_logical: int, max_replicas: int):
    """(slots [E, max_replicas] int32, count [E] int32) of one layer's placement; a logical
    expert's row lists its physical slots in order, repeated to fill the row."""
    slots = np.zeros((num_logical, max_replicas), np.int32)
    count = np.zeros(num_logical, np.int32)
    for e in range(num_logical):
        held = np.flatnonzero(phys_to_log == e)
        if not 1 <= len(held) <= max_replicas:
            raise ValueError(f"expert {e} has {len(held)} replicas (1 to {max_replicas})")
        slots[e] = np.resize(held, max_replicas)
        count[e] = len(held)
    return slots, count


def moe_layers(tree: dict) -> list[dict]:
    """The "moe" dicts of a params (or shardings) tree's MoE layers, in placement order
    (models/tree.decoder_layers: the MTP module's layer last)."""
    return [layer["moe"] for layer in decoder_layers(tree) if "moe" in layer]


def map_moe(tree: dict, fn) -> dict:
    """`tree` with the i-th MoE layer's "moe" dict (moe_layers order) replaced by
    fn(i, moe); everything else shared."""
    layers, i = [], 0
    for layer in decoder_layers(tree):
        if "moe" in layer:
            layer, i = {**layer, "moe": fn(i, layer["moe"])}, i + 1
        layers.append(layer)
    return with_decoder_layers(tree, layers)


def num_physical(params: dict) -> int | None:
    """E_p when the params' MoE layers hold physical slots (EPLB on), else None."""
    for moe in moe_layers(params):
        if SLOTS in moe:
            return jax.tree.leaves(moe["w_down"])[0].shape[0]
    return None


def to_physical(p_moe: dict, experts: jax.Array, positions: jax.Array) -> jax.Array:
    """[T, k] logical expert ids -> physical slots: a token at position p sends its copy for
    expert e to e's replica p mod count[e]. By position, so a prompt's tokens take turns and
    a decoding sequence changes replica every step (a step of three decodes would otherwise
    send two of them to the first replica at every step); not by the copy's index (a token's
    best expert always sits in its slot 0, so those indices would share a parity)."""
    pick = positions[:, None] % p_moe[COUNT][experts]
    return p_moe[SLOTS][experts, pick]


def logical_load(physical_load: np.ndarray, phys_to_log: np.ndarray, num_logical: int):
    """[L, E] copies per logical expert from [L, E_p] copies per physical slot."""
    out = np.zeros((physical_load.shape[0], num_logical), np.int64)
    for i in range(physical_load.shape[0]):
        np.add.at(out[i], phys_to_log[i], physical_load[i])
    return out


def device_load(physical_load: np.ndarray, ep: int) -> np.ndarray:
    """[L, ep]: copies each ep device received, per layer."""
    physical_load = np.asarray(physical_load)
    return physical_load.reshape(physical_load.shape[0], ep, -1).sum(-1)


def balancedness(physical_load: np.ndarray, ep: int) -> float:
    """Mean over layers of (mean / max) copies per ep device: 1.0 is perfectly even (vLLM's
    log_balancedness figure); 1.0 when no copy was sent."""
    per_device = device_load(physical_load, ep).astype(np.float64)
    busy = per_device.max(-1) > 0
    if not busy.any():
        return 1.0
    return float(np.mean(per_device[busy].mean(-1) / per_device[busy].max(-1)))


def expand_layer(p_moe: dict, phys_to_log: np.ndarray, num_logical: int, max_replicas: int):
    """A MoE layer's params (host arrays, logical [E, ...] expert stacks) with the stacks
    taken to physical slots [E_p, ...] and the placement tables added."""
    out = dict(p_moe)
    for name in PHYSICAL_LEAVES:
        if name in out:
            out[name] = jax.tree.map(lambda a: np.take(np.asarray(a), phys_to_log, 0), out[name])
    out[SLOTS], out[COUNT] = slot_tables(phys_to_log, num_logical, max_replicas)
    return out


def expand_params(params: dict, placement: np.ndarray, num_logical: int, max_replicas: int):
    """`expand_layer` over every MoE layer (placement [L_moe, E_p], moe_layers order)."""
    return map_moe(
        params, lambda i, moe: expand_layer(moe, placement[i], num_logical, max_replicas)
    )


def with_table_shardings(shardings: dict, mesh: Mesh) -> dict:
    """`shardings` of the logical params plus the placement tables' (replicated)."""
    rep = NamedSharding(mesh, P())
    return map_moe(shardings, lambda i, moe: {**moe, SLOTS: rep, COUNT: rep})


def move_plan(old: np.ndarray, new: np.ndarray, ep: int):
    """How device d builds its new slots from the old stacks, for one layer.

    Returns (send [ep, ep - 1, m]: rows of d's old stack sent to device d + s for s = 1..ep-1,
    pick [ep, per]: each new slot's row in d's buffer [own old rows; rows from d - 1; from
    d - 2; ...] (m rows each), m). A slot is taken from its own device when the expert was
    there, else from the nearest old replica (the lowest distance, then the lowest slot)."""
    per = len(old) // ep
    wants: dict[tuple[int, int], list[int]] = collections.defaultdict(list)  # (d, s): rows
    pick = np.zeros((ep, per), np.int32)
    remote = []
    for p, e in enumerate(new):
        d, i = divmod(p, per)
        held = np.flatnonzero(old == e)
        local = held[held // per == d]
        if old[p] == e:  # stays in its slot
            pick[d, i] = i
            continue
        if len(local):
            pick[d, i] = local[0] - d * per
            continue
        src = min(held, key=lambda q: ((d - q // per) % ep, q))
        s = (d - src // per) % ep  # src device sends it s devices on
        rows = wants[(d, s)]
        if src % per not in rows:
            rows.append(int(src % per))
        remote.append((d, i, s, rows.index(int(src % per))))
    most = max((len(r) for r in wants.values()), default=0)
    m = 1 << max(most - 1, 0).bit_length() if most else 0
    send = np.zeros((ep, max(ep - 1, 0), max(m, 1)), np.int32)
    for (d, s), rows in wants.items():
        send[(d - s) % ep, s - 1, : len(rows)] = rows
    for d, i, s, j in remote:
        pick[d, i] = per + (s - 1) * m + j
    return send, pick, m


@functools.cache
def _mover(mesh: Mesh, spec: P, m: int):
    """A jitted program: one stack [E_p, ...] (sharded `spec`, experts over ep) rebuilt from
    move tables, m rows per device distance."""
    ep = mesh.shape[EP]

    def local(stack, send, pick):  # stack [per, ...]; send [1, ep-1, m]; pick [1, per]
        parts = [stack]
        for s in range(1, ep):
            rows = jnp.take(stack, send[0, s - 1], axis=0)
            perm = [(j, (j + s) % ep) for j in range(ep)]
            parts.append(jax.lax.ppermute(rows, EP, perm))
        return jnp.take(jnp.concatenate(parts), pick[0], axis=0)

    table = P(EP)
    fn = jax.shard_map(local, mesh=mesh, in_specs=(spec, table, table), out_specs=spec)
    return jax.jit(fn, out_shardings=NamedSharding(mesh, spec))


def move_experts(p_moe: dict, old: np.ndarray, new: np.ndarray, mesh: Mesh) -> dict:
    """A MoE layer's device params with the physical stacks rearranged from placement `old`
    to `new` (only the experts that change devices travel) and the tables of `new`."""
    ep = mesh.shape[EP]
    send, pick, m = move_plan(old, new, ep)
    table = NamedSharding(mesh, P(EP))
    send_d, pick_d = put_global(send, table), put_global(pick, table)
    out = dict(p_moe)
    for name in PHYSICAL_LEAVES:
        if name in out:
            out[name] = jax.tree.map(
                lambda a: _mover(mesh, a.sharding.spec, max(m, 1))(a, send_d, pick_d), out[name]
            )
    num_logical, max_replicas = p_moe[SLOTS].shape
    slots, count = slot_tables(new, num_logical, max_replicas)
    rep = NamedSharding(mesh, P())
    out[SLOTS], out[COUNT] = put_global(slots, rep), put_global(count, rep)
    return out
