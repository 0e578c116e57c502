"""Process-wide settings for every test file (each runs in its own pytest process).

NPROC sizes XLA:CPU's thread pool, and must be set before the CPU backend starts. Pallas'
GPU interpreter runs a Mosaic GPU kernel's warpgroups as threads that block in barrier waits
inside XLA:CPU computations; with one pool thread per core (2 here) those waits can take
every thread and the kernel never finishes. Seen in a fuzz of the Mosaic kernels under the
race detector: a GQA case (group 32, head_dim 128, 128-key pages, block_kv 64, 2 stages)
hung every time, and ran in 5 s with NPROC=8. test_models_ops.py and
test_pallas_attention.py took the same time with and without it, test_sharding_mesh.py (whose
8-device worker inherits it) 205 s against 230 s.
"""

import os

os.environ.setdefault("NPROC", "8")
