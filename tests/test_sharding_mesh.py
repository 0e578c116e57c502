"""The engine over a device mesh, on fake CPU devices in subprocesses (tests/sharding_worker.py).

This pytest process keeps its one CPU device: XLA's device count is fixed when jax starts,
so every mesh runs in a child process started with XLA_FLAGS set. One child runs every
8-device case (few process starts, shared imports); the multi-host test starts two children
that form one mesh over gloo.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.sampler_cases import cases
from tests.sharding_worker import (
    FP8_LAYOUT,
    FP8_WEIGHTS_LAYOUT,
    KV_TRANSFER_LAYOUTS,
    LAYOUTS,
    LOAD_WEIGHTS_LAYOUT,
    MAX_TOKENS,
    PENALTY_LAYOUTS,
    SKEWED,
)
from tests.test_mtp import REF as MTP_REF
from tests.test_mtp import _check_drafts

ROOT = pathlib.Path(__file__).parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TOL = 2e-3


def _env(num_devices: int) -> dict:
    env = dict(os.environ)
    # Optimization level 0 halves XLA:CPU compile time, which dominates these runs; the
    # sharded and single-device results compared below are compiled alike.
    env["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={num_devices} --xla_backend_optimization_level=0"
    )
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _reference(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "reference.json").read_text())


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(float(np.max(np.abs(np.subtract(x, y)))) for x, y in zip(a, b, strict=True))


def run_child(num_devices: int, module: str, *args: str) -> str:
    """`python -m module args` on `num_devices` fake CPU devices; its stdout (a failure
    shows its stderr's end)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=_env(num_devices),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="module")
def mesh_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("mesh") / "results.json"
    run_child(8, "tests.sharding_worker", "mesh_cases", str(out))
    return json.loads(out.read_text())


def test_expert_parallel_op_matches_single_device(mesh_results):
    op = mesh_results["op"]
    assert op["hlo_has_all_to_all"]
    # The bounded exchange and the worst-case one under lax.cond (batch-invariant: one).
    assert op["hlo_has_conditional"] and not op["worst_only_has_conditional"]
    assert not op["small_default_has_conditional"]  # decode-sized: one exchange
    for case in ("random", "even", "one_device"):
        assert op[case]["max_abs"] > 1e-3  # the comparison is not against zeros
        assert op[case]["max_abs_err"] < 1e-6, case
        assert op[case]["equals_worst_case_bitwise"], case


@pytest.mark.parametrize("arch, mesh", LAYOUTS)
def test_sharded_generate_matches_hf_and_single_device(mesh_results, arch, mesh):
    """The HF fixture's greedy tokens; logprobs within TOL of one device's (SINGLE_ARCHS:
    run beside it, its expert loads equal too; the others: of the fixture's)."""
    got = mesh_results["sharded"][f"{arch}|{mesh}"]
    ref = _reference(arch)
    single = mesh_results["single"].get(arch)
    assert got["tokens"] == ref["greedy_tokens"]
    if single is not None:
        assert single["tokens"] == ref["greedy_tokens"]
        assert _max_diff(got["logprobs"], single["logprobs"]) < TOL
        assert got["expert_load"] == single["expert_load"]
    else:
        assert _max_diff(got["logprobs"], [lp[:MAX_TOKENS] for lp in ref["logprobs"]]) < TOL
    # Every real token (prompts, then one per decode step) sent k copies per MoE layer
    # (LongCat-Flash: fewer, its zero-computation experts' not counted).
    num_tokens = got["num_prompt_tokens"] + len(ref["prompts"]) * (MAX_TOKENS - 1)
    for layer_load in got["expert_load"]:
        if arch == "longcat_flash":
            assert 0 < sum(layer_load) < got["top_k"] * num_tokens
        else:
            assert sum(layer_load) == got["top_k"] * num_tokens
    assert got["new_compiles"] == 1  # one step program (every step 16 tokens)
    specs = got["param_specs"]
    mamba1 = arch == "falcon_mamba"  # (no attention; its channels [D, Hv] over tp)
    if arch == "deepseek_v4":  # (its heads' output goes through a grouped projection)
        assert specs["attn.wq_b"] == "P(None, 'tp', None)"
    elif not mamba1:
        assert specs["attn.wo"] == "P('tp', None, None)"
    if "moe.w_up" in specs:
        assert specs["moe.w_up"] == "P('ep', None, 'tp')"
    if "linear.wv" in specs or mamba1:
        assert specs["linear.wv"] == ("P(None, 'tp')" if mamba1 else "P(None, 'tp', None)")


@pytest.mark.parametrize(
    "kind, fixture", [("penalties", "hf_penalties"), ("token_lists", "hf_token_lists")]
)
@pytest.mark.parametrize("arch, mesh", PENALTY_LAYOUTS)
def test_penalties_and_token_lists_on_a_mesh_decode_as_hf(mesh_results, kind, fixture, arch, mesh):
    got = mesh_results[kind][f"{arch}|{mesh}"]
    want = [c["tokens"] for c in cases(fixture, arch)]
    assert want and got == want


@pytest.mark.parametrize("arch, mesh", SKEWED)
def test_skewed_routing_drops_nothing(mesh_results, arch, mesh):
    res = mesh_results["skewed"][f"{arch}|{mesh}"]
    single, sharded = res["single"], res["sharded"]
    assert sharded["tokens"] == single["tokens"]
    assert _max_diff(sharded["logprobs"], single["logprobs"]) < TOL
    assert sharded["new_compiles"] == 0  # same shapes: the compiled steps were reused
    # Every token (prompt tokens, then one per decode step) sent a copy to experts 0 and 1.
    num_tokens = sharded["num_prompt_tokens"] + len(single["tokens"]) * (MAX_TOKENS - 1)
    load = np.asarray(sharded["expert_load"])
    assert load.shape[0] >= 1
    assert (load[:, :2] == num_tokens).all() and (load[:, 2:] == 0).all()
    assert sharded["expert_load"] == single["expert_load"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_form_one_ep4_mesh(tmp_path, mesh_results):
    addr = f"127.0.0.1:{_free_port()}"
    outs = [tmp_path / f"proc{i}.json" for i in range(2)]
    logs = [tmp_path / f"proc{i}.log" for i in range(2)]
    procs = []
    try:
        for i in range(2):
            with open(logs[i], "w") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "tests.sharding_worker", "two_process"]
                        + [str(outs[i]), addr, "2", str(i)],
                        cwd=ROOT,
                        env=_env(2),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        # One failing process would leave the other waiting for its peer: stop at the first
        # failure instead of at the timeout.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
        for i, p in enumerate(procs):
            assert p.poll() == 0, f"process {i}: {p.poll()}\n{logs[i].read_text()[-4000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    results = [json.loads(o.read_text()) for o in outs]
    single = mesh_results["single"]["mixtral"]  # one process, one device, same prompts
    for i, res in enumerate(results):
        assert (res["process_index"], res["process_count"]) == (i, 2)
        assert (res["device_count"], res["local_device_count"]) == (4, 2)
        assert res["tokens"] == single["tokens"] == _reference("mixtral")["greedy_tokens"]
        assert _max_diff(res["logprobs"], single["logprobs"]) < TOL
        assert res["expert_load"] == single["expert_load"]
        # Prompts prefilled by a producer on the 2-process mesh, decoded by a consumer on it.
        moved = res["kv_transfer"]
        assert moved["tokens"] == single["tokens"]
        assert _max_diff(moved["logprobs"], single["logprobs"]) < TOL
        prompts = _reference("mixtral")["prompts"]
        assert moved["num_loaded_kv_tokens"] == sum(len(p) - 1 for p in prompts)
        assert moved["saved"] == (len(prompts) if i == 0 else 0)  # process 0 writes
    assert len(list((tmp_path / "kv_store").glob("*.safetensors"))) == len(prompts)
    # EPLB over the two processes: the same tokens, the same placements on both.
    balanced = [res["eplb"] for res in results]
    assert balanced[0]["tokens"] == single["tokens"] == balanced[1]["tokens"]
    assert balanced[0]["num_rebalances"] >= 4
    assert balanced[0]["placement"] == balanced[1]["placement"] != balanced[0]["first_placement"]


def test_batch_invariant_output_is_bitwise_equal_across_ep_layouts(mesh_results):
    runs = mesh_results["invariant"]
    assert sorted(runs) == ["ep=1", "ep=2", "ep=4"]
    assert runs["ep=1"]["tokens"] == _reference("deepseek_v3")["greedy_tokens"]
    for mesh in ("ep=2", "ep=4"):
        assert runs[mesh]["tokens"] == runs["ep=1"]["tokens"]
        assert runs[mesh]["bits"] == runs["ep=1"]["bits"], mesh


def test_fp8_kv_pages_on_a_mesh_match_hf_with_an_fp8_cache(mesh_results):
    """kv_cache_dtype="fp8" with KV heads split over tp: HF's fp8-cache tokens and logprobs."""
    got = mesh_results["fp8"]
    ref = json.loads((FIXTURES / FP8_LAYOUT[0] / "reference_fp8_kv.json").read_text())
    assert got["data_spec"] == "P(None, None, 'tp', None)"
    assert got["scale_spec"] == "P(None, None, 'tp')"
    assert got["tokens"] == ref["greedy_tokens"]
    assert _max_diff(got["logprobs"], ref["logprobs"]) < TOL


def test_fp8_weights_on_a_mesh_decode_as_transformers(mesh_results):
    """quantization="fp8" with experts over ep and heads over tp: transformers' greedy tokens
    and logprobs on the fp8 checkpoint, the scales split with their experts."""
    got = mesh_results["fp8_weights"]
    ref = _reference(FP8_WEIGHTS_LAYOUT[0])
    assert got["specs"] == {
        "w_gate.data": "P('ep', None, 'tp')",
        "w_gate.scale": "P('ep', None, None)",
        "wq_b.data": "P(None, 'tp', None)",
        "data_dtype": "float8_e4m3fn",
    }
    n = len(ref["greedy_tokens"][0])
    assert [t[:n] for t in got["tokens"]] == ref["greedy_tokens"]
    assert _max_diff([lp[:n] for lp in got["logprobs"]], ref["logprobs"]) < TOL


@pytest.mark.parametrize("layouts", KV_TRANSFER_LAYOUTS, ids="|".join)
def test_kv_stored_from_one_mesh_decodes_on_another_as_hf(mesh_results, layouts):
    """A producer's prompts (pages split one way) decoded by a consumer (split another way,
    or on one device) from the stored rows: the HF fixture's tokens and logprobs."""
    got = mesh_results["kv_transfer"]["|".join(layouts)]
    ref = _reference(layouts[0])
    assert got["num_loaded_kv_tokens"] == sum(len(p) - 1 for p in ref["prompts"])
    assert got["tokens"] == [t[:MAX_TOKENS] for t in ref["greedy_tokens"]]
    assert _max_diff(got["logprobs"], [lp[:MAX_TOKENS] for lp in ref["logprobs"]]) < TOL


def test_pages_back_from_host_memory_on_a_mesh_decode_as_hf(mesh_results):
    """KV offloading on a tp=2,ep=2 mesh: the prompts' pages, evicted to the host tier and
    copied back in (three of them), give the HF fixture's tokens and logprobs."""
    got = mesh_results["offload"]
    ref = _reference("deepseek_v3")
    assert got["loaded_pages"] == 3
    assert got["tokens"] == [t[:MAX_TOKENS] for t in ref["greedy_tokens"]]
    assert _max_diff(got["logprobs"], [lp[:MAX_TOKENS] for lp in ref["logprobs"]]) < TOL


def test_load_weights_on_a_mesh_places_them_as_the_served_ones(mesh_results):
    """LLM.load_weights on a tp=2,ep=2 mesh: other weights (a host tree) decode as one device
    given them does, split as before; the fixture's folder then gives the HF tokens, and
    again after sleep / wake_up (each device's shards to the host and back)."""
    got = mesh_results["load_weights"]
    ref = _reference(LOAD_WEIGHTS_LAYOUT[0])
    assert got["same_specs"]
    assert got["other"]["tokens"] == got["single_other"]["tokens"]
    assert _max_diff(got["other"]["logprobs"], got["single_other"]["logprobs"]) < TOL
    assert got["other"]["tokens"] != [t[:MAX_TOKENS] for t in ref["greedy_tokens"]]
    assert got["fixture"]["tokens"] == [t[:MAX_TOKENS] for t in ref["greedy_tokens"]]
    assert _max_diff(got["fixture"]["logprobs"], [lp[:MAX_TOKENS] for lp in ref["logprobs"]]) < TOL
    # After sleep and wake_up: the same answers, bitwise, from the compiled steps.
    after = got["after_sleep"]
    assert (after["tokens"], after["logprobs"]) == (
        got["fixture"]["tokens"],
        got["fixture"]["logprobs"],
    )
    assert after["new_compiles"] == 0


def test_lora_adapters_on_a_mesh_decode_as_peft(mesh_results):
    """Two PEFT adapters and the base model in one step with heads split over tp and tokens
    over dp: transformers + peft's tokens and logprobs (tests/fixtures/lora)."""
    got = mesh_results["lora"]
    ref = json.loads((FIXTURES / "lora" / "reference.json").read_text())["llama"]["adapters"]
    for i, name in enumerate(got["names"]):
        assert got["tokens"][i] == ref[name]["greedy_tokens"][i % 3], (name, i)
        np.testing.assert_allclose(got["logprobs"][i], ref[name]["logprobs"][i % 3], atol=TOL)


def test_mtp_drafts_on_a_mesh_are_transformers(mesh_results):
    got = mesh_results["mtp"]
    seen = {
        rid: {int(n): (tuple(d), lp) for n, (d, lp) in by_count.items()}
        for rid, by_count in got["seen"].items()
    }
    assert _check_drafts(MTP_REF["cases"], got["tokens"], seen) == 0
