"""How a long prompt's prefill shares engine steps with running decodes (host side, no jax).

A 128k-token prompt is hundreds of prefill chunks. At the full token budget every chunk
makes each running decode wait for it: on the 2-core CPU a 2048-token chunk at 32k context
takes ~100x a decode step, so chunked prefill alone (Sarathi-Serve, Agrawal et al. 2024)
does not bound inter-token latency. The policy, consulted by engine/scheduler.py:

- While decodes run, a long prefill's chunk is sized so that the step takes at most
  `max_decode_slowdown` times a step without it, from measured step times (the average
  extra time per long token): a chunk's cost grows with its context and depends on the
  device, the model and the load, so no fixed token count holds the bound.
  Every `probe_every` such steps one step leaves the long prefill out, to re-measure the
  decode-only step time it is compared with.
- With no decode running a long prefill takes the whole budget (there is no one to
  protect), but leaves room for a shorter request that is waiting, so that request is not
  queued behind the rest of the long prefill.
- `max_long_prefills` optionally caps how many long prefills run at once; later long prompts
  wait while shorter ones may pass them (vLLM's max_long_partial_prefills).

The scheduler stays deterministic given the step times it is told; without them (or with
`max_decode_slowdown=None`) long chunks are limited by the token budget alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LongPrefillPolicy:
    """What counts as a long prompt, and how its prefill yields to decodes."""

    long_prompt_tokens: int = 8192  # a sequence with at least this many tokens to prefill
    max_long_prefills: int | None = 1  # long prefills in progress at once; None: no cap
    max_decode_slowdown: float | None = 2.0  # step time with the chunk / without; None: off
    # Long chunks while decoding are whole multiples of this, and at least one: the XLA
    # attention computes a short chunk's last rows as one tile of this many (SMALL_TILE in
    # engine/paged_attention.py), so 1 token costs as much as 8.
    chunk_quantum: int = 8
    initial_chunk_tokens: int = 16  # long tokens per step before any step was measured
    probe_every: int = 64  # steps with a long chunk between decode-only measurements
    smoothing: float = 0.5  # weight of the newest measurement in the running averages

    def __post_init__(self):
        # numpy scalars are taken (as LLM's arguments are) and stored as Python numbers.
        def is_int(x) -> bool:
            return isinstance(x, int | np.integer) and not isinstance(x, bool)

        def is_real(x) -> bool:
            return (is_int(x) or isinstance(x, float | np.floating)) and math.isfinite(x)

        for name in ("long_prompt_tokens", "chunk_quantum", "initial_chunk_tokens", "probe_every"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be an integer >= 1")
            object.__setattr__(self, name, int(getattr(self, name)))
        cap = self.max_long_prefills
        if cap is not None:
            if not is_int(cap) or cap < 1:
                raise ValueError(f"max_long_prefills={cap!r}: must be an integer >= 1 or None")
            object.__setattr__(self, "max_long_prefills", int(cap))
        slowdown = self.max_decode_slowdown
        if slowdown is not None:
            if not (is_real(slowdown) and slowdown > 1):
                raise ValueError(f"max_decode_slowdown={slowdown!r}: must be > 1 (or None)")
            object.__setattr__(self, "max_decode_slowdown", float(slowdown))
        if not (is_real(self.smoothing) and 0 < self.smoothing <= 1):
            raise ValueError(f"smoothing={self.smoothing!r}: must be in (0, 1]")
        object.__setattr__(self, "smoothing", float(self.smoothing))

    @classmethod
    def token_budget_only(cls) -> LongPrefillPolicy:
        """Plain chunked prefill: long prompts are chunked by the token budget alone."""
        return cls(max_long_prefills=None, max_decode_slowdown=None)

    def without_clock(self) -> LongPrefillPolicy:
        """This policy without its step-time rule: steps that depend on no clock, as every
        process of a multi-host mesh must build (engine/llm.py)."""
        return dataclasses.replace(self, max_decode_slowdown=None)

    def is_long(self, num_tokens: int) -> bool:
        """Whether a sequence with `num_tokens` to prefill (from position 0) is long."""
        return num_tokens >= self.long_prompt_tokens


def policy_for_processes(
    long_prefill: LongPrefillPolicy | None, process_count: int
) -> LongPrefillPolicy:
    """The policy to schedule by. Across processes (one mesh over several hosts) every
    process must build the same steps (sharding/distributed.py), so none may steer by its own
    clock: the default policy drops its step-time rule there, and an explicit one that keeps
    it is refused (two hosts measuring 3% apart split a chunk, 96 tokens against 104, and
    the mesh then computes on mixed batches or its collectives abort)."""
    if long_prefill is None:
        policy = LongPrefillPolicy()
        return policy if process_count == 1 else policy.without_clock()
    if process_count > 1 and long_prefill.max_decode_slowdown is not None:
        raise ValueError(
            f"long_prefill.max_decode_slowdown={long_prefill.max_decode_slowdown}: steers by "
            f"this process's step times, which differ across the {process_count} processes "
            "that must schedule alike; use None (LongPrefillPolicy.without_clock())"
        )
    return long_prefill


class LongPrefillController:
    """The measured state behind `LongPrefillPolicy`: decode-only step time, and the extra
    time one long-prefill token adds to a step.

    Protocol (the scheduler's): each step ask `allowance(has_decodes)` for the long-prefill
    tokens this step may carry, then report the executed step with `observe`.
    """

    def __init__(self, policy: LongPrefillPolicy):
        self.policy = policy
        self.base_seconds: float | None = None  # average decode-only step time
        self.token_seconds: float | None = None  # average extra step time per long token
        self._last_tokens = policy.initial_chunk_tokens  # long tokens of the last such step
        self._since_base = 0  # steps with a long chunk since the last decode-only one
        self._probing = False

    def allowance(self, has_decodes: bool) -> int | None:
        """Long-prefill tokens this step may carry: None = only the budget limits them, 0 =
        leave long prefills out (a probe step that measures the decode-only time)."""
        slowdown = self.policy.max_decode_slowdown
        if not has_decodes or slowdown is None:
            return None
        if self.base_seconds is None or self._since_base >= self.policy.probe_every:
            self._probing = True
            return 0
        quantum = self.policy.chunk_quantum
        tokens = self.policy.initial_chunk_tokens
        if self.token_seconds is not None:
            # A chunk's cost grows about linearly with its tokens (and with its context,
            # which moves slowly); never more than double the last measured chunk.
            fit = (slowdown - 1) * self.base_seconds / max(self.token_seconds, 1e-12)
            tokens = int(min(fit, 2 * self._last_tokens))
        return max(quantum, tokens // quantum * quantum)

    def observe(
        self, num_decodes: int, long_tokens: int, other_prefill_tokens: int, seconds: float
    ) -> None:
        """Account one executed step: its decodes, long-prefill and other prefill tokens."""
        probing, self._probing = self._probing, False
        # A time that is not a time (NaN, inf, negative) would poison the averages for good.
        bad_time = not (math.isfinite(seconds) and seconds >= 0)
        if (
            num_decodes == 0
            or other_prefill_tokens
            or self.policy.max_decode_slowdown is None
            or bad_time
        ):
            if probing:  # the probe was spoiled by other work: try again later
                self._since_base = 0
            return
        a = self.policy.smoothing
        if long_tokens == 0:
            base = self.base_seconds
            self.base_seconds = seconds if base is None else (1 - a) * base + a * seconds
            self._since_base = 0
            return
        if self.base_seconds is None:
            return
        self._since_base += 1
        self._last_tokens = long_tokens
        per_token = max(0.0, seconds - self.base_seconds) / long_tokens
        old = self.token_seconds
        self.token_seconds = per_token if old is None else (1 - a) * old + a * per_token
