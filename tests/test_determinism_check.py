"""scripts/determinism_check.py end to end: deterministic trials, golden write / check / drift."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

from safetensors.numpy import load_file, save_file

ROOT = pathlib.Path(__file__).parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "qwen3"
ARGS = ["--num_probes=2", "--trials=3", "--max_tokens=8", "--budgets=16,80"]


def _run(model, golden) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "scripts.determinism_check",
        f"--model={model}",
        f"--golden={golden}",
        *ARGS,
    ]
    return subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def test_golden_round_trip_and_drift_detection(tmp_path):
    golden = tmp_path / "golden.json"
    first = _run(FIXTURE, golden)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "1 unique output(s) over 3 trials" in first.stdout
    assert "golden written" in first.stdout and golden.exists()

    again = _run(FIXTURE, golden)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "golden check: passed" in again.stdout

    # One weight nudged: the check must fail and say where.
    perturbed = tmp_path / "perturbed"
    shutil.copytree(FIXTURE, perturbed)
    tensors = load_file(perturbed / "model.safetensors")
    tensors["model.layers.1.mlp.down_proj.weight"] = (
        tensors["model.layers.1.mlp.down_proj.weight"] * 1.01
    )
    save_file(tensors, perturbed / "model.safetensors", metadata={"format": "pt"})
    drift = _run(perturbed, golden)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "golden mismatch: probe 0 differs" in drift.stdout
    assert "first at output position 0" in drift.stdout
    assert "golden check: FAILED" in drift.stdout
