"""What callers pass to `LLM`: its arguments, prompts and sampling params, checked and put in
one shape before any work starts. Each refusal is a ValueError naming the field.

Prompt forms (vLLM's): a string, a sequence of token ids (list, tuple, range or 1-D integer
array), a dict `{"prompt": text}` or `{"prompt_token_ids": ids}` (vLLM's TextPrompt and
TokensPrompt), or a list (or 2-D integer array) of those.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from configs.model_config import ModelConfig
from engine.sampling_params import SamplingParams
from models.load import GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE

INT32_MAX = 2**31 - 1  # step arrays (token counts, slots, sequence counts) are int32
PROMPT_KEYS = ("prompt", "prompt_token_ids")


def as_int(name: str, value, low: int = 1, high: int = INT32_MAX) -> int:
    """`value` as an int in [low, high]: Python and numpy integers, never bools."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}={value!r}: must be an integer, not a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]") from None
    if not low <= n <= high:
        raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")
    return n


def as_bool(name: str, value) -> bool:
    """`value` as a bool; only True/False (numpy's too): "False" is not False."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}={value!r}: must be True or False")
    return bool(value)


def check_prompt(ids: list[int], vocab: int, max_model_len: int) -> None:
    """ValueError naming the prompt: empty, a token outside [0, vocab), or too long."""
    if not ids:
        raise ValueError("prompt: must not be empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    if len(ids) > max_model_len:
        raise ValueError(
            f"prompt: length {len(ids)} exceeds max_model_len={max_model_len} "
            "(SamplingParams.truncate_prompt_tokens keeps a prompt's last tokens)"
        )


def config_fields(name: str, value, keys) -> dict:
    """A vLLM-style config given as a dict or its JSON text (`name` the argument): its
    fields, a ValueError naming `name` for bad JSON, another type or a key not in `keys`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name}={value!r}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}={value!r}: expected a dict, its JSON, or None")
    if set(value) - set(keys):
        raise ValueError(f"{name}: unsupported keys {sorted(set(value) - set(keys))}")
    return value


