"""Presence, frequency and repetition penalties: token counts kept on the device.

A penalized request needs, at every step, how often each vocabulary token occurs in its
output and whether it occurs in its prompt. Sending that from the host would cost a
[rows, distinct tokens] upload per step that grows with the output (and with a 128k prompt,
up to the vocabulary). Instead the engine keeps a `PenaltyState` on the device, one row per
slot (`PenaltySlots` gives each running penalized request one), and the step itself
updates it from the tokens it feeds: a token at a position below the request's prompt length
marks the prompt row, one at or past it counts as output. So the counts follow whatever
the step computed (chunked prefill, a recompute after preemption, the token an async step
feeds from the device) without the host knowing any sampled token. A row is zeroed by the
step that feeds its request's position 0 (admission, or re-admission after preemption). A
request whose first step starts past position 0 (its first pages from the prefix cache, a
KV store or the sample it shares them with; after a preemption, output tokens too) has its
row zeroed and the tokens before that position marked and counted before that step
(`seed_rows`): the state the steps feeding them would have left.

The penalties, in vLLM's order on the raw logits before temperature and the filters (so
greedy rows are penalized too): repetition (HF's RepetitionPenaltyLogitsProcessor, logit /
r when positive, * r otherwise, for tokens in prompt or output), then frequency and presence
(OpenAI: logit - frequency * count - presence * [count > 0], output tokens only). Every
row's result depends on its own row only, so batch invariance holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sharding.placement import put_replicated
from sharding.rules import replicated


class PenaltyState(NamedTuple):
    """Per slot, over the vocabulary: the output's token counts and the prompt's tokens."""

    output_counts: jax.Array  # [R, V] int32
    in_prompt: jax.Array  # [R, V] bool


def state_bytes(num_slots: int, vocab: int) -> int:
    """Device bytes of init_state(num_slots, vocab): int32 counts and bool flags."""
    return num_slots * vocab * (4 + 1)


def init_state(
    num_slots: int, vocab: int, sharding: jax.sharding.Sharding | None = None
) -> PenaltyState:
    """A zeroed state; with a `sharding` (a mesh's replicated one) created in place."""

    def make():
        return PenaltyState(
            jnp.zeros((num_slots, vocab), jnp.int32), jnp.zeros((num_slots, vocab), bool)
        )

    if sharding is None:
        return make()
    return jax.jit(make, out_shardings=sharding)()


def apply_penalties(
    logits: jax.Array,  # [S, V] f32
    output_counts: jax.Array,  # [S, V] int32
    in_prompt: jax.Array,  # [S, V] bool
    repetition: jax.Array,  # [S] f32, 1 = off
    presence: jax.Array,  # [S] f32, 0 = off
    frequency: jax.Array,  # [S] f32, 0 = off
) -> jax.Array:  # [S, V] f32
    """The penalized logits; a row with all three off comes back bitwise unchanged."""
    seen = in_prompt | (output_counts > 0)
    r = jnp.where(seen, repetition[:, None], 1.0)
    logits = jnp.where(logits > 0, logits / r, logits * r)
    counts = output_counts.astype(jnp.float32)
    logits = logits - frequency[:, None] * counts
    return logits - presence[:, None] * (output_counts > 0).astype(jnp.float32)


def update_state(
    state: PenaltyState,
    token_ids: jax.Array,  # [T] int32, the tokens the step feeds (async feeds resolved)
    positions: jax.Array,  # [T] int32
    cu_q_lens: jax.Array,  # [S+1] int32
    kv_lens: jax.Array,  # [S] int32
    slot: jax.Array,  # [S] int32, -1 = the row keeps no counts
    prompt_len: jax.Array,  # [S] int32
) -> PenaltyState:
    """Zero the rows whose request starts at position 0 in this step, then add the step's
    tokens: prompt positions mark `in_prompt`, later ones count in `output_counts`."""
    num_slots = state.output_counts.shape[0]
    num_tokens = token_ids.shape[0]
    q_lens = cu_q_lens[1:] - cu_q_lens[:-1]
    drop = num_slots  # an out-of-range slot: the scatters below skip it
    row_slot = jnp.where(slot >= 0, slot, drop)
    starts = (q_lens > 0) & (kv_lens - q_lens == 0)
    fresh = jnp.where(starts, row_slot, drop)
    counts = state.output_counts.at[fresh].set(0, mode="drop")
    in_prompt = state.in_prompt.at[fresh].set(False, mode="drop")
    # The row owning token t: cu_q_lens[owner] <= t < cu_q_lens[owner + 1]; padding tokens
    # (t >= cu_q_lens[-1]) write nowhere.
    t = jnp.arange(num_tokens, dtype=jnp.int32)
    owner = jnp.clip(jnp.searchsorted(cu_q_lens, t, side="right") - 1, 0, slot.shape[0] - 1)
    tok_slot = jnp.where(t < cu_q_lens[-1], row_slot[owner], drop)
    is_output = positions >= prompt_len[owner]
    counts = counts.at[jnp.where(is_output, tok_slot, drop), token_ids].add(1, mode="drop")
    in_prompt = in_prompt.at[jnp.where(is_output, drop, tok_slot), token_ids].set(True, mode="drop")
    return PenaltyState(counts, in_prompt)


def seed_rows(
    state: PenaltyState,
    slots: jax.Array,  # [M] int32, -1 = none
    tokens: jax.Array,  # [N] int32: tokens the rows' steps will not feed
    owner: jax.Array,  # [N] int32: the index into `slots` of each token's row, -1 = padding
    is_output: jax.Array,  # [N] bool: an output token (else a prompt token)
) -> PenaltyState:
    """Rows `slots` zeroed, then each of `tokens` marked in its row's `in_prompt` (prompt
    tokens) or counted in its `output_counts` (output tokens), as update_state would."""
    drop = state.output_counts.shape[0]  # an out-of-range row: the scatters skip it
    rows = jnp.where(slots >= 0, slots, drop)
    counts = state.output_counts.at[rows].set(0, mode="drop")
    in_prompt = state.in_prompt.at[rows].set(False, mode="drop")
    tok_rows = jnp.where(owner >= 0, rows[jnp.maximum(owner, 0)], drop)
    counts = counts.at[jnp.where(is_output, tok_rows, drop), tokens].add(1, mode="drop")
    in_prompt = in_prompt.at[jnp.where(is_output, drop, tok_rows), tokens].set(True, mode="drop")
    return PenaltyState(counts, in_prompt)


_seed_rows = jax.jit(seed_rows, donate_argnums=0)


def penalize(
    logits: jax.Array,  # [S, V] f32
    state: PenaltyState,  # already updated with this step's tokens
    slot: jax.Array,  # [S] int32, -1 = off
    params: jax.Array,  # [S, 3] f32: repetition, presence, frequency
) -> jax.Array:
    """Each row's logits penalized by its slot's counts (rows without a slot unchanged)."""
    rows = jnp.maximum(slot, 0)
    on = (slot >= 0)[:, None]
    counts = jnp.where(on, state.output_counts[rows], 0)
    in_prompt = on & state.in_prompt[rows]
    return apply_penalties(logits, counts, in_prompt, params[:, 0], params[:, 1], params[:, 2])


OFF = np.array([1.0, 0.0, 0.0], np.float32)  # (repetition, presence, frequency) off


class PenaltySlots:
    """Host side: which state row each penalized request uses, from its first step to its
    end. A request keeps its slot while it runs; a preempted one gives it back (it is
    recomputed from position 0, which zeroes whatever row it gets next). A slot given back
    while a step in flight still writes it is safe: steps run on the device in dispatch
    order, so the next owner's position-0 step zeroes the row after that write."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # pop() hands out slot 0 first
        self._held: dict[str, tuple[int, int]] = {}  # request id -> (slot, prompt length)
        # Slots taken by a request starting past position 0, to be seeded (`seed`) before
        # its first step: request id -> (slot, the prompt tokens before that position, the
        # output tokens before it).
        self._to_seed: dict[str, tuple[int, Sequence[int], Sequence[int]]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def release(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            held = self._held.pop(rid, None)
            self._to_seed.pop(rid, None)
            if held is not None:
                self._free.append(held[0])

    def fill(
        self,
        items: Sequence,  # ScheduledItems
        params: np.ndarray,  # [S, 3] the step's penalty_params (runner.pack)
        prompt_of: Callable[[object], Sequence[int]],  # item -> its request's prompt
        slot_out: np.ndarray,
        prompt_out: np.ndarray,
        output_of: Callable[[object], Sequence[int]] = lambda it: (),  # -> its output so far
    ) -> bool:
        """Write each penalized item's slot and prompt length into the step's [S] arrays
        (taking a slot for a request's first step); True if any item is penalized. The
        penalized rows are read off `params` (not off each item: a step of 256 unpenalized
        decodes pays one array compare)."""
        on = np.flatnonzero((params[: len(items)] != OFF).any(axis=1))
        for i in on.tolist():
            it = items[i]
            held = self._held.get(it.request_id)
            if held is None:
                if not self._free:  # more penalized requests than running sequences
                    raise RuntimeError(
                        f"no penalty slot left for {it.request_id!r} ({self.num_slots} held by "
                        f"{sorted(self._held)})"
                    )
                prompt = prompt_of(it)
                held = self._held[it.request_id] = (self._free.pop(), len(prompt))
                start = getattr(it, "start_pos", 0)
                if start:  # (output tokens too, after a preemption)
                    output = output_of(it)[: max(0, start - len(prompt))]
                    self._to_seed[it.request_id] = (held[0], prompt[:start], output)
            slot_out[i], prompt_out[i] = held
        return on.size > 0

    def ready(self, state: PenaltyState | None, vocab: int, mesh=None) -> PenaltyState:
        """The state a penalized step takes: `state`, or a zeroed one on first use (on a
        mesh, replicated), with the rows `fill` took for requests starting past position 0
        seeded."""
        if state is None:
            state = init_state(self.num_slots, vocab, None if mesh is None else replicated(mesh))
        return self.seed(state, mesh)

    def seed(self, state: PenaltyState, mesh=None) -> PenaltyState:
        """`state` with the rows `fill` took for requests starting past position 0 seeded
        (seed_rows); arrays padded to powers of two (a program per pair)."""
        if not self._to_seed:
            return state
        from engine.runner import next_pow2  # (runner imports the step, which imports this)

        seeds = list(self._to_seed.values())
        slots = np.full(next_pow2(len(seeds)), -1, np.int32)
        slots[: len(seeds)] = [slot for slot, _, _ in seeds]
        parts = [np.asarray(t, np.int32) for _, prompt, out in seeds for t in (prompt, out)]
        num = sum(map(len, parts))
        size = next_pow2(num)
        tokens, owner = np.zeros(size, np.int32), np.full(size, -1, np.int32)
        is_output = np.zeros(size, bool)
        tokens[:num] = np.concatenate(parts)
        owner[:num] = np.repeat(np.arange(len(parts)) // 2, list(map(len, parts)))
        is_output[:num] = np.repeat(np.arange(len(parts)) % 2 == 1, list(map(len, parts)))
        args = (slots, tokens, owner, is_output)
        if mesh is not None:
            args = put_replicated(args, mesh)
        state = _seed_rows(state, *args)
        self._to_seed.clear()
        return state
