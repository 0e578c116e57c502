"""The absl entry points run end to end on tiny presets (each in its own process, as users
run them: absl flags are process-global)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent


def _process(module: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def _run(module: str, *flags: str) -> str:
    proc = _process(module, *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_generate_prints_tokens_and_throughput():
    out = _run("scripts.generate", "--model=tiny-qwen3", "--num_prompts=3", "--max_tokens=5")
    assert out.count("(length)") == 3
    assert [line.split("]")[0] for line in out.splitlines() if " -> " in line] == [
        "[0",
        "[1",
        "[2",
    ]
    assert "tok/s" in out


def test_generate_from_text_with_a_tokenizer():
    # Sampled: equal prompts get seeds --seed + i, so their samples differ.
    out = _run(
        "scripts.generate",
        f"--model={ROOT}/tests/fixtures/llama",
        "--prompt=the cat sat on the",
        "--prompt=the cat sat on the",
        "--max_tokens=8",
        "--temperature=1.0",
    )
    replies = [line.split(" -> ")[1] for line in out.splitlines() if " -> " in line]
    assert len(replies) == 2 and all(r.endswith("(length)") for r in replies), out
    assert replies[0] != replies[1], out


@pytest.mark.parametrize(
    "module, flags, expect",
    [
        (
            "scripts.bench_throughput",
            [
                "--models=tiny-llama",
                "--batch_sizes=1,2",
                "--decode_steps=3",
                "--copy_mb=16",
                "--kv_cache_dtype=fp8",
            ],
            "| tiny-llama | 2 |",
        ),
        (
            "scripts.bench_determinism",
            ["--model=tiny-llama", "--num_requests=4", "--max_tokens=3", "--repeats=1"],
            "batch-invariant / default throughput",
        ),
    ],
)
def test_benchmarks_run_small(module, flags, expect):
    assert expect in _run(module, *flags)


@pytest.mark.parametrize(
    "module, flags, expect",
    [
        (
            "scripts.bench_throughput",
            ["--models=no-such-preset", "--decode_steps=1"],
            "--decode_steps=1: must be >= 2",
        ),
        (
            "scripts.bench_determinism",
            ["--model=no-such-preset", "--max_tokens=0"],
            "--max_tokens=0: must be >= 1",
        ),
        ("scripts.generate", ["--model=no-such-preset", "--prompt_len=0"], "--prompt_len=0"),
        ("scripts.generate", ["--model=/no/such/dir"], "model='/no/such/dir': no such directory"),
        (
            "scripts.bench_long_context",
            ["--part=itl", "--itl_model=no-such-preset", "--stream_tokens=3"],
            "stream_tokens=3: must be > 4",  # a stream that stops first hung the warm-up
        ),
        # Output paths are checked before the run, not when the results are written.
        (
            "scripts.bench_throughput",
            ["--models=no-such-preset", "--json_out=/no/such/dir/x.json"],
            "json_out='/no/such/dir/x.json': its folder does not exist",
        ),
        (
            "scripts.determinism_check",
            ["--model=no-such-preset", "--golden=/no/such/dir/g.json"],
            "no folder '/no/such/dir' to write it",
        ),
        ("scripts.bench_kernels", ["--smoke", "--out=/no/such/dir/x.json"], "--out="),
        ("scripts.bench_kernels", ["--smoke", "--num_warps=3"], "KernelConfig.num_warps=3"),
    ],
)
def test_benchmarks_reject_bad_flags_before_building_a_model(module, flags, expect):
    # A preset that does not exist: the flag error must come before any model is looked up.
    proc = _process(module, *flags)
    assert proc.returncode != 0 and expect in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]  # one line, for a person
