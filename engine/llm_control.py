"""What changes a running engine besides requests: its weights, its LoRA adapters, its
prefix cache, and its device memory (sleep / wake_up). `LLM` takes these methods from
`EngineControl` (vLLM's names), so engine/llm.py keeps to requests and the step loop; and
`stats()`.

Sleep (vLLM's sleep mode, for RL loops that train and generate on the same devices):
`sleep(level=1)` copies the weights to the host and frees their device buffers and the KV
cache's; `wake_up()` puts them back (same shardings: the compiled steps serve them) with
an empty cache. `sleep(level=2)` frees the weights without a copy: the caller brings new
ones with `load_weights` after `wake_up()`. Requests are refused while asleep (and at level
2 until new weights come); sleeping with unfinished requests is refused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from engine import lora
from models.load import replacement_params
from sharding.placement import put_tree
from sharding.rules import param_shardings


class _OnHost:
    """A device array's host copy: its shape, sharding and each shard this process holds
    (so the arrays of a mesh over several processes come back too). Not a pytree node."""

    def __init__(self, x: jax.Array):
        self.shape, self.sharding = x.shape, x.sharding
        self.shards = [(s.device, np.asarray(s.data)) for s in x.addressable_shards]

    def to_device(self) -> jax.Array:
        if not isinstance(self.sharding, NamedSharding):
            # One device: uncommitted, as the engine made it (a committed copy would make
            # every step compile again).
            return jnp.asarray(self.shards[0][1])
        arrays = [jax.device_put(data, device) for device, data in self.shards]
        return jax.make_array_from_single_device_arrays(self.shape, self.sharding, arrays)


def _free(tree) -> None:
    for x in jax.tree.leaves(tree):
        x.delete()


class EngineControl:
    """LLM's control methods (the attributes they use are LLM's)."""

    _sleep_level = 0  # 0: awake; 1 or 2 while asleep
    _host_params = None  # sleep(level=1)'s copy of the weights
    _eplb = None  # engine.eplb.ExpertBalancer (enable_eplb)
    _offload = None  # engine.kv_offload.KVOffload (kv_offloading_size)
    _transfer = None  # engine.kv_transfer.KVTransfer (kv_transfer_config with a store)

    def add_lora(self, lora_request: lora.LoRARequest) -> bool:
        """vLLM's: read an adapter now (errors raise here); False if it was held already."""
        return lora.add_now(self._lora, lora_request)

    def remove_lora(self, lora_int_id: int) -> bool:
        """vLLM's: drop an adapter's weights (False if not held; ValueError while requests use
        it). Its id stays its adapter's: add_lora reads the same folder again."""
        return lora.require(self._lora).remove(lora_int_id, self._scheduler.lora_ids_queued())

    def list_loras(self) -> set[int]:
        """vLLM's: the ids of the adapters held."""
        return set() if self._lora is None else self._lora.held()

    def load_weights(self, weights) -> None:
        """Serve other weights of the same model (an RL trainer's updated policy; vLLM's
        load_weights): a checkpoint directory or preset of the served config, or a params
        tree shaped as `llm.params` (models.load.replacement_params; with EPLB, as without:
        one stack per logical expert, put in the current placement's slots). Refused while
        requests are unfinished or asleep; the prefix cache is reset (its pages hold the old
        weights' KV)."""
        self._check_idle("load_weights")
        if self._sleep_level:
            raise ValueError("load_weights: the engine is asleep (wake_up first)")
        new = replacement_params(self.config, weights, self._seed, host=bool(self.mesh))
        if self._eplb is not None:  # onto the physical slots of the current placement
            new = put_tree(self._eplb.expand(new), self._eplb.shardings(self.config, self.mesh))
        elif self.mesh is not None:
            new = put_tree(new, param_shardings(self.config, self.mesh))
        self.params = jax.tree.map(jnp.asarray, new)
        self.reset_prefix_cache()

    def rebalance_experts(self) -> None:
        """Place every MoE layer's experts for the loads of the last window_size steps now
        (EPLB, engine/eplb.py; it also happens every step_interval steps). The steps already
        dispatched finish on the old placement."""
        if self._eplb is None:
            raise ValueError("rebalance_experts: the engine runs without enable_eplb=True")
        self._check_awake()
        self.params = self._eplb.rebalance(self.params, self.mesh, len(self._dispatched))

    def reset_prefix_cache(self) -> bool:
        """Forget every cached page (vLLM's: after new weights, or to measure cold); False
        when prefix caching is off."""
        cache = self._scheduler.prefix_cache
        if cache is not None:
            cache.reset()
        return cache is not None

    def sleep(self, level: int = 1) -> None:
        """Free the device memory of the weights (level 1: copied to the host first; 2:
        not) and of the KV cache (vLLM's sleep mode); a draft model's engine sleeps at
        level 1 (new weights for the target do not bring the draft's)."""
        if level not in (1, 2):
            raise ValueError(f"level={level!r}: must be 1 or 2")
        self._check_idle("sleep")
        if self._sleep_level:
            raise ValueError("sleep: the engine is asleep already")
        if self.params is not None:  # (None: freed by a sleep(level=2) before)
            if level == 1:
                self._host_params = jax.tree.map(_OnHost, self.params)
            _free(self.params)
        _free(self._kv)
        self.params = self._kv = None
        self._penalty_state = None  # (device state of running requests: there are none)
        self._no_prev_tokens = None
        if self._lora is not None:
            self._lora.forget_device()
        self.reset_prefix_cache()
        if hasattr(draft := self._scheduler.speculative, "sleep"):  # a draft model's engine
            draft.sleep()
        self._sleep_level = level

    def wake_up(self) -> None:
        """Undo sleep(): the KV cache (empty) and, after level 1, the weights."""
        if not self._sleep_level:
            raise ValueError("wake_up: the engine is awake")
        self._kv = self._new_kv()
        if self._host_params is not None:
            self.params = jax.tree.map(_OnHost.to_device, self._host_params)
            self._host_params = None
        if hasattr(draft := self._scheduler.speculative, "wake_up"):
            draft.wake_up()
        self._sleep_level = 0

    def is_sleeping(self) -> bool:
        return bool(self._sleep_level)

    def _check_awake(self) -> None:
        """Before a request is queued: ValueError while it could not run."""
        if self._sleep_level:
            raise ValueError("request: the engine is asleep (wake_up first)")
        if self.params is None:
            raise ValueError("request: sleep(level=2) freed the weights (load_weights first)")

    def _check_idle(self, what: str) -> None:
        if self.has_unfinished():
            raise ValueError(f"{what}: requests are unfinished (finish or abort them)")

    def stats(self) -> dict:
        """The engine's counters: pages, compilations, steps, expert load, and those of
        its prefix cache, speculation, KV transfer and offloading, EPLB and draft model."""
        s = self._scheduler.stats()
        s.update(
            # Compilations of this model's step in this process (engines serving the same
            # model config share them), against the buckets this engine can ever use.
            num_compiles=self._steps.num_compiles(),
            num_buckets=len(self._buckets.pairs),
            num_step_shapes=len(self._step_shapes),
            num_steps=self._num_steps,
            # Steps dispatched while the previous one was still running (async scheduling).
            num_steps_dispatched_ahead=self._num_dispatched_ahead,
            num_tokens_generated=self._num_tokens_generated,
            # step()'s seconds on the host, and blocked reading tokens back (device time)
            host_seconds=self._host_seconds,
            wait_seconds=self._wait_seconds,
            page_size=self.page_size,
            kv_cache_dtype=self.kv_dtype.name,
            max_model_len=self.max_model_len,
            # Token copies per routed expert, one list per MoE layer in layer order (the MTP
            # module's last): the last step's, and the sum over every step so far.
            expert_load=self._expert_load.tolist(),
            expert_load_total=self._expert_load_total.tolist(),
            **(self._transfer.stats() if self._transfer else {}),
            **(self._offload.stats() if self._offload else {}),
            **(self._eplb.stats() if self._eplb else {}),
            **(spec.stats() if hasattr(spec := self._scheduler.speculative, "stats") else {}),
        )
        return s
