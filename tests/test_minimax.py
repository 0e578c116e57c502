"""MiniMax-01 (configs/hf_minimax.py; models/linear_attention.lightning): the lightning
layer over a ragged batch against a numpy transcription of transformers'
MiniMaxLightningAttention's one-token path (one sequence, one token at a time), with prefix
caching's snapshots and speculative decoding's per-row states; its decays against the
slope_rate buffers transformers saved in the fixture; both config spellings and the
refusals; the state's shapes. The fixture's HF parity: tests/test_hf_parity.py (reference
path) and tests/test_linear_attention.py (the engine: chunks, reused state rows,
preemption)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.linear_attention import lightning, lightning_decays, zero_state
from models.specs import init_params
from tests.family_cases import arch_fields, saved_config
from tests.test_lfm2 import ROWS, SLOTS, SPAN_CASES, ragged_segments

FIXTURE = Path(__file__).parent / "fixtures" / "minimax"


def _numpy_lightning(p: dict, x: np.ndarray, state: np.ndarray, rates: np.ndarray):
    """transformers' MiniMaxLightningAttention on one sequence's tokens x [n, D] through
    its cached path (a token at a time), after its state [H, dk, dv]: (outputs, state)."""
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    x, s = x.astype(np.float64), state.astype(np.float64)
    q, k, v = (silu(np.einsum("td,dhk->thk", x, p[n])) for n in ("wq", "wk", "wv"))
    out = []
    for t in range(len(x)):
        s = np.exp(-rates)[:, None, None] * s + k[t][:, :, None] * v[t][:, None, :]
        o = np.einsum("hk,hkv->hv", q[t], s).reshape(-1)
        o = o / np.sqrt((o * o).mean() + 1e-6) * p["norm"].reshape(-1)
        gate = 1 / (1 + np.exp(-np.einsum("d,dhk->hk", x[t], p["wz"]).reshape(-1)))
        out.append((o * gate) @ p["wo"].reshape(-1, x.shape[1]))
    return np.stack(out), s


@pytest.mark.parametrize("lengths, fresh, snaps, drafting", SPAN_CASES)
def test_lightning_over_ragged_spans_equals_each_sequence_token_by_token(
    lengths, fresh, snaps, drafting
):
    cfg = get_preset("tiny-minimax")
    rng = np.random.default_rng(5)
    p = init_params(cfg, 0, 0.2, host=True)["layers"][1]["linear"]
    p = {k: np.asarray(v, np.float32) for k, v in p.items()}
    p["norm"] = rng.normal(1.0, 0.2, p["norm"].shape).astype(np.float32)
    x = rng.normal(size=(ROWS, cfg.hidden_size)).astype(np.float32)
    (rec,) = [rng.normal(size=a.shape).astype(np.float32) for a in zero_state(cfg, 9)]
    seg, starts = ragged_segments(lengths, fresh, snaps, drafting)
    if snaps:  # (the chunked form snapshots on chunk ends only: these spans row by row, as
        seg = seg._replace(chunk=None)  # the batch-invariant step runs them)
    params = {k: jnp.asarray(v) for k, v in p.items()}
    out, (new,) = lightning(params, jnp.asarray(x), cfg, (jnp.asarray(rec),), seg, 2)
    out, new = np.asarray(out), np.asarray(new)
    rates = lightning_decays(cfg, 2).astype(np.float64)
    tol = dict(atol=5e-5, rtol=1e-4)
    for i, (n, slot, start) in enumerate(zip(lengths, SLOTS, starts, strict=True)):
        before = np.zeros_like(rec[slot]) if fresh[i] else rec[slot]
        if n:
            want, after = _numpy_lightning(p, x[start : start + n], before, rates)
            np.testing.assert_allclose(out[start : start + n], want, **tol)
            np.testing.assert_allclose(new[slot], after, **tol)
        for end, row in (snaps or {}).get(i, ()):
            _, after = _numpy_lightning(p, x[start : start + end], before, rates)
            np.testing.assert_allclose(new[row], after, **tol)
    assert np.abs(out[: sum(lengths)]).max() > 0.1  # (not a comparison of zeros)
    for untouched in (1, 3):
        np.testing.assert_array_equal(new[untouched], rec[untouched])


def test_decays_are_the_slope_rates_transformers_saved():
    """The fixture's checkpoint holds each lightning layer's slope_rate buffer [H, 1, 1]
    as transformers computed it (get_slope_rate): the decays here, layer by layer."""
    cfg = get_preset("tiny-minimax")
    saved = load_file(FIXTURE / "model.safetensors")
    for i in cfg.linear_attention_layers:
        want = saved[f"model.layers.{i}.self_attn.slope_rate"].reshape(-1)
        np.testing.assert_allclose(lightning_decays(cfg, i), want, rtol=1e-6, atol=0)
    # (a rate per head, falling with depth: the last layer's ~1e-5 of the first's)
    first, last = lightning_decays(cfg, 1), lightning_decays(cfg, 3)
    assert len(set(first.tolist())) == cfg.linear_num_value_heads and (last < 1e-4 * first).all()


def _released() -> dict:
    """The fixture's config as the released remote code spells it (MiniMax-Text-01's
    config.json: attn_type_list, layernorm_*_alpha / _beta, postnorm, rotary_dim)."""
    hf = saved_config("minimax")
    hf["attn_type_list"] = [1 if k == "full_attention" else 0 for k in hf.pop("layer_types")]
    for block, release in (("full_attn", "full_attention"), ("linear_attn", "linear_attention")):
        for which in ("alpha", "beta"):
            hf[f"layernorm_{release}_{which}"] = hf.pop(f"{block}_{which}_factor")
    for which in ("alpha", "beta"):
        hf[f"layernorm_mlp_{which}"] = hf.pop(f"mlp_{which}_factor")
    return dict(hf, postnorm=True, rotary_dim=8, shared_intermediate_size=0)


def test_config_spellings_layer_pattern_and_rotary_dim():
    """The fixture reads as its preset; the release's spelling to the same model but for
    rotary_dim (8 of 16 channels rotated); transformers' default layers alternate, full
    attention first."""
    preset = get_preset("tiny-minimax")
    assert arch_fields(config_from_hf(FIXTURE)) == arch_fields(preset)
    want = arch_fields(preset.replace(partial_rotary_factor=0.5))
    assert arch_fields(config_from_hf(_released())) == want
    plain = {k: v for k, v in saved_config("minimax").items() if not k.endswith("_factor")}
    cfg = config_from_hf(dict(plain, layer_types=None, num_hidden_layers=6))
    assert cfg.linear_attention_layers == (1, 3, 5)
    assert cfg.residual_alphas == cfg.residual_betas == (1.0, 1.0, 1.0) and cfg.residual_normed


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(postnorm=False), "postnorm=False"),
        (dict(shared_intermediate_size=1024), "shared_intermediate_size=1024"),
        (dict(sliding_window=64), "sliding_window"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(layer_types=["full_attention"] * 3), "layer_types="),
        (dict(layer_types=None, attn_type_list=[1, 2, 0, 0]), "attn_type_list="),
        (dict(mlp_beta_factor="0.9"), "mlp_beta_factor='0.9'"),
        (dict(rotary_dim=32), "rotary_dim=32: an int in"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("minimax"), **change})


def test_state_shapes_bytes_and_bad_fields():
    """A sequence's state in each lightning layer: [4, 16, 16] float32, no conv inputs."""
    cfg = get_preset("tiny-minimax")
    assert cfg.linear_state_shapes() == ((4, 16, 16),)
    assert cfg.linear_state_bytes() == 3 * 4 * 16 * 16 * 4
    real = get_preset("minimax-text-01")  # 70 lightning layers of 64 heads of 128
    assert real.linear_state_bytes() == 70 * 64 * 128 * 128 * 4
    with pytest.raises(ValueError, match="lightning needs them equal"):
        cfg.replace(linear_num_value_heads=8)
    with pytest.raises(ValueError, match="residual_alphas="):
        cfg.replace(residual_alphas=(1.0, 1.0))
    with pytest.raises(ValueError, match="residual_betas="):
        cfg.replace(residual_betas=(1.0, float("nan"), 1.0))
    with pytest.raises(ValueError, match="needs residual_normed=True"):
        cfg.replace(residual_normed=False)
