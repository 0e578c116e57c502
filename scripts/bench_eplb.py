"""Expert-parallel load balancing: how evenly the ep devices' experts are loaded, with and
without EPLB, under a skewed router.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m scripts.bench_eplb
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m scripts.bench_eplb \
      --redundant=0,8,16 --skew=0.1

Random weights of `--model` on `--mesh`. Random weights route almost evenly, unlike trained
ones, so the router's correction bias (DeepSeek-V3's, it steers the choice only) is set to
-skew x log(rank) over a random ranking of the experts: popular experts get picked more, as
in trained MoE models; the expert loads measured are printed (max / mean over experts).
For each engine (no EPLB; EPLB with each `--redundant` count of extra slots per layer): a
warm-up batch of prompts, a rebalance from its loads (timed: placement on the host and the
experts moved on the devices), then a measured batch of other prompts of the same kind.
Reported: the copies each device received during the measured batch, as mean / max
(balancedness, 1.0 = even; averaged over MoE layers) and as the busiest device's share over
an even share (the expert phase of a step waits for the busiest device, so on hardware its
time scales with it); decode tokens / s on this machine (fake CPU devices share its cores,
so this does not show the balance). Also the placement algorithm alone at DeepSeek-V3's
size (256 experts, 58 MoE layers, 32 extra slots, ep=32) on synthetic Zipf loads.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import numpy as np
from absl import app, flags

from configs.presets import get_preset
from scripts.flag_checks import check_output_file
from sharding import eplb
from sharding.mesh import parse_mesh
from sharding.placement import put_tree

_MODEL = flags.DEFINE_string("model", "bench-deepseek-v3-64e", "MoE preset (noaux_tc routing).")
_MESH = flags.DEFINE_string("mesh", "ep=8", "Device mesh with ep >= 2.")
_REDUNDANT = flags.DEFINE_list("redundant", ["0", "8", "16"], "Extra slots per layer to try.")
_SKEW = flags.DEFINE_float("skew", 0.05, "Router bias -skew x log(rank): 0 = unskewed.")
_PROMPTS = flags.DEFINE_integer("num_prompts", 48, "Prompts per batch (warm-up, measured).")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 96, "Tokens per prompt.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "Tokens generated per prompt.")
_SEED = flags.DEFINE_integer("seed", 0, "Weights, ranking and prompts.")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")


def skewed(params: dict, skew: float, rng: np.random.Generator) -> dict:
    """Host params with every MoE layer's correction bias set to -skew x log(rank)."""
    layers = []
    for layer in params["layers"]:
        if "moe" in layer:
            moe = dict(layer["moe"])
            rank = rng.permutation(moe["router_bias"].shape[0]) + 1
            moe["router_bias"] = (-skew * np.log(rank)).astype(np.float32)
            layer = {**layer, "moe": moe}
        layers.append(layer)
    return {**params, "layers": layers}


def run_engine(redundant: int | None, prompts: tuple[list, list]) -> dict:
    """One engine: warm-up batch, rebalance (EPLB), measured batch."""
    from engine import LLM, SamplingParams

    options = {}
    if redundant is not None:  # never on its own: only rebalance_experts() below
        config = {"num_redundant_experts": redundant, "step_interval": 10**9}
        options = {"enable_eplb": True, "eplb_config": config}
    llm = LLM(
        model=_MODEL.value,
        mesh=_MESH.value,
        seed=_SEED.value,
        max_model_len=_PROMPT_LEN.value + _MAX_TOKENS.value,
        max_num_batched_tokens=512,
        **options,
    )
    host = jax.tree.map(np.asarray, llm.params)
    # The same bias in every engine (EPLB changes no router leaf).
    host = skewed(host, _SKEW.value, np.random.default_rng(_SEED.value))
    llm.params = put_tree(host, jax.tree.map(lambda a: a.sharding, llm.params))
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    warm, measured = prompts
    llm.generate(warm, params)
    warm_load = np.asarray(llm.stats()["expert_load_total"])
    out = {"redundant": redundant}
    if redundant is not None:
        start = time.perf_counter()
        llm.rebalance_experts()
        jax.block_until_ready(llm.params)
        out["rebalance_s"] = time.perf_counter() - start
    before = np.asarray(llm.stats()["expert_load_total"])
    start = time.perf_counter()
    llm.generate(measured, params)
    seconds = time.perf_counter() - start
    stats = llm.stats()
    logical = np.asarray(stats["expert_load_total"]) - before
    ep = parse_mesh(_MESH.value).ep
    if redundant is None:  # experts in order, E / ep per device
        placement = np.tile(np.arange(logical.shape[1]), (len(logical), 1))
        per_device = eplb.device_load(logical, ep)
    else:  # the copies each device received since the rebalance
        placement = np.asarray(stats["eplb"]["placement"])
        per_device = np.asarray(stats["eplb"]["device_load"])
    out.update(
        # The warm-up batch's loads on the placement made from them, each expert's copies
        # split evenly over its replicas: what the placement fits.
        fit=eplb.balancedness(even_split(warm_load, placement), ep),
        balancedness=float(np.mean(per_device.mean(-1) / per_device.max(-1))),
        busiest_over_even=float(np.mean(per_device.max(-1) / per_device.mean(-1))),
        expert_max_over_mean=float(np.mean(logical.max(-1) / logical.mean(-1))),
        decode_tokens_per_s=len(measured) * _MAX_TOKENS.value / seconds,
    )
    return out


