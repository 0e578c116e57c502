"""Expert-parallel MoE: per-layer time of dispatch, expert compute and combine, and load.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m scripts.bench_moe
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m scripts.bench_moe \
      --mesh=dp=2,ep=4 --num_tokens=1024

Random weights of `--model`; one `--num_tokens`-token prompt is run through the model on one
device and the hidden states entering each MoE layer are kept, so every layer sees its own
routing. For each MoE layer, the three phases of sharding/expert_parallel.py run as separate
jitted shard_maps over the mesh (dispatch: sort + all-to-all; compute: grouped matmuls over
the local experts; combine: all-to-all back + weighted sum), each timed on its own (fastest
of `--iters`), next to the whole routed-expert path and the single-device `routed_experts`.
Load: token copies per expert and per ep device, as max / mean (1.0 = balanced).
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from configs.presets import get_preset
from models.moe import expert_activation, routed_for
from models.reference import contiguous_attend, init_cache
from models.specs import init_params
from models.transformer import forward_hidden
from scripts.flag_checks import check_output_file
from sharding import expert_parallel as ep_lib
from sharding.mesh import DP, EP, check_layout, make_mesh, parse_mesh
from sharding.placement import put_tree
from sharding.rules import param_shardings

_MODEL = flags.DEFINE_string("model", "bench-deepseek-v3-35m", "MoE preset.")
_MESH = flags.DEFINE_string("mesh", "ep=8", "Device mesh, e.g. 'ep=8' or 'dp=2,ep=4'.")
_TOKENS = flags.DEFINE_integer("num_tokens", 512, "Tokens entering each MoE layer.")
_ITERS = flags.DEFINE_integer("iters", 20, "Timed calls per phase (the fastest reported).")
_SEED = flags.DEFINE_integer("seed", 0, "Weights and prompt.")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def moe_inputs(params: dict, cfg, token_ids: np.ndarray) -> list[tuple]:
    """(layer, x [T, D], weights [T, k], experts [T, k]) entering each MoE layer's experts."""
    captured = []
    routed = routed_for(cfg)

    def capture(p_moe, x, weights, experts):
        captured.append((x, weights, experts))
        return routed(p_moe, x, weights, experts)

    positions = jnp.arange(len(token_ids), dtype=jnp.int32)
    cache = init_cache(cfg, len(token_ids))
    forward_hidden(
        params,
        cfg,
        jnp.asarray(token_ids),
        positions,
        cache,
        contiguous_attend(cfg, positions),
        capture,
    )  # eager, so `capture` sees concrete arrays
    layers = [i for i in range(cfg.num_layers) if cfg.is_moe_layer(i)]
    return [(i, *c) for i, c in zip(layers, captured, strict=True)]


def best_ms(fn, *args) -> float:
    """Fastest of `--iters` calls: on a shared CPU the minimum is what repeats across runs."""
    jax.block_until_ready(fn(*args))  # compile and warm up
    best = float("inf")
    for _ in range(_ITERS.value):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def imbalance(load: np.ndarray) -> float:
    return float(load.max() / load.mean()) if load.sum() else 1.0


def main(argv):
    del argv
    try:
        _main()
    except (ValueError, OSError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"bench_moe: {e}")


