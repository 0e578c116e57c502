"""Disaggregated prefill and decode: one engine computes prompts' KV, another decodes them.

vLLM's KVTransferConfig with its SharedStorageConnector: `LLM(kv_transfer_config={
"kv_connector": "SharedStorageConnector", "kv_role": "kv_producer",
"kv_connector_extra_config": {"shared_storage_path": DIR}})`. A producer (or "kv_both")
writes the KV of every prompt it finishes computing to DIR, one safetensors file per prompt
named by a hash of its token ids. A consumer (or "kv_both") looks each queued request's
prompt up there and, when the scheduler admits it, writes the stored rows into the request's
new pages and computes only the last prompt token, whose logits draw the first output token.
A disaggregated deployment sends each request to a producer with max_tokens=1, then the same
request to a consumer: prefills never stall the consumer's running decodes
(`scripts/disagg_proxy.py` does this in front of two servers).

A file holds the rows token by token (every leaf of the cache at each position: K and V per
KV head, or the MLA latent; fp8 pages' bytes and scales as stored), whole, not split by any
mesh: producer and consumer may differ in page size, mesh layout and number of processes.
They must agree on what makes the rows: the model config (a fingerprint of it), the cache
dtype and each leaf's row shape, checked when a request is queued (a ValueError naming the
field). The prompt's token ids are stored too and compared, so a hash collision loads nothing.

A request run with a LoRA adapter (engine/lora.py) has its own file: the key also hashes
the adapter's fingerprint (its files' hash, models.lora.fingerprint), the same in every
engine whatever its id there. A hybrid model's windowed layers (gpt-oss, Llama 4's chunked
ones: a pool of their own whose pages go back behind the window) store the rows of the
prompt's last `hybrid_window` positions only, the most the query after it reads, and the
consumer's table for them starts at that window (released places before it). A
linear-attention model's layers (Qwen3-Next, Qwen3.5, Kimi-Linear, Nemotron-H, Granite
4.0-H) keep a recurrent state, not pages: a producer's prefill stops one token short of the
prompt's end
(Sequence.prefill_stop), the step after which it stores the rows of those positions and
each layer's state row; a consumer loads both (its state row) and computes the last token
from there, as with any model (a producer whose own prefix cache supplied the prompt up to
that token, a snapshot there, stores them before the step that computes it). Not for a
sliding window on every layer, nor DeepSeek-V4, nor for requests that need their whole
prompt computed (prompt logprobs:
prefix_cache.reads_cache); those compute as usual. As vLLM's connector,
the engine never deletes the files. Every process of a multi-process mesh reads the store
(a filesystem they share), so a prompt's file must be there before its request is sent to a
consumer, as the proxy does: processes that saw different files would schedule differently.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
from collections.abc import Callable, Sequence

import jax
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from configs.model_config import ModelConfig
from engine.inputs import config_fields
from engine.prefix_cache import reads_cache
from engine.runner import next_pow2
from engine.scheduler_output import ScheduledItem, SchedulerOutput
from sharding.placement import put_replicated
from sharding.rules import replicated

# OffloadingConnector: vLLM's other spelling of KV offloading to host memory
# (engine/kv_offload.py), {"num_cpu_blocks": N, "block_size": tokens}; no transfer here.
CONNECTORS = ("SharedStorageConnector", "OffloadingConnector")
ROLES = ("kv_producer", "kv_consumer", "kv_both")
FORMAT = "moeserve-kv-1"
_KEYS = {"kv_connector", "kv_role", "kv_connector_extra_config"}
_EXTRA_KEYS = {"shared_storage_path"}
_OFFLOADING_KEYS = {"num_cpu_blocks", "block_size"}


@dataclasses.dataclass(frozen=True)
class KVTransferConfig:
    """Where prompts' KV goes and whether this engine writes it, reads it, or both (vLLM's
    KVTransferConfig fields; the keyword form, as there)."""

    kv_connector: str = "SharedStorageConnector"  # or "OffloadingConnector" (host memory)
    kv_role: str | None = None  # "kv_producer" (writes), "kv_consumer" (reads), "kv_both"
    # {"shared_storage_path": the directory producer and consumer share}
    kv_connector_extra_config: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.kv_connector not in CONNECTORS:
            raise ValueError(f"kv_connector={self.kv_connector!r}: expected one of {CONNECTORS}")
        if self.kv_role not in ROLES:
            raise ValueError(f"kv_role={self.kv_role!r}: expected one of {ROLES}")
        extra = self.kv_connector_extra_config
        if not isinstance(extra, dict):
            raise ValueError(f"kv_connector_extra_config={extra!r}: expected a dict")
        keys = _OFFLOADING_KEYS if self.offloading else _EXTRA_KEYS
        if set(extra) - keys:
            raise ValueError(
                f"kv_connector_extra_config: unsupported keys {sorted(set(extra) - keys)} "
                f"(expected {sorted(keys)})"
            )
        if self.offloading:
            if self.kv_role != "kv_both":
                raise ValueError(f"kv_role={self.kv_role!r}: OffloadingConnector needs 'kv_both'")
            if "num_cpu_blocks" not in extra:  # (block_size: the page size when unset)
                raise ValueError("kv_connector_extra_config.num_cpu_blocks: missing")
            for key, value in sorted(extra.items()):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(
                        f"kv_connector_extra_config.{key}={value!r}: must be an integer >= 1"
                    )
            return
        path = extra.get("shared_storage_path")
        if not isinstance(path, str) or not path:
            raise ValueError(
                f"kv_connector_extra_config.shared_storage_path={path!r}: must be a directory"
            )

    @property
    def offloading(self) -> bool:
        """vLLM's OffloadingConnector: the host tier of engine/kv_offload.py, no store."""
        return self.kv_connector == "OffloadingConnector"

    @property
    def shared_storage_path(self) -> str:
        return self.kv_connector_extra_config["shared_storage_path"]

    @property
    def saves(self) -> bool:
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def loads(self) -> bool:
        return self.kv_role in ("kv_consumer", "kv_both")

    @classmethod
    def of(cls, value) -> KVTransferConfig | None:
        """None, a KVTransferConfig, or vLLM's form: a dict or its JSON text."""
        if value is None or isinstance(value, cls):
            return value
        return cls(**config_fields("kv_transfer_config", value, _KEYS))


