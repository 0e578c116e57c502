"""One entry point for model weights: a preset (random init), an HF directory, or an orbax dir.

`load_model` returns only once everything is read and checked, and keeps no state, so a bad
checkpoint raises before anything is half-loaded and the next call starts clean.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np

from configs.fp8_schemes import is_float_quantized
from configs.hf_config import config_from_hf, read_hf_config
from configs.int4_schemes import INT4_METHODS
from configs.model_config import ModelConfig
from configs.presets import PRESETS, get_preset
from models.hf_loader import load_hf_params, resolve_tied_head, unquantized_leaves
from models.orbax_io import check_tree, is_orbax_dir, load_config, restore_params, save_params
from models.quantization import (
    VLLM_INT4_NAMES,
    check_quantization,
    dequantize_tree,
    held_block,
    our_block,
    quantize_params,
)
from models.specs import abstract_params, count_params, init_params

TOKENIZER_FILE = "tokenizer.json"
# Read for add_bos_token and the chat template (engine/inputs.py, engine/chat.py).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # a chat template of its own (wins over the config)
GENERATION_CONFIG_FILE = "generation_config.json"  # default sampling settings (engine/inputs.py)
HF_CONFIG_FILE = "config.json"


def looks_like_path(model: str) -> bool:
    """Whether a `model` string that names no preset was meant as a path."""
    return os.sep in model or (os.altsep is not None and os.altsep in model) or model[:1] in ".~"


def cast_params(params: dict, cfg: ModelConfig, dtype: str) -> tuple[ModelConfig, dict]:
    """(cfg with `dtype`, params cast leaf by leaf to the dtypes the specs declare for it)."""
    if dtype == cfg.dtype:
        return cfg, params
    cfg = cfg.replace(dtype=dtype)
    # The specs decide per leaf: e.g. DeepSeek-V3's router_bias stays float32.
    want = abstract_params(cfg)  # (fp8 weights: their data stay fp8, their scales float32)
    return cfg, jax.tree.map(lambda x, w: x.astype(w.dtype), params, want)


def _dir_config(path: str, dtype: str | None) -> ModelConfig:
    if is_orbax_dir(path):
        cfg = load_config(path)
        return cfg if dtype in (None, "auto") else cfg.replace(dtype=dtype)
    if os.path.isfile(os.path.join(path, HF_CONFIG_FILE)):
        return resolve_tied_head(path, config_from_hf(path, name=path, dtype=dtype))
    raise ValueError(
        f"model={path!r}: directory has neither {HF_CONFIG_FILE} (Hugging Face) nor an orbax "
        "checkpoint written by save_params"
    )


def _load_dir(
    path: str, dtype: str | None, cfg: ModelConfig | None = None
) -> tuple[ModelConfig, dict]:
    cfg = _dir_config(path, dtype) if cfg is None else cfg
    if is_orbax_dir(path):
        stored, params = restore_params(path)
        stored, params = cast_params(params, stored, cfg.dtype)
        if stored.quantization and not cfg.quantization:  # fp8 / int4 stored, float wanted
            params = jax.tree.map(np.asarray, dequantize_tree(params, jnp.dtype(cfg.dtype)))
        elif cfg.quantization and not stored.quantization:  # float stored, fp8 / int4 wanted
            block = our_block(cfg.quantization_block)
            params = jax.tree.map(np.asarray, params)
            params = quantize_params(params, block, cfg.quantization_skip, cfg=cfg)
        fields = (
            "quantization",
            "quantization_block",
            "quantization_skip",
            "quantization_zero_point",
            "quantization_act_order",
        )
        return stored.replace(**{f: getattr(cfg, f) for f in fields}), params
    return cfg, load_hf_params(path, cfg)


def _model_dir(model: str) -> str | None:
    """The directory `model` names, or None for a preset; errors name `model`."""
    path = os.path.expanduser(model)
    if model in PRESETS:
        return None
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise ValueError(f"model={model!r}: is a file; expected a directory or preset name")
    if looks_like_path(model):
        raise FileNotFoundError(f"model={model!r}: no such directory")
    get_preset(model)  # ValueError "unknown preset" listing the presets
    return None


def tokenizer_path(model: str) -> str | None:
    """The tokenizer.json `load_model(model)` returns (None: presets, directories without
    one), found without reading any weights."""
    return _tokenizer_in(_model_dir(model))


def _tokenizer_in(path: str | None) -> str | None:
    if path is None or not os.path.isfile(os.path.join(path, TOKENIZER_FILE)):
        return None
    return os.path.join(path, TOKENIZER_FILE)


def model_config(
    model: str, dtype: str | None = None, quantization: str | None = None
) -> ModelConfig:
    """The ModelConfig `load_model(model, dtype)` returns, read without any weights: what
    an engine checks its arguments against before it loads them. `quantization="fp8"` holds
    the projection weights as fp8 (models/quantization.py); what an fp8 checkpoint stores
    in float stays float (ModelConfig.quantization_skip). vLLM's names of a checkpoint's own
    int4 format ("gptq", "awq", their "_marlin" kernels, "compressed-tensors") hold it as
    "int4" when the checkpoint is in that format ("compressed-tensors" on its fp8
    float-quantized format: as "fp8")."""
    check_quantization(quantization)
    path = _model_dir(model)
    if path is not None:
        cfg = _dir_config(path, dtype)
    else:
        cfg = get_preset(model)
        cfg = cfg.replace(dtype=dtype) if dtype not in (None, "auto") else cfg
    if quantization in VLLM_INT4_NAMES:
        method = None if path is None or is_orbax_dir(path) else _quant_method(path)
        if method != VLLM_INT4_NAMES[quantization]:
            raise ValueError(
                f"quantization={quantization!r}: needs a checkpoint whose config.json "
                f"quantization_config.quant_method is {VLLM_INT4_NAMES[quantization]!r} "
                f"(found {method!r}; quantization='int4' quantizes any other on load)"
            )
        # (compressed-tensors' float-quantized format is fp8, its pack-quantized one int4)
        quantization = _stored_quantization(path, cfg)
    if quantization is None:
        return cfg.replace(quantization=None, quantization_skip=())
    stored = _stored_quantization(path, cfg)
    if stored is not None and stored != quantization:
        raise ValueError(
            f"quantization={quantization!r}: the checkpoint stores {stored} weights (hold them "
            f"as quantization={stored!r}, or None to dequantize them)"
        )
    cfg = cfg.replace(quantization_block=held_block(cfg.quantization_block, quantization))
    if path is None or is_orbax_dir(path):  # an orbax checkpoint's own, if stored quantized
        return cfg.replace(quantization=quantization)
    return cfg.replace(quantization=quantization, quantization_skip=unquantized_leaves(path, cfg))


def _stored_quantization(path: str | None, cfg: ModelConfig) -> str | None:
    """How the checkpoint at `path` stores its weights: "fp8", "int4" or None (float;
    gpt-oss's MXFP4 experts count as float: they are dequantized on load)."""
    if path is None:
        return None
    if is_orbax_dir(path):
        return cfg.quantization
    method = _quant_method(path)
    if method == "fp8" or is_float_quantized(read_hf_config(path).get("quantization_config")):
        return "fp8"
    return "int4" if method in INT4_METHODS else None


def _quant_method(path: str) -> str | None:
    """The HF checkpoint's quantization_config.quant_method (None without one)."""
    return (read_hf_config(path).get("quantization_config") or {}).get("quant_method")


def load_model(
    model: str,
    dtype: str | None = None,
    seed: int = 0,
    cfg: ModelConfig | None = None,
    host: bool = False,
) -> tuple[ModelConfig, dict, str | None]:
    """(cfg, params, tokenizer.json path or None) for a preset name, HF dir or orbax dir.

    A preset name wins over a same-named local directory (write "./name" for the directory).

    Args:
      model: preset name (random weights from `seed`), a Hugging Face directory (config.json +
        safetensors) or a directory written by `save_params` / `convert_hf`.
      dtype: parameter dtype override. None keeps the preset's or orbax checkpoint's dtype and
        reads HF checkpoints as float32; "auto" reads an HF checkpoint in its own dtype.
      cfg: `model_config(model, dtype)`, when the caller has read it already.
      host: return the params as host (numpy) arrays, for a caller that places them itself
        (sharding a checkpoint onto a mesh: no device holds more than its shards; preset
        weights are drawn on the host); default: on the default device.
    """
    path = _model_dir(model)
    if path is not None:
        cfg, params = _load_dir(path, dtype, cfg)
        tokenizer = _tokenizer_in(path)
        if not host:
            params = jax.tree.map(jnp.asarray, params)
        return cfg, params, tokenizer
    cfg = model_config(model, dtype) if cfg is None else cfg
    return cfg, init_params(cfg, jax.random.key(seed), host=host), None


def replacement_params(cfg: ModelConfig, weights, seed: int = 0, host: bool = False) -> dict:
    """New weights for an engine serving `cfg` (LLM.load_weights): those of a checkpoint
    directory or preset name whose config is `cfg` but for its name, or a params tree as
    the specs shape it (a trainer's arrays). ValueError naming the field or tensor that
    differs, before any weight is read. `host`: as load_model's."""
    if isinstance(weights, str):
        # (the served MTP drafting, ModelConfig.mtp_drafts, asks the new ones for the module)
        new_cfg = model_config(weights, cfg.dtype, cfg.quantization)
        new_cfg = new_cfg.replace(mtp_drafts=cfg.mtp_drafts)
        differ = [
            f"{f.name}={getattr(new_cfg, f.name)!r}"
            for f in dataclasses.fields(cfg)
            if f.name != "name" and getattr(new_cfg, f.name) != getattr(cfg, f.name)
        ]
        if differ:
            raise ValueError(
                f"weights={weights!r}: its config differs from the served {cfg.name!r} in "
                + ", ".join(differ)
            )
        return load_model(weights, cfg.dtype, seed, new_cfg, host=host)[1]
    check_tree(weights, cfg, "weights")
    return weights


def _check_out_dir(hf_dir: str, out_dir: str) -> None:
    """ValueError naming out_dir unless it is a new (or empty) directory apart from hf_dir,
    checked before the checkpoint is read: writing into the HF directory would mix the two."""
    src, dst = os.path.realpath(hf_dir), os.path.realpath(os.path.expanduser(out_dir))
    if os.path.commonpath([src, dst]) in (src, dst):
        raise ValueError(
            f"out_dir={out_dir!r}: must be a new directory outside hf_dir={hf_dir!r} "
            "(and not one containing it)"
        )
    if os.path.exists(dst) and not (os.path.isdir(dst) and not os.listdir(dst)):
        raise ValueError(f"out_dir={out_dir!r}: already exists; give a new or empty directory")


def convert_hf_to_orbax(
    hf_dir: str, out_dir: str, dtype: str | None = None, quantization: str | None = None
) -> tuple[ModelConfig, dict]:
    """Load the HF checkpoint in `hf_dir` and write it as an orbax checkpoint in `out_dir`
    (`quantization="fp8"`: fp8 weights, an fp8 checkpoint's own bytes and scales), with its
    tokenizer.json (and tokenizer_config.json, chat_template.jinja,
    generation_config.json) copied along so the orbax directory stands alone."""
    hf_dir = os.path.expanduser(hf_dir)
    if not os.path.isdir(hf_dir):
        raise FileNotFoundError(f"hf_dir={hf_dir!r}: no such directory")
    if is_orbax_dir(hf_dir):
        raise ValueError(f"hf_dir={hf_dir!r}: is already an orbax checkpoint")
    _check_out_dir(hf_dir, out_dir)
    cfg, params = _load_dir(hf_dir, dtype, model_config(hf_dir, dtype, quantization))
    save_params(out_dir, params, cfg)
    for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CHAT_TEMPLATE_FILE, GENERATION_CONFIG_FILE):
        if os.path.isfile(os.path.join(hf_dir, name)):
            shutil.copyfile(
                os.path.join(hf_dir, name), os.path.join(os.path.expanduser(out_dir), name)
            )
    return cfg, params


def summary(cfg: ModelConfig, params: dict) -> str:
    """'deepseek_v3, 3 layers, 1.23M params (0.45M active), float32, 4.9 MB' for logs."""
    total, active = count_params(cfg)
    nbytes = sum(np.dtype(x.dtype).itemsize * x.size for x in jax.tree.leaves(params))
    return (
        f"{cfg.model_type}, {cfg.num_layers} layers, {total / 1e6:.2f}M params "
        f"({active / 1e6:.2f}M active), {cfg.dtype}, {nbytes / 1e6:.1f} MB"
    )
