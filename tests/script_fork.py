"""Runs absl entry points (`python -m scripts.X FLAGS`) in forked children of one process.

  python -m tests.script_fork CASES.json RESULTS.json

CASES.json is a list of [module, [flags...]]; RESULTS.json gets, in the same order,
{"returncode", "stdout", "stderr"} per case, as `subprocess.run` would have given them.

Each case still runs in a process of its own (absl flags are process-global), but that
process is a fork of this one, which has already imported jax and the project's packages
(no backend started, so nothing a fork would share is running): a bad-flag case then costs
a fork and the script module's own import, not a Python start and jax's import (~1.9 s a
case on the 2-core CI machine, most of it before the script reads its first flag).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback


def _preload() -> None:
    """What the scripts import before they parse flags (none of it defines absl flags)."""
    import absl.app  # noqa: F401
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401
    import numpy  # noqa: F401
    from jax._src import xla_bridge

    import configs.presets  # noqa: F401
    import engine.llm  # noqa: F401
    import models.load  # noqa: F401
    import scripts.flag_checks  # noqa: F401
    import sharding.distributed  # noqa: F401

    # A started backend owns threads a fork would not copy: the children must start their own.
    assert not xla_bridge._backends, "a backend started while preloading"


def _child(module: str, flags: list[str], out_fd: int, err_fd: int) -> None:
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.argv = [module, *flags]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_cases(cases: list[tuple[str, list[str]]]) -> list[dict]:
    _preload()
    results = []
    for module, flags in cases:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(module, flags, out.fileno(), err.fileno())
            _, status = os.waitpid(pid, 0)
            out.seek(0)
            err.seek(0)
            results.append(
                {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "stdout": out.read().decode(errors="replace"),
                    "stderr": err.read().decode(errors="replace"),
                }
            )
    return results


if __name__ == "__main__":
    cases_path, results_path = sys.argv[1:]
    with open(cases_path) as f:
        cases = json.load(f)
    with open(results_path, "w") as f:
        json.dump(run_cases(cases), f)
