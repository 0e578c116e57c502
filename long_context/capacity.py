"""Capacity math: KV-cache and weight bytes, and how many sequences of a context fit.

KV bytes per token (all layers):
  MHA / GQA: 2 (K and V) x layers x kv_heads x head_dim x bytes
  MLA:       layers x (kv_lora_rank + qk_rope_head_dim) x bytes   (DeepSeek-V2, arXiv:2405.04434)
  fp8 KV adds the engine's 4-byte scale per cached row (engine/kv_quant.py).
Weight bytes come from the parameter specs (`models.specs.count_params`), so they count exactly
what the engine allocates; "active" weights are those one token reads (top-k of the routed
experts plus everything dense). Quantization scales and the few arrays real quantizers keep in
high precision (norms, router bias) are not modelled: under 0.1% of any preset here.

Across `tp` devices each weight is split as the engine shards it (sharding/rules.py): over
tp along its head, MLP or vocabulary axis, or kept whole on every device (norms, routers, the
MLA down-projections, and GQA K/V projections when tp does not divide the KV heads); a tp the
engine refuses (one that does not divide the heads or a split width) is refused here too.
GQA KV heads are split when tp divides them, else every device keeps all of them (vLLM would
keep ceil(kv_heads / tp)); the MLA latent has no head axis and is replicated on every
device.

KV is counted as the engine allocates it (engine/kv_pages.py): the budget holds whole pages
of `page_size` tokens, and a sequence takes ceil(context / page_size) of them; with a sliding
window on every layer (ModelConfig.kv_window) a decoding sequence holds only the pages under
its last `window` keys, 1 + ceil((window - 1) / page_size) at most (engine/scheduler.py gives
the rest back). A hybrid model (ModelConfig.hybrid_window: gpt-oss, half its layers windowed)
keeps its windowed layers' KV in a pool of their own, where a sequence holds only those pages;
its full-attention layers hold every page.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

from configs.hf_config import config_from_hf
from configs.model_config import ModelConfig
from configs.presets import PRESETS, get_preset

# Bytes per element. int4 packs two values per byte.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "int8": 1,
    "int4": 0.5,
}
GIB = 1 << 30


def dtype_bytes(dtype: str, flag: str) -> float:
    """Bytes per element of `dtype`; ValueError naming `flag` when it is unknown."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{flag}={dtype!r}: unknown dtype; expected one of {list(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def resolve_config(model: str) -> ModelConfig:
    """The ModelConfig of a preset name, a Hugging Face directory or an orbax directory.

    Reads only the config (never the weights), so a 671B checkpoint is sized in milliseconds.
    An HF directory keeps the checkpoint's own dtype.
    """
    if model in PRESETS:
        return PRESETS[model]
    path = os.path.expanduser(model)
    if os.path.isdir(path):
        from models.orbax_io import is_orbax_dir, load_config

        if is_orbax_dir(path):
            return load_config(path)
        if os.path.isfile(os.path.join(path, "config.json")):
            return config_from_hf(path, name=model, dtype="auto")
        raise ValueError(f"model={model!r}: directory has no config.json and no orbax config")
    from models.load import looks_like_path

    if os.path.exists(path):
        raise ValueError(f"model={model!r}: is a file; expected a directory or preset name")
    if looks_like_path(model):
        raise FileNotFoundError(f"model={model!r}: no such directory")
    return get_preset(model)  # ValueError listing the known presets


# Bytes of the float32 scale the engine keeps per cached row of fp8 KV (engine/kv_quant.py).
FP8_KV_SCALE_BYTES = 4


def kv_bytes_per_token(cfg: ModelConfig, kv_dtype: str, layers=None) -> int:
    """KV-cache bytes one token occupies across all layers, or those in `layers` (whole
    model, before any split).

    float8_e4m3fn KV is sized as the engine stores it (`kv_cache_dtype="fp8"`): one float32
    scale per cached row, i.e. per KV head for K and for V, per token for the MLA latent.
    """
    # ModelConfig's cache widths: the MLA latent + rope key, or GQA's K and V heads.
    item = dtype_bytes(kv_dtype, "kv_dtype")
    if layers is None:
        total, layers = cfg.kv_bytes_per_token(item), range(cfg.num_layers)
    else:
        total = sum(sum(cfg.layer_kv_widths(i)) for i in layers) * item
    if kv_dtype == "float8_e4m3fn":
        for i in layers:
            rows = len(cfg.layer_kv_widths(i))  # (GQA: K's and V's, one per KV head)
            rows *= 1 if cfg.is_mla else cfg.layer_num_kv_heads(i)
            total += rows * FP8_KV_SCALE_BYTES
    return math.ceil(total)


