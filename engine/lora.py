"""Multi-LoRA serving (vLLM's `enable_lora`): requests name an adapter with a LoRARequest,
and one step runs tokens of several adapters (and of none) side by side.

`LLM(enable_lora=True, max_loras=M, max_lora_rank=R)` keeps M adapter slots in the step
(models/lora.py: A [M + 1, K, R], B [M + 1, R, N] per target; slot 0: no adapter). An
adapter is read from its PEFT directory once, when a request first names it (errors raise
then, before the request is queued), and kept on the host by `lora_int_id`. The scheduler
admits a request only while the running requests use at most M distinct adapters
(Scheduler.max_loras); others wait, later requests may pass them. Each step, the adapters of
its requests get slots: those already in one keep it, the others take the slot of an adapter
no request in the step uses, and the stacks go to the device again when a slot changed.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from configs.model_config import ModelConfig
from models import lora as lora_model


@dataclasses.dataclass(frozen=True)
class LoRARequest:
    """vLLM's: an adapter's name, its id (>= 1; one id, one adapter) and its PEFT folder."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self):
        if not isinstance(self.lora_name, str) or not self.lora_name:
            raise ValueError(f"lora_name={self.lora_name!r}: must be a non-empty string")
        i = self.lora_int_id
        if not isinstance(i, int) or isinstance(i, bool) or i < 1:
            raise ValueError(f"lora_int_id={i!r}: must be an int >= 1")
        if not isinstance(self.lora_path, str):
            raise ValueError(f"lora_path={self.lora_path!r}: must be a string")


def check_engine(enable, max_loras, max_lora_rank) -> None:
    """LLM's LoRA arguments; ValueError naming the one that cannot be."""
    if enable:
        check_settings(max_loras, max_lora_rank)


def check_settings(max_loras, max_lora_rank) -> None:
    for name, v in (("max_loras", max_loras), ("max_lora_rank", max_lora_rank)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}={v!r}: must be an int >= 1")


class LoRASlots:
    """The host copies of the adapters and the step's slot stacks."""

    def __init__(self, cfg: ModelConfig, max_loras: int, max_lora_rank: int, place=jnp.asarray):
        check_settings(max_loras, max_lora_rank)
        self.cfg, self.max_loras, self.max_rank, self._place = cfg, max_loras, max_lora_rank, place
        self.dims = lora_model.targets(cfg)
        if not self.dims:
            raise ValueError(f"enable_lora=True: {cfg.model_type} has no projection LoRA targets")
        dt = jnp.dtype(cfg.dtype)
        s, r = max_loras + 1, max_lora_rank
        self._host = {
            key: (np.zeros((s, k, r), dt), np.zeros((s, r, n), dt))
            for key, (k, n) in self.dims.items()
        }
        self._adapters: dict[int, dict] = {}  # lora_int_id -> weights
        self._paths: dict[int, tuple[str, str]] = {}  # lora_int_id -> (name, path)
        self._fingerprints: dict[int, str] = {0: ""}  # lora_int_id -> models.lora.fingerprint
        self._slot_of: dict[int, int] = {}  # adapters in a slot
        self._holder: list[int | None] = [None] * s  # slot -> lora_int_id (slot 0: none)
        self._tree = None
        self.num_loads = 0  # slot (re)fills, for stats

    def add(self, request: LoRARequest | None) -> int:
        """The request's lora_int_id (0: none), reading its adapter the first time."""
        if request is None:
            return 0
        if not isinstance(request, LoRARequest):
            raise ValueError(f"lora_request={request!r}: expected a LoRARequest or None")
        rid, known = request.lora_int_id, self._paths.get(request.lora_int_id)
        if known is not None and known != (request.lora_name, request.lora_path):
            raise ValueError(
                f"lora_int_id={rid}: already names adapter {known[0]!r} at {known[1]!r}"
            )
        if rid not in self._adapters:  # (again after remove: the same folder)
            self._adapters[rid] = lora_model.load_adapter(
                request.lora_path, self.cfg, self.max_rank
            )
            self._paths[rid] = (request.lora_name, request.lora_path)
            self._fingerprints[rid] = lora_model.fingerprint(request.lora_path)
        return rid

    def remove(self, rid: int, queued: set[int]) -> bool:
        """Drop an adapter's weights and slot; False if not held. ValueError while requests
        (`queued`: their ids) use it. The id stays bound to its name and folder: the prefix
        cache keys pages by id (engine/prefix_cache.py)."""
        if rid not in self._adapters:
            return False
        if rid in queued:
            raise ValueError(f"lora_int_id={rid}: queued or running requests use it")
        del self._adapters[rid]
        slot = self._slot_of.pop(rid, None)
        if slot is not None:
            self._holder[slot] = None
        return True

    def fingerprint(self, rid: int) -> str:
        """The weights of adapter `rid` as other engines know them ("" for none)."""
        return self._fingerprints[rid]

    def forget_device(self) -> None:
        """Drop the stacks' device copies (LLM.sleep); tree() places them again."""
        self._tree = None

    def next_free_id(self) -> int:
        """An id no adapter was ever given here."""
        return max(self._paths, default=0) + 1

    def held(self) -> set[int]:
        """The ids of the adapters whose weights are held."""
        return set(self._adapters)

    def assign(self, lora_ids) -> dict[int, int]:
        """Slots for the distinct adapters `lora_ids` (at most max_loras besides 0)."""
        want = sorted(set(lora_ids) - {0})
        if len(want) > self.max_loras:
            raise ValueError(f"{len(want)} adapters in one step: more than max_loras")
        for rid in want:
            if rid in self._slot_of:
                continue
            free = [i for i in range(1, len(self._holder)) if self._holder[i] not in want]
            slot = next((i for i in free if self._holder[i] is None), free[0])
            self._fill(slot, rid)
        return {0: 0, **{rid: self._slot_of[rid] for rid in want}}

    def _fill(self, slot: int, rid: int) -> None:
        old = self._holder[slot]
        if old is not None:
            del self._slot_of[old]
        weights = self._adapters[rid]
        for key, (a, b) in self._host.items():
            a[slot] = 0
            b[slot] = 0
            if key in weights:
                wa, wb = weights[key]
                a[slot, :, : wa.shape[1]] = wa
                b[slot, : wb.shape[0]] = wb
        self._holder[slot], self._slot_of[rid] = rid, slot
        self._tree = None
        self.num_loads += 1

    def tree(self) -> list[dict]:
        """Per layer {leaf: (A, B)}: the stacks the step reads (params["lora"])."""
        if self._tree is None:
            layers = [{} for _ in range(self.cfg.num_layers)]
            for (i, _, name), (a, b) in self._host.items():
                layers[i][name] = (a, b)
            # Placed from copies: on a CPU the device array may share the host buffer, which
            # _fill overwrites while a step that read the old stacks may still run.
            self._tree = jax.tree.map(lambda x: self._place(x.copy()), layers)
        return self._tree

    def token_slots(self, items, num_tokens: int) -> np.ndarray:
        """[num_tokens] int32: each packed row's slot (padding rows: 0)."""
        slots = self.assign([it.lora_id for it in items])
        per_item = [slots[it.lora_id] for it in items]
        out = np.zeros(num_tokens, np.int32)
        rows = np.repeat(np.asarray(per_item, np.int32), [len(it.token_ids) for it in items])
        out[: rows.size] = rows
        return out


