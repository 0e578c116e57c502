"""Run the evaluations against any model given as two small functions.

  generate_fn(prompts: list[list[int]], max_new_tokens: int) -> list[list[int] | str]
      greedy continuation of each prompt (ids, or text for text tasks)
  score_fn(prompts: list[list[int]]) -> list[np.ndarray]
      for each prompt, log p(prompt[i] | prompt[:i]) for i >= 1: [len(prompt) - 1]

`model.LLMAdapter` supplies both over the engine; tests use stubs, so the scoring is checked
without a model that can actually retrieve anything.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from tqdm import tqdm

from long_context.evals.data import batches, check_grid, perplexity_dataset, retrieval_dataset
from long_context.evals.tasks import RetrievalTask

GenerateFn = Callable[[list[list[int]], int], list]
ScoreFn = Callable[[list[list[int]]], list[np.ndarray]]

# Perplexity "tail": the last quarter of each window, the tokens with the longest context.
TAIL_FRACTION = 0.25


@dataclasses.dataclass
class RetrievalResult:
    """Accuracy over the grid; `accuracy[i][j]` is lengths[i] at depths[j]."""

    task: str
    lengths: list[int]
    depths: list[float]
    num_samples: int
    accuracy: np.ndarray  # [len(lengths), len(depths)]
    samples: list[dict]  # one record per prompt
    elapsed_s: float
    meta: dict = dataclasses.field(default_factory=dict)

    @property
    def overall_accuracy(self) -> float:
        return float(self.accuracy.mean())

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "lengths": self.lengths,
            "depths": self.depths,
            "num_samples": self.num_samples,
            "accuracy": self.accuracy.tolist(),
            "overall_accuracy": self.overall_accuracy,
            "elapsed_s": self.elapsed_s,
            "meta": self.meta,
            "samples": self.samples,
        }


@dataclasses.dataclass
class PerplexityResult:
    """Perplexity of the text by context length (whole windows, and their last quarter)."""

    lengths: list[int]
    num_windows: list[int]  # windows scored per length
    perplexity: list[float]  # exp(mean NLL) over every scored token of the windows
    tail_perplexity: list[float]  # over the last TAIL_FRACTION of each window's positions
    elapsed_s: float
    meta: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"task": "perplexity", **dataclasses.asdict(self)}


def _progress(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="prompt", disable=not enabled, dynamic_ncols=True)


def _check_counts(**counts: int | None) -> None:
    for name, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"{name}={value}: must be >= 1")


def check_retrieval_args(
    lengths: Sequence[int],
    depths: Sequence[float],
    num_samples: int,
    max_new_tokens: int | None,
    batch_size: int,
) -> None:
    """`run_retrieval`'s argument checks alone, for callers to run before loading a model."""
    check_grid(lengths, depths)
    _check_counts(num_samples=num_samples, max_new_tokens=max_new_tokens, batch_size=batch_size)


def check_perplexity_args(lengths: Sequence[int], num_windows: int, batch_size: int) -> None:
    """`run_perplexity`'s argument checks that need no text, for callers to run before loading
    a model (a length longer than the text is found once the text is read)."""
    check_grid(lengths)
    _check_counts(num_windows=num_windows, batch_size=batch_size)


def run_retrieval(
    task: RetrievalTask,
    generate_fn: GenerateFn,
    lengths: Sequence[int],
    depths: Sequence[float],
    num_samples: int = 1,
    max_new_tokens: int | None = None,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = True,
) -> RetrievalResult:
    """Ask every prompt of the grid and score the replies.

    Args:
      max_new_tokens: reply length; default `task.default_max_new_tokens`.
    """
    check_retrieval_args(lengths, depths, num_samples, max_new_tokens, batch_size)
    ds = retrieval_dataset(task, lengths, depths, num_samples, seed)
    if max_new_tokens is None:
        max_new_tokens = task.default_max_new_tokens
    lengths, depths = [int(n) for n in lengths], [float(d) for d in depths]
    correct = np.zeros((len(lengths), len(depths)))
    records = []
    start = time.perf_counter()
    with _progress(len(ds), task.name, progress) as bar:
        for batch in batches(ds, batch_size):
            outputs = generate_fn([s.prompt.tolist() for s in batch], max_new_tokens)
            if len(outputs) != len(batch):
                raise ValueError(
                    f"generate_fn: returned {len(outputs)} outputs for {len(batch)} prompts"
                )
            for s, out in zip(batch, outputs, strict=True):
                ok = task.is_correct(s.answer, out)
                correct[lengths.index(s.length), depths.index(s.depth)] += ok
                records.append(
                    {
                        "length": s.length,
                        "depth": s.depth,
                        "trial": s.trial,
                        "needle_position": s.needle_start,
                        "actual_depth": s.actual_depth,
                        "answer": s.answer if isinstance(s.answer, str) else list(s.answer),
                        "output": task.render(out),
                        "correct": bool(ok),
                    }
                )
            bar.update(len(batch))
    return RetrievalResult(
        task=task.name,
        lengths=lengths,
        depths=depths,
        num_samples=num_samples,
        accuracy=correct / num_samples,
        samples=records,
        elapsed_s=time.perf_counter() - start,
    )


def run_perplexity(
    score_fn: ScoreFn,
    tokens: np.ndarray,
    lengths: Sequence[int],
    num_windows: int = 4,
    bos_token_id: int | None = None,
    batch_size: int = 1,
    progress: bool = True,
) -> PerplexityResult:
    """Perplexity of `tokens` (a text's ids) in disjoint windows of each length."""
    check_perplexity_args(lengths, num_windows, batch_size)
    ds = perplexity_dataset(tokens, lengths, num_windows, bos_token_id)
    lengths = [int(n) for n in lengths]
    nll = {n: [0.0, 0] for n in lengths}  # sum of -logprob, tokens
    tail = {n: [0.0, 0] for n in lengths}
    windows = dict.fromkeys(lengths, 0)
    start = time.perf_counter()
    with _progress(len(ds), "perplexity", progress) as bar:
        for batch in batches(ds, batch_size):
            scores = score_fn([w.prompt.tolist() for w in batch])
            if len(scores) != len(batch):
                raise ValueError(f"score_fn: returned {len(scores)} arrays for {len(batch)}")
            for w, lp in zip(batch, scores, strict=True):
                lp = np.asarray(lp, dtype=np.float64)
                if lp.shape != (w.length - 1,):
                    raise ValueError(
                        f"score_fn: expected {w.length - 1} logprobs for a {w.length}-token "
                        f"prompt, got shape {lp.shape}"
                    )
                if not np.all(np.isfinite(lp)) or np.any(lp > 1e-6):
                    raise ValueError("score_fn: logprobs must be finite and <= 0")
                n_tail = max(1, math.ceil(TAIL_FRACTION * lp.size))
                nll[w.length][0] -= lp.sum()
                nll[w.length][1] += lp.size
                tail[w.length][0] -= lp[-n_tail:].sum()
                tail[w.length][1] += n_tail
                windows[w.length] += 1
            bar.update(len(batch))
    ppl = lambda acc: math.exp(acc[0] / acc[1])
    return PerplexityResult(
        lengths=lengths,
        num_windows=[windows[n] for n in lengths],
        perplexity=[ppl(nll[n]) for n in lengths],
        tail_perplexity=[ppl(tail[n]) for n in lengths],
        elapsed_s=time.perf_counter() - start,
    )
