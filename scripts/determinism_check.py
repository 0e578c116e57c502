"""Determinism regression check: are the probes' outputs bitwise identical in any traffic?

  python -m scripts.determinism_check --model=tiny-deepseek-v3 --trials=6
  python -m scripts.determinism_check --model=/ckpt --golden=golden.json   # write, then check

Each trial hides the probe prompts at random positions among random co-requests on an engine
with a random prefill chunk budget. Prints the unique outputs per probe (1 = deterministic)
and the first differing position otherwise. With --golden, writes the file when it does not
exist and otherwise checks against it, naming the first drifting probe and position; exits
non-zero on any difference. The file records the model and the settings the outputs depend on
(max_tokens, batch_invariant, seed, num_probes, probe_len); a run with others is refused
before any engine is built, not reported as drift.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from engine import determinism as det
from scripts.flag_checks import MAX_PROMPTS, check_count, check_output_file

_MODEL = flags.DEFINE_string("model", "tiny-deepseek-v3", "Preset, HF dir or orbax dir.")
_NUM_PROBES = flags.DEFINE_integer("num_probes", 3, "Probe prompts (random token ids).")
_PROBE_LEN = flags.DEFINE_integer("probe_len", 24, "Longest probe prompt.")
_TRIALS = flags.DEFINE_integer("trials", 6, "Trials (engines with random budgets).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "Tokens generated per probe.")
_BUDGETS = flags.DEFINE_list("budgets", ["16", "80", "512"], "Chunk budgets to draw from.")
_NUM_PAGES = flags.DEFINE_integer("num_pages", 24, "KV pages (small: forces preemption).")
_MAX_MODEL_LEN = flags.DEFINE_integer("max_model_len", 256, "Longest sequence.")
_BATCH_INVARIANT = flags.DEFINE_bool("batch_invariant", True, "Engine's deterministic mode.")
_PREFIX_CACHING = flags.DEFINE_bool(
    "enable_prefix_caching",
    False,
    "Engines with prefix caching: a probe's later trials on an engine take its cached pages.",
)
_GOLDEN = flags.DEFINE_string("golden", None, "Golden file to write (absent) or check.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of probes and traffic.")


def parse_budgets(values: list[str]) -> tuple[int, ...]:
    try:
        return tuple(int(b) for b in values)
    except ValueError:
        raise ValueError(f"budgets={values}: expected integers, e.g. 16,80,512") from None


def main(argv):
    del argv
    try:
        failed = _check()
    except (ValueError, OSError) as e:
        sys.exit(f"determinism_check: {e}")
    if failed:
        sys.exit(1)


def _check() -> bool:
    """Run the trials (and the golden write / check); True when anything differed."""
    budgets = parse_budgets(_BUDGETS.value)
    det.check_trial_args(
        _NUM_PROBES.value,
        _PROBE_LEN.value,
        _TRIALS.value,
        _MAX_TOKENS.value,
        budgets,
        _MAX_MODEL_LEN.value,
        _SEED.value,
    )
    # What the probes' outputs depend on besides the model; a golden file pins them.
    settings = {
        "max_tokens": _MAX_TOKENS.value,
        "batch_invariant": _BATCH_INVARIANT.value,
        "seed": _SEED.value,
        "num_probes": _NUM_PROBES.value,
        "probe_len": _PROBE_LEN.value,
    }
    check_count("--num_probes", _NUM_PROBES.value, high=MAX_PROMPTS)
    if _GOLDEN.value is not None and os.path.isdir(_GOLDEN.value):
        raise ValueError(f"golden={_GOLDEN.value!r}: is a directory; give a file path")
    check = bool(_GOLDEN.value) and os.path.exists(_GOLDEN.value)
    if _GOLDEN.value and not check:  # to be written after the trials: its folder must exist
        folder = os.path.dirname(os.path.abspath(_GOLDEN.value))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"golden={_GOLDEN.value!r}: no folder {folder!r} to write it")
        check_output_file("--golden", _GOLDEN.value)  # and be writable
    if check:
        det.check_golden_settings(_GOLDEN.value, _MODEL.value, settings)
    engines = {}

    def make_llm(budget: int) -> LLM:
        if budget not in engines:
            engines[budget] = LLM(
                model=_MODEL.value,
                batch_invariant=_BATCH_INVARIANT.value,
                max_num_batched_tokens=budget,
                max_num_seqs=min(budget, 32),
                num_pages=_NUM_PAGES.value,
                max_model_len=_MAX_MODEL_LEN.value,
                enable_prefix_caching=_PREFIX_CACHING.value,
            )
        return engines[budget]

    vocab = make_llm(budgets[0]).config.vocab_size
    rng = np.random.default_rng(_SEED.value)
    probes = [
        rng.integers(3, vocab, int(rng.integers(1, _PROBE_LEN.value + 1))).tolist()
        for _ in range(_NUM_PROBES.value)
    ]
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    report = det.run_trials(
        make_llm, probes, params, _TRIALS.value, budgets, vocab, seed=_SEED.value
    )
    failed = False
    for i, (u, pos) in enumerate(
        zip(report.unique_outputs, report.first_diff_position, strict=True)
    ):
        where = "" if pos is None else f", first difference at output position {pos}"
        print(f"probe {i}: {u} unique output(s) over {_TRIALS.value} trials{where}")
        failed |= u > 1
    print(f"budgets used: {report.budgets}")
    if _PREFIX_CACHING.value:
        hits = sum(llm.stats()["prefix_cache_hits"] for llm in engines.values())
        print(f"prefix cache hits: {hits} tokens")
    if check:
        bad = det.check_golden(_GOLDEN.value, probes, report.outputs)
        for i, pos in bad:
            print(
                f"golden mismatch: probe {i} differs from {_GOLDEN.value} first at output "
                f"position {pos}"
            )
        print("golden check: " + ("FAILED" if bad else "passed"))
        failed |= bool(bad)
    elif _GOLDEN.value:
        det.write_golden(_GOLDEN.value, _MODEL.value, probes, report.outputs, settings)
        print(f"golden written: {_GOLDEN.value}")
    return failed


if __name__ == "__main__":
    app.run(main)
