"""LiquidAI's LFM2-MoE (configs/hf_lfm2.py; models/linear_attention.short_conv): the gated short
convolution over a ragged batch against a numpy transcription of transformers' Lfm2ShortConv
(one sequence, one token at a time), with prefix caching's snapshots and speculative
decoding's per-row states; the configs' spellings and refusals; the state's bytes. The
fixture's HF parity: tests/test_hf_parity.py (reference path) and tests/test_linear_attention.py
(the engine: chunks, reused state rows, preemption)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.linear_attention import Segments, short_conv, zero_state
from models.specs import init_params
from tests.family_cases import arch_fields, saved_config

FIXTURE = Path(__file__).parent / "fixtures" / "lfm2_moe"


def _numpy_conv(p: dict, x: np.ndarray, prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' Lfm2ShortConv on one sequence's tokens x [n, D] after its last K-1
    inputs `prior` [K-1, D] (oldest first): (outputs [n, D], the new last K-1 inputs)."""
    x = x.astype(np.float64)
    bx = (x @ p["w_b"]) * (x @ p["w_x"])
    inputs = np.concatenate([prior, bx])  # [K-1 + n, D]
    taps = p["conv"].shape[0]
    conv = np.stack([(inputs[t : t + taps] * p["conv"]).sum(0) for t in range(len(x))])
    return ((x @ p["w_c"]) * conv) @ p["wo"], inputs[-(taps - 1) :]


# (lengths, fresh, snapshots {span: [(end, state row)]}, drafting) of four spans in state rows
# SLOTS over ROWS rows: a continued span, a fresh one, a padding span, a decode (padding rows
# after them); one-token spans shorter than a conv's window, snapshots inside long spans;
# drafting spans (a state after each row but the last).
SPAN_CASES = [
    ((5, 3, 0, 1), (False, True, True, False), None, None),
    ((1, 6, 0, 2), (False, False, True, False), {1: [(2, 6), (5, 7)], 3: [(1, 8)]}, None),
    ((3, 4, 0, 2), (False, True, True, False), {0: [(1, 6), (2, 7)], 3: [(1, 8)]}, True),
]
ROWS, SLOTS = 16, [2, 4, 0, 5]