class StoreUnreadable(Exception):
    """A prompt's file went away (or broke) between its request's queueing and its load:
    the engine takes the step back and computes the prompt instead (LLM._launch)."""


def check_engine(config: KVTransferConfig | None, cfg: ModelConfig) -> None:
    """The models KV transfer cannot serve, refused before the weights are read."""
    if config is not None and cfg.kv_window:
        raise ValueError(
            f"kv_transfer_config: not supported for {cfg.model_type}'s sliding-window "
            f"attention on every layer (window {cfg.kv_window} tokens)"
        )


# Where a cache leaf's rows live (KVTransfer._pools): the main pool's pages, a hybrid
# model's windowed pool's, or a linear-attention layer's state arrays (a row a sequence).
MAIN, WINDOW, STATE = 0, 1, 2


def windowed_leaves(cfg: ModelConfig, kv) -> tuple[bool, ...]:
    """For each leaf of the paged cache `kv` (jax.tree.leaves order), whether it lives in
    a hybrid model's windowed pool (ModelConfig.hybrid_window): a windowed layer's, or
    DeepSeek-V4's per-token rows (its first len(layer_kv_widths) arrays of each layer; the
    entries after them stay in the main pool)."""
    if cfg.hybrid_window is None:
        return tuple(False for _ in jax.tree.leaves(kv))
    out = []
    for i, layer in enumerate(kv):
        n = len(jax.tree.leaves(layer))
        if cfg.is_dsv4:
            rows = len(cfg.layer_kv_widths(i))
        else:
            rows = 0 if cfg.attention_window(i) is None else n
        out += [j < rows for j in range(n)]
    return tuple(out)


