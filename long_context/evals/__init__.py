"""Long-context evaluations: passkey and needle retrieval over a length x depth grid, and
perplexity against context length. See harness.py for the model interface."""

from long_context.evals.data import perplexity_dataset, read_tokens, retrieval_dataset
from long_context.evals.harness import (
    PerplexityResult,
    RetrievalResult,
    check_perplexity_args,
    check_retrieval_args,
    run_perplexity,
    run_retrieval,
)
from long_context.evals.report import plot_heatmap, plot_perplexity, write_json
from long_context.evals.tasks import (
    TASKS,
    RetrievalSample,
    TextTask,
    TokenizerCodec,
    TokenTask,
    build_sample,
)

__all__ = [
    "TASKS",
    "PerplexityResult",
    "RetrievalResult",
    "RetrievalSample",
    "TextTask",
    "TokenTask",
    "TokenizerCodec",
    "build_sample",
    "check_perplexity_args",
    "check_retrieval_args",
    "perplexity_dataset",
    "plot_heatmap",
    "plot_perplexity",
    "read_tokens",
    "retrieval_dataset",
    "run_perplexity",
    "run_retrieval",
    "write_json",
]
