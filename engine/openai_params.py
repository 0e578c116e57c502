"""OpenAI API request bodies -> SamplingParams: the fields of /v1/completions and
/v1/chat/completions the engine takes (engine/server.py), with vLLM's extras."""

from __future__ import annotations

import dataclasses

from engine.beam_search import BeamSearchParams
from engine.sampling_params import MAX_LOGPROBS, SamplingParams
from engine.structured import StructuredOutputsParams

# Request fields copied into SamplingParams as they are (None = left out).
_PLAIN_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "allowed_token_ids",
    "bad_words",
    "truncate_prompt_tokens",
)
# What a model's generation_config.json may set (inputs.GENERATION_DEFAULTS' fields).
_GENERATION_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")


def default_params(llm) -> dict:
    """The fields a request leaves out: the OpenAI API's temperature 1, overridden by what
    the model's generation_config sets (LLM.get_default_sampling_params)."""
    gen, plain = llm.get_default_sampling_params(), SamplingParams()
    given = {f: getattr(gen, f) for f in _GENERATION_FIELDS if getattr(gen, f) != getattr(plain, f)}
    return {"temperature": 1.0, **given}


def sampling_params(body: dict, defaults: dict, chat_api: bool) -> SamplingParams:
    """A request body's SamplingParams (ValueError naming the field when one is wrong)."""
    fields = dict(defaults)
    fields.update({k: body[k] for k in _PLAIN_FIELDS if body.get(k) is not None})
    max_tokens = body.get("max_completion_tokens") if chat_api else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        fields["stop"] = (stop,) if isinstance(stop, str) else stop
    if body.get("logit_bias") is not None:
        bias = body["logit_bias"]
        if not isinstance(bias, dict):
            raise ValueError(f"logit_bias={bias!r}: must be an object of token id: bias")
        try:
            fields["logit_bias"] = {int(k): v for k, v in bias.items()}
        except ValueError as e:
            raise ValueError(f"logit_bias: keys must be token ids ({e})") from e
    if chat_api:  # logprobs: bool, top_logprobs: how many alternatives
        if body.get("logprobs"):
            fields["logprobs"] = body.get("top_logprobs") or None
    elif body.get("logprobs") is not None:
        fields["logprobs"] = body["logprobs"] or None
    if body.get("echo"):  # the prompt, and with logprobs its tokens', before the answer
        if chat_api:
            raise ValueError("echo: only on /v1/completions")
        if body.get("logprobs") is not None:
            if fields.get("max_tokens") == 0:
                raise ValueError("max_tokens=0: echo with logprobs needs max_tokens >= 1")
            fields["prompt_logprobs"] = body["logprobs"] or True
    structured = _structured(body)
    if structured is not None:
        fields["structured_outputs"] = structured
    try:
        return SamplingParams(**fields)
    except TypeError as e:  # a field of the wrong JSON type reaching a comparison
        raise ValueError(f"request: {e}") from e


def beam_search_params(body: dict, params: SamplingParams) -> BeamSearchParams:
    """vLLM's use_beam_search: `n` beams of the request's max_tokens (its ignore_eos,
    length_penalty); what a beam search cannot serve refused by field."""
    if body.get("stream"):
        raise ValueError("stream: not supported with use_beam_search")
    if params.structured_outputs is not None or body.get("echo"):
        raise ValueError("use_beam_search: takes no echo, structured outputs or forced tools")
    if body.get("temperature") not in (None, 1, 1.0):
        raise ValueError(
            f"temperature={body['temperature']!r}: beam search ranks by the model's "
            "unscaled log-probabilities (leave it out, or 1)"
        )
    if params.n > MAX_LOGPROBS // 2:
        raise ValueError(f"n={params.n}: at most {MAX_LOGPROBS // 2} beams")
    beam = BeamSearchParams(params.n, params.max_tokens, params.ignore_eos)
    return dataclasses.replace(beam, length_penalty=body.get("length_penalty", 1.0))


def _structured(body: dict) -> StructuredOutputsParams | None:
    """vLLM's structured_outputs object, or the OpenAI API's response_format."""
    given = body.get("structured_outputs")
    if given is not None:
        if not isinstance(given, dict):
            raise ValueError("structured_outputs: must be an object")
        try:
            return StructuredOutputsParams(**given)
        except TypeError as e:
            raise ValueError(f"structured_outputs: {e}") from e
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if schema is None:
            raise ValueError("response_format.json_schema.schema: missing")
        return StructuredOutputsParams(json=schema)
    raise ValueError(
        f"response_format.type={kind!r}: must be 'text', 'json_object' or 'json_schema'"
    )