def slots_for(enable: bool, cfg: ModelConfig, max_loras: int, max_rank: int, mesh=None):
    """An engine's LoRASlots (their stacks replicated over `mesh`), None without LoRA."""
    if not enable:
        return None
    if mesh is None:
        return LoRASlots(cfg, max_loras, max_rank)
    from sharding.placement import put_replicated

    return LoRASlots(cfg, max_loras, max_rank, lambda x: put_replicated(x, mesh))


def require(slots: LoRASlots | None) -> LoRASlots:
    """An engine's slots; ValueError for an engine without LoRA."""
    if slots is None:
        raise ValueError("lora_request: this engine was built without enable_lora=True")
    return slots


def add_now(slots: LoRASlots | None, request: LoRARequest) -> bool:
    """LLM.add_lora: read `request`'s adapter now; False if it was held already."""
    if not isinstance(request, LoRARequest):
        raise ValueError(f"lora_request={request!r}: expected a LoRARequest")
    new = request.lora_int_id not in require(slots).held()
    slots.add(request)
    return new


def lora_ids(slots: LoRASlots | None, lora_request, n: int) -> list[int]:
    """Each of n prompts' lora_int_id (0: none) from generate's `lora_request`: None, one
    LoRARequest for all, or a list of n (None entries: the base model)."""
    if lora_request is None:
        return [0] * n
    require(slots)
    many = isinstance(lora_request, list | tuple)
    if many and len(lora_request) != n:
        raise ValueError(f"lora_request: {len(lora_request)} given for {n} prompts")
    return [slots.add(r) for r in (lora_request if many else [lora_request] * n)]


def for_step(slots: LoRASlots | None, items, batch, params: dict):
    """(batch, params) for a step: with LoRA, each row's slot and the adapters' stacks."""
    if slots is None:
        return batch, params
    rows = slots.token_slots(items, batch.token_ids.shape[0])
    return batch._replace(lora_slots=rows), {**params, "lora": slots.tree()}
