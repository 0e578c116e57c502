"""scripts/bench_kernels.py end to end in its --smoke mode (interpret mode off GPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax
import pytest

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _run_bench(tmp_path, *extra) -> dict:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.bench_kernels", f"--out={out}", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "target gqa_decode_frac_of_copy>=0.80" in proc.stdout
    result = json.loads(out.read_text())
    # Each row is also printed as it is measured (what a cut-off run leaves behind).
    logged = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line[:4] == "row "]
    assert logged == result["rows"]
    return result


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> dict:
    """One smoke run of the script for both tests below (a run costs ~15 s of Python start
    and interpret-mode compiles): every table at batches 1 and 2, and the sweep."""
    return _run_bench(tmp_path_factory.mktemp("bench"), "--smoke", "--sweep", "--batches=1,2")


def test_bench_kernels_smoke_writes_every_row(smoke_run):
    result = dict(smoke_run, rows=[r for r in smoke_run["rows"] if r["kind"] != "sweep"])
    assert {r.get("batch") for r in result["rows"] if r["kind"] == "decode"} == {1, 2}
    result["rows"] = [r for r in result["rows"] if r.get("batch", 2) == 2]  # (prefill: none)
    kinds = {(r["kind"], r.get("attn"), r["impl"], r.get("kv")) for r in result["rows"]}
    assert kinds == {
        ("copy", None, "xla", None),
        ("matmul", None, "xla", None),
        ("decode", "gqa", "pallas", "bf16"),
        ("decode", "gqa", "bundled", "bf16"),
        ("decode", "mla", "pallas", "bf16"),
        ("decode", "mla", "mosaic", "bf16"),
        ("decode", "gqa", "pallas", "fp8"),
        ("decode", "mla", "pallas", "fp8"),
        ("prefill", "gqa", "pallas", None),
        ("prefill", "gqa", "mosaic", None),
    }
    fp8 = next(r for r in result["rows"] if r.get("kv") == "fp8" and r["attn"] == "gqa")
    bf16 = next(r for r in result["rows"] if r.get("kv") == "bf16" and r["attn"] == "gqa")
    # 1-byte elements plus a 4-byte scale per head_dim-wide row, against 2-byte elements
    d = result["suite"]["gqa"][2]
    assert fp8["bytes"] * 2 * d == bf16["bytes"] * (d + 4)
    assert all(r["seconds"] > 0 for r in result["rows"])
    # Same decode, two kernels: both right (bf16 outputs of O(1) values).
    others = [r for r in result["rows"] if r["impl"] in ("bundled", "mosaic")]
    assert len(others) == 3  # bundled GQA decode, Mosaic MLA decode, Mosaic GQA prefill
    for other in others:
        assert other["max_abs_diff_vs_pallas"] < 5e-2, other
    assert set(result["targets"]) == {
        "gqa_decode_frac_of_copy>=0.80",
        "mla_decode_frac_of_copy>=0.75",
        "min_speedup_vs_bundled>=1.3",
        "prefill_frac_of_matmul>=0.40",
    }


def test_bench_kernels_sweep_times_every_config_on_the_same_function(smoke_run):
    """--sweep: every tiling is timed at the target shape, the smaller batch and the
    tensor-parallel MLA heads, and every tiling computes the first one's output."""
    from pallas_kernels import benchmark as bk

    result = smoke_run
    sweep = [r for r in result["rows"] if r["kind"] == "sweep"]
    assert not [r for r in sweep if "error" in r], sweep
    decode = [r for r in sweep if "max_abs_diff_vs_first" in r]
    assert {(r["attn"], r["impl"], r["batch"], r["mla_heads"]) for r in decode} == {
        ("gqa", "pallas", 2, 4),
        ("mla", "pallas", 2, 4),
        ("mla", "mosaic", 2, 4),
        ("gqa", "pallas", 1, 4),
        ("mla", "pallas", 1, 4),
        ("mla", "mosaic", 1, 4),
        ("mla", "pallas", 2, 1),  # heads / 8
        ("mla", "mosaic", 2, 1),
    }
    # bf16 outputs of O(1) values: the tilings reorder sums only.
    assert max(r["max_abs_diff_vs_first"] for r in decode) < 5e-2
    small = [r for r in decode if r["batch"] == 1]
    triton = [r for r in small if r["impl"] == "pallas"]
    assert {r["config"]["kv_split"] for r in triton} == {32, 256, 512}  # the smoke split, then
    assert len(small) == sum(len(v) for v in bk.SMALL_SWEEP.values())  # SMALL_SWEEP's
    mosaic = [r["config"] for r in decode if r["impl"] == "mosaic" and r["batch"] == 2]
    assert len(mosaic) == len(bk.SWEEP["mosaic"]) + 1  # and at heads / 8, the default
    prefill = [r for r in sweep if "tflops" in r and r["impl"] == "pallas"]
    assert {r["config"]["block_rows"] for r in prefill} == {16, 128}  # the smoke-valid ones
    # The base-2, mask-skipping softmax is timed beside the default at each shape.
    for rows in ([r for r in decode if r["impl"] == "pallas" and r["batch"] == 2], prefill):
        assert {r["config"]["fast_softmax"] for r in rows} == {False, True}
    # The engine's max_model_len-wide page table: per-tile splits against fixed ones.
    wide = [r for r in decode if r.get("table")]
    assert {(r["attn"], r["config"]["splits_follow_length"]) for r in wide} == {
        ("gqa", True),
        ("gqa", False),
        ("mla", True),
        ("mla", False),
    }
    assert {(r["batch"], r["table"]) for r in wide} == {(2, bk.SMOKE_SUITE.engine_table)}
    table = bk.format_table(result)  # the printed rows tell those configs apart
    assert "fast_softmax=True" in table and "target_programs=1024" in table
    assert "splits_follow_length=False,table=256" in table
    mosaic_prefill = [r for r in sweep if "tflops" in r and r["impl"] == "mosaic"]
    assert len(mosaic_prefill) == len(bk.MOSAIC_PREFILL_SWEEP)
    assert all(r["seconds"] > 0 for r in sweep)


