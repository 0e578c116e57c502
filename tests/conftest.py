"""Settings for the test processes (make test runs each file in its own pytest process).

NPROC sizes XLA:CPU's thread pool, and must be set before the CPU backend starts. Pallas'
GPU interpreter runs a Mosaic GPU kernel's warpgroups as threads that block in barrier waits
inside XLA:CPU computations; with one pool thread per core (2 here) those waits can take
every thread and the kernel never finishes. Seen in a fuzz of the Mosaic kernels under the
race detector: a GQA case (group 32, head_dim 128, 128-key pages, block_kv 64, 2 stages)
hung every time, and ran in 5 s with NPROC=8. Only the files that run Mosaic kernels in the
interpreter get it (and runs given a directory): two other files run side by side, as make
test runs them, took 7-9% longer with it (test_kv_quant.py 151 -> 161 s,
test_batch_invariance.py 179 -> 196 s).
"""

import os
import pathlib

# The test files that run Mosaic GPU kernels in Pallas' GPU interpreter.
GPU_INTERPRETER_FILES = ("test_pallas_mosaic.py", "test_pallas_engine.py", "test_pallas_bench.py")


def pytest_configure(config):
    paths = [pathlib.Path(str(arg).split("::")[0]) for arg in config.args]
    if any(p.is_dir() or p.name in GPU_INTERPRETER_FILES for p in paths):
        os.environ.setdefault("NPROC", "8")
