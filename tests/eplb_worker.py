"""Expert-parallel load balancing on an 8-device CPU mesh, run in a child process by
tests/test_eplb.py (XLA's device count is fixed when jax starts):

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.eplb_worker OUT.json
"""

from __future__ import annotations

import json
import pathlib
import sys

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# (fixture, mesh, num_redundant_experts): experts over ep alone; split over tp too, with
# gpt-oss's biased experts and DeepSeek-V3's fp8 weights (data and scales move together).
CASES = [
    ("deepseek_v3", "ep=4", 4, {}),
    ("qwen3_moe", "tp=2,ep=2", 2, {}),
    ("gpt_oss", "tp=2,ep=2", 2, {}),
    ("deepseek_v3_fp8", "tp=2,ep=2", 2, {"quantization": "fp8"}),
    # int4 experts held packed (two values a byte; F / 2 split over tp) as a GPTQ
    # checkpoint stores them: zero points and act order's group indices move with them.
    ("qwen3_moe_gptq", "tp=2,ep=2", 2, {"quantization": "int4"}),
    # Tokens split over dp too; batch-invariant mode (worst-case exchange buffers only).
    # (dp=2,ep=2, not 4: batch-invariant steps pad to 64 rows a shard, their narrow products
    # to 128, and eight shards of 128 took ~0.5 s a step on this CPU's two cores; its one
    # bucket, 256 rows, takes the prompts in one step)
    (
        "deepseek_v3",
        "dp=2,ep=2",
        2,
        {"batch_invariant": True, "token_buckets": None, "max_num_batched_tokens": 64},
    ),
]


# MTP drafting (engine/mtp.py) with EPLB: the MTP module's MoE layer is placed, measured
# and moved as the decoder layers' are (the placement's last row).
MTP_MESH, MTP_REDUNDANT = "ep=4", 4


def _engine(arch: str, mesh: str, **options):
    from tests.sharding_worker import _engine as engine_at

    return engine_at(str(FIXTURES / arch), mesh, **options)


def _generate(llm, prompts) -> dict:
    from tests.sharding_worker import _generate as generate

    return generate(llm, prompts)


def _host(params) -> dict:
    import jax
    import numpy as np

    return jax.tree.map(np.asarray, params)


def _slots_hold_their_experts(llm, logical: dict) -> bool:
    """Every physical slot's weights on the devices are its logical expert's in `logical`
    (an engine's params without EPLB, on the host), under the current placement; every
    other weight is the same."""
    import jax
    import numpy as np

    from sharding.eplb import COUNT, PHYSICAL_LEAVES, SLOTS, map_moe

    placement = llm._eplb.placement

    def strip(i: int, moe: dict) -> dict:
        return {k: v for k, v in moe.items() if k not in (SLOTS, COUNT)}

    def take(i: int, moe: dict) -> dict:
        return {
            k: jax.tree.map(lambda w: w[placement[i]], v) if k in PHYSICAL_LEAVES else v
            for k, v in moe.items()
        }

    got, want = map_moe(_host(llm.params), strip), map_moe(logical, take)
    return all(jax.tree.leaves(jax.tree.map(np.array_equal, got, want)))


def _case(arch: str, mesh: str, redundant: int, options: dict, prompts: list) -> dict:
    base = _engine(arch, mesh, **options)
    out = {"base": _generate(base, prompts)}
    logical = _host(base.params)
    del base
    # Rebalanced every 3 steps from the last 8 steps' loads while it generates.
    llm = _engine(
        arch,
        mesh,
        enable_eplb=True,
        eplb_config={"num_redundant_experts": redundant, "step_interval": 3, "window_size": 8},
        **options,
    )
    first = llm.stats()["eplb"]["placement"]
    out["eplb"] = _generate(llm, prompts)
    stats = llm.stats()
    out["first_placement"] = first
    out["placement"] = stats["eplb"]["placement"]
    out["num_rebalances"] = stats["eplb"]["num_rebalances"]
    out["expert_load_total"] = stats["expert_load_total"]
    out["slots_hold_their_experts"] = _slots_hold_their_experts(llm, logical)
    w_gate = llm.params["layers"][-1]["moe"]["w_gate"]
    out["w_gate_spec"] = str(getattr(w_gate, "data", w_gate).sharding.spec)
    out["w_gate_shape"] = list(getattr(w_gate, "data", w_gate).shape)
    return out


HOT = (14, 15)  # one replica each in the first placement, on devices 2 and 3


def _skew(params: dict) -> dict:
    """DeepSeek-V3's correction bias steering every copy to the HOT experts (host params)."""
    import numpy as np

    layers = []
    for layer in params["layers"]:
        if "moe" in layer:
            bias = np.zeros_like(layer["moe"]["router_bias"])
            bias[list(HOT)] = 1e4
            layer = {**layer, "moe": {**layer["moe"], "router_bias": bias}}
        layers.append(layer)
    return {**params, "layers": layers}