def _main() -> None:
    if _ITERS.value < 1:
        raise app.UsageError(f"--iters={_ITERS.value}: must be >= 1")
    if _SEED.value < 0:
        raise app.UsageError(f"--seed={_SEED.value}: must be >= 0")
    if _JSON.value is not None:
        check_output_file("--json_out", _JSON.value)
    cfg = get_preset(_MODEL.value)
    if cfg.num_experts < 1:
        raise app.UsageError(
            f"--model={_MODEL.value}: must be a preset with routed experts (num_experts >= 1, "
            f"not {cfg.num_experts})"
        )
    # One prompt of num_tokens positions goes through the model.
    if not 1 <= _TOKENS.value <= cfg.max_position_embeddings:
        raise app.UsageError(
            f"--num_tokens={_TOKENS.value}: must be in [1, {cfg.max_position_embeddings}] "
            f"({cfg.name}'s max_position_embeddings)"
        )
    mc = parse_mesh(_MESH.value)
    check_layout(cfg, mc)  # before the model runs, not when its weights are placed
    mesh = make_mesh(mc)
    params = init_params(cfg, jax.random.key(_SEED.value))
    rng = np.random.default_rng(_SEED.value)
    token_ids = rng.integers(3, cfg.vocab_size, _TOKENS.value).astype(np.int32)
    inputs = moe_inputs(params, cfg, token_ids)
    sharded = put_tree(params, param_shardings(cfg, mesh))

    num_local = cfg.num_experts // mc.ep
    tok = P((DP, EP))
    w_specs = ep_lib.expert_weight_specs(cfg, mesh)
    d_specs = ep_lib.Dispatched(tok, tok, tok, tok)

    def shard(fn, in_specs, out_specs):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs))

    dispatch = shard(lambda x, e: ep_lib.dispatch(x, e, num_local, mc.ep), (tok, tok), d_specs)
    act = expert_activation(cfg)
    compute = shard(lambda p, x, e: ep_lib.expert_compute(p, x, e, act), (w_specs, tok, tok), tok)
    combine = shard(ep_lib.combine, (tok, d_specs, tok), tok)
    # The bounded exchange at any size (the engine's keeps it for BOUNDED_MIN_ROWS and up).
    whole = jax.jit(ep_lib.make_routed_experts_ep(cfg, mesh, min_rows=0))
    whole_worst = jax.jit(ep_lib.make_routed_experts_ep(cfg, mesh, min_rows=None))
    single = jax.jit(routed_for(cfg))
    on_tokens = NamedSharding(mesh, tok)

    rows = []
    for layer, x, weights, experts in inputs:
        # The expert-parallel leaves (gpt-oss: the gate/up biases too).
        p_moe = {k: sharded["layers"][layer]["moe"][k] for k in w_specs}
        x_p, w_p, e_p = ep_lib.pad_tokens(x, weights, experts, mc.dp * mc.ep, cfg.num_experts)
        x_s, w_s, e_s = (jax.device_put(a, on_tokens) for a in (x_p, w_p, e_p))
        d = dispatch(x_s, e_s)
        ys = compute(p_moe, d.recv_x, d.recv_expert)
        load = np.bincount(np.asarray(experts).ravel(), minlength=cfg.num_experts)
        p_full = {k: params["layers"][layer]["moe"][k] for k in w_specs}
        rows.append(
            dict(
                layer=layer,
                dispatch_ms=best_ms(dispatch, x_s, e_s),
                compute_ms=best_ms(compute, p_moe, d.recv_x, d.recv_expert),
                combine_ms=best_ms(combine, ys, d, w_s),
                ep_path_ms=best_ms(whole, p_moe, x, weights, experts),
                ep_worst_ms=best_ms(whole_worst, p_moe, x, weights, experts),
                # Copies the busiest (device, peer) pair exchanges: within the bound or not.
                most_to_one_peer=max(
                    int(ep_lib.most_sent_to_one_peer(shard_e, num_local, mc.ep))
                    for shard_e in np.split(np.asarray(e_p), mc.dp * mc.ep)
                ),
                one_device_ms=best_ms(single, p_full, x, weights, experts),
                expert_imbalance=imbalance(load),
                device_imbalance=imbalance(load.reshape(mc.ep, num_local).sum(axis=1)),
                max_expert_copies=int(load.max()),
            )
        )

    # Tokens per shard after pad_tokens pads num_tokens up to a multiple of dp * ep.
    local_tokens = -(-_TOKENS.value // (mc.dp * mc.ep))
    k = cfg.num_experts_per_tok
    bound = ep_lib.bounded_capacity(local_tokens, k, num_local, mc.ep)
    print(
        f"{cfg.name}, mesh {_MESH.value} on {jax.device_count()} {jax.default_backend()} "
        f"devices, {_TOKENS.value} tokens, top-{k} of {cfg.num_experts} "
        f"experts ({num_local} per ep device), exchange capacity "
        f"{ep_lib.capacity(local_tokens, k, num_local)} rows per peer (worst case), "
        f"{bound} (bounded)\n"
    )
    print(
        "| layer | dispatch ms | expert compute ms | combine ms | EP path ms | EP path, "
        "worst-case buffers ms | most copies to one peer | one device ms "
        "| expert load max/mean | ep-device load max/mean |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layer']} | {r['dispatch_ms']:.2f} | {r['compute_ms']:.2f} | "
            f"{r['combine_ms']:.2f} | {r['ep_path_ms']:.2f} | {r['ep_worst_ms']:.2f} | "
            f"{r['most_to_one_peer']} | {r['one_device_ms']:.2f} | "
            f"{r['expert_imbalance']:.2f} | {r['device_imbalance']:.2f} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump({"model": cfg.name, "mesh": _MESH.value, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
