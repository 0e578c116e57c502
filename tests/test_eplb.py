"""Expert-parallel load balancing (sharding/eplb.py, engine/eplb.py): the placement rules on
the host against brute force and a simulation of the moves, then the engine on an 8-device
CPU mesh in a child process (tests/eplb_worker.py): the fixtures' HF tokens and the bits of
an engine without EPLB while experts are rebalanced every 3 steps, every slot holding its
expert's weights after the moves, a skewed router's devices balanced, load_weights."""

from __future__ import annotations

import itertools
import json

import jax.numpy as jnp
import numpy as np
import pytest

from configs.presets import get_preset
from engine.eplb import EPLBConfig, balancer_for
from sharding import eplb
from sharding.mesh import parse_mesh
from tests.eplb_worker import CASES, HOT
from tests.test_mtp import REF as MTP_REF
from tests.test_mtp import _check_drafts
from tests.test_sharding_mesh import run_child


def _device_max(load, members) -> float:
    """The busiest device's copies when each expert's load splits evenly over its replicas."""
    counts = np.bincount(np.ravel(members), minlength=len(load))
    return max(sum(load[e] / counts[e] for e in row) for row in members)


@pytest.mark.parametrize("seed", range(6))
def test_replica_counts_minimize_the_busiest_replica(seed):
    rng = np.random.default_rng(seed)
    load = rng.integers(0, 50, size=4).astype(float)
    for extra in range(5):
        counts = eplb.replica_counts(load, 4 + extra)
        assert counts.sum() == 4 + extra and counts.min() >= 1
        best = min(
            max(load / np.array(c))
            for c in itertools.product(range(1, extra + 2), repeat=4)
            if sum(c) == 4 + extra
        )
        assert max(load / counts) == pytest.approx(best)


def test_pack_fills_every_device_and_keeps_replicas_apart():
    rng = np.random.default_rng(0)
    load = rng.zipf(1.5, size=16).astype(float)
    counts = eplb.replica_counts(load, 24)
    members, device_load = eplb.pack(load, counts, 4)
    assert members.shape == (4, 6)
    assert np.array_equal(np.bincount(members.ravel(), minlength=16), counts)
    assert counts.max() > 4  # an expert with more replicas than devices: on every device
    for e in range(16):  # no device holds two replicas of one expert while one has none
        assert (members == e).any(axis=1).sum() == min(counts[e], 4)
    assert device_load.sum() == pytest.approx(load.sum())
    assert device_load.max() == pytest.approx(_device_max(load, members))


def test_fewer_hot_replicas_when_they_pack_evenly():
    # Two experts take every copy; 4 devices, 4 extra slots. Three replicas each (what the
    # busiest-replica rule alone gives) leave two devices two of them; two each is even.
    load = np.zeros(16)
    load[[14, 15]] = 100.0
    members = eplb.balanced_members(load, 20, 4)
    assert _device_max(load, members) == pytest.approx(200.0 / 4)
    all_hot = eplb.pack(load, eplb.replica_counts(load, 20), 4)[0]
    assert _device_max(load, all_hot) == pytest.approx(200.0 / 3)


