"""The serving engine: `from engine import LLM, SamplingParams`.

`LLM` is imported lazily so the host-side modules (scheduler, page manager) can be used
and tested without importing jax.
"""

from engine.sampling_params import RequestOutput, SamplingParams, StreamDelta
from engine.structured import StructuredOutputsParams

__all__ = [
    "BeamSearchParams",
    "KVTransferConfig",
    "LLM",
    "LoRARequest",
    "RequestOutput",
    "SamplingParams",
    "StreamDelta",
    "StructuredOutputsParams",
]


def __getattr__(name: str):
    if name == "LLM":
        from engine.llm import LLM

        return LLM
    if name == "LoRARequest":  # engine/lora.py imports jax
        from engine.lora import LoRARequest

        return LoRARequest
    if name == "BeamSearchParams":  # engine/beam_search.py imports jax (through inputs)
        from engine.beam_search import BeamSearchParams

        return BeamSearchParams
    if name == "KVTransferConfig":  # engine/kv_transfer.py imports jax
        from engine.kv_transfer import KVTransferConfig

        return KVTransferConfig
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
