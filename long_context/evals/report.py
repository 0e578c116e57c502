"""Results to disk: a JSON of everything and a PNG (retrieval heatmap, perplexity curve).

matplotlib (Agg, no display) draws the PNGs: a heatmap people read needs axis labels and the
accuracy printed in each cell, which is text rendering we should not write ourselves.
"""

from __future__ import annotations

import json
import os

import numpy as np

from long_context.evals.harness import PerplexityResult, RetrievalResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def write_json(result: RetrievalResult | PerplexityResult, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result.to_dict(), f, indent=1)


def plot_heatmap(result: RetrievalResult, path: str, title: str | None = None) -> None:
    """Accuracy by context length (x) and needle depth (y, 0% at the top)."""
    plt = _pyplot()
    acc = result.accuracy.T  # [depths, lengths]
    fig, ax = plt.subplots(
        figsize=(
            max(4.0, 1.5 + 0.9 * len(result.lengths)),
            max(3.0, 1.2 + 0.5 * len(result.depths)),
        )
    )
    im = ax.imshow(acc, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(result.lengths)), [_length_label(n) for n in result.lengths])
    ax.set_yticks(range(len(result.depths)), [f"{d:.0%}" for d in result.depths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    for (j, i), a in np.ndenumerate(acc):
        ax.text(i, j, f"{a:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="accuracy")
    ax.set_title(title or f"{result.task}: accuracy {result.overall_accuracy:.2f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_perplexity(result: PerplexityResult, path: str, title: str | None = None) -> None:
    """Perplexity against context length (log-2 x axis): whole windows and their tails."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(result.lengths, result.perplexity, "o-", label="whole window")
    ax.plot(result.lengths, result.tail_perplexity, "s--", label="last quarter of window")
    ax.set_xscale("log", base=2)
    ax.set_xticks(result.lengths, [_length_label(n) for n in result.lengths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("perplexity")
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(title or "perplexity by context length")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
