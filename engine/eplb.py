"""Expert-parallel load balancing for an engine on a mesh (vLLM's `enable_eplb` and
`eplb_config`): `LLM(..., mesh="ep=8", enable_eplb=True, eplb_config={
"num_redundant_experts": 8, "window_size": 1000, "step_interval": 3000})`.

Every MoE layer serves its E experts from E + num_redundant_experts physical slots spread
over the ep devices (sharding/eplb.py). Each step reports the token copies every logical
expert and every physical slot received (padding not counted); the engine keeps the last
`window_size` steps' and every `step_interval` steps computes a new placement from the
window's per-expert loads and moves the experts whose device changed, between steps (the
steps already dispatched run on the weights they were given). `LLM.rebalance_experts()` does
it at once; `initial_load` (a JSON file of a past run's `stats()["expert_load_total"]`)
places them before the first step. Loads come back identical to every process of a mesh,
so every process places alike.

`llm.stats()["eplb"]`: the placement (logical expert per physical slot, per MoE layer), the
number of rebalances, the balancedness of the copies each device received since the last
one (mean over devices / max, averaged over layers; 1.0 is even; None before any copy) and
that of the placement the last rebalance replaced.
"""

from __future__ import annotations

import collections
import dataclasses
import json

import numpy as np
from absl import logging

from configs.model_config import ModelConfig
from engine.inputs import config_fields
from sharding import eplb as placement
from sharding.mesh import MeshConfig
from sharding.rules import param_shardings

_KEYS = {
    "window_size",
    "step_interval",
    "num_redundant_experts",
    "log_balancedness",
    "initial_load",
}


@dataclasses.dataclass(frozen=True)
class EPLBConfig:
    """vLLM's EPLBConfig fields, and `initial_load`: a JSON file of token copies per
    expert, [MoE layer][expert] (what `llm.stats()["expert_load_total"]` lists after a run
    of representative traffic), to place the experts from before the first step (SGLang's
    --init-expert-location; None: evenly)."""

    window_size: int = 1000  # steps whose loads a placement is computed from
    step_interval: int = 3000  # steps between rebalances
    num_redundant_experts: int = 0  # extra physical slots per MoE layer (a multiple of ep)
    log_balancedness: bool = False  # log the balancedness at each rebalance
    initial_load: str | None = None  # JSON file: [L_moe][E] copies to place from at start

    def __post_init__(self):
        for name in ("window_size", "step_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"eplb_config.{name}={value!r}: must be an integer >= 1")
        r = self.num_redundant_experts
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"eplb_config.num_redundant_experts={r!r}: must be an integer >= 0")
        if not isinstance(self.log_balancedness, bool):
            raise ValueError(
                f"eplb_config.log_balancedness={self.log_balancedness!r}: must be a bool"
            )
        if self.initial_load is not None and not isinstance(self.initial_load, str):
            raise ValueError(
                f"eplb_config.initial_load={self.initial_load!r}: must be a JSON file's path"
            )

    @classmethod
    def of(cls, value) -> EPLBConfig:
        """None (the defaults), an EPLBConfig, or vLLM's form: a dict or its JSON text."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        return cls(**config_fields("eplb_config", value, _KEYS))


class ExpertBalancer:
    """The placement of every MoE layer's experts and the loads that steer it (host side)."""

    def __init__(self, config: EPLBConfig, cfg: ModelConfig, ep: int):
        self.config = config
        self.ep = ep
        self.num_logical = cfg.num_experts
        self.num_physical = cfg.num_experts + config.num_redundant_experts
        # Replicas of one expert: at most every extra slot, plus its own.
        self.max_replicas = config.num_redundant_experts + 1
        num_moe = num_moe_layers(cfg)
        first = placement.initial_placement(self.num_logical, self.num_physical, ep)
        self.placement = np.tile(first, (num_moe, 1))  # [L_moe, E_p]
        if config.initial_load is not None:
            mtp = bool(cfg.mtp_drafts and cfg.num_experts)
            load = read_initial_load(config.initial_load, num_moe, self.num_logical, mtp)
            rows = len(load)  # (a run's loads without the MTP layer's: it starts even)
            self.placement[:rows] = placement.rebalance(load, self.placement[:rows], ep)
        self._window: collections.deque = collections.deque(maxlen=config.window_size)
        self._since = np.zeros((num_moe, self.num_physical), np.int64)  # copies per slot
        self._skip = 0  # steps read back next that ran on the placement before the last
        self._steps = 0  # steps since the last rebalance
        self.num_rebalances = 0
        self.balancedness_before = None  # of the placement the last rebalance replaced

    # -- params ------------------------------------------------------------------------
    def expand(self, params: dict) -> dict:
        """Host params with logical expert stacks -> physical stacks and tables."""
        return placement.expand_params(params, self.placement, self.num_logical, self.max_replicas)

    def shardings(self, cfg: ModelConfig, mesh) -> dict:
        return placement.with_table_shardings(param_shardings(cfg, mesh), mesh)

    # -- loads ---------------------------------------------------------------------------
    def record(self, load: np.ndarray) -> np.ndarray:
        """One step's load as the step reports it, [L_moe, E + E_p] (per logical expert,
        then per physical slot); returns the logical part."""
        load = np.asarray(load, np.int64)
        logical, physical = load[:, : self.num_logical], load[:, self.num_logical :]
        self._window.append(logical)
        if self._skip:
            self._skip -= 1
        else:
            self._since += physical
        self._steps += 1
        return logical

    def due(self) -> bool:
        return self._steps >= self.config.step_interval

    def balancedness(self) -> float | None:
        """Of the copies each device received since the last rebalance (None: none yet)."""
        if not self._since.any():
            return None
        return placement.balancedness(self._since, self.ep)

    def rebalance(self, params: dict, mesh, in_flight: int = 0) -> dict:
        """The params with every MoE layer's experts placed for the window's loads;
        `in_flight`: steps dispatched on the old placement, not yet read back."""
        if self._window:
            load = np.sum(self._window, axis=0)
            self.balancedness_before = self.balancedness()
            new, old = placement.rebalance(load, self.placement, self.ep), self.placement

            def move(i: int, moe: dict) -> dict:
                if np.array_equal(old[i], new[i]):
                    return moe
                return placement.move_experts(moe, old[i], new[i], mesh)

            params = placement.map_moe(params, move)
            self.placement = new
            if self.config.log_balancedness:
                logging.info("eplb: rebalanced; balancedness before: %s", self.balancedness_before)
        self._since[:] = 0
        self._skip = in_flight
        self._steps = 0
        self.num_rebalances += 1
        return params

    def stats(self) -> dict:
        return {
            "eplb": {
                "num_physical_experts": self.num_physical,
                "num_rebalances": self.num_rebalances,
                # Copies each device received since the last rebalance, per MoE layer.
                "device_load": placement.device_load(self._since, self.ep).tolist(),
                "balancedness": self.balancedness(),
                "balancedness_before_rebalance": self.balancedness_before,
                "placement": self.placement.tolist(),
            }
        }