class KVStore:
    """The shared directory: one safetensors file per prompt (its ids and rows), written
    whole under a temporary name and renamed, so a reader never sees half a file."""

    def __init__(self, path: str, fingerprint: dict[str, str]):
        self.path = pathlib.Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.meta = {"format": FORMAT, **fingerprint}

    def file(self, ids: Sequence[int], adapter: str = "") -> pathlib.Path:
        """The file of prompt `ids` run with `adapter` (its fingerprint; "": none)."""
        digest = hashlib.sha256(adapter.encode() + np.asarray(ids, np.int64).tobytes())
        return self.path / f"{digest.hexdigest()}.safetensors"

    def num_stored(self, ids: Sequence[int], adapter: str, strict: bool) -> int:
        """Positions of `ids` whose rows the store holds (0 without a file for them). A
        file made with other settings raises (strict) or counts as none."""
        path = self.file(ids, adapter)
        if not path.exists():
            return 0
        with safe_open(path, "numpy") as f:
            meta = f.metadata() or {}
            for key, mine in self.meta.items():
                if meta.get(key) != mine:
                    if not strict:
                        return 0
                    raise ValueError(
                        f"kv_transfer_config: {path} holds KV with {key}={meta.get(key)!r}, "
                        f"this engine's is {mine!r} (producer and consumer must serve the "
                        "same model with the same kv_cache_dtype)"
                    )
            stored = f.get_tensor("token_ids")
        n = stored.shape[0]
        return n if n <= len(ids) and np.array_equal(stored, np.asarray(ids[:n])) else 0

    def read(self, ids: Sequence[int], adapter: str, n: int, windows: Sequence[int]) -> list:
        """Each leaf's rows of positions [windows[i], n) (0: the first `n`; None: a state
        leaf's one row, whole); a windowed leaf's file holds its prompt's last rows only
        (KVTransfer.save)."""
        with safe_open(self.file(ids, adapter), "numpy") as f:
            total = f.get_slice("token_ids").get_shape()[0]
            rows = []
            for i, lo in enumerate(windows):
                if lo is None:
                    rows.append(f.get_tensor(f"leaf{i}"))
                    continue
                leaf = f.get_slice(f"leaf{i}")
                first = total - leaf.get_shape()[0]  # the position of its first row
                rows.append(leaf[lo - first : n - first])
            return rows

    def write(
        self, ids: Sequence[int], adapter: str, rows: list[np.ndarray], count: int | None = None
    ) -> bool:
        """Store `rows` (each [count, ...], or a state leaf's [1, ...]) of the first `count`
        positions (None: all) for the prompt `ids`; False if a file is there already."""
        path = self.file(ids, adapter)
        if path.exists():
            return False
        tensors = {"token_ids": np.asarray(ids[:count], np.int64)}
        tensors.update((f"leaf{i}", np.ascontiguousarray(r)) for i, r in enumerate(rows))
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        save_file(tensors, str(tmp), metadata=self.meta)
        os.replace(tmp, path)
        return True


