"""Structured outputs' host cost at a real vocabulary size: compiling a constraint's index,
and building each step's allowed-token bitmask (engine/structured.py).

  python -m scripts.bench_structured               # the figures in docs/benchmarks.md
  python -m scripts.bench_structured --vocab_size=4096 --corpus_mb=1 --steps=8

No model vocabulary can be downloaded here, so the tokenizer is a byte-level BPE (the kind
Llama 3, Qwen and DeepSeek use) trained on this Python's standard library sources, sorted
by path: the same files give the same tokenizer. Then, per constraint (a regex, 16 choices,
a nested JSON schema, any JSON object): the seconds to compile its index (what
add_request spends before queueing the request), and the host time of `masks_for` over
`rows` constrained rows for `steps` steps (each row walks a random path through its
automaton: one new token a step), per row and step: on the first pass each state met is
new (its mask is written), on a second pass over the same paths every state's mask is a
cached copy (random paths rarely meet a state twice; a model's outputs, alike across rows
and steps, do more often). Also the step's side on this backend:
the jitted `apply_allowed_mask` over [rows, vocab_size] logits.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import sysconfig
import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from engine import SamplingParams, StructuredOutputsParams
from engine.logit_bias import apply_allowed_mask
from engine.structured import StructuredOutputs
from scripts.flag_checks import check_count, check_output_file

_VOCAB = flags.DEFINE_integer("vocab_size", 65536, "BPE vocabulary size to train.")
_CORPUS_MB = flags.DEFINE_integer("corpus_mb", 16, "Megabytes of stdlib source to train on.")
_ROWS = flags.DEFINE_integer("rows", 64, "Constrained rows per step.")
_STEPS = flags.DEFINE_integer("steps", 32, "Steps timed per constraint.")
_ENGINE_MODEL = flags.DEFINE_string(
    "engine_model",
    "tests/fixtures/llama",
    "HF dir whose weights decode under a constraint end to end ('' = skip); with the "
    "tokenizer of --engine_tokenizer.",
)
_ENGINE_TOKENIZER = flags.DEFINE_string(
    "engine_tokenizer", "tests/fixtures/structured/tokenizer.json", "Byte-level BPE for it."
)
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"],
        },
        "status": {"enum": ["active", "inactive", "banned"]},
    },
    "required": ["name", "age", "status"],
}
CONSTRAINTS = {
    "regex (ISO date, time)": StructuredOutputsParams(
        regex=r"[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z"
    ),
    "choice (16 phrases)": StructuredOutputsParams(
        choice=[f"option {w} number {i}" for i, w in enumerate("abcdefghijklmnop")]
    ),
    "JSON schema (nested, 6 fields)": StructuredOutputsParams(json=SCHEMA),
    "any JSON object": StructuredOutputsParams(json_object=True),
}


def train_tokenizer(vocab_size: int, corpus_mb: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    texts, size = [], 0
    for f in files:
        if size >= corpus_mb << 20:
            break
        text = f.read_text(errors="replace")
        texts.append(text)
        size += len(text)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def walk(index, eos: int, steps: int, rng) -> list[int]:
    """A random path of up to `steps` tokens through `index`'s automaton (EOS only when
    nothing else is allowed)."""
    import outlines_core

    guide, out = outlines_core.Guide(index), []
    for _ in range(steps):
        allowed = [t for t in guide.get_tokens() if t != eos]
        if not allowed:
            break
        out.append(int(rng.choice(allowed)))
        guide.advance(out[-1])
    return out


def bench_constraint(so, structured, eos, rows, steps, rng) -> dict:
    start = time.perf_counter()
    index = structured.index(so)
    compile_s = time.perf_counter() - start
    paths = [walk(index, eos, steps, rng) for _ in range(rows)]
    params = SamplingParams(structured_outputs=so)
    items = [
        SimpleNamespace(request_id=str(r), sampling_params=params, sample=True) for r in range(rows)
    ]
    states_before = len(structured._masks)
    got = dict(compile_s=compile_s)
    # Twice over the same paths: first each state's mask is written (outlines_core walks its
    # allowed tokens), then every state's row is a cached copy.
    for name in ("first", "again"):
        seconds, done = 0.0, 0
        for step in range(steps):
            live = [r for r in range(rows) if step <= len(paths[r])]
            if not live:
                break
            batch = [items[r] for r in live]
            start = time.perf_counter()
            structured.masks_for(batch, rows, lambda it, n=step: paths[int(it.request_id)][:n])
            seconds += time.perf_counter() - start
            done += len(live)
        for r in range(rows):
            structured.release(str(r))
        got[f"us_per_row_step_{name}"] = seconds / done * 1e6
        got["row_steps"] = done
    got["states"] = len(structured._masks) - states_before
    return got


def bench_engine(model_dir: str, tokenizer: str, rows: int, steps: int) -> dict:
    """Decode `rows` requests of `steps` tokens (ignore_eos), unconstrained and under a
    regex that allows any text (`[^\\x00]*`; a token that would leave invalid UTF-8 is
    still masked, so the tokens may differ; the counts do not): the price of building the
    masks and of not scheduling ahead, seconds after a first run compiled each mode's
    steps."""
    import tempfile

    from engine import LLM

    folder = tempfile.mkdtemp()
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(model_dir, name)), os.path.join(folder, name))
    os.symlink(os.path.abspath(tokenizer), os.path.join(folder, "tokenizer.json"))
    llm = LLM(model=folder, max_num_seqs=rows, max_num_batched_tokens=max(64, rows))
    prompts = [[1, 40 + r, 50 + r] for r in range(rows)]
    free = SamplingParams(max_tokens=steps, ignore_eos=True)
    allow = StructuredOutputsParams(regex=r"[^\x00]*")
    out = {}
    for name, params in (
        ("unconstrained", free),
        ("regex", SamplingParams(max_tokens=steps, ignore_eos=True, structured_outputs=allow)),
    ):
        llm.generate(prompts, params)  # compiles
        start = time.perf_counter()
        got = llm.generate(prompts, params)
        out[name] = time.perf_counter() - start
        assert sum(len(g.token_ids) for g in got) == rows * steps
    return out


def main(argv) -> None:
    del argv
    try:
        check_count("--vocab_size", _VOCAB.value, low=512, high=1 << 20)
        check_count("--corpus_mb", _CORPUS_MB.value, low=1, high=1024)
        check_count("--rows", _ROWS.value, low=1, high=4096)
        check_count("--steps", _STEPS.value, low=1, high=4096)
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_structured: {e}")
    start = time.perf_counter()
    tok = train_tokenizer(_VOCAB.value, _CORPUS_MB.value)
    vocab = tok.get_vocab_size()
    print(f"tokenizer: {vocab} tokens, trained in {time.perf_counter() - start:.1f} s")
    eos = tok.token_to_id("<|endoftext|>")
    structured = StructuredOutputs(tok, vocab, [eos])
    start = time.perf_counter()
    structured._vocab()  # the outlines_core Vocabulary, built once per engine
    results = dict(vocab_size=vocab, rows=_ROWS.value, steps=_STEPS.value)
    results["vocabulary_s"] = time.perf_counter() - start
    print(f"vocabulary: {results['vocabulary_s']:.2f} s")
    rng = np.random.default_rng(0)
    results["constraints"] = {}
    for name, so in CONSTRAINTS.items():
        got = bench_constraint(so, structured, eos, _ROWS.value, _STEPS.value, rng)
        results["constraints"][name] = got
        print(
            f"{name:32s} compile {got['compile_s']:6.2f} s; mask per row and step "
            f"{got['us_per_row_step_first']:7.1f} us, states cached "
            f"{got['us_per_row_step_again']:5.1f} us ({got['row_steps']} row-steps, "
            f"{got['states']} states)"
        )
    logits = jnp.asarray(rng.standard_normal((_ROWS.value, vocab)), jnp.float32)
    mask = jnp.asarray(rng.integers(-(2**31), 2**31, (_ROWS.value, -(-vocab // 32))), jnp.int32)
    fn = jax.jit(apply_allowed_mask)
    fn(logits, mask).block_until_ready()
    best = float("inf")
    for _ in range(5):  # best of 5 x 20 calls
        start = time.perf_counter()
        for _ in range(20):
            out = fn(logits, mask)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - start) / 20)
    results["apply_ms"] = best * 1e3
    results["backend"] = jax.default_backend()
    shape = f"[{_ROWS.value}, {vocab}]"
    print(f"apply_allowed_mask {shape} on {results['backend']}: {results['apply_ms']:.3f} ms")
    if _ENGINE_MODEL.value:
        secs = bench_engine(_ENGINE_MODEL.value, _ENGINE_TOKENIZER.value, 8, _STEPS.value)
        results["engine_seconds"] = secs
        print(
            f"engine, 8 requests x {_STEPS.value} tokens: unconstrained {secs['unconstrained']:.3f}"
            f" s, under an all-allowing regex {secs['regex']:.3f} s"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    app.run(main)
