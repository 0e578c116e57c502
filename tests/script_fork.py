"""Runs absl entry points (`python -m scripts.X FLAGS`) in forked children of one process.

  python -m tests.script_fork CASES.json RESULTS.json
  python -m tests.script_fork --serve          (ForkServer: one case a line, as asked)

CASES.json is a list of [module, [flags...]]; RESULTS.json gets, in the same order,
{"returncode", "stdout", "stderr"} per case, as `subprocess.run` would have given them.

Each case still runs in a process of its own (absl flags are process-global), but that
process is a fork of this one, which has already imported jax and the project's packages
(no backend started, so nothing a fork would share is running): a bad-flag case then costs
a fork and the script module's own import, not a Python start and jax's import (~1.9 s a
case on the 2-core CI machine, most of it before the script reads its first flag).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
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


def _run_one(module: str, flags: list[str], timeout: float | None = None) -> dict:
    """One case in a forked child; past `timeout` seconds the child is killed (SIGKILL:
    returncode -9, as subprocess.run's caller sees a killed process) and stderr says so."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(module, flags, out.fileno(), err.fileno())
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                err.write(f"\nscript_fork: killed after {timeout} s\n".encode())
                break
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        return {
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


def run_cases(cases: list[tuple[str, list[str]]]) -> list[dict]:
    _preload()
    return [_run_one(module, flags) for module, flags in cases]


def serve() -> None:
    """Cases from stdin, one JSON line each ([module, flags, timeout]); each one's result as
    one JSON line on stdout, once its child has ended. The protocol has stdout to itself:
    the children write to files of their own."""
    _preload()
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # (anything else printed here goes to stderr)
    for line in sys.stdin:
        module, flags, timeout = json.loads(line)
        protocol.write(json.dumps(_run_one(module, flags, timeout)) + "\n")
        protocol.flush()


class ForkServer:
    """`python -m module flags` as forks of one process that has imported jax (tests that
    run many scripts: a case costs a fork, not a Python start and jax's import). Started on
    first use with this process's environment plus `env`; closed at exit."""

    def __init__(self, env: dict[str, str], cwd: str):
        self._env, self._cwd, self._proc = env, cwd, None

    def run(self, module: str, *flags: str, timeout: float = 600) -> subprocess.CompletedProcess:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.script_fork", "--serve"],
                cwd=self._cwd,
                env={**os.environ, **self._env},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            atexit.register(self.close)
        self._proc.stdin.write(json.dumps([module, list(flags), timeout]) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"script_fork server ended (status {self._proc.wait()})")
        res = json.loads(line)
        args = [sys.executable, "-m", module, *flags]
        return subprocess.CompletedProcess(args, res["returncode"], res["stdout"], res["stderr"])

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=60)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
        sys.exit(0)
    cases_path, results_path = sys.argv[1:]
    with open(cases_path) as f:
        cases = json.load(f)
    with open(results_path, "w") as f:
        json.dump(run_cases(cases), f)
