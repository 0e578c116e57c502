"""Evaluation inputs as grain pipelines: the retrieval grid and perplexity windows.

Both are `grain.MapDataset`s built lazily, so a 128k-token prompt exists only while its batch
runs; `.batch(n, batch_fn=list)` groups them for one `generate` / `score` call.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import grain
import numpy as np

from long_context.evals.tasks import Codec, RetrievalTask, build_sample


def check_grid(lengths: Sequence[int], depths: Sequence[float] = (0.0,)) -> None:
    """ValueError naming `lengths` / `depths` for an empty, repeated or out-of-range grid."""
    if not lengths:
        raise ValueError("lengths: must not be empty")
    if any(isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2 for n in lengths):
        raise ValueError(f"lengths: {list(lengths)}: every length must be an integer >= 2")
    if len(set(lengths)) != len(lengths):
        raise ValueError(f"lengths: {list(lengths)} has repeats")
    if not depths or any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"depths: {list(depths)}: must be non-empty, each in [0, 1]")
    if len(set(depths)) != len(depths):
        raise ValueError(f"depths: {list(depths)} has repeats")


def retrieval_dataset(
    task: RetrievalTask,
    lengths: Sequence[int],
    depths: Sequence[float],
    num_samples: int,
    seed: int = 0,
) -> grain.MapDataset:
    """Samples for every (length, depth, trial), lengths outermost, as a MapDataset."""
    check_grid(lengths, depths)
    if num_samples < 1:
        raise ValueError(f"num_samples={num_samples}: must be >= 1")
    cells = [(int(n), float(d), t) for n in lengths for d in depths for t in range(num_samples)]
    return grain.MapDataset.source(cells).map(lambda cell: build_sample(task, *cell, seed=seed))


@dataclasses.dataclass(frozen=True)
class PerplexityWindow:
    """One contiguous stretch of the text as a prompt."""

    length: int  # prompt tokens
    index: int  # window number at this length
    prompt: np.ndarray  # [length] int32: BOS (if any) then the text


def read_tokens(path: str, codec: Codec | None) -> np.ndarray:
    """Token ids of a text file through `codec`, or of a `.npy` file of ids as they are."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"text_file={path!r}: no such file")
    if path.endswith(".npy"):
        return np.asarray(np.load(path), dtype=np.int32).reshape(-1)
    if codec is None:
        raise ValueError(
            f"text_file={path!r}: a text file needs a tokenizer; this model has none "
            "(give a .npy file of token ids instead)"
        )
    with open(path, encoding="utf-8") as f:
        return np.asarray(codec.encode(f.read()), dtype=np.int32)


def perplexity_dataset(
    tokens: np.ndarray,
    lengths: Sequence[int],
    num_windows: int,
    bos_token_id: int | None = None,
) -> grain.MapDataset:
    """Up to `num_windows` disjoint windows from the start of `tokens` per length."""
    check_grid(lengths)
    if num_windows < 1:
        raise ValueError(f"num_windows={num_windows}: must be >= 1")
    tokens = np.asarray(tokens, dtype=np.int32)
    bos = [] if bos_token_id is None else [bos_token_id]
    cells = []
    for n in lengths:
        text_len = int(n) - len(bos)
        count = min(num_windows, len(tokens) // text_len)
        if count == 0:
            raise ValueError(
                f"lengths: {n} is longer than the text ({len(tokens)} tokens); give a longer "
                "text_file or shorter lengths"
            )
        cells += [(int(n), i) for i in range(count)]

    def window(cell: tuple[int, int]) -> PerplexityWindow:
        n, i = cell
        text_len = n - len(bos)
        text = tokens[i * text_len : (i + 1) * text_len]
        return PerplexityWindow(n, i, np.concatenate([np.asarray(bos, np.int32), text]))

    return grain.MapDataset.source(cells).map(window)


def batches(ds: grain.MapDataset, batch_size: int):
    """Iterate `ds` in lists of `batch_size` (the last may be shorter)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be >= 1")
    return iter(ds.batch(batch_size, batch_fn=list))
