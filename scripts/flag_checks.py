"""Checks of script flags made before any model is built: a ValueError naming the flag, the
value and the limit, so a bad output path or list fails in a second, not after the run."""

from __future__ import annotations

import os

# Random prompts a script builds in host memory before it runs them: a bound so that a
# mistyped count is refused at once instead of filling the host's memory for minutes.
MAX_PROMPTS = 1 << 20


def _writable_folder(flag: str, path: str, folder: str) -> None:
    if not os.path.isdir(folder):
        raise ValueError(f"{flag}={path!r}: its folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}={path!r}: its folder {folder!r} is not writable")


def check_output_file(flag: str, path: str) -> None:
    """`path` can be written as a file: not a directory, in an existing writable folder."""
    if not path:
        raise ValueError(f"{flag}: empty; give a file path")
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        raise ValueError(f"{flag}={path!r}: is a directory; give a file path")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}={path!r}: exists and is not writable")
    _writable_folder(flag, path, os.path.dirname(os.path.abspath(path)))


def check_output_dir(flag: str, path: str) -> None:
    """`path` is a writable directory or can be made one (its nearest existing parent is)."""
    if not path:
        raise ValueError(f"{flag}: empty; give a directory")
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{flag}={path!r}: is a file; give a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{flag}={path!r}: is not writable")
        return
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{flag}={path!r}: {parent!r} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}={path!r}: cannot be created, {parent!r} is not writable")


def check_input_file(flag: str, path: str) -> None:
    if not os.path.isfile(os.path.expanduser(path)):
        raise ValueError(f"{flag}={path!r}: no such file")


def parse_ints(
    flag: str, values: list[str], low: int = 1, high: int | None = None, allow_empty: bool = False
) -> list[int]:
    """A comma-list flag's integers, each in [low, high], none repeated, at least one unless
    `allow_empty`."""
    limit = f"integers in [{low}, {high}]" if high is not None else f"integers >= {low}"
    shown = ",".join(values)
    try:
        ints = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"{flag}={shown}: expected {limit}, comma-separated") from None
    if not ints and not allow_empty:
        raise ValueError(f"{flag}: empty; expected {limit}, comma-separated")
    bad = [v for v in ints if v < low or (high is not None and v > high)]
    if bad:
        raise ValueError(f"{flag}={shown}: {bad[0]} is out of range; expected {limit}")
    if len(set(ints)) < len(ints):
        raise ValueError(f"{flag}={shown}: has repeats")
    return ints


def parse_floats(flag: str, values: list[str], low: float = 0.0) -> list[float]:
    """A comma-list flag's finite numbers > low, none repeated (the list may be empty)."""
    shown = ",".join(values)
    try:
        floats = [float(v) for v in values]
    except ValueError:
        raise ValueError(f"{flag}={shown}: expected numbers > {low:g}, comma-separated") from None
    bad = [v for v in floats if not (low < v < float("inf"))]
    if bad:
        raise ValueError(f"{flag}={shown}: {bad[0]:g} is not a finite number > {low:g}")
    if len(set(floats)) < len(floats):
        raise ValueError(f"{flag}={shown}: has repeats")
    return floats


def check_count(flag: str, value: int, low: int = 1, high: int = MAX_PROMPTS) -> None:
    if not low <= value <= high:
        raise ValueError(f"{flag}={value}: must be in [{low}, {high}]")
