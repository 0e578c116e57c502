"""Device mesh and parallelism: mesh.py (the mesh string and layout checks), rules.py (logical
axis -> mesh axis table, param / KV / activation shardings), placement.py (arrays onto a
possibly multi-process mesh), expert_parallel.py (the MoE all-to-all), distributed.py
(multi-host runtime and the scheduling choice)."""