def state_shard_fraction(cfg: ModelConfig, tp: int) -> float:
    """Fraction of a linear-attention model's recurrent state one of `tp` devices holds:
    its DeltaNet heads split over tp when tp divides them (sharding/rules.py), else all
    (LFM2's short convs: whole on every device)."""
    if cfg.linear_attention_kind == "short_conv":
        return 1.0
    heads = (cfg.linear_num_key_heads, cfg.linear_num_value_heads)
    if cfg.linear_attention_kind == "mamba1":  # (its one key head, every channel's: unsplit)
        heads = heads[1:]
    return 1.0 if any(h % tp for h in heads) else 1.0 / tp


def kv_shard_fraction(cfg: ModelConfig, tp: int) -> float:
    """Fraction of each token's KV bytes one of `tp` devices holds, as the engine shards the
    cache (sharding/rules.py `rules_for`): KV heads split over tp when it divides them, else
    every device keeps them all; the MLA latent, shared by all heads, is never split."""
    if cfg.is_mla or any(cfg.layer_num_kv_heads(i) % tp for i in range(cfg.num_layers)):
        return 1.0
    return 1.0 / tp


@functools.cache
def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active per token) parameters, from the specs the engine allocates from (traced
    once per config: sweeps over dtypes and devices call this many times)."""
    from models.specs import count_params  # imports jax; keep this module light for --help

    return count_params(cfg)


@functools.cache
def params_per_device(cfg: ModelConfig, tp: int, nbytes: bool = False) -> int:
    """Parameters one of `tp` devices holds as the engine shards them: a weight split over
    tp holds 1/tp of its elements there (the engine checks that tp divides the axis), a
    replicated one all of them. ValueError (naming the axis) for a split the engine refuses.
    `nbytes`: their bytes as the engine holds them (with cfg.quantization: fp8 / int4 data
    and float32 scales) instead of their count."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec

    from models.specs import is_spec, param_specs
    from sharding.mesh import MeshConfig, check_layout
    from sharding.rules import param_partition_specs

    mc = MeshConfig(tp=tp)
    check_layout(cfg, mc)
    specs = jax.tree.leaves(param_specs(cfg), is_leaf=is_spec)
    parts = jax.tree.leaves(
        param_partition_specs(cfg, mc), is_leaf=lambda x: isinstance(x, PartitionSpec)
    )
    total = 0
    for spec, part in zip(specs, parts, strict=True):
        split = any(a == "tp" or (isinstance(a, tuple) and "tp" in a) for a in part)
        size = math.prod(spec.shape) * (np.dtype(spec.dtype).itemsize if nbytes else 1)
        total += size // (tp if split else 1)
    return total


def quantized_config(cfg: ModelConfig, quantization: str) -> ModelConfig:
    """`cfg` with its projection weights held as the engine holds them for
    LLM(quantization=...): fp8 in the config's blocks, int4 in its groups (an int4
    checkpoint's) or in groups of 128 inputs."""
    from models.quantization import check_quantization, held_block

    check_quantization(quantization)
    block = held_block(cfg.quantization_block, quantization)
    return cfg.replace(quantization=quantization, quantization_block=block)


