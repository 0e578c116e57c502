"""Settings for the test processes (make test runs each file in its own pytest process):
XLA:CPU's thread count (NPROC) and optimization level (XLA_FLAGS, below).

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

import importlib.util
import os
import pathlib
import pkgutil
import shutil

# The test files that run Mosaic GPU kernels in Pallas' GPU interpreter.
GPU_INTERPRETER_FILES = ("test_pallas_mosaic.py", "test_pallas_engine.py", "test_pallas_bench.py")


# XLA:CPU's backend optimization level 0: compiling is most of a test file's time on CPU
# (tiny models, many step shapes), and level 0 compiles about 30% faster (tests/test_engine.py
# alone: 327 -> 234 s; make test with it in every file 16.3 min against 17.8 the day before,
# docs/benchmarks.md "Test time"). The programs it makes run slower (interpret-mode Pallas
# kernels most: 20 -> 56 s for one test), so files whose time is running, not compiling,
# keep the default level, and so do the files whose bitwise claims are about the programs
# users run:
# - test_batch_invariance.py: bitwise invariance of the default build (and its Pallas
#   interpret-mode cases run slower at level 0: alone 148 s at the default, 178 s at 0);
# - test_determinism_check.py: the determinism regression script, bitwise run to run;
# - test_long_context.py: 8k-token prefills, run-time bound (196 s either way).
# The other files' HF parity tolerances hold at either level, and their bitwise comparisons
# are between programs compiled alike. A run given a directory (one process) gets level 0
# throughout. Not on a machine with a GPU (or a GPU plugin): there the flag would also reach
# the GPU compiler, and the GPU tests check what users run.
DEFAULT_OPT_FILES = (
    "test_batch_invariance.py",
    "test_determinism_check.py",
    "test_long_context.py",
)
CPU_TEST_XLA_FLAG = "--xla_backend_optimization_level=0"


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") or pathlib.Path("/dev/nvidiactl").exists():
        return True
    spec = importlib.util.find_spec("jax_plugins")
    if spec is None or spec.submodule_search_locations is None:
        return False
    names = [m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)]
    return any("cuda" in n or "rocm" in n for n in names)


def pytest_configure(config):
    paths = [pathlib.Path(str(arg).split("::")[0]) for arg in config.args]
    if any(p.is_dir() or p.name in GPU_INTERPRETER_FILES for p in paths):
        os.environ.setdefault("NPROC", "8")
    flags = os.environ.get("XLA_FLAGS", "")
    default_opt = any(p.name in DEFAULT_OPT_FILES for p in paths)
    if "xla_backend_optimization_level" not in flags and not default_opt and not _has_gpu():
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_TEST_XLA_FLAG}".strip()
