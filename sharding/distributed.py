"""Several hosts, one mesh: JAX's multi-controller runtime (`jax.distributed`).

Each process runs the same program; `jax.devices()` then lists every process's devices and
one mesh spans them, so the step's collectives (the expert all-to-all, tensor-parallel
all-reduces) cross hosts with no code of ours in between.

Scheduling: a replicated deterministic scheduler, not a leader that broadcasts. Every
process builds the same LLM, receives the same requests in the same order, and runs the
same pure-Python scheduler (FIFO queues, page ids from a deterministic free list, request
seeds derived from the engine seed and a counter, no clocks: the long-prefill policy's
step-time rule is off there, engine/llm.py `_long_prefill_policy`). Its only input from the
device is the step output, which the step returns replicated on the mesh, so every process
reads the very same tokens and the schedulers stay in lockstep. A leader would need an
extra variable-size host broadcast of each SchedulerOutput every step, on the latency path
of every decode; the replicated scheduler needs none. The price: requests must reach every
process (an offline script does this by construction; a server must forward its requests
to all processes before they enter the scheduler).
"""

from __future__ import annotations

import jax


def initialize(coordinator: str | None, num_processes: int, process_id: int) -> None:
    """Join `num_processes` processes into one JAX runtime; a no-op for one process.

    Must run before anything touches a jax backend. On CPU the cross-process collectives
    use gloo (XLA:CPU has no other implementation).
    """
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes={num_processes!r}: must be an integer >= 1")
    if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id!r}: must be in [0, {num_processes})")
    if num_processes == 1:
        return
    host, sep, port = (coordinator or "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"coordinator={coordinator!r}: expected 'host:port'")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)


def is_leader() -> bool:
    """Process 0: the one that prints and writes results."""
    return jax.process_index() == 0