def weight_bytes(cfg: ModelConfig, weight_dtype: str) -> tuple[int, int]:
    """(total, active per token) weight bytes with every parameter stored as `weight_dtype`."""
    nbytes = dtype_bytes(weight_dtype, "weight_dtype")
    return tuple(math.ceil(n * nbytes) for n in param_counts(cfg))


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What one deployment of a model holds at one context length."""

    model: str  # preset name or directory
    context: int  # tokens per sequence
    kv_dtype: str
    weight_dtype: str
    tp: int  # devices the model is split over
    page_size: int  # KV page size in tokens
    hbm_gib: float  # memory per device
    headroom: float  # fraction of memory kept free (activations, fragmentation)
    num_params: int
    num_active_params: int
    kv_bytes_per_token: int  # whole model, all layers
    kv_bytes_per_sequence: int  # kv_bytes_per_token x context
    kv_bytes_per_sequence_per_device: int  # after the tp split (MLA: replicated)
    weight_bytes: int  # whole model
    active_weight_bytes: int  # read per token (MoE: routed top-k + dense)
    weight_bytes_per_device: int
    kv_budget_bytes_per_device: int  # hbm x (1 - headroom) - weights per device
    kv_tokens: int  # tokens the KV budget holds in whole pages (over all sequences)
    max_sequences: int  # full-context sequences decoding at once, each in whole pages
    sliding_window: int | None = None  # the layers' window (fewer pages held), or None
    # Layers with that window that cache: all of them (ModelConfig.kv_window) or, in a hybrid
    # model, those whose KV has a pool of its own; 0 without a window.
    windowed_layers: int = 0
    swa_full_tokens_ratio: float | None = None  # their pool's share of the full pool's pages
    # Linear-attention models: a sequence's recurrent state (conv inputs and the gated
    # DeltaNet's [Hv, dk, dv], float32) over all such layers, per device; 0 for others.
    state_bytes_per_sequence_per_device: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def capacity(
    model: str | ModelConfig,
    context: int,
    kv_dtype: str | None = None,
    weight_dtype: str | None = None,
    hbm_gib: float = 80.0,
    tp: int = 1,
    headroom: float = 0.1,
    page_size: int = 16,
    quantization: str | None = None,
    swa_full_tokens_ratio: float | None = None,
) -> Capacity:
    """Size a deployment of `model` for sequences of `context` tokens.

    Args:
      model: a ModelConfig, preset name, HF directory or orbax directory.
      kv_dtype, weight_dtype: keys of DTYPE_BYTES; None means the model's own dtype.
      hbm_gib: accelerator memory per device, GiB.
      tp: devices the weights and KV heads are split over.
      headroom: fraction of each device's memory not given to weights or KV, in [0, 1).
      page_size: KV page size in tokens (the engine's `page_size`).
      quantization: weights as `LLM(quantization=...)` holds them ("fp8", "int4": their
        data and scales counted exactly; embeddings, norms, routers in the model dtype), in
        place of `weight_dtype`.
      swa_full_tokens_ratio: a hybrid model's windowed pool as this share of the full
        pool's pages (LLM's, SGLang's): a sequence's share of it is then at least that
        share of its context's pages.

    Raises ValueError naming the argument for a bad value, or when the weights do not fit.
    """
    from engine.kv_budget import check_window_ratio  # (it imports this module)

    cfg = model if isinstance(model, ModelConfig) else resolve_config(model)
    ratio = check_window_ratio(cfg, swa_full_tokens_ratio)
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context={context!r}: must be an integer >= 1")
    if context > cfg.max_position_embeddings and not cfg.attention_free:  # (Mamba: none)
        raise ValueError(
            f"context={context}: exceeds the model's max_position_embeddings="
            f"{cfg.max_position_embeddings}"
        )
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r}: must be an integer >= 1")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size={page_size!r}: must be an integer >= 1")
    if not hbm_gib > 0 or math.isinf(hbm_gib):
        raise ValueError(f"hbm_gib={hbm_gib!r}: must be a finite number > 0")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom={headroom!r}: must be in [0, 1)")
    if quantization is not None and weight_dtype is not None:
        raise ValueError(
            f"weight_dtype={weight_dtype!r}, quantization={quantization!r}: give one of them"
        )
    kv_dtype = cfg.dtype if kv_dtype is None else kv_dtype
    per_token = kv_bytes_per_token(cfg, kv_dtype)
    num_params, num_active = param_counts(cfg)
    if quantization is not None:
        from models.specs import count_bytes

        cfg = quantized_config(cfg, quantization)
        weight_dtype = quantization
        total_w, active_w = count_bytes(cfg)
    else:
        weight_dtype = cfg.dtype if weight_dtype is None else weight_dtype
        total_w, active_w = weight_bytes(cfg, weight_dtype)

    per_token_dev = math.ceil(per_token * kv_shard_fraction(cfg, tp))
    try:  # a split the engine refuses (heads, a width tp must divide) is no answer
        dev_params = params_per_device(cfg, tp, nbytes=quantization is not None)
    except ValueError as e:
        raise ValueError(f"tp={tp}: the engine cannot split {cfg.name} so ({e})") from None
    if quantization is not None:
        weights_dev = dev_params
    else:
        weights_dev = math.ceil(dev_params * dtype_bytes(weight_dtype, "weight_dtype"))
    usable = math.floor(hbm_gib * GIB * (1 - headroom))
    budget = usable - weights_dev
    if budget <= 0:
        need = (weights_dev / GIB) / (1 - headroom)
        raise ValueError(
            f"hbm_gib={hbm_gib}: {cfg.name} weights take {weights_dev / GIB:.1f} GiB per device "
            f"({weight_dtype}, tp={tp}), more than {usable / GIB:.1f} GiB left after "
            f"headroom={headroom}; needs hbm_gib > {need:.1f} or a larger tp"
        )
    pages_per_sequence = -(-context // page_size)
    window = cfg.kv_window or cfg.hybrid_window
    windowed = len(cfg.windowed_layers) if window is not None else 0
    # Per layer: the pages a decoding sequence holds, every one or (a window) those under
    # its last `window` keys, however aligned.
    window_pages = pages_per_sequence
    if window is not None:
        window_pages = min(pages_per_sequence, 1 + -(-(window - 1) // page_size))
    if ratio is not None:  # (a pool of ratio x the full pool's pages, more than it needs)
        window_pages = max(window_pages, math.ceil(ratio * pages_per_sequence))
    # The windowed layers' bytes a token (a hybrid model's: Gemma 4's are not its global
    # layers' width) over their window's pages, the others' over the context's.
    window_dev = per_token_dev
    if windowed < cfg.num_layers - len(cfg.linear_attention_layers):
        window_dev = 0
        if windowed:
            window_bytes = kv_bytes_per_token(cfg, kv_dtype, cfg.windowed_layers)
            window_dev = math.ceil(window_bytes * kv_shard_fraction(cfg, tp))
    state = math.ceil(cfg.linear_state_bytes() * state_shard_fraction(cfg, tp))
    layer_bytes = (per_token_dev - window_dev) * pages_per_sequence + window_dev * window_pages
    sequence_bytes = page_size * layer_bytes + state
    if cfg.is_dsv4 and window is not None:  # entries for the context, rows for its window
        rows = sum(sum(cfg.layer_kv_widths(i)) for i in range(cfg.num_layers))
        rows *= dtype_bytes(kv_dtype, "kv_dtype") * window_pages * page_size
        sequence_bytes = per_token_dev * page_size * pages_per_sequence + rows
        windowed = cfg.num_layers
    if per_token_dev:
        num_pages = budget // (per_token_dev * page_size)
    else:  # (no KV: the pages of the sequences the states allow, which hold nothing)
        num_pages = budget // sequence_bytes * pages_per_sequence
    return Capacity(
        model=cfg.name,
        context=context,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        tp=tp,
        page_size=page_size,
        hbm_gib=hbm_gib,
        headroom=headroom,
        num_params=num_params,
        num_active_params=num_active,
        kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_token * context,
        kv_bytes_per_sequence_per_device=per_token_dev * context,
        weight_bytes=total_w,
        active_weight_bytes=active_w,
        weight_bytes_per_device=weights_dev,
        kv_budget_bytes_per_device=budget,
        kv_tokens=num_pages * page_size,
        max_sequences=budget // sequence_bytes,
        sliding_window=window,
        # (those caching: a layer reading an earlier one's K and V holds no pages)
        windowed_layers=sum(1 for i in cfg.windowed_layers if cfg.layer_kv_widths(i))
        if windowed
        else 0,
        swa_full_tokens_ratio=ratio,
        state_bytes_per_sequence_per_device=state,
    )


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f}{unit}"
    return str(n)


def _size(b: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b / (1 << shift):,.2f} {unit}"
    return f"{b:,.0f} B"


def format_capacity(c: Capacity) -> str:
    """A few human-readable lines for the terminal."""
    return "\n".join(
        [
            f"{c.model}: {_count(c.num_params)} params ({_count(c.num_active_params)} active), "
            f"weights {c.weight_dtype}, KV {c.kv_dtype}, tp={c.tp}, {c.hbm_gib:g} GiB/device, "
            f"headroom {c.headroom:g}",
            f"  KV per token      {c.kv_bytes_per_token:,} B",
            f"  KV per sequence   {c.kv_bytes_per_sequence:,} B ({_size(c.kv_bytes_per_sequence)})"
            f" at {c.context:,} tokens; {_size(c.kv_bytes_per_sequence_per_device)} per device",
            f"  weights           {_size(c.weight_bytes)} total, {_size(c.active_weight_bytes)} "
            f"active per token, {_size(c.weight_bytes_per_device)} per device",
            f"  KV budget/device  {_size(c.kv_budget_bytes_per_device)} = {c.kv_tokens:,} tokens "
            f"in {c.page_size}-token pages",
            f"  max sequences     {c.max_sequences:,}"
            + (
                f" (each with a {_size(c.state_bytes_per_sequence_per_device)} recurrent "
                "state per device)"
                if c.state_bytes_per_sequence_per_device
                else ""
            )
            + (
                ""
                if c.sliding_window is None
                else f" (each holding its last {c.sliding_window:,} keys' pages in its "
                f"{c.windowed_layers} layers with a sliding window"
                + (
                    f", their pool {c.swa_full_tokens_ratio:g} x the full layers' pages)"
                    if c.swa_full_tokens_ratio
                    else ")"
                )
            ),
        ]
    )
