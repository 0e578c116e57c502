"""Shared pieces of the model-family tests (tests/test_<family>.py): a fixture's saved
config.json, a ModelConfig's architecture fields (those a config.json decides), the logits
at a prompt's last position."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from models.reference import cache_len, init_cache, prefill_bucket, reference_forward

FIXTURES = Path(__file__).parent / "fixtures"
# Fields a config.json does not decide the model by (its name, the dtype asked for, the
# special tokens): left out when a config is compared with a preset.
NON_ARCH = ("name", "dtype", "bos_token_id", "eos_token_ids")


def saved_config(arch: str) -> dict:
    """tests/fixtures/<arch>/config.json, as transformers saved it."""
    return json.loads((FIXTURES / arch / "config.json").read_text())


def arch_fields(cfg, skip: tuple[str, ...] = NON_ARCH) -> dict:
    """`cfg`'s fields but `skip`."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in skip}


def last_prefill_logits(cfg, params: dict, prompt: list[int]) -> np.ndarray:
    """The reference forward's logits row at `prompt`'s last position ([V] float32)."""
    bucket = prefill_bucket(len(prompt))
    ids = np.zeros(bucket, np.int32)
    ids[: len(prompt)] = prompt
    cache = init_cache(cfg, cache_len(len(prompt), bucket))
    logits, _ = reference_forward(
        params, cfg, jnp.asarray(ids), jnp.int32(0), cache, jnp.int32(len(prompt))
    )
    return np.asarray(logits[len(prompt) - 1])
