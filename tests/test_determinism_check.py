"""scripts/determinism_check.py end to end: deterministic trials, golden write / check / drift."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from safetensors.numpy import load_file, save_file

from engine import determinism as det

ROOT = pathlib.Path(__file__).parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "qwen3"
ARGS = ["--num_probes=2", "--trials=3", "--max_tokens=8", "--budgets=16,80"]


def _run(model, golden, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "scripts.determinism_check",
        f"--model={model}",
        f"--golden={golden}",
        *ARGS,
        *extra,
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
    model = tmp_path / "model"
    shutil.copytree(FIXTURE, model)
    golden = tmp_path / "golden.json"
    first = _run(model, golden)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "1 unique output(s) over 3 trials" in first.stdout
    assert "golden written" in first.stdout and golden.exists()

    # With prefix caching: a probe's later trials on an engine start on its cached pages.
    again = _run(model, golden, "--enable_prefix_caching")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "golden check: passed" in again.stdout
    hits = int(again.stdout.split("prefix cache hits: ")[1].split()[0])
    assert hits > 0

    # Another model or setting is refused up front (no engine built), not reported as drift.
    other = _run(model, golden, "--max_tokens=4")
    assert other.returncode != 0 and "golden check" not in other.stdout
    assert "written with max_tokens=8, this run has max_tokens=4" in other.stderr, other.stderr
    other = _run(FIXTURE, golden)
    assert other.returncode != 0 and f"written with model={str(model)!r}" in other.stderr

    # One weight nudged in place: the check must fail and say where.
    tensors = load_file(model / "model.safetensors")
    tensors["model.layers.1.mlp.down_proj.weight"] = (
        tensors["model.layers.1.mlp.down_proj.weight"] * 1.01
    )
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    drift = _run(model, golden)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "golden mismatch: probe 0 differs" in drift.stdout
    assert "first at output position 0" in drift.stdout
    assert "golden check: FAILED" in drift.stdout


def test_flags_are_checked_before_an_engine_is_built(tmp_path):
    good = dict(num_probes=1, probe_len=8, trials=1, max_tokens=1, budgets=(16,), max_model_len=64)
    det.check_trial_args(**good)
    for field, bad in [
        ("num_probes", 0),
        ("probe_len", 0),
        ("trials", 0),
        ("max_tokens", 0),
        ("budgets", ()),
        ("budgets", (16, 0)),
        ("max_model_len", 32),
        ("seed", -1),
        ("max_tokens", 57),  # probe_len 8 + 57 > max_model_len 64: replies would be cut
    ]:
        with pytest.raises(ValueError, match=f"{field}="):
            det.check_trial_args(**{**good, field: bad})
    with pytest.raises(ValueError, match="trials=0"):
        det.run_trials(None, [[3]], None, 0, (16,), 512)
    # The script says so with no model loaded: a missing model directory would be reported
    # first otherwise.
    run = _run(tmp_path / "no_model", tmp_path / "golden.json", "--budgets=")
    assert run.returncode == 1 and "determinism_check: budgets=[]" in run.stderr, run.stderr


def test_golden_files_without_settings_still_check(tmp_path):
    # Files written before settings were recorded: the model is still compared, then outputs.
    old = tmp_path / "old.json"
    out = ([5, 6], [1, 2])
    entry = dict(prompt=[3, 4], sha256=det.fingerprint(*out), token_ids=[5, 6], logprob_bits=[1, 2])
    old.write_text(json.dumps(dict(model="./tiny-llama", probes=[entry])))
    det.check_golden_settings(str(old), "tiny-llama", {"max_tokens": 2, "seed": 0})
    with pytest.raises(ValueError, match="written with model='tiny-llama'"):
        det.check_golden_settings(str(old), "tiny-qwen3", {"max_tokens": 2})
    assert det.check_golden(str(old), [[3, 4]], [out]) == []
    assert det.check_golden(str(old), [[3, 4]], [([5, 7], [1, 2])]) == [(0, 1)]
    old.write_text("{not json")
    with pytest.raises(ValueError, match="golden=.*not JSON"):
        det.check_golden_settings(str(old), "tiny-llama", {})