def _skewed(prompts: list) -> dict:
    """Every copy routed to the HOT experts: the devices' balancedness measured before and
    after a rebalance, and the tokens of both."""
    import jax

    from sharding.placement import put_tree

    llm = _engine(
        "deepseek_v3",
        "ep=4",
        enable_eplb=True,
        eplb_config={"num_redundant_experts": 4, "step_interval": 10**6},
    )
    skewed = _skew(_host(llm.params))
    llm.params = put_tree(skewed, jax.tree.map(lambda a: a.sharding, llm.params))
    before = _generate(llm, prompts)
    stats = llm.stats()["eplb"]
    out = {"before": before, "balancedness_before": stats["balancedness"]}
    out["placement_before"] = stats["placement"]
    llm.rebalance_experts()
    after = _generate(llm, prompts)
    stats = llm.stats()["eplb"]
    out.update(after=after, balancedness_after=stats["balancedness"])
    out["placement_after"] = stats["placement"]
    out["balancedness_before_rebalance"] = stats["balancedness_before_rebalance"]
    out["expert_load"] = llm.stats()["expert_load_total"]
    from engine.server import Server

    srv = Server(("127.0.0.1", 0), llm, "m")
    out["metrics"] = srv.metrics()
    srv.close()
    # The same skew on an engine without EPLB: the tokens a rebalance must not change.
    base = _engine("deepseek_v3", "ep=4")
    base.params = put_tree(
        _skew(_host(base.params)), jax.tree.map(lambda a: a.sharding, base.params)
    )
    out["base"] = _generate(base, prompts)
    return out


def _load_weights(prompts: list) -> dict:
    """load_weights onto an EPLB engine after rebalances: other weights (the experts' down
    projections negated) land in the current placement's slots and decode as an engine
    without EPLB given them."""
    import numpy as np

    base = _engine("qwen3_moe", "ep=4")
    new = _host(base.params)
    new["layers"] = [
        {**x, "moe": {**x["moe"], "w_down": -x["moe"]["w_down"]}} if "moe" in x else x
        for x in new["layers"]
    ]
    base.load_weights(new)
    want = _generate(base, prompts)["tokens"]
    llm = _engine(
        "qwen3_moe",
        "ep=4",
        enable_eplb=True,
        eplb_config={"num_redundant_experts": 4, "step_interval": 2, "window_size": 4},
    )
    first = np.array(llm._eplb.placement)
    _generate(llm, prompts)
    llm.load_weights(new)
    return {
        "num_rebalances": llm.stats()["eplb"]["num_rebalances"],
        "placement_changed": not np.array_equal(first, llm._eplb.placement),
        "slots_hold_their_experts": _slots_hold_their_experts(llm, new),
        "tokens": _generate(llm, prompts)["tokens"],
        "want": want,
    }


def _mtp() -> dict:
    """The MTP fixture drafting with EPLB, rebalanced every 2 steps: its tokens and drafts,
    and where the MTP layer's experts went."""
    import numpy as np

    from engine import LLM
    from tests.test_mtp import ENGINE, MTP_DIR, REF, SPEC, _run

    logical = _host(LLM(str(MTP_DIR), mesh=MTP_MESH, speculative_config=SPEC, **ENGINE).params)
    eplb_config = {"num_redundant_experts": MTP_REDUNDANT, "step_interval": 2, "window_size": 4}
    llm = LLM(
        str(MTP_DIR),
        mesh=MTP_MESH,
        speculative_config=SPEC,
        enable_eplb=True,
        eplb_config=eplb_config,
        **ENGINE,
    )
    first = np.array(llm._eplb.placement)
    tokens, seen = _run(llm, REF["cases"])
    stats = llm.stats()
    return {
        "tokens": tokens,
        "seen": {
            rid: {str(n): [list(d), [float(x) for x in lp]] for n, (d, lp) in by_count.items()}
            for rid, by_count in seen.items()
        },
        "num_rebalances": stats["eplb"]["num_rebalances"],
        "placement_rows": len(stats["eplb"]["placement"]),
        "mtp_placement_changed": not np.array_equal(first[-1], llm._eplb.placement[-1]),
        "expert_load_total": stats["expert_load_total"],
        "num_decoder_moe_layers": sum(map(llm.config.is_moe_layer, range(llm.config.num_layers))),
        "slots_hold_their_experts": _slots_hold_their_experts(llm, logical),
    }


def main(out_path: str) -> None:
    import jax

    assert jax.device_count() == 8, jax.devices()
    result = {"cases": {}}
    for arch, mesh, redundant, options in CASES:
        ref = json.loads((FIXTURES / arch / "reference.json").read_text())
        res = _case(arch, mesh, redundant, options, ref["prompts"])
        res["hf_tokens"] = ref["greedy_tokens"]
        result["cases"][f"{arch}|{mesh}"] = res
    prompts = json.loads((FIXTURES / "deepseek_v3" / "reference.json").read_text())["prompts"]
    result["skewed"] = _skewed(prompts)
    qwen = json.loads((FIXTURES / "qwen3_moe" / "reference.json").read_text())
    result["load_weights"] = {**_load_weights(qwen["prompts"]), "hf": qwen["greedy_tokens"]}
    result["mtp"] = _mtp()
    pathlib.Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
