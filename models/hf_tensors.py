"""What one tensor of a Hugging Face checkpoint is to the loader: its expected shape, the params
leaves it fills and how (`HFTensor`, `KINDS`); the builders models/checkpoint_names.py and
models/linear_names.py name tensors with."""

from __future__ import annotations

from typing import NamedTuple

# How an HF tensor becomes (part of) a params leaf.
#   copy:        reshape to the leaf shape (embeddings, norms, biases)
#   linear:      torch Linear weight [out, in] -> transpose -> reshape to the leaf
#   expert:      one expert's Linear weight -> transpose -> leaf[expert]
#   gate_up:     fused [E, 2F, D] -> w_gate = [:, :F]^T, w_up = [:, F:]^T (two targets)
#   experts_T:   fused [E, D, F] -> transpose the last two axes
#   gate_up_interleaved: gpt-oss [E, D, 2F] (or its [E, 2F] bias), gate and up columns
#                alternating: w_gate = [..., 0::2], w_up = [..., 1::2] (two targets)
#   gate_up_halves: Llama 4 [E, D, 2F]: w_gate = [..., :F], w_up = [..., F:] (two targets)
#   grouped:     a Linear (or conv [C, 1, K]) weight whose output rows are `groups` groups,
#                each a run of rows per target in order (each target's share of a group:
#                its size / input width / groups); each target's rows, transposed, reshape
#                to it (Qwen3-Next's in_proj_qkvz and gated q_proj, Qwen3.5's in_proj_qkv)
#   grouped_T:   grouped's, for a weight stored [in, out] (GPT-2's Conv1D c_attn)
#   index:       an integer table, reshaped (DeepSeek-V4's tid2eid)
#   rows:        the leading elements of a table in row order, the leaf's (Llama 3.2 Vision's
#                embedding rows; ERNIE 4.5 VL's text router bias, the first of its two rows);
#                a table of more rows than its shape's is read alike (Molmo2's embedding)
KINDS = (
    "index",
    "rows",
    "copy",
    "linear",
    "expert",
    "gate_up",
    "experts_T",
    "gate_up_interleaved",
    "gate_up_halves",
    "grouped",
    "grouped_T",
)

Path_ = tuple  # a params tree path, e.g. ("layers", 0, "attn", "wq")


class HFTensor(NamedTuple):
    """One tensor of an HF checkpoint: its expected shape and where it lands in the params."""

    shape: tuple[int, ...]  # expected shape in the HF file
    targets: tuple[Path_, ...]  # params leaves it fills
    kind: str  # one of KINDS
    expert: int = -1  # expert index for kind "expert"
    groups: int = 1  # kind "grouped": the output rows' groups


def linear(out_dim: int, in_dim: int, path: Path_) -> HFTensor:
    return HFTensor((out_dim, in_dim), (path,), "linear")


def vector(n: int, path: Path_) -> HFTensor:
    return HFTensor((n,), (path,), "copy")
