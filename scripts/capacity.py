"""How many sequences of a context fit on a deployment: KV and weight bytes.

python -m scripts.capacity --model=llama-3.1-70b --context=131072 --hbm_gib=80 --tp=8
python -m scripts.capacity --model=deepseek-v3 --weight_dtype=float8_e4m3fn --tp=8 \
    --hbm_gib=141 --json
"""

from __future__ import annotations

import json
import sys

from absl import app, flags

from long_context.capacity import DTYPE_BYTES, capacity, format_capacity

_MODEL = flags.DEFINE_string("model", "llama-3.1-70b", "Preset name, HF dir or orbax dir.")
_CONTEXT = flags.DEFINE_integer("context", 131072, "Tokens per sequence.")
_KV_DTYPE = flags.DEFINE_string(
    "kv_dtype", None, f"KV-cache dtype, one of {list(DTYPE_BYTES)}; default: the model's dtype."
)
_WEIGHT_DTYPE = flags.DEFINE_string(
    "weight_dtype",
    None,
    "Weight dtype: bfloat16, float8_e4m3fn, int8, int4 (or float32, float16); default: the "
    "model's dtype.",
)
_QUANTIZATION = flags.DEFINE_enum(
    "quantization",
    None,
    ["fp8", "int4"],
    "Weights as LLM(quantization=...) holds them (data and scales counted exactly), in place "
    "of --weight_dtype.",
)
_HBM_GIB = flags.DEFINE_float("hbm_gib", 80.0, "Accelerator memory per device, GiB.")
_TP = flags.DEFINE_integer("tp", 1, "Devices the weights and KV heads are split over.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens, as the engine's.")
_HEADROOM = flags.DEFINE_float(
    "headroom", 0.1, "Fraction of each device's memory kept free (activations, fragmentation)."
)
_SWA_RATIO = flags.DEFINE_float(
    "swa_full_tokens_ratio", None, "Hybrid models: the windowed pool's share of the full pool's."
)
_JSON = flags.DEFINE_bool("json", False, "Print one JSON object instead of text.")


def main(argv):
    del argv
    try:
        c = capacity(
            _MODEL.value,
            context=_CONTEXT.value,
            kv_dtype=_KV_DTYPE.value,
            weight_dtype=_WEIGHT_DTYPE.value,
            hbm_gib=_HBM_GIB.value,
            tp=_TP.value,
            headroom=_HEADROOM.value,
            page_size=_PAGE_SIZE.value,
            quantization=_QUANTIZATION.value,
            swa_full_tokens_ratio=_SWA_RATIO.value,
        )
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"capacity: {e}")
    print(json.dumps(c.to_dict(), sort_keys=True) if _JSON.value else format_capacity(c))


if __name__ == "__main__":
    app.run(main)
