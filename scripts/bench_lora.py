"""Multi-LoRA: what adapters cost a decode step.

  python -m scripts.bench_lora                  # the figures in docs/benchmarks.md
  python -m scripts.bench_lora --model=tiny-llama --n=2 --max_tokens=4 --rank=4

`n` greedy requests of `max_tokens` tokens after a short prompt, timed (after a first run
compiled the steps) on: an engine without LoRA; an engine with `enable_lora` serving the
same requests without adapters, all with one adapter, and spread over `max_loras`
adapters (request i takes adapter i % max_loras). The adapters are random PEFT folders of
rank `rank` on every projection, written to a temporary directory.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np
from absl import app, flags
from safetensors.numpy import save_file

from engine import LLM, LoRARequest, SamplingParams
from models import lora as lora_model
from models.load import model_config
from scripts.flag_checks import check_count

_MODEL = flags.DEFINE_string("model", "bench-llama-20m", "Preset name, HF dir or orbax dir.")
_N = flags.DEFINE_integer("n", 16, "Requests (decoding together).")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 16, "Prompt tokens.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 64, "New tokens per request.")
_RANK = flags.DEFINE_integer("rank", 16, "Adapter rank (also max_lora_rank).")
_MAX_LORAS = flags.DEFINE_integer("max_loras", 4, "Adapters, all running at once.")

_HF_MODULE = {v: k for k, v in lora_model.MODULES.items()}


def write_adapter(path: str, cfg, rank: int, seed: int) -> None:
    """A random PEFT LoRA folder for every projection `cfg` has."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for (i, group, leaf), (k, n) in lora_model.targets(cfg).items():
        pre = f"base_model.model.model.layers.{i}.{_HF_MODULE[(group, leaf)]}"
        tensors[f"{pre}.lora_A.weight"] = rng.normal(0, 0.02, (rank, k)).astype(np.float32)
        tensors[f"{pre}.lora_B.weight"] = rng.normal(0, 0.02, (n, rank)).astype(np.float32)
    os.makedirs(path)
    save_file(tensors, os.path.join(path, lora_model.WEIGHTS_FILE))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none"}
    with open(os.path.join(path, lora_model.CONFIG_FILE), "w") as f:
        json.dump(config, f)


def timed(llm: LLM, prompts, loras) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value, ignore_eos=True)
    llm.generate(prompts, params, loras)  # compiles
    start = time.perf_counter()
    llm.generate(prompts, params, loras)
    return time.perf_counter() - start


def main(argv):
    del argv
    try:
        check_count("--n", _N.value, low=1, high=256)
        check_count("--prompt_len", _PROMPT_LEN.value, low=1, high=1 << 16)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        check_count("--rank", _RANK.value, low=1, high=1024)
        check_count("--max_loras", _MAX_LORAS.value, low=1, high=64)
        cfg = model_config(_MODEL.value)
    except ValueError as e:
        sys.exit(f"bench_lora: {e}")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, cfg.vocab_size, _PROMPT_LEN.value).tolist() for _ in range(_N.value)]
    engine = dict(max_num_seqs=_N.value, max_model_len=_PROMPT_LEN.value + _MAX_TOKENS.value + 8)
    rows = [("no LoRA engine", timed(LLM(_MODEL.value, **engine), prompts, None))]
    with tempfile.TemporaryDirectory() as tmp:
        adapters = []
        for i in range(_MAX_LORAS.value):
            write_adapter(os.path.join(tmp, f"a{i}"), cfg, _RANK.value, i)
            adapters.append(LoRARequest(f"a{i}", i + 1, os.path.join(tmp, f"a{i}")))
        llm = LLM(
            _MODEL.value,
            enable_lora=True,
            max_loras=_MAX_LORAS.value,
            max_lora_rank=_RANK.value,
            **engine,
        )
        rows.append(("LoRA engine, no adapter", timed(llm, prompts, None)))
        rows.append(("LoRA engine, 1 adapter", timed(llm, prompts, adapters[0])))
        spread = [adapters[i % len(adapters)] for i in range(_N.value)]
        rows.append((f"LoRA engine, {len(adapters)} adapters", timed(llm, prompts, spread)))
    tokens = _N.value * _MAX_TOKENS.value
    print(
        f"{_MODEL.value}: {_N.value} requests x {_MAX_TOKENS.value} tokens, rank {_RANK.value}, "
        f"max_loras {_MAX_LORAS.value}"
    )
    print("| run | seconds | tok/s | vs no LoRA |")
    print("|---|---|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {tokens / seconds:.0f} | {rows[0][1] / seconds:.2f}x |")


if __name__ == "__main__":
    app.run(main)