def num_moe_layers(cfg: ModelConfig) -> int:
    """MoE layers EPLB places: the decoder layers', and the MTP module's when it drafts."""
    num = sum(cfg.is_moe_layer(i) for i in range(cfg.num_layers))
    return num + bool(cfg.mtp_drafts and cfg.num_experts)


def read_initial_load(path: str, num_moe: int, num_experts: int, mtp: bool = False) -> np.ndarray:
    """[L_moe, E] non-negative copies from eplb_config.initial_load's JSON file; with `mtp`
    (the last of the num_moe layers is the MTP module's) also [L_moe - 1, E], the loads of
    a run that did not draft."""
    field = f"eplb_config.initial_load={path!r}"
    try:
        with open(path) as f:
            load = np.asarray(json.load(f), np.float64)
    except FileNotFoundError:
        raise FileNotFoundError(f"{field}: no such file") from None
    except (json.JSONDecodeError, ValueError, TypeError) as e:
        raise ValueError(f"{field}: not a JSON list of per-expert counts ({e})") from None
    shapes = [(num_moe, num_experts)] + [(num_moe - 1, num_experts)] * mtp
    if load.shape not in shapes or not np.isfinite(load).all() or (load < 0).any():
        layers = f"{num_moe} MoE layers" + f" (or {num_moe - 1}: the MTP module's last)" * mtp
        raise ValueError(
            f"{field}: expected non-negative counts of shape [{layers}, "
            f"{num_experts} experts], found shape {list(load.shape)}"
        )
    return load


def balancer_for(
    enable_eplb: bool, eplb_config, cfg: ModelConfig, mesh: MeshConfig | None
) -> ExpertBalancer | None:
    """The engine's balancer (None without enable_eplb); every check before the weights are
    read."""
    if not isinstance(enable_eplb, bool):
        raise ValueError(f"enable_eplb={enable_eplb!r}: must be a bool")
    config = EPLBConfig.of(eplb_config)
    if not enable_eplb:
        if eplb_config is not None:
            raise ValueError("eplb_config: set without enable_eplb=True")
        return None
    if not cfg.num_experts:
        raise ValueError(f"enable_eplb=True: {cfg.model_type} has no routed experts")
    ep = mesh.ep if mesh is not None else 1
    if ep < 2:
        raise ValueError(f"enable_eplb=True: needs a mesh with ep >= 2 (ep={ep})")
    r = config.num_redundant_experts
    if r % ep:
        raise ValueError(
            f"eplb_config.num_redundant_experts={r}: must be a multiple of ep={ep} "
            "(every device holds as many experts)"
        )
    return ExpertBalancer(config, cfg, ep)
