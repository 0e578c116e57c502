"""Orbax checkpoints of the param tree, self-describing with the ModelConfig beside them.

Layout of a checkpoint directory:
  <dir>/moeserve_config.json   the ModelConfig as JSON (written last: its presence marks a
                               finished save)
  <dir>/params/                orbax StandardCheckpointer tree, laid out as models/specs.py
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import numpy as np

from configs.model_config import ModelConfig, RopeScaling
from models.specs import abstract_params

CONFIG_FILE = "moeserve_config.json"
PARAMS_DIR = "params"


def is_orbax_dir(path: str | os.PathLike) -> bool:
    """Whether `path` looks like a directory written by `save_params`."""
    return os.path.isfile(os.path.join(os.fspath(path), CONFIG_FILE))


def config_to_dict(cfg: ModelConfig) -> dict:
    """A JSON-ready dict of `cfg` (tuples become lists, rope_scaling a nested dict)."""
    return dataclasses.asdict(cfg)


def config_from_dict(d: dict) -> ModelConfig:
    """Inverse of `config_to_dict`; ValueError naming unknown or ill-typed fields."""
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"config fields {unknown}: not fields of ModelConfig")
    d = dict(d)
    try:
        if "rope_scaling" in d:
            d["rope_scaling"] = RopeScaling(**d["rope_scaling"])
        for f in dataclasses.fields(ModelConfig):  # its tuple fields, stored as lists
            if f.name in d and isinstance(f.default, tuple):
                d[f.name] = tuple(_tuples(v) for v in d[f.name])  # (not iterable: TypeError)
        return ModelConfig(**d)
    except TypeError as e:
        raise ValueError(f"config: {e}") from e


def _tuples(x: Any) -> Any:
    """JSON's lists as tuples, at every depth (load_scales: ((path), factor) pairs)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def _named_leaves(tree: Any) -> dict[str, Any]:
    """{'layers.0.attn.wq': leaf, ...}: the dotted names orbax also uses (an fp8 weight's
    'layers.0.attn.wq.data' and '.scale': orbax stores a dataclass node as a dict)."""
    out = {}
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        names = (getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))) for k in keypath)
        out[".".join(str(n) for n in names)] = leaf
    return out


def check_tree(tree: Any, cfg: ModelConfig, what: str) -> None:
    """ValueError naming the first leaf of `tree` that is missing, extra or mis-shaped vs cfg."""
    want, got = _named_leaves(abstract_params(cfg)), _named_leaves(tree)
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    if missing:
        raise ValueError(f"{what}: tensors missing for config {cfg.name!r}: {missing}")
    if extra:
        raise ValueError(f"{what}: unexpected tensors for config {cfg.name!r}: {extra}")
    for name, w in want.items():
        g = got[name]
        if tuple(g.shape) != tuple(w.shape) or jax.numpy.dtype(g.dtype) != w.dtype:
            raise ValueError(
                f"{what}: tensor {name!r} has shape {tuple(g.shape)} dtype {g.dtype}; "
                f"config {cfg.name!r} needs shape {tuple(w.shape)} dtype {w.dtype}"
            )


def save_params(path: str | os.PathLike, params: dict, cfg: ModelConfig) -> None:
    """Write `params` (checked against `cfg`'s specs) and `cfg` into the new directory `path`."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    check_tree(params, cfg, f"save_params({path})")
    params_dir = os.path.join(path, PARAMS_DIR)
    if os.path.exists(params_dir) or os.path.exists(os.path.join(path, CONFIG_FILE)):
        raise FileExistsError(f"checkpoint already exists at {path}; choose a new directory")
    os.makedirs(path, exist_ok=True)
    import orbax.checkpoint as ocp  # here: 0.4 s of imports a run from safetensors skips

    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(params_dir, params)
        ckptr.wait_until_finished()
    tmp = os.path.join(path, CONFIG_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(config_to_dict(cfg), f, indent=2, sort_keys=True)
    os.replace(tmp, os.path.join(path, CONFIG_FILE))


def load_config(path: str | os.PathLike) -> ModelConfig:
    """The ModelConfig stored in the checkpoint directory `path`."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"orbax checkpoint directory not found: {path}")
    cfg_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(cfg_path):
        raise ValueError(f"{cfg_path}: missing; {path} was not written by save_params")
    try:
        with open(cfg_path) as f:
            d = json.load(f)
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object, got {type(d).__name__}")
        return config_from_dict(d)
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{cfg_path}: bad config ({e})") from e


def restore_params(path: str | os.PathLike) -> tuple[ModelConfig, dict]:
    """(cfg, params as host arrays) from a directory written by `save_params`; shapes and
    dtypes checked."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    cfg = load_config(path)
    params_dir = os.path.join(path, PARAMS_DIR)
    if not os.path.isdir(params_dir):
        raise FileNotFoundError(f"orbax params directory not found: {params_dir}")
    import orbax.checkpoint as ocp  # imported here: see save_params

    with ocp.StandardCheckpointer() as ckptr:
        # Check every stored array against the specs first: orbax would otherwise cast dtypes
        # silently and report shape mismatches without naming the array.
        check_tree(ckptr.metadata(params_dir).item_metadata.tree, cfg, params_dir)
        # Read into host arrays, as HF checkpoints are; the caller places them (orbax's own
        # committed device arrays made the engine's KV come back committed after its first
        # step, and every step shape compiled a second time).
        host = jax.tree.map(lambda a: np.empty(a.shape, a.dtype), abstract_params(cfg))
        params = ckptr.restore(params_dir, host)
    return cfg, params
