"""AI21's Jamba (configs/hf_jamba.py; models/linear_attention.mamba1): the Mamba-1 layer over
a ragged batch against a numpy transcription of transformers' JambaMambaMixer with its
one-token state update (one sequence, one token at a time), with prefix caching's
snapshots and speculative decoding's per-row states; the config's layer pattern and
refusals; the state's shapes. The fixture's HF parity: tests/test_hf_parity.py (reference
path) and tests/test_linear_attention.py (the engine: chunks, reused state rows,
preemption)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.linear_attention import mamba1, zero_state
from models.specs import init_params
from tests.family_cases import arch_fields, saved_config
from tests.test_lfm2 import ROWS, SLOTS, SPAN_CASES, ragged_segments

FIXTURE = Path(__file__).parent / "fixtures" / "jamba"


def _rms(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _numpy_mamba(p: dict, x: np.ndarray, conv: np.ndarray, state: np.ndarray):
    """transformers' JambaMambaMixer on one sequence's tokens x [n, D], token by token
    (its causal conv, then mamba_selective_state_update), after its conv's last K-1 inputs
    `conv` [K-1, Hv] and its scan state [Hv, N, 1]: (outputs, new conv inputs, new state)."""
    x = x.astype(np.float64)
    s = state[..., 0].astype(np.float64)
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    inputs = np.concatenate([conv, x @ p["wv"]])
    taps = p["conv_v"].shape[0]
    a = -np.exp(p["A_log"])
    out = []
    for t in range(len(x)):
        xc = silu((inputs[t : t + taps] * p["conv_v"]).sum(0) + p["conv_v_bias"])
        dt = _rms(xc @ p["w_dt"], p["dt_norm"]) @ p["dt_proj"] + p["dt_bias"]
        dt = np.log1p(np.exp(dt))
        b, c = _rms(xc @ p["w_b"], p["b_norm"]), _rms(xc @ p["w_c"], p["c_norm"])
        s = s * np.exp(dt[:, None] * a) + (dt * xc)[:, None] * b[None, :]
        y = s @ c + p["D"] * xc
        out.append((y * silu(x[t] @ p["wz"])) @ p["wo"])
    return np.stack(out), inputs[-(taps - 1) :], s[..., None]


@pytest.mark.parametrize("lengths, fresh, snaps, drafting", SPAN_CASES)
def test_mamba1_over_ragged_spans_equals_each_sequence_token_by_token(
    lengths, fresh, snaps, drafting
):
    cfg = get_preset("tiny-jamba")
    rng = np.random.default_rng(3)
    p = init_params(cfg, 0, 0.2, host=True)["layers"][0]["linear"]
    p = {k: np.asarray(v, np.float32) for k, v in p.items()}
    p["A_log"] = rng.uniform(-2, 1, p["A_log"].shape).astype(np.float32)
    for name in ("dt_bias", "conv_v_bias", "D"):
        p[name] = rng.normal(0.5, 0.5, p[name].shape).astype(np.float32)
    x = rng.normal(size=(ROWS, cfg.hidden_size)).astype(np.float32)
    conv, rec = [rng.normal(size=a.shape).astype(np.float32) for a in zero_state(cfg, 9)]
    seg, starts = ragged_segments(lengths, fresh, snaps, drafting)
    params = {k: jnp.asarray(v) for k, v in p.items()}
    out, new = mamba1(params, jnp.asarray(x), cfg, (jnp.asarray(conv), jnp.asarray(rec)), seg)
    out, new = np.asarray(out), [np.asarray(a) for a in new]
    tol = dict(atol=5e-5, rtol=1e-4)
    for i, (n, slot, start) in enumerate(zip(lengths, SLOTS, starts, strict=True)):
        before = [np.zeros_like(a[slot]) if fresh[i] else a[slot] for a in (conv, rec)]
        if n:
            want, *after = _numpy_mamba(p, x[start : start + n], *before)
            np.testing.assert_allclose(out[start : start + n], want, **tol)
            for got, w in zip(new, after, strict=True):
                np.testing.assert_allclose(got[slot], w, **tol)
        for end, row in (snaps or {}).get(i, ()):
            _, *after = _numpy_mamba(p, x[start : start + end], *before)
            for got, w in zip(new, after, strict=True):
                np.testing.assert_allclose(got[row], w, **tol)
    assert np.abs(out[: sum(lengths)]).max() > 0.1  # (not a comparison of zeros)
    for untouched in (1, 3):
        for got, old in zip(new, (conv, rec), strict=True):
            np.testing.assert_array_equal(got[untouched], old[untouched])


def test_config_layer_pattern_dt_rank_and_dense_experts():
    """The fixture reads as its preset; transformers' rules: attention where i % period ==
    offset, experts likewise, dt rank "auto" = ceil(hidden / 16), one expert a dense MLP."""
    assert arch_fields(config_from_hf(FIXTURE)) == arch_fields(get_preset("tiny-jamba"))
    cfg = config_from_hf(dict(saved_config("jamba"), num_hidden_layers=8, mamba_dt_rank="auto"))
    assert cfg.nope_layers == (2, 6) and cfg.mamba_dt_rank == 4
    assert [cfg.is_moe_layer(i) for i in range(8)] == [False, True] * 4
    dense = config_from_hf(dict(saved_config("jamba"), num_experts=1))
    assert dense.num_experts == 0 and dense.intermediate_size == 96


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(mamba_proj_bias=True), "mamba_proj_bias=True"),
        (dict(attn_layer_offset=4), "attn_layer_offset=4: must be in"),
        (dict(expert_layer_offset=2), "expert_layer_offset=2: must be in"),
        (dict(attn_layer_offset=3, num_hidden_layers=3), "no attention layer"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("jamba"), **change})


def test_state_shapes_and_bytes():
    """A sequence's state in each Mamba layer: its conv's last 3 inputs of 128 channels
    (model dtype) and the scan's [128, 8, 1] float32."""
    cfg = get_preset("tiny-jamba")
    assert cfg.linear_state_shapes() == ((3, 128), (128, 8, 1))
    assert cfg.linear_state_bytes() == 3 * (3 * 128 * 4 + 128 * 8 * 4)
    with pytest.raises(ValueError, match="mamba1 needs a dt rank"):
        cfg.replace(mamba_dt_rank=0)