def as_model_path(model) -> str:
    """The `model` argument as a string: a preset name or a path (str or os.PathLike)."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        raise ValueError(
            f"model={model!r}: expected a preset name or a directory path (str or PathLike)"
        )
    return model


def _is_token(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _is_single(prompts) -> bool:
    """Whether `prompts` is one prompt rather than a batch of them."""
    if isinstance(prompts, str | Mapping):
        return True
    if isinstance(prompts, np.ndarray):  # a numeric 1-D array is one prompt (floats refused)
        return prompts.ndim == 1 and prompts.dtype.kind in "biuf"
    # A number first (a float or bool too) is meant as a token id, and refused as one.
    return (
        isinstance(prompts, Sequence)
        and len(prompts) > 0
        and isinstance(prompts[0], int | float | np.number | np.bool_)
    )


def _as_array(x):
    """Array-likes that are not numpy arrays (e.g. jax arrays) as numpy arrays."""
    if hasattr(x, "__array__") and not isinstance(x, np.ndarray | str | Sequence | Mapping):
        return np.asarray(x)
    return x


def split_prompts(prompts) -> list:
    """The prompts of a generate/stream/score call as a list of single prompts."""
    prompts = _as_array(prompts)
    if isinstance(prompts, bytes | bytearray):
        raise ValueError("prompts: bytes are not a prompt; pass a str or token ids")
    if isinstance(prompts, np.ndarray) and prompts.ndim == 0:
        raise ValueError(f"prompts: a 0-d array ({prompts!r}) is not a prompt")
    if _is_single(prompts):
        return [prompts]
    if not isinstance(prompts, Iterable):
        raise ValueError(
            "prompts: expected a string, token ids, a {'prompt': ...} or "
            "{'prompt_token_ids': ...} dict, or a list of those; got "
            f"{type(prompts).__name__}"
        )
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts: must contain at least one prompt")
    return prompts


def tokenize(prompt, tokenizer, bos_id: int | None) -> list[int]:
    """One prompt's token ids: a text through `tokenizer` (a tokenizers.Tokenizer, None if
    the model has none), led by `bos_id` when given and not already there
    (prompt_bos_id); token ids as they are (checked to be integers)."""
    prompt = prompt_text_or_ids(prompt)
    if not isinstance(prompt, str):
        return prompt
    if tokenizer is None:
        raise ValueError(
            "prompt: a string prompt needs a tokenizer.json in the model directory; "
            "pass token ids instead"
        )
    ids = tokenizer.encode(prompt).ids
    if bos_id is not None and (not ids or ids[0] != bos_id):
        ids = [bos_id, *ids]
    return ids


def prompt_text_or_ids(prompt) -> str | list[int]:
    """One prompt as its text (to tokenize) or its token ids (checked to be integers)."""
    prompt = _as_array(prompt)
    if isinstance(prompt, Mapping):
        keys = sorted(map(str, prompt))
        if len(prompt) != 1 or keys[0] not in PROMPT_KEYS:
            raise ValueError(
                f"prompt: a dict prompt holds exactly one of {PROMPT_KEYS}; got keys {keys}"
            )
        ((key, prompt),) = prompt.items()
        if key == "prompt" and not isinstance(prompt, str):
            raise ValueError(f"prompt: 'prompt' must be a string, got {type(prompt).__name__}")
        if key == "prompt_token_ids" and isinstance(prompt, str):
            raise ValueError("prompt: 'prompt_token_ids' must be token ids, got a string")
        prompt = _as_array(prompt)
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, bytes | bytearray):
        raise ValueError("prompt: bytes are not a prompt; pass a str or token ids")
    if isinstance(prompt, np.ndarray) and prompt.ndim != 1:
        raise ValueError(f"prompt: token ids must be 1-D, got an array of shape {prompt.shape}")
    if not isinstance(prompt, Iterable) or isinstance(prompt, Mapping):
        raise ValueError(
            f"prompt: expected a string or a list of token ids, got {type(prompt).__name__}"
        )
    ids = prompt.tolist() if isinstance(prompt, np.ndarray) else list(prompt)
    for t in ids:
        if not _is_token(t):
            raise ValueError(f"prompt: token ids must be integers, got {t!r}")
    return [int(t) for t in ids]


def sampling_list(
    sampling_params, num_prompts: int, default: SamplingParams | None = None
) -> list[SamplingParams]:
    """One SamplingParams per prompt: None (`default`, else SamplingParams()), one for all,
    or one each."""
    if sampling_params is None:
        sampling_params = default or SamplingParams()
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * num_prompts
    if isinstance(sampling_params, str | bytes | Mapping | type) or not isinstance(
        sampling_params, Iterable
    ):
        raise ValueError(
            "sampling_params: expected a SamplingParams or a list of them, got "
            f"{type(sampling_params).__name__}"
        )
    params = list(sampling_params)
    if len(params) != num_prompts:
        raise ValueError(f"sampling_params: {len(params)} given for {num_prompts} prompts")
    for p in params:
        if not isinstance(p, SamplingParams):
            raise ValueError(f"sampling_params: expected SamplingParams, got {type(p).__name__}")
    return params


def tokenizer_config(tokenizer_path) -> dict:
    """The tokenizer_config.json beside tokenizer.json ({} when there is none)."""
    path = os.path.join(os.path.dirname(os.fspath(tokenizer_path)), TOKENIZER_CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    return _json_object(path)


def _json_object(path: str) -> dict:
    """The JSON object in the file at `path`; ValueError naming it otherwise."""
    with open(path, encoding="utf-8") as f:
        try:
            got = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(got, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    return got


def prompt_bos_id(tok_cfg: dict, tokenizer, cfg: ModelConfig) -> int | None:
    """The BOS id text prompts start with, or None to take the tokenizer's ids as they are.

    tokenizer.json's post-processor adds a BOS where the model wants one (Llama 3, Mistral),
    and `tokenizers` applies it. A tokenizer_config.json beside it (`tok_cfg`) may also set
    add_bos_token (Llama 2, DeepSeek: transformers' Llama tokenizer adds its bos_token
    then). The config's bos_token_id alone means nothing here: Qwen configs name
    <|endoftext|>, which their tokenizer never adds.
    """
    if tok_cfg.get("add_bos_token") is not True:
        return None
    token = tok_cfg.get("bos_token")
    if isinstance(token, dict):  # an AddedToken
        token = token.get("content")
    bos = tokenizer.token_to_id(token) if isinstance(token, str) else None
    bos = cfg.bos_token_id if bos is None else bos
    if bos is None:
        raise ValueError(
            f"{TOKENIZER_CONFIG_FILE}: add_bos_token is true but no bos_token is known"
        )
    return bos


def bad_word_ids(tokenizer, words) -> tuple[tuple[int, ...], ...]:
    """Each bad word's token ids as an output would hold it, without special tokens: the
    word, and after a space when that starts with another token of the same count (vLLM's
    two forms). ValueError without a tokenizer."""
    if tokenizer is None:
        raise ValueError(
            f"bad_words={list(words)!r}: need the model's tokenizer (a tokenizer.json); "
            "use bad_words_token_ids"
        )
    out = {}
    for word in words:
        plain, spaced = (
            tuple(tokenizer.encode(text, add_special_tokens=False).ids)
            for text in (word.lstrip(), " " + word.lstrip())
        )
        out[plain] = None
        if spaced and len(spaced) == len(plain) and spaced[0] != plain[0]:
            out[spaced] = None
    out.pop((), None)  # a word the tokenizer drops entirely
    return tuple(out)


# generation_config.json keys vLLM takes as default sampling settings, and their fields.
GENERATION_DEFAULTS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


def default_sampling_params(generation_config: str, model: str) -> SamplingParams:
    """The SamplingParams a request without its own gets (vLLM's `generation_config`):
    "auto" reads the model folder's generation_config.json (none, or a preset: the
    defaults), "vllm" ignores it, any other value is a folder holding one. Its
    temperature, top_p, top_k, min_p, repetition_penalty and max_new_tokens (as max_tokens)
    replace SamplingParams()'s; other keys (do_sample, eos_token_id, ...) are not sampling
    settings here. ValueError (FileNotFoundError for a missing folder) before any work."""
    if not isinstance(generation_config, str) or not generation_config:
        raise ValueError(
            f"generation_config={generation_config!r}: 'auto', 'vllm' or a folder path"
        )
    if generation_config == "vllm":
        return SamplingParams()
    folder = model if generation_config == "auto" else generation_config
    if generation_config != "auto" and not os.path.isdir(folder):
        raise FileNotFoundError(f"generation_config={folder!r}: no such directory")
    path = os.path.join(folder, GENERATION_CONFIG_FILE)
    if not os.path.isfile(path):
        if generation_config != "auto":
            raise FileNotFoundError(f"generation_config: {path!r} does not exist")
        return SamplingParams()
    gen = _json_object(path)
    given = {
        field: gen[key] for key, field in GENERATION_DEFAULTS.items() if gen.get(key) is not None
    }
    try:
        return SamplingParams(**given)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def load_text_side(tokenizer_path, cfg: ModelConfig) -> tuple:
    """(tokenizer, the BOS a text prompt must start with, chat template, special tokens)
    from the model's tokenizer.json and the files beside it; (None, None, None, {})
    without one."""
    if tokenizer_path is None:
        return None, None, None, {}
    from tokenizers import Tokenizer

    from engine import chat

    tokenizer = Tokenizer.from_file(os.fspath(tokenizer_path))
    tok_cfg = tokenizer_config(tokenizer_path)
    model_dir = os.path.dirname(os.fspath(tokenizer_path))
    template, special = chat.read_template(tok_cfg, model_dir)
    return tokenizer, prompt_bos_id(tok_cfg, tokenizer, cfg), template, special


def model_len(max_model_len: int | None, cfg: ModelConfig) -> int:
    """LLM's max_model_len (checked an int already): the model's max_position_embeddings
    unless given, and never more, but for a model without attention (Mamba's: no positions,
    a state of one size whatever the length)."""
    if max_model_len is None:
        return cfg.max_position_embeddings
    if max_model_len > cfg.max_position_embeddings and not cfg.attention_free:
        raise ValueError(
            f"max_model_len={max_model_len!r}: must be in [1, max_position_embeddings="
            f"{cfg.max_position_embeddings}]"
        )
    return max_model_len


def priorities(priority, n: int, policy: str) -> list[int]:
    """Each of n requests' priority from generate's `priority` (vLLM's): None (0 each), one
    int, or a list of n; other than 0 only under scheduling_policy="priority"."""
    if priority is None:
        return [0] * n
    many = isinstance(priority, list | tuple)
    if many and len(priority) != n:
        raise ValueError(f"priority: {len(priority)} given for {n} prompts")
    values = [
        as_int("priority", v, low=-INT32_MAX, high=INT32_MAX)
        for v in (priority if many else [priority] * n)
    ]
    if policy != "priority" and any(values):
        raise ValueError("priority: needs LLM(scheduling_policy='priority')")
    return values
