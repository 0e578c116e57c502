"""Shared pieces of the model-family tests (tests/test_<family>.py): a fixture's saved
config.json, and a ModelConfig's architecture fields (those a config.json decides)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

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
