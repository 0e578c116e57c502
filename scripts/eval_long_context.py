"""Long-context evaluations through the engine: passkey / needle retrieval, perplexity.

python -m scripts.eval_long_context --model=tiny-llama --task=passkey --lengths=256,1k \
    --depths=0,0.5,1 --num_samples=2 --output_dir=/tmp/eval
python -m scripts.eval_long_context --model=/ckpt/llama-3.1-8b --task=perplexity \
    --text_file=book.txt --lengths=1k,4k,16k,64k,128k

Writes <output_dir>/<task>.json (every prompt's record) and <task>.png (accuracy heatmap by
length x depth, or the perplexity curve). Models without a tokenizer run in token space.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from engine import LLM
from long_context.evals import (
    check_perplexity_args,
    check_retrieval_args,
    plot_heatmap,
    plot_perplexity,
    read_tokens,
    run_perplexity,
    run_retrieval,
    write_json,
)
from long_context.evals.model import LLMAdapter
from long_context.evals.tasks import TextTask
from scripts import engine_flags
from scripts.flag_checks import MAX_PROMPTS, check_output_dir

_MODEL = flags.DEFINE_string("model", None, "Preset name, HF dir or orbax dir.")
_TASK = flags.DEFINE_enum("task", "passkey", ["passkey", "needle", "perplexity"], "Evaluation.")
_LENGTHS = flags.DEFINE_list(
    "lengths", "1k,2k,4k,8k,16k,32k,64k,128k", "Context lengths in tokens ('k' = 1024)."
)
_DEPTHS = flags.DEFINE_list("depths", "0,0.25,0.5,0.75,1", "Needle depths in [0, 1].")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 5, "Prompts per (length, depth) cell.")
_MODE = flags.DEFINE_enum(
    "mode",
    "auto",
    ["auto", "text", "tokens"],
    "passkey / needle: prompts in words (needs a tokenizer) or ids.",
)
_TEXT_FILE = flags.DEFINE_string(
    "text_file", None, "Perplexity: the text (or a .npy of token ids). needle: the haystack."
)
_NUM_WINDOWS = flags.DEFINE_integer("num_windows", 4, "Perplexity windows per length.")
_MAX_NEW_TOKENS = flags.DEFINE_integer(
    "max_new_tokens", None, "Reply tokens; default 16 in words, the answer length in ids."
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Prompts per generate / score call.")
_SEED = flags.DEFINE_integer("seed", 0, "Needles, token-space filler, random weights.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "eval_results", "Where the JSON and PNG go.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
# Engine settings: scripts/engine_flags.py (as generate and serve take them).
flags.mark_flag_as_required("model")

# Longest reply either mode asks for by default (token-space answers are shorter).
_DEFAULT_REPLY = TextTask.default_max_new_tokens


def parse_length(s: str) -> int:
    s = s.strip().lower()
    try:
        return int(s[:-1]) * 1024 if s.endswith("k") else int(s)
    except ValueError:
        raise ValueError(f"lengths: {s!r} is not a token count like 4096 or 4k") from None


def parse_depth(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise ValueError(f"depths: {s!r} is not a number in [0, 1]") from None


def _check_max_model_len(lengths: list[int], reply: int) -> None:
    """The engine refuses a prompt longer than max_model_len and cuts a reply off there (a
    cut answer would score as wrong); say so before loading."""
    if (
        engine_flags.MAX_MODEL_LEN.value is not None
        and engine_flags.MAX_MODEL_LEN.value < max(lengths) + reply
    ):
        raise ValueError(
            f"max_model_len={engine_flags.MAX_MODEL_LEN.value}: must hold the longest length, "
            f"{max(lengths)}, plus {reply} reply tokens (--max_new_tokens)"
        )


def _engine(lengths: list[int], reply: int) -> LLM:
    try:
        return LLM(
            model=_MODEL.value,
            **engine_flags.llm_kwargs(
                max_model_len=engine_flags.MAX_MODEL_LEN.value or max(lengths) + reply
            ),
            seed=_SEED.value,
        )
    except ValueError as e:
        if engine_flags.MAX_MODEL_LEN.value is None and str(e).startswith("max_model_len="):
            # The value is ours (longest length + reply), not the user's: say where it is from.
            raise ValueError(f"lengths up to {max(lengths)} plus {reply} reply tokens: {e}") from e
        raise


def _retrieval(lengths: list[int], out: str) -> None:
    depths = [parse_depth(d) for d in _DEPTHS.value]
    check_retrieval_args(
        lengths, depths, _NUM_SAMPLES.value, _MAX_NEW_TOKENS.value, _BATCH_SIZE.value
    )
    _check_max_model_len(lengths, _MAX_NEW_TOKENS.value or _DEFAULT_REPLY)
    cells = len(lengths) * len(depths)
    if cells * _NUM_SAMPLES.value > MAX_PROMPTS:  # every prompt is built before they run
        raise ValueError(
            f"num_samples={_NUM_SAMPLES.value}: {cells} (length, depth) cells x num_samples "
            f"must be <= {MAX_PROMPTS} prompts"
        )
    haystack = None
    if _TEXT_FILE.value and _TASK.value == "needle":
        if not os.path.isfile(_TEXT_FILE.value):
            raise ValueError(f"text_file={_TEXT_FILE.value!r}: no such file")
        with open(_TEXT_FILE.value, encoding="utf-8") as f:
            haystack = f.read()
    os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
    reply = _MAX_NEW_TOKENS.value or _DEFAULT_REPLY
    adapter = LLMAdapter(_engine(lengths, reply))
    task = adapter.retrieval_task(_TASK.value, _MODE.value, haystack, _SEED.value)
    result = run_retrieval(
        task,
        adapter.generate,
        lengths,
        depths,
        num_samples=_NUM_SAMPLES.value,
        max_new_tokens=_MAX_NEW_TOKENS.value,
        batch_size=_BATCH_SIZE.value,
        seed=_SEED.value,
        progress=_PROGRESS.value,
    )
    result.meta = {"model": _MODEL.value, "mode": type(task).__name__, "seed": _SEED.value}
    write_json(result, out + ".json")
    plot_heatmap(result, out + ".png", f"{_TASK.value} on {_MODEL.value}")
    print(f"{_TASK.value} on {_MODEL.value}: accuracy {result.overall_accuracy:.3f}")
    print("length  " + " ".join(f"{d:>6.0%}" for d in depths))
    for n, row in zip(lengths, result.accuracy, strict=True):
        print(f"{n:>6}  " + " ".join(f"{a:>6.2f}" for a in row))


def _perplexity(lengths: list[int], out: str) -> None:
    if not _TEXT_FILE.value:
        raise ValueError("text_file: perplexity needs --text_file")
    if not os.path.isfile(_TEXT_FILE.value):
        raise FileNotFoundError(f"text_file={_TEXT_FILE.value!r}: no such file")
    if _MODE.value != "auto":
        raise ValueError(
            f"mode={_MODE.value!r}: applies to passkey and needle; perplexity reads "
            "--text_file as text (through the tokenizer) or as a .npy of token ids"
        )
    check_perplexity_args(lengths, _NUM_WINDOWS.value, _BATCH_SIZE.value)
    _check_max_model_len(lengths, 0)
    os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
    llm = _engine(lengths, 0)
    adapter = LLMAdapter(llm)
    tokens = read_tokens(_TEXT_FILE.value, adapter.codec)
    result = run_perplexity(
        adapter.score,
        tokens,
        lengths,
        num_windows=_NUM_WINDOWS.value,
        bos_token_id=adapter.bos_token_id,
        batch_size=_BATCH_SIZE.value,
        progress=_PROGRESS.value,
    )
    result.meta = {"model": _MODEL.value, "text_file": _TEXT_FILE.value}
    write_json(result, out + ".json")
    plot_perplexity(result, out + ".png", f"perplexity on {_MODEL.value}")
    print(f"perplexity on {_MODEL.value} ({len(tokens)} tokens of {_TEXT_FILE.value})")
    for n, k, p, t in zip(
        lengths, result.num_windows, result.perplexity, result.tail_perplexity, strict=True
    ):
        print(f"{n:>7}  windows {k}  ppl {p:10.3f}  last-quarter ppl {t:10.3f}")


def main(argv):
    del argv
    try:
        lengths = [parse_length(s) for s in _LENGTHS.value]
        check_output_dir("--output_dir", _OUTPUT_DIR.value)
        out = os.path.join(_OUTPUT_DIR.value, _TASK.value)
        if _TASK.value == "perplexity":
            _perplexity(lengths, out)
        else:
            _retrieval(lengths, out)
    except (ValueError, OSError, NotImplementedError) as e:
        sys.exit(f"eval_long_context: {e}")
    print(f"wrote {out}.json and {out}.png")


if __name__ == "__main__":
    app.run(main)
