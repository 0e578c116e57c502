"""Determinism regression checks: hide probe prompts among random traffic, compare outputs
bitwise, and pin them in a golden file so any drift of model or engine is caught."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.sampling_params import RequestOutput, SamplingParams

MAX_CO_LEN = 64  # co-requests' prompts are shorter than this


def output_bits(out: RequestOutput) -> tuple[list[int], list[int]]:
    """(token ids, float32 bit patterns of the logprobs): what "bitwise identical" compares."""
    return list(out.token_ids), np.asarray(out.logprobs, np.float32).view(np.uint32).tolist()


def fingerprint(tokens: list[int], bits: list[int]) -> str:
    """sha256 over the token ids and logprob bits of one output."""
    h = hashlib.sha256()
    h.update(np.asarray(tokens, np.int64).tobytes())
    h.update(np.asarray(bits, np.uint32).tobytes())
    return h.hexdigest()


def first_difference(a: tuple[list, list], b: tuple[list, list]) -> int | None:
    """First output position where token or logprob bits differ (None if identical)."""
    (ta, ba), (tb, bb) = a, b
    for i in range(max(len(ta), len(tb))):
        if i >= len(ta) or i >= len(tb) or ta[i] != tb[i] or ba[i] != bb[i]:
            return i
    return None


@dataclass
class TrialReport:
    """Per probe prompt: how many distinct outputs the trials produced, and where they split."""

    unique_outputs: list[int]  # 1 = deterministic
    first_diff_position: list[int | None]  # vs trial 0, the earliest over all trials
    outputs: list[tuple[list[int], list[int]]]  # trial 0's (tokens, logprob bits) per probe
    budgets: list[int]  # chunk budget of each trial


def check_trial_args(
    num_probes: int,
    probe_len: int,
    trials: int,
    max_tokens: int,
    budgets: tuple[int, ...],
    max_model_len: int,
    seed: int = 0,
    max_co_len: int = MAX_CO_LEN,
) -> None:
    """ValueError naming the first argument a check cannot run with, before any engine exists
    (an empty probe set or max_tokens=0 would make a check that cannot fail)."""
    for name, value in (
        ("num_probes", num_probes),
        ("probe_len", probe_len),
        ("trials", trials),
        ("max_tokens", max_tokens),
        ("max_model_len", max_model_len),
    ):
        if value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")
    if not budgets or any(b < 1 for b in budgets):
        raise ValueError(f"budgets={list(budgets)}: must be one or more chunk budgets >= 1")
    if seed < 0:
        raise ValueError(f"seed={seed}: must be >= 0")
    # Co-requests have up to max_co_len - 1 prompt tokens; the engine refuses longer prompts.
    longest = max(probe_len, max_co_len - 1)
    if max_model_len < longest:
        raise ValueError(f"max_model_len={max_model_len}: prompts here run up to {longest} tokens")
    # A reply stops at max_model_len: the check would compare fewer tokens than asked for.
    if probe_len + max_tokens > max_model_len:
        raise ValueError(
            f"max_tokens={max_tokens}: probe_len={probe_len} + max_tokens exceeds "
            f"max_model_len={max_model_len} (the replies would be cut short)"
        )


def run_trials(
    make_llm: Callable[[int], object],
    probes: list[list[int]],
    params: SamplingParams,
    trials: int,
    budgets: tuple[int, ...],
    vocab_size: int,
    seed: int = 0,
    max_co_requests: int = 24,
    max_co_len: int = MAX_CO_LEN,
) -> TrialReport:
    """Run `trials` trials; each hides the probes at random positions among random co-requests
    on an engine with a random chunk budget (`make_llm(budget)`), and compares the probes."""
    if trials < 1:
        raise ValueError(f"trials={trials}: must be >= 1")
    if not budgets:
        raise ValueError("budgets: must name one or more chunk budgets")
    rng = np.random.default_rng(seed)
    per_probe: list[list[tuple[list, list]]] = [[] for _ in probes]
    used = []
    for _ in range(trials):
        budget = int(rng.choice(budgets))
        used.append(budget)
        llm = make_llm(budget)
        n_co = int(rng.integers(0, max_co_requests + 1))
        prompts = [
            rng.integers(3, vocab_size, int(rng.integers(1, max_co_len))).tolist()
            for _ in range(n_co)
        ]
        co_params = [
            SamplingParams(max_tokens=int(rng.integers(1, 16)), ignore_eos=True)
            for _ in range(n_co)
        ]
        slots = []
        for probe in probes:
            at = int(rng.integers(0, len(prompts) + 1))
            slots = [s + (s >= at) for s in slots] + [at]
            prompts.insert(at, probe)
            co_params.insert(at, params)
        outs = llm.generate(prompts, co_params)
        for i, at in enumerate(slots):
            per_probe[i].append(output_bits(outs[at]))
    unique, first = [], []
    for runs in per_probe:
        unique.append(len({fingerprint(*r) for r in runs}))
        diffs = [d for r in runs[1:] if (d := first_difference(runs[0], r)) is not None]
        first.append(min(diffs) if diffs else None)
    return TrialReport(unique, first, [runs[0] for runs in per_probe], used)


def write_golden(
    path: str, model: str, probes: list[list[int]], outputs: list, settings: dict | None = None
) -> None:
    """Pin each probe's output: hash plus the raw tokens and logprob bits (to locate drift),
    with the model and the `settings` (JSON values) a later check must run with."""
    entries = [
        dict(prompt=p, sha256=fingerprint(t, b), token_ids=t, logprob_bits=b)
        for p, (t, b) in zip(probes, outputs, strict=True)
    ]
    with open(path, "w") as f:
        json.dump(dict(model=model, settings=settings or {}, probes=entries), f)


def _read_golden(path: str) -> dict:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"golden={path!r}: no such file")
    try:
        with open(path) as f:
            golden = json.load(f)
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"golden={path!r}: not JSON ({e})") from None
    if not isinstance(golden, dict) or not {"model", "probes"} <= golden.keys():
        raise ValueError(f"golden={path!r}: not a golden file (needs 'model' and 'probes')")
    return golden


def check_golden_settings(path: str, model: str, settings: dict) -> None:
    """ValueError naming the first of model / `settings` that differs from what the golden file
    recorded: its outputs are not comparable then. Files written before settings were recorded
    only have the model checked."""
    golden = _read_golden(path)
    recorded = {"model": os.path.normpath(golden["model"]), **golden.get("settings", {})}
    given = {"model": os.path.normpath(model), **settings}
    for name, want in recorded.items():
        if name in given and given[name] != want:
            raise ValueError(
                f"golden={path!r}: written with {name}={want!r}, this run has {name}="
                f"{given[name]!r}; write a new golden file to pin other settings"
            )


def check_golden(path: str, probes: list[list[int]], outputs: list) -> list[tuple[int, int]]:
    """[(probe index, first differing position)] against the golden file; [] when all match."""
    golden = _read_golden(path)["probes"]
    if [g["prompt"] for g in golden] != probes:
        raise ValueError(f"golden={path!r}: its probe prompts differ from this run's")
    mismatches = []
    for i, (g, out) in enumerate(zip(golden, outputs, strict=True)):
        if g["sha256"] != fingerprint(*out):
            pos = first_difference((g["token_ids"], g["logprob_bits"]), out)
            mismatches.append((i, 0 if pos is None else pos))
    return mismatches