@pytest.mark.parametrize("seed", range(4))
def test_rebalance_evens_the_devices_and_moves_nothing_twice(seed):
    rng = np.random.default_rng(seed)
    num_logical, num_physical, ep = 32, 40, 8
    load = rng.zipf(1.3, size=(3, num_logical)).astype(float)
    load[2] = 0  # a layer that saw no token keeps its placement
    old = np.tile(eplb.initial_placement(num_logical, num_physical, ep), (3, 1))
    new = eplb.rebalance(load, old, ep)
    for i in range(2):
        assert np.array_equal(np.bincount(new[i], minlength=num_logical) >= 1, np.ones(32, bool))
        before = _device_max(load[i], old[i].reshape(ep, -1))
        after = _device_max(load[i], new[i].reshape(ep, -1))
        assert after <= before
        assert after <= load[i].sum() / ep + load[i].max() / 2  # within half a hot expert
    assert np.array_equal(new[2], old[2])
    # The same experts on each device, in other slots: they stay where they are.
    shuffled = np.stack([rng.permuted(row.reshape(ep, -1), axis=1).ravel() for row in new])
    assert not np.array_equal(shuffled, new)
    again = eplb.rebalance(load, shuffled, ep)
    assert np.array_equal(again, shuffled)
    send, pick, m = eplb.move_plan(shuffled[0], again[0], ep)
    assert m == 0 and np.array_equal(pick, np.tile(np.arange(num_physical // ep), (ep, 1)))


@pytest.mark.parametrize("seed", range(5))
def test_move_plan_rebuilds_every_slot(seed):
    """The moves simulated as the device program runs them (one shift per distance, each
    device's buffer = its old rows, then rows from 1, 2, ... devices back)."""
    rng = np.random.default_rng(seed)
    num_logical, num_physical, ep = 12, 16, 4
    per = num_physical // ep
    weights = rng.normal(size=(num_logical, 3))
    old = eplb.initial_placement(num_logical, num_physical, ep)
    new = eplb.rebalance(rng.zipf(1.4, size=(1, num_logical)), old[None], ep)[0]
    assert not np.array_equal(old, new)
    send, pick, m = eplb.move_plan(old, new, ep)
    assert m >= 1 and m & (m - 1) == 0  # a power of two
    stack = weights[old].reshape(ep, per, 3)
    rebuilt = []
    for d in range(ep):
        parts = [stack[d]]
        for s in range(1, ep):
            src = (d - s) % ep
            parts.append(stack[src][send[src, s - 1]])
        rebuilt.append(np.concatenate(parts)[pick[d]])
    assert np.array_equal(np.concatenate(rebuilt), weights[new])


def test_tokens_go_to_replicas_of_their_expert_by_position():
    phys_to_log = np.array([0, 1, 2, 0, 3, 1, 0, 2])
    slots, count = eplb.slot_tables(phys_to_log, 4, 3)
    assert count.tolist() == [3, 2, 2, 1]
    experts = jnp.array([[0, 1]] * 12 + [[3, 2]] * 12, jnp.int32)
    positions = jnp.arange(24, dtype=jnp.int32)
    phys = np.asarray(
        eplb.to_physical({"eplb_slots": slots, "eplb_count": count}, experts, positions)
    )
    assert np.array_equal(phys_to_log[phys], np.asarray(experts))
    for e in range(4):  # consecutive positions take turns over the replicas
        hits = np.bincount(phys[np.asarray(experts) == e], minlength=8)
        held = np.flatnonzero(phys_to_log == e)
        assert hits[held].max() - hits[held].min() <= 1 and hits[held].min() > 0


def test_loads_per_device_and_balancedness():
    physical = np.array([[3, 1, 0, 4], [4, 0, 0, 0]])
    assert eplb.device_load(physical, 2).tolist() == [[4, 4], [4, 0]]
    assert eplb.balancedness(physical, 2) == pytest.approx((1.0 + 0.5) / 2)
    assert eplb.logical_load(physical, np.array([[0, 1, 2, 0]] * 2), 3).tolist() == [
        [7, 1, 0],
        [4, 0, 0],
    ]


def test_bad_settings_are_refused_before_the_weights():
    moe, mesh = get_preset("tiny-deepseek-v3"), parse_mesh("ep=4")
    assert balancer_for(False, None, moe, mesh) is None
    assert balancer_for(True, {"num_redundant_experts": 4}, moe, mesh).num_physical == 20
    cases = [
        (True, None, get_preset("tiny-llama"), mesh, "no routed experts"),
        (True, None, moe, None, "ep >= 2"),
        (True, None, moe, parse_mesh("tp=2"), "ep >= 2"),
        (True, {"num_redundant_experts": 3}, moe, mesh, "multiple of ep=4"),
        (True, {"num_redundant_experts": -4}, moe, mesh, "num_redundant_experts"),
        (True, {"window_size": 0}, moe, mesh, "window_size"),
        (True, {"step_interval": 1.5}, moe, mesh, "step_interval"),
        (True, {"redundant": 4}, moe, mesh, "unsupported keys"),
        (True, "{not json", moe, mesh, "not JSON"),
        (False, {"num_redundant_experts": 4}, moe, mesh, "without enable_eplb"),
        ("yes", None, moe, mesh, "enable_eplb"),
    ]
    for enable, config, cfg, mc, message in cases:
        with pytest.raises(ValueError, match=message):
            balancer_for(enable, config, cfg, mc)
    assert EPLBConfig.of('{"num_redundant_experts": 8}') == EPLBConfig(num_redundant_experts=8)

    from engine import LLM

    with pytest.raises(ValueError, match="ep >= 2"):
        LLM(model="tiny-deepseek-v3", enable_eplb=True)


def test_an_initial_load_places_the_experts_before_the_first_step(tmp_path):
    """eplb_config.initial_load (a saved expert_load_total): two hot experts start with a
    replica on each of the four devices; a bad file is refused, naming the field."""
    moe, mesh = get_preset("tiny-deepseek-v3"), parse_mesh("ep=4")
    num_moe = sum(moe.is_moe_layer(i) for i in range(moe.num_layers))
    load = np.zeros((num_moe, moe.num_experts))
    load[:, [14, 15]] = 100
    path = tmp_path / "load.json"
    path.write_text(json.dumps(load.tolist()))
    config = {"num_redundant_experts": 4, "initial_load": str(path)}
    balancer = balancer_for(True, config, moe, mesh)
    for row in balancer.placement:
        devices = [set(np.flatnonzero(row == e) // 5) for e in (14, 15)]
        assert len(devices[0]) == len(devices[1]) == 2 and devices[0].isdisjoint(devices[1])
    assert not np.array_equal(balancer.placement, balancer_for(True, None, moe, mesh).placement)
    # Drafting with an MTP module (one more MoE layer, the last): a file without its row
    # leaves it placed evenly; with it, it is placed by its own row.
    mtp = moe.replace(num_nextn_predict_layers=1, mtp_drafts=2)
    placed = balancer_for(True, config, mtp, mesh).placement
    assert len(placed) == num_moe + 1 and np.array_equal(placed[:-1], balancer.placement)
    even = balancer_for(True, {"num_redundant_experts": 4}, mtp, mesh).placement
    assert np.array_equal(placed[-1], even[-1])
    path.write_text(json.dumps(np.concatenate([load, load[:1]]).tolist()))
    assert np.array_equal(balancer_for(True, config, mtp, mesh).placement, placed[[0, 1, 0]])
    bad = tmp_path / "bad.json"
    for content, message in (
        (json.dumps(load[:, :3].tolist()), r"\[2 MoE layers, 16 experts\], found shape \[2, 3\]"),
        (json.dumps((-load).tolist()), "non-negative"),
        ("{not json", "not a JSON list"),
    ):
        bad.write_text(content)
        with pytest.raises(ValueError, match=message):
            balancer_for(True, {**config, "initial_load": str(bad)}, moe, mesh)
    with pytest.raises(FileNotFoundError, match="initial_load="):
        balancer_for(True, {**config, "initial_load": str(tmp_path / "none.json")}, moe, mesh)


@pytest.fixture(scope="module")
def mesh_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("eplb") / "results.json"
    run_child(8, "tests.eplb_worker", str(out))
    return json.loads(out.read_text())


@pytest.mark.parametrize("arch, mesh, redundant, options", CASES)
def test_rebalancing_while_decoding_keeps_every_bit(mesh_results, arch, mesh, redundant, options):
    got = mesh_results["cases"][f"{arch}|{mesh}"]
    assert got["base"]["tokens"] == got["hf_tokens"]
    assert got["eplb"]["tokens"] == got["hf_tokens"]
    # Replicas hold the same weights and a copy's output does not depend on which device
    # served it (rows of the grouped matmul are independent): bitwise on CPU.
    assert got["eplb"]["logprobs"] == got["base"]["logprobs"]
    assert got["num_rebalances"] >= 4  # 16 steps or more, one every 3
    # Moves keep every array's shape and sharding: no step program compiled again.
    assert got["eplb"]["new_compiles"] == 1  # one step program (every step 16 tokens)
    assert got["placement"] != got["first_placement"]
    assert got["slots_hold_their_experts"]  # after the moves, every leaf of every slot
    num_logical = len(got["expert_load_total"][0])
    assert got["w_gate_shape"][0] == num_logical + redundant
    assert got["w_gate_spec"].startswith("P('ep'")


def test_a_skewed_router_is_balanced_by_a_rebalance(mesh_results):
    res = mesh_results["skewed"]
    load = np.asarray(res["expert_load"])
    hot = list(HOT)
    assert (load[:, hot] > 0).all() and load.sum() == load[:, hot].sum()
    ep = 4

    def expected(placement) -> float:
        """Balancedness if each hot expert's copies split evenly over its replicas."""
        values = []
        for row in np.asarray(placement):
            per_device = np.zeros(ep)
            for e in hot:
                held = np.flatnonzero(row == e)
                np.add.at(per_device, held // (len(row) // ep), 1.0 / len(held))
            values.append(per_device.mean() / per_device.max())
        return float(np.mean(values))

    assert expected(res["placement_before"]) == pytest.approx(0.5)  # one device per expert
    assert res["balancedness_before"] == pytest.approx(0.5)
    assert res["balancedness_before_rebalance"] == pytest.approx(0.5)
    assert expected(res["placement_after"]) == pytest.approx(1.0)
    assert res["balancedness_after"] == pytest.approx(1.0)
    assert res["before"]["tokens"] == res["base"]["tokens"] == res["after"]["tokens"]
    assert res["after"]["logprobs"] == res["base"]["logprobs"]
    assert 'moeserve:eplb_rebalances_total{model_name="m"} 1\n' in res["metrics"]
    assert 'moeserve:eplb_balancedness{model_name="m"} 1.0\n' in res["metrics"]


def test_load_weights_land_in_the_current_placement(mesh_results):
    res = mesh_results["load_weights"]
    assert res["num_rebalances"] >= 4 and res["placement_changed"]
    assert res["slots_hold_their_experts"]
    assert res["tokens"] == res["want"]
    assert res["tokens"] != res["hf"]  # the new weights are really served


def test_mtp_drafts_with_eplb_are_transformers(mesh_results):
    """DeepSeek-V3's MTP module drafting on an ep=4 mesh with EPLB rebalancing every 2
    steps: its MoE layer is the placement's last row, its loads counted, its experts moved
    (every slot then holds its expert); the tokens are greedy and the drafts transformers'."""
    res = mesh_results["mtp"]
    seen = {
        rid: {int(n): (tuple(d), lp) for n, (d, lp) in by_count.items()}
        for rid, by_count in res["seen"].items()
    }
    assert _check_drafts(MTP_REF["cases"], res["tokens"], seen) == 0  # (test_mtp's pages)
    assert res["placement_rows"] == res["num_decoder_moe_layers"] + 1
    load = np.asarray(res["expert_load_total"])
    assert load.shape[0] == res["placement_rows"] and load[-1].sum() > 0
    assert res["num_rebalances"] >= 3 and res["mtp_placement_changed"]
    assert res["slots_hold_their_experts"]


def test_the_benchmark_runs_small(tmp_path):
    out = tmp_path / "bench.json"
    flags = ["--model=tiny-deepseek-v3", "--mesh=ep=4", "--redundant=0,4", "--num_prompts=2"]
    flags += ["--prompt_len=8", "--max_tokens=3", f"--json_out={out}"]
    stdout = run_child(4, "scripts.bench_eplb", *flags)
    assert "| EPLB, 4 extra slots |" in stdout and "| no EPLB |" in stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["redundant"] for r in rows] == [None, 0, 4]
    for r in rows:
        assert 0 < r["balancedness"] <= 1 and r["busiest_over_even"] >= 1
