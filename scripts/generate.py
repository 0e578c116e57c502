"""Generate from a preset, a Hugging Face directory or an orbax checkpoint.

python -m scripts.generate --model=tiny-deepseek-v3 --num_prompts=8 --max_tokens=24
python -m scripts.generate --model=tests/fixtures/llama --prompt="the cat sat on"

Multi-host: start the same command on every process, adding --coordinator=HOST:PORT (process
0's address), --num_processes=N and --process_id=I; one mesh then spans every process's
devices (sharding/distributed.py: every process runs the same deterministic scheduler).
On one machine with fake CPU devices, for example:
XLA_FLAGS=--xla_force_host_platform_device_count=2 python -m scripts.generate \
    --model=tests/fixtures/mixtral --mesh=ep=4 --coordinator=127.0.0.1:12355 \
    --num_processes=2 --process_id=0     # and --process_id=1 in a second shell
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams, StructuredOutputsParams, chat, inputs
from models.load import model_config, tokenizer_path
from scripts import engine_flags
from scripts.flag_checks import MAX_PROMPTS, check_count
from sharding import distributed

_MODEL = flags.DEFINE_string("model", "tiny-deepseek-v3", "Preset name, HF dir or orbax dir.")
_PROMPT = flags.DEFINE_multi_string("prompt", [], "Text prompt(s); needs a tokenizer.json.")
_CHAT = flags.DEFINE_bool(
    "chat", False, "Send each --prompt as a user message through the model's chat template."
)
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", 4, "Random token prompts when no --prompt.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 32, "Longest random prompt (tokens).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 16, "New tokens per prompt.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "0 = greedy.")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Nucleus mass.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Top-k; 0 = off.")
_MIN_P = flags.DEFINE_float("min_p", 0.0, "Min-p (relative to the top token); 0 = off.")
_PRESENCE = flags.DEFINE_float("presence_penalty", 0.0, "Per token already output, in [-2, 2].")
_FREQUENCY = flags.DEFINE_float(
    "frequency_penalty", 0.0, "Per occurrence of a token already output, in [-2, 2]."
)
_REPETITION = flags.DEFINE_float(
    "repetition_penalty", 1.0, "Divides (x multiplies) logits of prompt/output tokens; 1 = off."
)
_MIN_TOKENS = flags.DEFINE_integer(
    "min_tokens", 0, "New tokens before EOS, stop ids or stop strings may end a request."
)
_LOGIT_BIAS = flags.DEFINE_list(
    "logit_bias", [], "Token biases as id:bias pairs, e.g. 42:-100,7:2.5 (bias in [-100, 100])."
)
_ALLOWED = flags.DEFINE_list(
    "allowed_token_ids", [], "Sample only among these token ids, e.g. 3,17,42 (empty: all)."
)
_TRUNCATE = flags.DEFINE_integer(
    "truncate_prompt_tokens", None, "Keep only each prompt's last N tokens (default: all)."
)
_STOP = flags.DEFINE_multi_string(
    "stop", [], "Stop string(s): a request ends when its text holds one (needs a tokenizer.json)."
)
_BAD_WORDS = flags.DEFINE_multi_string(
    "bad_words", [], "Word(s) the output must not contain (needs a tokenizer.json)."
)
_SKIP_SPECIAL = flags.DEFINE_bool(
    "skip_special_tokens", True, "Leave special tokens out of the text (and its stop strings)."
)
_REGEX = flags.DEFINE_string("regex", None, "Structured output: the text must match this regex.")
_CHOICE = flags.DEFINE_list("choice", [], "Structured output: the text is one of these strings.")
_JSON_SCHEMA = flags.DEFINE_string(
    "json_schema", None, "Structured output: JSON a schema accepts (its JSON text or a file)."
)
_N = flags.DEFINE_integer(
    "n",
    1,
    "Samples per prompt (they share the prompt's KV pages); with --temperature > 0 "
    "sample k of prompt i draws with seed + i * n + k.",
)
_SEED = flags.DEFINE_integer(
    "seed",
    0,
    "Engine seed (random weights, random prompts); with --temperature > 0, prompt i samples "
    "with seed + i.",
)
_COORDINATOR = flags.DEFINE_string("coordinator", None, "Multi-host: process 0's host:port.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 1, "Multi-host: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", 0, "Multi-host: this process's index.")


def main(argv):
    del argv
    try:
        _generate()
    except (ValueError, OSError) as e:  # bad flags and inputs: one line, no trace
        sys.exit(f"generate: {e}")


def _flag_int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a token id") from None


def _parse_logit_bias(pairs: list[str]) -> list[tuple[int, float]] | None:
    """--logit_bias=42:-100,7:2.5 -> [(42, -100.0), (7, 2.5)]; SamplingParams checks the
    rest (ranges, an id given twice)."""
    bias = []
    for pair in pairs:
        token, sep, value = pair.partition(":")
        try:
            if not sep:
                raise ValueError
            bias.append((_flag_int("--logit_bias", token), float(value)))
        except ValueError:
            raise ValueError(f"--logit_bias: {pair!r} is not id:bias") from None
    return bias or None


def _structured_outputs() -> StructuredOutputsParams | None:
    """--regex / --choice / --json_schema (at most one; a schema may be a file's path)."""
    given = {"regex": _REGEX.value, "choice": _CHOICE.value, "json": _JSON_SCHEMA.value}
    given = {k: v for k, v in given.items() if v}
    if not given:
        return None
    if len(given) > 1:
        raise ValueError("--regex, --choice, --json_schema: give at most one")
    schema = given.get("json")
    if schema is not None and os.path.isfile(schema):
        with open(schema) as f:
            given["json"] = f.read()
    return StructuredOutputsParams(**given)


def _generate() -> None:
    # Checked before the model loads.
    params = SamplingParams(
        temperature=_TEMPERATURE.value,
        max_tokens=_MAX_TOKENS.value,
        top_p=_TOP_P.value,
        top_k=_TOP_K.value,
        min_p=_MIN_P.value,
        presence_penalty=_PRESENCE.value,
        frequency_penalty=_FREQUENCY.value,
        repetition_penalty=_REPETITION.value,
        stop=tuple(_STOP.value),
        min_tokens=_MIN_TOKENS.value,
        logit_bias=_parse_logit_bias(_LOGIT_BIAS.value),
        allowed_token_ids=[_flag_int("--allowed_token_ids", t) for t in _ALLOWED.value] or None,
        truncate_prompt_tokens=_TRUNCATE.value,
        n=_N.value,
        bad_words=tuple(_BAD_WORDS.value),
        structured_outputs=_structured_outputs(),
        skip_special_tokens=_SKIP_SPECIAL.value,
    )
    for name, flag, low in (
        ("num_prompts", _NUM_PROMPTS, 1),
        ("prompt_len", _PROMPT_LEN, 1),
        ("seed", _SEED, 0),
    ):
        if flag.value < low:
            raise ValueError(f"--{name}={flag.value}: must be >= {low}")
    if not _PROMPT.value:  # random prompts, built on the host before they run
        check_count("--num_prompts", _NUM_PROMPTS.value, high=MAX_PROMPTS)
        # The engine refuses a prompt past max_model_len; the config says it without weights.
        limit = (
            engine_flags.MAX_MODEL_LEN.value or model_config(_MODEL.value).max_position_embeddings
        )
        if _PROMPT_LEN.value > limit:
            raise ValueError(
                f"--prompt_len={_PROMPT_LEN.value}: must be <= max_model_len={limit}"
                + (
                    ""
                    if engine_flags.MAX_MODEL_LEN.value
                    else " (the model's max_position_embeddings)"
                )
            )
    # Text in or out needs the model's tokenizer: known from its files, before the weights.
    text_flags = (  # (what to show, whether it is given)
        ("--prompt", _PROMPT.value),
        (f"--stop={list(params.stop)}", params.stop),
        (f"--bad_words={list(params.bad_words)}", params.bad_words),
        ("--regex/--choice/--json_schema", params.structured_outputs is not None),
    )
    for shown, given in text_flags:
        if given and tokenizer_path(_MODEL.value) is None:
            raise ValueError(f"{shown}: model={_MODEL.value!r} has no tokenizer.json to read text")
    if _CHAT.value:
        if not _PROMPT.value:
            raise ValueError("--chat: needs --prompt (the user messages)")
        path = tokenizer_path(_MODEL.value)
        if chat.read_template(inputs.tokenizer_config(path), os.path.dirname(path))[0] is None:
            raise ValueError(f"--chat: model={_MODEL.value!r} has no chat template")
    distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    llm = LLM(
        model=_MODEL.value,
        **engine_flags.llm_kwargs(),
        seed=_SEED.value,
    )
    if _PROMPT.value:
        prompts = list(_PROMPT.value)
        if _CHAT.value:  # token ids as the template renders them (engine/chat.py)
            convs = [[{"role": "user", "content": p}] for p in prompts]
            prompts = chat.prompt_ids(llm.tokenizer, llm.chat_template, convs, llm.special_tokens)
    else:
        rng = np.random.default_rng(_SEED.value)
        vocab = llm.config.vocab_size
        prompts = [
            rng.integers(3, vocab, size=int(rng.integers(1, _PROMPT_LEN.value + 1))).tolist()
            for _ in range(_NUM_PROMPTS.value)
        ]
    if _TEMPERATURE.value > 0:
        # A seed per prompt: one shared seed would give equal prompts equal samples and make
        # every prompt's draws the same uniforms.
        params = [
            dataclasses.replace(params, seed=(_SEED.value + i * params.n) % 2**32)
            for i in range(len(prompts))
        ]
    llm.generate(prompts, SamplingParams(max_tokens=2))  # compile outside the timing
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    if not distributed.is_leader():
        return  # every process holds the same outputs; process 0 prints them
    # Numbered by prompt (the warm-up took the first ids), and by sample with --n > 1.
    records = [
        (f"{i}.{k}" if _N.value > 1 else str(i), sample)
        for i, out in enumerate(outs)
        for k, sample in enumerate(out.samples or [out])
    ]
    for label, out in records:
        shown = out.text if out.text is not None else out.token_ids
        print(f"[{label}] prompt {len(out.prompt_token_ids)} tok -> {shown} ({out.finish_reason})")
    new_tokens = sum(len(o.token_ids) for _, o in records)
    stats = llm.stats()
    print(
        f"{llm.config.name}: {len(outs)} requests, {new_tokens} new tokens in {elapsed:.2f} s "
        f"= {new_tokens / elapsed:.1f} tok/s; compiles {stats['num_compiles']}, "
        f"preemptions {stats['num_preemptions']}"
        + (
            f"; drafts kept {stats['num_accepted_tokens']} of {stats['num_draft_tokens']}"
            if "num_draft_tokens" in stats
            else ""
        )
        + (
            f"; prefix cache hits {stats['prefix_cache_hits']} of "
            f"{stats['prefix_cache_queries']} tokens"
            if "prefix_cache_hits" in stats
            else ""
        )
        + (
            f", pages to / from host memory {stats['kv_offload_stored_pages']} / "
            f"{stats['kv_offload_loaded_pages']}"
            if "kv_offload_pages" in stats
            else ""
        )
    )


if __name__ == "__main__":
    app.run(main)