def _gather(kv, slots, page_size: int, pools: tuple[int, ...]) -> list[jax.Array]:
    """Each cache leaf's rows at `slots` = (main, windowed pool's, state rows) [N]: [N, ...]
    (a page slot's row, or a state leaf's row)."""
    out = []
    for leaf, pool in zip(jax.tree.leaves(kv), pools, strict=True):
        s = slots[pool]
        out.append(leaf[s] if pool == STATE else leaf[s // page_size, s % page_size])
    return out


def _scatter(kv, slots, rows, page_size: int, pools: tuple[int, ...]):
    """`kv` with each leaf's rows at `slots` = (main, windowed pool's, state rows) [N] set
    to `rows` (slots past a pool: none)."""
    leaves, tree = jax.tree.flatten(kv)
    new = []
    for leaf, r, pool in zip(leaves, rows, pools, strict=True):
        s = slots[pool]
        at = s if pool == STATE else (s // page_size, s % page_size)
        new.append(leaf.at[at].set(r, mode="drop"))
    return jax.tree.unflatten(tree, new)


def _slots(page_ids, lo: int, n: int, page_size: int) -> np.ndarray:
    """Slot ids of a table's positions [lo, n)."""
    pos = np.arange(lo, n)
    return np.asarray(page_ids, np.int64)[pos // page_size] * page_size + pos % page_size


def _padded(slots: list[np.ndarray], pad: int) -> np.ndarray:
    """The slots end to end, padded with `pad` to a power of two (a program per size)."""
    flat = np.concatenate([np.zeros(0, np.int64), *slots])
    out = np.full(next_pow2(max(1, len(flat))), pad, np.int32)
    out[: len(flat)] = flat
    return out


class KVTransfer:
    """An engine's side of it: at queueing, how much of a prompt the store holds; before a
    step, the stored rows of the requests it admits written into their pages; after it, the
    rows of the prompts it completes gathered, and written to the store once the step is
    read back (the gather is queued behind the step on the device: no wait)."""

    def __init__(
        self, config, cfg: ModelConfig, kv, page_size: int, num_pages: int, mesh=None, loras=None
    ):
        """`loras`: the engine's LoRASlots (engine/lora.py), None without LoRA."""
        self.config = config
        self._adapter = (lambda lora_id: "") if loras is None else loras.fingerprint
        leaves = jax.tree.leaves(kv)
        model = repr(dataclasses.replace(cfg, name=""))  # not where it was loaded from
        # A linear-attention layer's arrays: their state rows ([rows, ...]), not pages.
        states = [cfg.is_linear_layer(i) for i, x in enumerate(kv) for _ in jax.tree.leaves(x)]
        rows = [
            [list(leaf.shape[1 if state else 2 :]), leaf.dtype.name]
            for leaf, state in zip(leaves, states, strict=True)
        ]
        self.store = KVStore(
            config.shared_storage_path,
            # (rows first: a dtype or shape that differs is named before the config's hash)
            {"rows": json.dumps(rows), "model": hashlib.sha256(model.encode()).hexdigest()[:16]},
        )
        self._page_size = page_size
        # A hybrid model's windowed layers (their own pool): the rows of a prompt's last
        # `_window` positions only, the most a query after it reads.
        self._windowed = windowed_leaves(cfg, kv)
        self._window = cfg.hybrid_window
        self._pools = tuple(
            STATE if state else WINDOW if w else MAIN
            for w, state in zip(self._windowed, states, strict=True)
        )
        self._states = any(states)
        # Past each pool (main, windowed, state rows): a write there is dropped.
        window_pages = max(
            [x.shape[0] for x, w in zip(leaves, self._windowed, strict=True) if w] + [0]
        )
        state_rows = max([x.shape[0] for x, s in zip(leaves, states, strict=True) if s] + [0])
        self._pad_slots = (num_pages * page_size, window_pages * page_size, state_rows)
        self._mesh = mesh
        gather = functools.partial(_gather, page_size=page_size, pools=self._pools)
        scatter = functools.partial(_scatter, page_size=page_size, pools=self._pools)
        if mesh is None:
            self._gather = jax.jit(gather)
            self._scatter = jax.jit(scatter, donate_argnums=0)
        else:  # rows leave replicated (every process can read them), the cache as it came
            self._gather = jax.jit(gather, out_shardings=replicated(mesh))
            shardings = jax.tree.map(lambda x: x.sharding, kv)
            self._scatter = jax.jit(scatter, donate_argnums=0, out_shardings=shardings)
        # Gathers in flight: (the step they follow, [(prompt ids, device rows)]).
        self._saving: list[tuple[SchedulerOutput, list]] = []
        self.num_saved_prompts = self.num_saved_tokens = 0

    def prefill_stop(self, ids: Sequence[int]) -> int:
        """Sequence.prefill_stop of a prompt this engine may store: a linear-attention
        model's prompt positions but the last (0: none)."""
        return len(ids) - 1 if self.config.saves and self._states else 0

    def num_loadable(self, ids: Sequence[int], params, lora_id: int, strict=False) -> int:
        """Prompt positions a request may load: the stored ones, short of its last token."""
        if not self.config.loads or not reads_cache(params):
            return 0
        stored = self.store.num_stored(ids, self._adapter(lora_id), strict)
        return min(stored, len(ids) - 1)

    def _first(self, n: int) -> int:
        """The first position a windowed layer reads for the query after `n` positions."""
        return max(0, n + 1 - self._window) if self._window else 0

    def _slots(self, items, spans, pads: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """(main, windowed pool's, state rows) slot ids, padded with `pads`: each item's
        positions [0, n) for `spans` = [(q, n), ...], in the windowed pool those from the
        query at q's window on; its state row."""
        size = self._page_size
        main = [_slots(it.page_ids, 0, n, size) for it, (_, n) in zip(items, spans, strict=True)]
        windowed = [
            _slots(it.window_page_ids, self._first(q), n, size)
            for it, (q, n) in zip(items, spans, strict=True)
            if self._window
        ]
        states = [np.asarray([it.state_slot]) for it in items if self._states]
        return _padded(main, pads[0]), _padded(windowed, pads[1]), _padded(states, pads[2])

    def _starts(self, n: int) -> list[int | None]:
        """KVStore.read's `windows` for a load of `n` positions."""
        return [None if p == STATE else self._first(n) if p == WINDOW else 0 for p in self._pools]

    def load(self, kv, items: Sequence[ScheduledItem], prompt_of: Callable):
        """`kv` with the stored rows of every item that loads (ScheduledItem.num_loaded):
        its positions [0, num_loaded), in a windowed pool from its query's window on."""
        loads = [it for it in items if it.num_loaded]
        if not loads:
            return kv
        spans = [(it.num_loaded, it.num_loaded) for it in loads]  # (the query after them)
        slots = self._slots(loads, spans, self._pad_slots)
        try:
            read = [
                self.store.read(
                    prompt_of(it),
                    self._adapter(it.lora_id),
                    it.num_loaded,
                    self._starts(it.num_loaded),
                )
                for it in loads
            ]
        except (OSError, SafetensorError) as e:
            raise StoreUnreadable(f"kv_transfer_config: a stored prompt's KV: {e}") from e
        rows = []
        for i, pool in enumerate(self._pools):
            leaf = np.concatenate([r[i] for r in read])
            pad = np.zeros((len(slots[pool]) - len(leaf), *leaf.shape[1:]), leaf.dtype)
            rows.append(np.concatenate([leaf, pad]))
        if self._mesh is not None:
            slots, rows = put_replicated((slots, rows), self._mesh)
        return self._scatter(kv, slots, rows)

    def save(self, kv, sched: SchedulerOutput, prompt_of: Callable, before=False) -> None:
        """Queue a gather of the rows of every prompt `sched` completes (its first sample).
        `before`: `kv` is the one `sched`'s step will read (its admissions' snapshots
        copied in), for the prompts of a linear-attention model whose prefix-cache hit
        reached their stop point: their state rows hold the state there until the step."""
        if not self.config.saves or (before and not self._states):
            return
        # (A prompt loaded from the store is there; decodes have nothing to store; before
        # the step, only a prompt admitted onto a snapshot can be at its stop point.)
        items = [
            it
            for it in sched.items
            if not (it.num_loaded or it.num_generated) and (it.state_from or not before)
        ]
        if not items:
            return
        # Decided from the steps alone (every process of a mesh gathers alike): not what
        # the store holds, which a process may see before another. (Samples of one prompt
        # queue it once.)
        gathers, queued = [], {key for _, g in self._saving for key, _, _ in g}
        for it in items:
            prompt = prompt_of(it)
            # Its prompt's computed, or (a linear-attention model) all of it but the last
            # token: the state row holds the state there now.
            n = len(prompt) - 1 if self._states else len(prompt)
            if before:  # (a snapshot restored at n: the step computes the last token)
                done = it.start_pos == n
            else:
                done = it.start_pos < n == it.kv_len_after if self._states else it.sample
            if not (done and n):
                continue
            ids = tuple(prompt)
            key = (ids, self._adapter(it.lora_id))
            if key in queued:
                continue
            # Its window's last query is at n - 1, the next one's at n: from n - window on.
            slots = self._slots([it], [(max(0, n - 1), n)], (0, 0, 0))
            if self._mesh is not None:
                slots = put_replicated(slots, self._mesh)
            gathers.append((key, n, self._gather(kv, slots)))
            queued.add(key)
        if gathers:
            self._saving.append((sched, gathers))

    def written(self, sched: SchedulerOutput) -> None:
        """Write the rows gathered after `sched`, now read back (process 0 writes)."""
        while self._saving and self._saving[0][0] is sched:
            for (ids, adapter), n, rows in self._saving.pop(0)[1]:
                if jax.process_index() != 0 or self.store.file(ids, adapter).exists():
                    continue
                # (a windowed leaf: its last `_window` positions; a state leaf: its row)
                keep = [(n, min(n, self._window or n), 1)[p] for p in self._pools]
                rows = [np.asarray(r)[:k] for r, k in zip(jax.device_get(rows), keep, strict=True)]
                if self.store.write(ids, adapter, rows, n):
                    self.num_saved_prompts += 1
                    self.num_saved_tokens += n

    def stats(self) -> dict[str, int]:
        return {
            "kv_transfer_saved_prompts": self.num_saved_prompts,
            "kv_transfer_saved_tokens": self.num_saved_tokens,
        }