def ragged_segments(lengths, fresh, snaps, drafting) -> tuple[Segments, np.ndarray]:
    """Segments of a SPAN_CASES case (chunks of 16; snapshots and drafting where given) and
    each span's first row."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    seq_of = np.clip(np.searchsorted(np.cumsum(lengths), np.arange(ROWS), side="right"), 0, 3)
    snap_end, snap_row = np.full((4, 2), -1, np.int32), np.full((4, 2), -1, np.int32)
    for i, pairs in (snaps or {}).items():
        for j, (end, row) in enumerate(pairs):
            snap_end[i, j], snap_row[i, j] = end, row
    seg = Segments(
        *map(jnp.asarray, (seq_of, np.arange(ROWS) - starts[seq_of], starts, lengths)),
        jnp.asarray(SLOTS, jnp.int32),
        jnp.asarray(fresh),
        16,
        None if snaps is None else jnp.asarray(snap_end),
        None if snaps is None else jnp.asarray(snap_row),
        None if snaps is None else jnp.zeros(4, jnp.int32),
        None if drafting is None else jnp.asarray([True, False, False, True]),
    )
    return seg, starts


@pytest.mark.parametrize("lengths, fresh, snaps, drafting", SPAN_CASES)
def test_short_conv_over_ragged_spans_equals_each_sequence_token_by_token(
    lengths, fresh, snaps, drafting
):
    cfg = get_preset("tiny-lfm2-moe")
    rng = np.random.default_rng(2)
    p = {
        k: np.asarray(v)
        for k, v in init_params(cfg, 0, 0.3, host=True)["layers"][0]["linear"].items()
    }
    x = rng.normal(size=(ROWS, cfg.hidden_size)).astype(np.float32)
    (state,) = [rng.normal(size=a.shape).astype(np.float32) for a in zero_state(cfg, 9)]
    seg, starts = ragged_segments(lengths, fresh, snaps, drafting)
    out, (new,) = short_conv(p, jnp.asarray(x), cfg, (jnp.asarray(state),), seg)
    out, new = np.asarray(out), np.asarray(new)
    for i, (n, slot, start) in enumerate(zip(lengths, SLOTS, starts, strict=True)):
        before = np.zeros_like(state[slot]) if fresh[i] else state[slot]
        if n:
            want, prior = _numpy_conv(p, x[start : start + n], before)
            np.testing.assert_allclose(out[start : start + n], want, atol=2e-5, rtol=1e-5)
            np.testing.assert_allclose(new[slot], prior, atol=2e-5, rtol=1e-5)
        for end, row in (snaps or {}).get(i, ()):
            _, prior = _numpy_conv(p, x[start : start + end], before)
            np.testing.assert_allclose(new[row], prior, atol=2e-5, rtol=1e-5)
    assert np.abs(out[: sum(lengths)]).max() > 0.1  # (not a comparison of zeros)
    for untouched in (1, 3):
        np.testing.assert_array_equal(new[untouched], state[untouched])


def test_saved_and_released_spellings_read_as_the_preset():
    """transformers' save and the releases' spelling (tie_embedding, norm_eps,
    full_attn_idxs in place of layer_types) read to the tiny preset."""
    want = arch_fields(get_preset("tiny-lfm2-moe"))
    assert arch_fields(config_from_hf(FIXTURE)) == want
    released = {
        k: v
        for k, v in saved_config("lfm2_moe").items()
        if k not in ("layer_types", "tie_word_embeddings")
    }
    released = dict(released, full_attn_idxs=[2, 4], tie_embedding=True)
    assert arch_fields(config_from_hf(released)) == want
    untied = config_from_hf(dict(released, tie_embedding=False))
    assert not untied.tie_word_embeddings
    plain = config_from_hf(dict(released, use_expert_bias=False))
    assert (plain.topk_method, plain.scoring_func) == ("greedy", "sigmoid")


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(conv_bias=True), "conv_bias=True"),
        (dict(layer_types=None), "layer_types: required"),
        (dict(layer_types=["conv"] * 5), "needs a full_attention layer"),
        (dict(layer_types=["conv", "attention"] * 2 + ["conv"]), "layer_types: expected 5"),
        (dict(tie_embedding=False), "tie_embedding=False and tie_word_embeddings=True differ"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("lfm2_moe"), **change})


def test_state_bytes_and_shapes():
    """A sequence's state: each short-conv layer's last K-1 = 2 inputs of 64 channels in
    the model dtype (float32), nothing else; none for the attention layers, which keep
    pages."""
    cfg = get_preset("tiny-lfm2-moe")
    assert cfg.linear_state_shapes() == ((2, 64),)
    assert cfg.linear_state_bytes() == 3 * 2 * 64 * 4
    assert [a.shape for a in zero_state(cfg, 7)] == [(7, 2, 64)]
    assert cfg.layer_kv_widths(2) == (32, 32) and cfg.layer_kv_widths(0) == ()
    with pytest.raises(ValueError, match="linear_conv_kernel=1"):
        cfg.replace(linear_conv_kernel=1)


def test_dense_lfm2_mlp_width_and_layer_kinds_as_transformers_reads_them():
    """LFM2 (dense): the fixture's config reads as its preset (MLP 112 wide from 100);
    block_ff_dim wins over intermediate_size; without the multiplier no rounding; without
    auto-adjust the width as given; without layer_types or full_attn_idxs every layer
    attends (transformers' Lfm2Config)."""
    saved = json.loads((FIXTURE.parent / "lfm2" / "config.json").read_text())
    assert arch_fields(config_from_hf(saved)) == arch_fields(get_preset("tiny-lfm2"))
    assert config_from_hf(dict(saved, block_ff_dim=196)).intermediate_size == 208  # 130 * 1.5
    plain = dict(saved, block_ffn_dim_multiplier=None)
    assert config_from_hf(plain).intermediate_size == 66
    assert config_from_hf(dict(saved, block_auto_adjust_ff_dim=False)).intermediate_size == 100
    bare = {k: v for k, v in saved.items() if k not in ("layer_types", "full_attn_idxs")}
    assert config_from_hf(bare).linear_attention_layers == ()
