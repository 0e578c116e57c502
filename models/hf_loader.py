"""Hugging Face safetensors checkpoint -> params tree (models/specs.py layout), without torch.

Reads one `model.safetensors` or the shards listed in `model.safetensors.index.json` with the
safetensors numpy API. Every expected tensor's presence, shape and dtype is checked from the
file headers before any tensor data is read, so a bad checkpoint fails fast and nothing is
half-loaded.

Block-quantized fp8 weights (a `quantization_config` with quant_method "fp8", as DeepSeek-V3
ships) are dequantized to the params dtype as they are read (models/fp8_checkpoint.py), or,
with `ModelConfig.quantization="fp8"`, kept as they are stored: their bytes and scales
become QuantizedWeights (models/quantization.py), and the float weights are quantized.

Expert weights come in two layouts, both supported:
  per_expert: released checkpoints (and transformers' save_pretrained):
      model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight
      Mixtral: model.layers.{i}.block_sparse_moe.experts.{e}.{w1,w3,w2}.weight, ...gate.weight
  fused: transformers 5 in-memory modules: mlp.experts.gate_up_proj [E, 2F, D] (gate rows
      first), mlp.experts.down_proj [E, D, F]
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open

from configs.fp8_schemes import Fp8Scheme
from configs.hf_config import fp8_scheme, fp8_weight_block, read_hf_config, stored_int4_scheme
from configs.int4_schemes import Int4Scheme
from configs.model_config import ModelConfig
from models import int4_checkpoint as int4
from models.checkpoint_names import (
    ALTERNATE_NAMES,
    EXPERT_LAYOUTS,
    hf_tensor_names,
    prefixes_of,
    with_prefixes,
)
from models.fp8_checkpoint import (
    E8M0_DTYPE,
    FP4_DTYPE,
    FP8_DTYPE,
    SCALE_SUFFIX,
    Fp8Reader,
    dequantize,
    dequantize_fp4,
    fp4_shapes,
    held_scale,
)
from models.hf_tensors import KINDS, HFTensor, Path_
from models.mxfp4 import (
    BLOCKS_SUFFIX,
    SCALES_SUFFIX,
    e8m0_values,
    gpt_oss_expert_weight,
    mxfp4_shapes,
)
from models.quantization import (
    QuantizedWeight,
    our_block,
    pack_int4,
    quantize_params,
    quantized_leaves,
)
from models.release_names import JOINED
from models.specs import ParamSpec, param_specs
from models.tree import decoder_layers

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


class _Header(NamedTuple):
    file: Path
    shape: tuple[int, ...]
    dtype: str


def _checkpoint_files(model_dir: Path) -> list[Path]:
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model_dir {str(model_dir)!r}: directory not found")
    index = model_dir / INDEX_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{index}: not a valid safetensors index ({e})") from e
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise ValueError(
                f"{index}: not a valid safetensors index (weight_map must map tensor names "
                "to file names)"
            )
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
    else:
        files = [model_dir / SINGLE_FILE]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"checkpoint file {str(f)!r}: not found")
    return files


def _join_parts(cfg: ModelConfig, headers: dict[str, _Header]) -> dict[str, tuple[str, ...]]:
    """Tensors stored in parts (release_names.JOINED) get a header of their own, the parts'
    rows concatenated, where the checkpoint has every part and not the whole; returns
    {whole: its parts}, which the reader concatenates."""
    joined = {}
    for whole, parts in JOINED.get(cfg.model_type, ()):
        for first in [n for n in headers if n.endswith(parts[0])]:
            stem = first[: -len(parts[0])]
            names = tuple(stem + p for p in parts)
            if stem + whole in headers or not all(n in headers for n in names):
                continue
            heads = [headers[n] for n in names]
            if len({(h.dtype, h.shape[1:]) for h in heads}) > 1:
                shapes = ", ".join(f"{n} {headers[n].shape} {headers[n].dtype}" for n in names)
                raise ValueError(f"checkpoint tensors {shapes}: parts of one tensor must agree")
            rows = sum(h.shape[0] for h in heads)
            headers[stem + whole] = _Header(
                heads[0].file, (rows, *heads[0].shape[1:]), heads[0].dtype
            )
            joined[stem + whole] = names
    return joined


def _read_headers(files: list[Path]) -> dict[str, _Header]:
    headers = {}
    for path in files:
        try:
            with safe_open(str(path), framework="np") as f:
                for name in f.keys():
                    if name in headers:
                        raise ValueError(
                            f"checkpoint tensor {name!r}: in both {headers[name].file.name} "
                            f"and {path.name}"
                        )
                    sl = f.get_slice(name)
                    headers[name] = _Header(path, tuple(sl.get_shape()), sl.get_dtype())
        except SafetensorError as e:
            raise ValueError(f"checkpoint file {str(path)!r}: corrupt or truncated ({e})") from e
    return headers


# gpt-oss's expert weights, which its released checkpoints store as MXFP4 pairs
# `<name>_blocks` / `<name>_scales` (models/mxfp4.py) in place of `<name>`.
MXFP4_TENSORS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def _is_mxfp4(name: str, headers: dict[str, _Header]) -> bool:
    """Whether `name` is stored as an MXFP4 blocks/scales pair instead of itself."""
    return (
        name not in headers
        and name.endswith(MXFP4_TENSORS)
        and name + BLOCKS_SUFFIX in headers
        and name + SCALES_SUFFIX in headers
    )


def _is_int4(name: str, headers: dict[str, _Header]) -> bool:
    """Whether `name` is stored as packed int4 (any format: models/int4_checkpoint.py)."""
    return int4.packed_name(name, headers.__contains__) is not None


def _stored_apart(name: str, headers: dict[str, _Header]) -> bool:
    """Stored as other tensors than `name` itself (MXFP4 or packed int4)."""
    return _is_mxfp4(name, headers) or _is_int4(name, headers)


def _pick_layout(cfg: ModelConfig, headers: dict[str, _Header]) -> dict[str, HFTensor]:
    prefixes = prefixes_of(headers)
    candidates = [
        with_prefixes(hf_tensor_names(cfg, lay), prefixes)
        for lay in (EXPERT_LAYOUTS if cfg.num_experts else EXPERT_LAYOUTS[:1])
    ]
    candidates = [_alternate_names(cfg, names, headers) for names in candidates]
    missing = [
        [n for n in names if n not in headers and not _stored_apart(n, headers)]
        for names in candidates
    ]

    # The layout is the one the model's own layers are stored in (the MTP layer's follows).
    def is_mtp(name: str) -> bool:
        return bool(cfg.mtp_drafts) and name.startswith(f"{prefixes[0]}layers.{cfg.num_layers}.")

    best = min(
        range(len(candidates)),
        key=lambda j: (sum(not is_mtp(n) for n in missing[j]), len(missing[j])),
    )
    if missing[best]:
        name = missing[best][0]
        whose = " (the MTP module's: speculative_config method 'mtp')" * is_mtp(name)
        raise ValueError(
            f"checkpoint tensor {name!r}: missing{whose} "
            f"({len(missing[best])} expected tensors missing in total)"
        )
    return _transposed_experts(candidates[best], headers)


def _alternate_names(cfg: ModelConfig, names: dict[str, HFTensor], headers) -> dict:
    """`names` with each tensor the checkpoint holds only under an alternate name
    (checkpoint_names.ALTERNATE_NAMES) renamed to it."""
    out = {}
    for name, t in names.items():
        for old, new in ALTERNATE_NAMES.get(cfg.model_type, ()):
            other = name.replace(old, new)
            if name not in headers and other in headers:
                name = other
        out[name] = t
    return out


def _transposed_experts(names: dict[str, HFTensor], headers) -> dict[str, HFTensor]:
    """Fused experts stored with their last two axes swapped, gate_up [E, D, 2F] and down
    [E, F, D] (Qwen3-VL-MoE's released layout, which transformers transposes on load where
    the shapes differ from its modules'), read as such."""
    out = dict(names)
    for name, t in names.items():
        got = headers[name].shape if name in headers else None
        swapped = t.shape[:1] + t.shape[:0:-1] if len(t.shape) == 3 else None
        if got is None or got == t.shape or got != swapped:
            continue
        if t.kind == "gate_up":
            out[name] = t._replace(shape=swapped, kind="gate_up_halves")
        elif t.kind == "experts_T":
            out[name] = t._replace(shape=swapped, kind="copy")
    return out


class _Quantization(NamedTuple):
    """A checkpoint's quantization, from its config.json."""

    block: tuple[int, int] | None  # [rows, cols] of fp8 scale blocks, (1, group) for int4
    method: str | None  # quantization_config's quant_method (None without one)
    int4: Int4Scheme | None  # how int4 weights are stored (None: not int4)
    fp8: Fp8Scheme | None  # how fp8 weights and their scales are stored (None: not fp8)


def _quantization(model_dir: Path) -> _Quantization:
    config = model_dir / "config.json"
    hf = read_hf_config(config) if config.is_file() else {}
    qc = hf.get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    return _Quantization(fp8_weight_block(hf), method, stored_int4_scheme(hf), fp8_scheme(hf))


def _validate_mxfp4(name: str, want: HFTensor, headers: dict[str, _Header], method) -> None:
    if method != "mxfp4":
        raise ValueError(
            f"checkpoint tensor {name + BLOCKS_SUFFIX!r}: MXFP4 blocks need a config.json "
            f"quantization_config with quant_method 'mxfp4' (found {method!r})"
        )
    blocks_shape, scales_shape = mxfp4_shapes(want.shape)
    for suffix, shape in ((BLOCKS_SUFFIX, blocks_shape), (SCALES_SUFFIX, scales_shape)):
        got = headers[name + suffix]
        if got.shape != shape:
            raise ValueError(
                f"checkpoint tensor {name + suffix!r}: expected shape {shape} (MXFP4 of "
                f"{want.shape}), found {got.shape} in {got.file.name}"
            )
        if got.dtype != "U8":
            raise ValueError(
                f"checkpoint tensor {name + suffix!r}: dtype {got.dtype}, expected U8 (MXFP4)"
            )


def _validate(
    names: dict[str, HFTensor],
    headers: dict[str, _Header],
    method: str | None = None,
    scheme: Int4Scheme | None = None,
    fp8: Fp8Scheme | None = None,
) -> None:
    for name, want in names.items():
        if _is_mxfp4(name, headers):
            _validate_mxfp4(name, want, headers, method)
            continue
        if _is_int4(name, headers):
            _validate_int4(name, want, headers, scheme)
            continue
        got = headers[name]
        if got.dtype == FP4_DTYPE and want.kind in ("linear", "expert"):
            _validate_fp4(name, want, headers, fp8)  # (packed: half the inputs)
            continue
        # (a "rows" tensor: at least its rows, the leading ones read; Molmo2's image tokens')
        rows = want.kind == "rows" and len(got.shape) == len(want.shape) >= 1
        more = rows and got.shape[1:] == want.shape[1:] and got.shape[0] > want.shape[0]
        if got.shape != want.shape and not more:
            raise ValueError(
                f"checkpoint tensor {name!r}: expected shape {want.shape}, found {got.shape} "
                f"in {got.file.name}"
            )
        scale = fp8.scale_name(name, headers.__contains__) if fp8 else name + SCALE_SUFFIX
        if got.dtype == FP8_DTYPE:
            _validate_fp8(name, got, headers, fp8)
        elif scale in headers:
            # transformers would multiply it in anyway; what the file means is unclear.
            raise ValueError(
                f"checkpoint tensor {scale!r}: a scale for {name!r}, which is stored "
                f"as {got.dtype}, not {FP8_DTYPE}"
            )
        elif want.kind == "index":
            if got.dtype not in ("I32", "I64"):
                raise ValueError(
                    f"checkpoint tensor {name!r}: dtype {got.dtype}, expected an integer table "
                    "(I32 or I64)"
                )
        elif got.dtype not in FLOAT_DTYPES:
            raise ValueError(
                f"checkpoint tensor {name!r}: dtype {got.dtype} unsupported; "
                f"expected one of {FLOAT_DTYPES} (or {FP8_DTYPE} with block scales)"
            )


_INT4_DTYPES = {"int32": ("I32",), "int": ("I32", "I64"), "float": FLOAT_DTYPES}


def _validate_int4(
    name: str, want: HFTensor, headers: dict[str, _Header], scheme: Int4Scheme | None
) -> None:
    packed = int4.packed_name(name, headers.__contains__)
    ct = packed.endswith(int4.PACKED_SUFFIX)
    layout = "compressed-tensors" if ct else "gptq' or 'awq"
    if scheme is None or (scheme.method == "compressed-tensors") != ct:
        raise ValueError(
            f"checkpoint tensor {packed!r}: packed int4 needs a config.json quantization_config "
            f"with quant_method '{layout}' (found {scheme.method if scheme else None!r})"
        )
    if want.kind not in ("linear", "expert") or len(want.shape) != 2:
        raise ValueError(f"checkpoint tensor {packed!r}: int4 only for Linears")
    what = f"{scheme.method} int4 of {want.shape} in groups of {scheme.group or 'all inputs'}"
    for tensor, (shape, kind) in int4.stored_names(name, want.shape, scheme).items():
        _check_part(headers, tensor, shape, _INT4_DTYPES[kind], f"int4 {name!r}", what)


def _check_part(headers, tensor: str, shape, dtypes, owner: str, what: str) -> None:
    """One stored part of a packed weight: present, of `shape` and one of `dtypes`."""
    got = headers.get(tensor)
    if got is None:
        raise ValueError(f"checkpoint tensor {tensor!r}: missing ({owner})")
    if got.shape != shape or got.dtype not in dtypes:
        raise ValueError(
            f"checkpoint tensor {tensor!r}: expected shape {shape} and dtype in {dtypes} "
            f"({what}), found {got.shape} {got.dtype} in {got.file.name}"
        )


def _validate_fp8(
    name: str, got: _Header, headers: dict[str, _Header], fp8: Fp8Scheme | None
) -> None:
    if fp8 is None:
        raise ValueError(
            f"checkpoint tensor {name!r}: dtype {FP8_DTYPE} needs a config.json "
            "quantization_config with quant_method 'fp8' or a compressed-tensors "
            "'float-quantized' format (none found)"
        )
    if len(got.shape) < 2:
        raise ValueError(f"checkpoint tensor {name!r}: {FP8_DTYPE} only for matrices")
    at = fp8.scale_name(name, headers.__contains__)
    scale = headers.get(at)
    if scale is None:
        raise ValueError(
            f"checkpoint tensor {name!r}: {FP8_DTYPE} weight without its scale tensor {at!r}"
        )
    want = fp8.stored_scale_shape(got.shape)
    if scale.shape != want and not (fp8.strategy == "tensor" and scale.shape == want[:-1]):
        kind = f"blocks of {list(fp8.block)}" if fp8.strategy == "block" else fp8.strategy
        raise ValueError(
            f"checkpoint tensor {at!r}: expected shape {want} (weight {got.shape}, scales "
            f"per {kind}), found {scale.shape}"
        )
    if scale.dtype not in FLOAT_DTYPES + (E8M0_DTYPE,):
        raise ValueError(
            f"checkpoint tensor {at!r}: dtype {scale.dtype} unsupported; "
            f"expected one of {FLOAT_DTYPES + (E8M0_DTYPE,)}"
        )


def _validate_fp4(name: str, want, headers: dict[str, _Header], fp8: Fp8Scheme | None) -> None:
    """An FP4 weight (DeepSeek-V4's experts): int8 [out, in / 2] and a ue8m0 scale
    [out, in / 32] (models/fp8_checkpoint.py)."""
    if fp8 is None or not fp8.fp4_experts:
        raise ValueError(
            f"checkpoint tensor {name!r}: dtype {FP4_DTYPE} (FP4) needs a config.json "
            "quantization_config with quant_method 'fp8' and expert_dtype 'fp4'"
        )
    at = fp8.scale_name(name, headers.__contains__)
    shapes = fp4_shapes(want.shape)
    what = f"FP4 of {want.shape}, a scale per 32 inputs"
    for tensor, shape, dtypes in (
        (name, shapes[0], (FP4_DTYPE,)),
        (at, shapes[1], (E8M0_DTYPE, "U8")),
    ):
        _check_part(headers, tensor, shape, dtypes, f"FP4 {name!r}", what)


class _TensorReader(contextlib.ExitStack):
    """Reads checkpoint tensors by name, each file opened once; fp8 weights come dequantized
    (as `dtype`) with their block scales, MXFP4 expert weights from their blocks and scales
    (as `dtype` when it is float32 or bfloat16, else float32; `_place` casts)."""

    def __init__(
        self,
        headers: dict[str, _Header],
        dtype,
        int4_scheme: Int4Scheme | None = None,
        shapes: dict[str, tuple[int, ...]] | None = None,
        fp8: Fp8Scheme | None = None,
        joined: dict[str, tuple[str, ...]] | None = None,
    ):
        super().__init__()
        self.headers, self.dtype, self.fp8 = headers, dtype, fp8
        self.joined = joined or {}  # a tensor stored in parts: their names (_join_parts)
        # int4 weights: their format, and each one's [out, in] (what the loader expects)
        self.int4_scheme, self.shapes = int4_scheme, shapes or {}
        self._fp8 = Fp8Reader()
        self._files: dict[Path, Any] = {}

    def read(self, name: str) -> np.ndarray:
        if _is_mxfp4(name, self.headers):
            blocks, scales = self.read(name + BLOCKS_SUFFIX), self.read(name + SCALES_SUFFIX)
            # Every MXFP4 value is exact in bfloat16: decode straight to it (half the peak
            # host memory of float32, 8.5 GB for gpt-oss-120b's gate_up) when that is the dtype.
            exact = self.dtype in (np.dtype(np.float32), np.dtype(jnp.bfloat16))
            return gpt_oss_expert_weight(blocks, scales, self.dtype if exact else np.float32)
        if _is_int4(name, self.headers):
            return self._int4_parts(name).dequantize(self.int4_scheme.held_group, self.dtype)
        if self.headers[name].dtype == FP8_DTYPE:
            data, scale = self._fp8_parts(name)
            return dequantize(data, scale, self.fp8.held_block, self.dtype)
        if self.headers[name].dtype == FP4_DTYPE and self.fp8 is not None:
            scales = self._scale_bytes(self.fp8.scale_name(name, self.headers.__contains__))
            exact = self.dtype in (np.dtype(np.float32), np.dtype(jnp.bfloat16))
            return dequantize_fp4(self._raw(name), scales, self.dtype if exact else np.float32)
        return self._raw(name)

    def _int4_parts(self, name: str) -> int4.Int4Parts:
        return int4.read_parts(self.read, name, self.shapes[name], self.int4_scheme)

    def read_stored(self, name: str) -> list[np.ndarray | None]:
        """A quantized weight as stored: fp8 data [out, in] and its float32 block scales;
        int4: its values (int8 [out, in]), group scales, zero points and group indices
        (models/int4_checkpoint.Int4Parts; None where the format has none)."""
        if _is_int4(name, self.headers):
            p = self._int4_parts(name)
            return [p.values, p.scale, p.zero, p.g_idx]
        return list(self._fp8_parts(name))

    def _fp8_parts(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """An fp8 weight's data and its float32 scales over the held blocks."""
        data = self._fp8.read(self.headers[name].file, name)
        at = self.fp8.scale_name(name, self.headers.__contains__)
        if self.headers[at].dtype == E8M0_DTYPE:
            stored = e8m0_values(self._scale_bytes(at))
        else:
            stored = np.asarray(self.read(at), np.float32)
        return data, held_scale(stored, data.shape, self.fp8)

    def _raw(self, name: str) -> np.ndarray:
        if name in self.joined:
            return np.concatenate([self._raw(part) for part in self.joined[name]])
        path = self.headers[name].file
        if path not in self._files:
            self._files[path] = self.enter_context(safe_open(str(path), framework="np"))
        return self._files[path].get_tensor(name)

    def _scale_bytes(self, name: str) -> np.ndarray:
        """A ue8m0 scale's bytes (F8_E8M0, or stored as U8)."""
        if self.headers[name].dtype == E8M0_DTYPE:
            return self._fp8.read_bytes(self.headers[name].file, name, (E8M0_DTYPE,))
        return self._raw(name)


def _leaf_specs(specs, path: Path_ = ()) -> dict[Path_, ParamSpec]:
    if isinstance(specs, ParamSpec):
        return {path: specs}
    items = specs.items() if isinstance(specs, dict) else enumerate(specs)
    out = {}
    for key, sub in items:
        out.update(_leaf_specs(sub, path + (key,)))
    return out


def _build_tree(specs, leaves: dict[Path_, np.ndarray], path: Path_ = ()):
    if isinstance(specs, ParamSpec):
        return leaves[path]
    if isinstance(specs, dict):
        return {k: _build_tree(v, leaves, path + (k,)) for k, v in specs.items()}
    return [_build_tree(v, leaves, path + (i,)) for i, v in enumerate(specs)]


def resolve_tied_head(model_dir: str | Path, cfg: ModelConfig) -> ModelConfig:
    """`cfg`, untied when its checkpoint holds an lm_head.weight unlike the embedding.

    transformers 5.24 does the same: with tie_word_embeddings it warns that both are present
    with different values and keeps them apart (saved tied models hold only the embedding).
    """
    if not cfg.tie_word_embeddings:
        return cfg
    headers = _read_headers(_checkpoint_files(Path(model_dir)))
    # The two as this checkpoint names them (a wrapper's prefixes; Mistral's own names).
    names = with_prefixes(
        hf_tensor_names(cfg.replace(tie_word_embeddings=False)), prefixes_of(headers)
    )
    head = next(n for n, t in names.items() if t.targets == (("lm_head",),))
    embed = next(n for n, t in names.items() if t.targets == (("embed",),))
    if head not in headers:
        return cfg
    if embed in headers and headers[head].shape == headers[embed].shape:
        q = _quantization(Path(model_dir))
        pair = {n: HFTensor(headers[n].shape, (), "copy") for n in (head, embed)}
        try:
            _validate(pair, headers, fp8=q.fp8)
        except ValueError:
            pair = None  # not comparable; the load (untied) refuses the bad one, naming it
        if pair is not None:
            with _TensorReader(headers, np.float32, fp8=q.fp8) as reader:
                if np.array_equal(reader.read(head), reader.read(embed)):
                    return cfg
    warnings.warn(
        f"{model_dir}: tie_word_embeddings=true, but the checkpoint's {head} differs from "
        f"{embed}: they are not tied (as transformers does)",
        stacklevel=2,
    )
    return cfg.replace(tie_word_embeddings=False)


def load_hf_params(model_dir: str | Path, cfg: ModelConfig) -> dict:
    """Params tree of host (numpy) arrays for `cfg` from an HF safetensors checkpoint
    directory, cast to cfg.dtype (router_bias stays float32, as declared in models/specs.py).
    The caller places them: whole on one device, or straight into shards on a mesh.

    Raises FileNotFoundError (directory, file or shard missing) or ValueError (corrupt file,
    missing tensor, wrong shape or dtype, an fp8 weight without its scale or quantization_config),
    each naming the path or tensor, before reading data.
    """
    model_dir = Path(model_dir)
    headers = _read_headers(_checkpoint_files(model_dir))
    joined = _join_parts(cfg, headers)
    names = _pick_layout(cfg, headers)
    block, method, scheme, fp8 = _quantization(model_dir)
    _validate(names, headers, method, scheme, fp8)

    specs = param_specs(cfg.replace(quantization=None))
    leaf_specs = _leaf_specs(specs)
    layouts = _quantized_layouts(cfg, specs)
    int4_stored = scheme is not None
    keep = set()
    if block == cfg.quantization_block and cfg.quantization == ("int4" if int4_stored else "fp8"):
        keep = _stored_leaves(names, headers, layouts, int4_stored)
    leaves: dict[Path_, np.ndarray] = {}
    stored: dict[Path_, list[np.ndarray]] = {}
    shapes = {n: t.shape for n, t in names.items()}
    with _TensorReader(headers, jnp.dtype(cfg.dtype), scheme, shapes, fp8, joined) as reader:
        # Grouped by file (each shard opened once).
        def file_of(n: str) -> str:
            if _is_mxfp4(n, headers):
                n += BLOCKS_SUFFIX
            elif _is_int4(n, headers):
                n = int4.packed_name(n, headers.__contains__)
            return str(headers[n].file)

        for name in sorted(names, key=file_of):
            t = names[name]
            if t.targets[0] in keep:
                _place_stored(t, reader.read_stored(name), leaf_specs, stored)
            else:
                _place(t, reader.read(name), leaf_specs, leaves)
    for path, (data, scale, *rest) in stored.items():
        if int4_stored:
            leaves[path] = pack_int4(data, scale, *layouts[path], our_block(block), *rest)
        else:
            leaves[path] = QuantizedWeight(data, scale, *layouts[path], our_block(block))
    params = _build_tree(specs, leaves)
    if cfg.load_scales:
        _fold_scales(params, cfg.load_scales)
    if cfg.quantization:
        block = our_block(cfg.quantization_block)
        params = quantize_params(params, block, cfg.quantization_skip, cfg=cfg)
    return params


def _fold_scales(params: dict, scales) -> None:
    """ModelConfig.load_scales, in place: each decoder layer's leaf at a path (where the layer
    has it) times its factor, in float32, rounded once to its dtype (Falcon-H1's multipliers
    of its projections' inputs or outputs; a Linear's input times a scalar is its weight's)."""
    for layer in params["layers"]:
        for path, factor in scales:
            node = layer
            for key in path[:-1]:
                node = node.get(key, {})
            leaf = node.get(path[-1])
            if leaf is None:
                continue
            if not isinstance(leaf, np.ndarray):
                raise ValueError(
                    f"load_scales: {'.'.join(path)} is held quantized; a quantized checkpoint "
                    "of a model whose multipliers fold into its weights is not supported"
                )
            node[path[-1]] = (leaf.astype(np.float32) * np.float32(factor)).astype(leaf.dtype)


def _path_name(path: Path_) -> str:
    return ".".join(str(p) for p in path)


def _quantized_layouts(cfg: ModelConfig, specs: dict, skip=None) -> dict[Path_, tuple[int, int]]:
    """params path -> (lead, k_dims) of each leaf `cfg` holds as fp8 (none without
    quantization)."""
    if not cfg.quantization:
        return {}
    skip = cfg.quantization_skip if skip is None else skip
    out = {}
    num = len(specs["layers"])
    for i, group, name, layout in quantized_leaves(decoder_layers(specs), skip):
        at = ("layers", i) if i < num else ("mtp", "layer")  # (the MTP module's: i == num)
        at += ("moe", "shared") if group == "shared" else (group,)
        out[at + (name,)] = layout
    return out


def _leaf_name(path: Path_, num_layers: int) -> str:
    """quantization.leaf_name of a leaf's params path (the MTP layer's as layer num_layers)."""
    if path[:2] == ("mtp", "layer"):
        path = ("layers", num_layers) + path[2:]
    return _path_name(path)


def _sources(names: dict[str, HFTensor]) -> dict[Path_, list[tuple[str, HFTensor]]]:
    out = defaultdict(list)
    for name, t in names.items():
        for path in t.targets:
            out[path].append((name, t))
    return out


def _stored_quantized(name: str, headers: dict[str, _Header], int4_stored: bool) -> bool:
    if int4_stored:
        return _is_int4(name, headers)
    return not _stored_apart(name, headers) and headers[name].dtype == FP8_DTYPE


def _stored_leaves(
    names: dict[str, HFTensor], headers: dict[str, _Header], layouts: dict, int4_stored: bool
) -> set[Path_]:
    """The leaves to hold quantized whose every tensor the checkpoint stores as a quantized
    Linear (fp8, or int4; one or one per expert): taken as they are. Others (fused expert
    tensors) are read as float and quantized."""
    sources = _sources(names)
    return {
        path
        for path in layouts
        if sources.get(path)
        and all(
            t.kind in ("linear", "expert") and _stored_quantized(n, headers, int4_stored)
            for n, t in sources[path]
        )
    }


def unquantized_leaves(model_dir: str | Path, cfg: ModelConfig) -> tuple[str, ...]:
    """The leaves `cfg.replace(quantization="fp8")` would hold quantized that the checkpoint
    in `model_dir`, itself fp8 (or int4), stores in float (`modules_to_not_convert`, or a
    compressed-tensors `ignore` list): they stay float, as vLLM keeps them. Empty for a
    checkpoint that is not quantized."""
    model_dir = Path(model_dir)
    block, _, scheme, _ = _quantization(model_dir)
    if block is None:
        return ()
    headers = _read_headers(_checkpoint_files(model_dir))
    names = _pick_layout(cfg, headers)
    specs = param_specs(cfg.replace(quantization=None))
    sources = _sources(names)
    layouts = _quantized_layouts(cfg.replace(quantization="fp8"), specs, skip=())
    int4_stored = scheme is not None

    def quantized(n: str) -> bool:  # (FP4: dequantized on load, then held in fp8 blocks)
        fp4 = not _stored_apart(n, headers) and headers[n].dtype == FP4_DTYPE
        return fp4 or _stored_quantized(n, headers, int4_stored)

    return tuple(
        _leaf_name(path, cfg.num_layers)
        for path in layouts
        if not any(quantized(n) for n, _ in sources.get(path, ()))
    )


def _place_stored(t: HFTensor, parts: list, leaf_specs: dict, stored: dict) -> None:
    """A quantized Linear [out, in] as stored (`_TensorReader.read_stored`'s parts) into the
    leaf's [in..., out...] layout: data, scales and zero points transposed (the data
    reshaped like a float weight), group indices [in] as they are; experts stacked."""
    (path,) = t.targets
    spec = leaf_specs[path]
    data, *rest = parts
    shape = spec.shape if t.kind == "linear" else spec.shape[1:]
    moved = [data.T.reshape(shape)] + [
        None if p is None else np.ascontiguousarray(p.T if p.ndim == 2 else p) for p in rest
    ]
    if t.kind == "linear":
        stored[path] = moved
        return
    if path not in stored:
        stored[path] = [
            None if p is None else np.zeros((spec.shape[0],) + p.shape, p.dtype) for p in moved
        ]
    for held, p in zip(stored[path], moved, strict=True):
        if p is not None:
            held[t.expert] = p


def _place(t: HFTensor, arr: np.ndarray, leaf_specs: dict[Path_, ParamSpec], leaves: dict) -> None:
    def cast(path: Path_, x: np.ndarray) -> np.ndarray:
        spec = leaf_specs[path]
        return np.asarray(x, dtype=spec.dtype)

    if t.kind == "rows":  # (Llama 3.2 Vision's embedding: its image tokens' rows unread;
        (path,) = t.targets  # ERNIE 4.5 VL's router biases: the text one's, the first row)
        shape = leaf_specs[path].shape
        leaves[path] = cast(path, arr.reshape(-1)[: math.prod(shape)].reshape(shape))
    elif t.kind in ("copy", "index"):  # (to every target: LeRoPE's alpha is each layer's)
        for path in t.targets:
            leaves[path] = cast(path, arr.reshape(leaf_specs[path].shape))
    elif t.kind == "linear":
        (path,) = t.targets
        leaves[path] = cast(path, arr.T.reshape(leaf_specs[path].shape))
    elif t.kind == "expert":
        (path,) = t.targets
        spec = leaf_specs[path]
        if path not in leaves:
            leaves[path] = np.zeros(spec.shape, spec.dtype)
        leaves[path][t.expert] = cast(path, arr.T.reshape(spec.shape[1:]))
    elif t.kind == "gate_up":
        gate_path, up_path = t.targets
        f = arr.shape[1] // 2
        leaves[gate_path] = cast(gate_path, arr[:, :f].transpose(0, 2, 1))
        leaves[up_path] = cast(up_path, arr[:, f:].transpose(0, 2, 1))
    elif t.kind == "experts_T":  # (DBRX's: [E * F, D], experts stacked on the first axis)
        (path,) = t.targets
        arr = arr.reshape(leaf_specs[path].shape[0], -1, arr.shape[-1])
        leaves[path] = cast(path, arr.transpose(0, 2, 1))
    elif t.kind == "gate_up_interleaved":
        gate_path, up_path = t.targets
        leaves[gate_path] = cast(gate_path, arr[..., 0::2])
        leaves[up_path] = cast(up_path, arr[..., 1::2])
    elif t.kind == "gate_up_halves":
        gate_path, up_path = t.targets
        f = arr.shape[-1] // 2
        leaves[gate_path] = cast(gate_path, arr[..., :f])
        leaves[up_path] = cast(up_path, arr[..., f:])
    elif t.kind in ("grouped", "grouped_T"):
        arr = arr.T if t.kind == "grouped_T" else arr  # (GPT-2's Conv1D: [in, out])
        rows = arr.reshape(arr.shape[0], -1)  # [out, in] (a conv's [C, 1, K]: [C, K])
        groups = rows.reshape(t.groups, -1, rows.shape[1])
        start = 0
        for path in t.targets:
            share = math.prod(leaf_specs[path].shape) // rows.shape[1] // t.groups
            part = groups[:, start : start + share].reshape(-1, rows.shape[1])
            leaves[path] = cast(path, part.T.reshape(leaf_specs[path].shape))
            start += share
    else:
        raise ValueError(f"kind={t.kind!r}: expected one of {KINDS}")
