"""Convert a Hugging Face safetensors checkpoint into a self-describing orbax checkpoint.

python -m scripts.convert_hf --hf_dir=tests/fixtures/llama --out_dir=/tmp/llama_orbax
python -m scripts.convert_hf --hf_dir=tests/fixtures/deepseek_v3_fp8 --out_dir=/tmp/ds_fp8 \
    --quantization=fp8    # fp8 weights kept as the checkpoint stores them
"""

from __future__ import annotations

import os
import shutil
import sys

from absl import app, flags, logging

from models.load import convert_hf_to_orbax, summary
from scripts.flag_checks import check_output_dir

_HF_DIR = flags.DEFINE_string("hf_dir", None, "HF model directory (config.json + safetensors).")
_OUT_DIR = flags.DEFINE_string(
    "out_dir", None, "New (or empty) directory for the orbax checkpoint, outside --hf_dir."
)
_DTYPE = flags.DEFINE_enum(
    "dtype",
    None,
    ["float32", "bfloat16", "float16", "auto"],
    "Parameter dtype; default float32, 'auto' keeps the checkpoint's own.",
)
_QUANTIZATION = flags.DEFINE_enum(
    "quantization",
    None,
    ["fp8", "int4"],
    "fp8: store the projection weights as e4m3 with block scales (an fp8 checkpoint's own); "
    "int4: packed 4-bit with group scales (an int4 checkpoint's own).",
)
flags.mark_flags_as_required(["hf_dir", "out_dir"])


def main(argv):
    del argv
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every save step at INFO
    out_dir = os.path.abspath(os.path.expanduser(_OUT_DIR.value))
    existed = os.path.exists(out_dir)
    try:
        # Before the checkpoint is read (minutes for a large one), not when it is written.
        check_output_dir("--out_dir", _OUT_DIR.value)
        cfg, params = convert_hf_to_orbax(
            _HF_DIR.value, _OUT_DIR.value, dtype=_DTYPE.value, quantization=_QUANTIZATION.value
        )
    except (ValueError, OSError) as e:
        if not existed and os.path.isdir(out_dir):  # no half-written checkpoint left behind
            shutil.rmtree(out_dir, ignore_errors=True)
        sys.exit(f"convert_hf: {e}")
    print(f"converted {_HF_DIR.value} -> {_OUT_DIR.value}: {summary(cfg, params)}")


if __name__ == "__main__":
    app.run(main)