def even_split(load: np.ndarray, placement: np.ndarray) -> np.ndarray:
    """[L, E_p]: each slot's share of its expert's copies, split evenly over the replicas."""
    out = []
    for layer_load, row in zip(load, placement, strict=True):
        counts = np.bincount(row, minlength=len(layer_load))
        out.append(layer_load[row] / counts[row])
    return np.stack(out)


def placement_at_scale(seed: int) -> dict:
    """The host's placement algorithm at DeepSeek-V3's size on Zipf loads."""
    rng = np.random.default_rng(seed)
    num_logical, extra, ep, layers = 256, 32, 32, 58
    load = rng.zipf(1.5, size=(layers, num_logical)).astype(float)
    old = np.tile(eplb.initial_placement(num_logical, num_logical + extra, ep), (layers, 1))
    start = time.perf_counter()
    new = eplb.rebalance(load, old, ep)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "balancedness_before": eplb.balancedness(even_split(load, old), ep),
        "balancedness_after": eplb.balancedness(even_split(load, new), ep),
    }


def main(argv):
    del argv
    try:
        _main()
    except (ValueError, OSError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"bench_eplb: {e}")


def _main() -> None:
    for name, value, low in (
        ("--num_prompts", _PROMPTS.value, 1),
        ("--prompt_len", _PROMPT_LEN.value, 1),
        ("--max_tokens", _MAX_TOKENS.value, 1),
        ("--seed", _SEED.value, 0),
    ):
        if value < low:
            raise app.UsageError(f"{name}={value}: must be >= {low}")
    try:
        redundant = [int(r) for r in _REDUNDANT.value]
    except ValueError:
        raise app.UsageError(f"--redundant={_REDUNDANT.value}: integers expected") from None
    if _JSON.value is not None:
        check_output_file("--json_out", _JSON.value)
    cfg = get_preset(_MODEL.value)
    if cfg.topk_method != "noaux_tc":
        raise app.UsageError(f"--model={_MODEL.value}: needs DeepSeek-V3 (noaux_tc) routing")
    rng = np.random.default_rng(_SEED.value + 1)
    prompts = tuple(
        rng.integers(3, cfg.vocab_size, (_PROMPTS.value, _PROMPT_LEN.value)).tolist()
        for _ in range(2)
    )
    rows = [run_engine(None, prompts)] + [run_engine(r, prompts) for r in redundant]
    scale = placement_at_scale(_SEED.value)
    print(f"{_MODEL.value} on {_MESH.value}, skew {_SKEW.value}")
    print(
        "| engine | fit (warm-up) | balancedness (measured) | busiest / even | rebalance s "
        "| decode tok/s (CPU) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        name = "no EPLB" if r["redundant"] is None else f"EPLB, {r['redundant']} extra slots"
        rebalance = f"{r['rebalance_s']:.2f}" if "rebalance_s" in r else "-"
        print(
            f"| {name} | {r['fit']:.3f} | {r['balancedness']:.3f} | {r['busiest_over_even']:.2f} | "
            f"{rebalance} | {r['decode_tokens_per_s']:.0f} |"
        )
    print(f"expert loads, max / mean over experts: {rows[0]['expert_max_over_mean']:.2f}")
    print(
        f"placement at DeepSeek-V3's size (256 experts x 58 layers, 32 extra, ep=32): "
        f"{scale['seconds']:.2f} s, balancedness {scale['balancedness_before']:.3f} -> "
        f"{scale['balancedness_after']:.3f} (Zipf 1.5 loads)"
    )
    if _JSON.value is not None:
        with open(_JSON.value, "w") as f:
            json.dump({"rows": rows, "placement_at_scale": scale}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