def test_bench_kernels_rejects_contexts_off_the_page_size(tmp_path):
    """A context that is not a whole number of pages (or --page_size=0) is refused before
    anything is timed: its page table would be too short for its kv_lens."""
    from pallas_kernels import benchmark as bk

    assert bk.check_suite(bk.SMOKE_SUITE, 16) is None
    assert "--page_size=0" in bk.check_suite(bk.SMOKE_SUITE, 0)
    no_batch = dataclasses.replace(bk.SMOKE_SUITE, batches=(0,))
    assert "--batches=[0]" in bk.check_suite(no_batch, 16)
    ok_contexts = dataclasses.replace(bk.SMOKE_SUITE, contexts=(96,))
    prefill = bk.SMOKE_SUITE.prefill_context
    assert f"contexts [{prefill}]" in bk.check_suite(ok_contexts, 48)
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.bench_kernels",
            "--smoke",
            "--contexts=100",
            f"--out={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "contexts [100]: every context must be a positive multiple of --page_size" in (
        proc.stderr
    )
    assert not out.exists() and "row " not in proc.stdout


@pytest.mark.gpu
def test_bench_kernels_full_run_on_gpu(tmp_path):
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU")
    result = _run_bench(tmp_path)
    assert all(v is not None for v in result["targets"].values()), result["targets"]


def test_gpu_check_names_tests_that_exist(tmp_path):
    """scripts/gpu_check.sh (the rationed GPU run) selects tests by node id: each of its
    pytest stages, run here with --collect-only, finds every test it names and some to run."""
    stages = "mosaic kernels engine fp8 int4"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "STAGES": stages,
            "PYTEST_ADDOPTS": "--collect-only",
            "PYTHON": sys.executable,
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    for stage in stages.split():
        assert f"=== {stage}: exit 0" in proc.stdout
        assert " collected" in (tmp_path / f"{stage}.log").read_text()


def test_bench_kernels_runs_without_the_mosaic_kernels():
    """--nomosaic gives no Mosaic configs: no Mosaic kernel is built. Interpret-mode times
    mean nothing, so the table calls every target "not measured"."""
    from engine import attention_ops
    from pallas_kernels import GQA_CONFIG, GQA_DECODE_CONFIG
    from pallas_kernels import benchmark as bk

    small = dict(block_rows=16, block_kv=16, kv_split=32)
    configs = {
        "gqa": dataclasses.replace(GQA_DECODE_CONFIG, **small),
        "gqa_prefill": dataclasses.replace(GQA_CONFIG, **small),
        "mla": dataclasses.replace(attention_ops.mla_config(decode=True), **small),
    }
    result = bk.run(
        bk.SMOKE_SUITE, configs, 16, True, bundled=False, fp8=False, prefill=False, mosaic=False
    )
    impls = {(r["kind"], r.get("attn"), r["impl"]) for r in result["rows"]}
    assert impls == {
        ("copy", None, "xla"),
        ("matmul", None, "xla"),
        ("decode", "gqa", "pallas"),
        ("decode", "mla", "pallas"),
    }
    assert all("error" not in r for r in result["rows"])
    targets = [line for line in bk.format_table(result).splitlines() if line[:7] == "target "]
    assert len(targets) == 4 and all(line.endswith("not measured") for line in targets)
