"""Model ops vs direct formulas: RoPE, MoE routing + dropless experts, MLA absorption, and the
reference forward's cache (prefill + decode == longer prefill)."""

from __future__ import annotations

import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.model_config import RopeScaling
from configs.presets import get_preset
from models import reductions
from models.attention import (
    mla_absorb_q,
    mla_expand_kv,
    mla_inputs,
    mla_latent_to_v,
    mla_softmax_scale,
)
from models.layers import rms_norm
from models.moe import GROUP_TILE, expert_activation, grouped_swiglu, moe_block, route
from models.reference import init_cache, reference_forward
from models.rope import apply_rope, rope_frequencies, rope_layout, yarn_get_mscale
from models.specs import is_spec, param_specs


def random_params(cfg, seed: int, std: float = 0.3) -> dict:
    """Random params in numpy (eager jax init would compile one kernel per leaf shape); norm
    weights near 1 so the norms stay meaningful."""
    rng = np.random.default_rng(seed)

    def draw(spec):
        x = rng.standard_normal(spec.shape).astype(np.float32)
        return jnp.asarray(1 + 0.1 * x if len(spec.shape) == 1 else std * x, spec.dtype)

    return jax.tree.map(draw, param_specs(cfg), is_leaf=is_spec)


# ---- RoPE ---------------------------------------------------------------------------------

# Values printed by transformers 5.24 ROPE_INIT_FUNCTIONS (every 4th / 8th inverse frequency).
HF_DEEPSEEK_V3_YARN = [
    1.0,
    0.3162277638912201,
    0.10000000149011612,
    0.026879360899329185,
    0.005500000435858965,
    0.0007905694073997438,
    2.499999936844688e-05,
    7.905694474175107e-06,
]
HF_LLAMA31 = [
    1.0,
    0.193922758102417,
    0.03760603070259094,
    0.00729266507551074,
    0.0005248460220173001,
    3.428102354519069e-05,
    6.647869668086059e-06,
    1.289173155782919e-06,
]


def _np_base(theta, dim):
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _np_llama3(theta, dim, factor, low, high, old):
    # Llama 3.1 reference (meta-llama/llama-models apply_scaling), float64.
    out = []
    for f in _np_base(theta, dim):
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def _np_yarn(theta, dim, factor, old, beta_fast=32, beta_slow=1):
    # YaRN (arXiv:2309.00071, DeepSeek yarn_find_correction_range), float64.
    def corr(rot):
        return dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    base = _np_base(theta, dim)
    return base / factor * ramp + base * (1 - ramp)


@pytest.mark.parametrize(
    "rs, theta, dim, want",
    [
        (RopeScaling(), 10000.0, 40, _np_base(10000.0, 40)),
        (RopeScaling(rope_type="linear", factor=4.0), 10000.0, 64, _np_base(10000.0, 64) / 4),
        (
            RopeScaling(rope_type="llama3", factor=8.0, original_max_position_embeddings=64),
            10000.0,
            40,
            _np_llama3(10000.0, 40, 8.0, 1.0, 4.0, 64),
        ),
        (
            RopeScaling(rope_type="yarn", factor=40.0, original_max_position_embeddings=4096),
            10000.0,
            64,
            _np_yarn(10000.0, 64, 40.0, 4096),
        ),
    ],
    ids=["default", "linear", "llama3", "yarn"],
)
def test_rope_frequencies_match_formula(rs, theta, dim, want):
    inv_freq, _ = rope_frequencies(theta, dim, rs)
    assert inv_freq.dtype == np.float32
    np.testing.assert_allclose(inv_freq, want, rtol=2e-6)


def test_bf16_rms_norms_equal_transformers_bit_for_bit():
    """tests/fixtures/rms_norm/bf16.npz (made by make_rms_norm_fixture.py): transformers'
    GptOssRMSNorm and LlamaRMSNorm on the same bf16 input and weight."""
    d = np.load(pathlib.Path(__file__).parent / "fixtures" / "rms_norm" / "bf16.npz")

    def bf16(name):
        return jnp.asarray(d[name].view(jnp.bfloat16))

    x, w, eps = bf16("x"), bf16("weight"), float(d["eps"])
    for name, in_f32 in (("gpt_oss", True), ("llama", False)):
        got = np.asarray(rms_norm(x, w, eps, scale_in_float32=in_f32)).view(np.uint16)
        np.testing.assert_array_equal(got, d[name], err_msg=name)
    assert (d["gpt_oss"] != d["llama"]).mean() > 0.2  # the two conventions do differ
    assert get_preset("tiny-gpt-oss").norm_scale_in_float32
    assert not get_preset("tiny-llama").norm_scale_in_float32


def test_rope_frequencies_match_hf_values():
    ds = RopeScaling(
        rope_type="yarn",
        factor=40.0,
        original_max_position_embeddings=4096,
        mscale=1.0,
        mscale_all_dim=1.0,
    )
    inv_freq, factor = rope_frequencies(10000.0, 64, ds)
    np.testing.assert_allclose(inv_freq[::4], HF_DEEPSEEK_V3_YARN, rtol=1e-6)
    assert factor == 1.0  # mscale == mscale_all_dim cancels in cos/sin ...
    cfg = get_preset("deepseek-v3")  # ... and moves into the softmax scale instead
    assert mla_softmax_scale(cfg) == pytest.approx(192**-0.5 * (0.1 * math.log(40) + 1) ** 2)
    plain = RopeScaling(rope_type="yarn", factor=40.0, original_max_position_embeddings=4096)
    assert rope_frequencies(10000.0, 64, plain)[1] == pytest.approx(1.3688879454113936)
    assert yarn_get_mscale(40.0) == pytest.approx(1.3688879454113936)

    l3 = get_preset("llama-3.1-8b").rope_scaling
    np.testing.assert_allclose(rope_frequencies(500000.0, 128, l3)[0][::8], HF_LLAMA31, rtol=1e-6)


def test_yarn_attention_factor_is_the_ratio_of_the_two_mscales():
    # HF _compute_yarn_parameters: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    # (the test above has them equal, where the ratio is 1 whichever way round).
    rs = RopeScaling(
        rope_type="yarn",
        factor=40.0,
        original_max_position_embeddings=4096,
        mscale=1.0,
        mscale_all_dim=0.5,
    )
    want = (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1)
    assert rope_frequencies(10000.0, 64, rs)[1] == pytest.approx(want)


def test_rope_layout_follows_rope_interleave():
    # HF DeepSeek-V3 with rope_interleave=False rotates halves (apply_rotary_pos_emb).
    v3 = get_preset("tiny-deepseek-v3")
    assert v3.rope_interleave and rope_layout(v3) == "pairs_to_half"
    assert rope_layout(v3.replace(rope_interleave=False)) == "half"
    assert rope_layout(get_preset("tiny-deepseek-v2")) == "pairs"
    assert rope_layout(get_preset("tiny-llama")) == "half"


def _np_rotate(x, pos, inv_freq, factor, layout):
    ang = pos[:, None].astype(np.float64) * inv_freq[None, :]  # [T, Dr/2]
    cos, sin = np.cos(ang)[:, None] * factor, np.sin(ang)[:, None] * factor  # [T, 1, Dr/2]
    if layout == "half":  # HF rotate_half with cos/sin = cat(freqs, freqs)
        cos2, sin2 = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos2 + rot * sin2
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * (cos + 1j * sin)  # DeepSeek complex pairs
    if layout == "pairs":
        return np.stack([z.real, z.imag], -1).reshape(x.shape)
    return np.concatenate([z.real, z.imag], -1)


@pytest.mark.parametrize("layout", ["half", "pairs", "pairs_to_half"])
def test_apply_rope_matches_formula(layout):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3, 16)).astype(np.float32)  # [T, H, Dr]
    pos = np.array([0, 1, 2, 5, 40, 300, 2047], np.int32)
    inv_freq, factor = rope_frequencies(10000.0, 16, RopeScaling())
    got = apply_rope(jnp.asarray(x), jnp.asarray(pos), inv_freq, 1.25, layout)
    want = _np_rotate(x.astype(np.float64), pos, inv_freq.astype(np.float64), 1.25, layout)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)
    assert factor == 1.0


def test_rope_layouts_give_equal_scores():
    # The pair layouts only permute channels, identically for q and k.
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((5, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((5, 8)), jnp.float32)
    pos = jnp.arange(5) * 7
    inv_freq, _ = rope_frequencies(10000.0, 8, RopeScaling())
    scores = [
        apply_rope(q, pos, inv_freq, 1.0, lay) @ apply_rope(k, pos, inv_freq, 1.0, lay).T
        for lay in ("pairs", "pairs_to_half")
    ]
    np.testing.assert_allclose(np.asarray(scores[0]), np.asarray(scores[1]), atol=1e-5)


# ---- MoE ----------------------------------------------------------------------------------


def _np_route(p, x, cfg):
    """HF 5.24 routers, written out in float64 numpy."""
    logits = x.astype(np.float64) @ np.asarray(p["router"], np.float64)  # [T, E]
    if cfg.scoring_func == "sigmoid":
        scores = 1 / (1 + np.exp(-logits))
    else:
        scores = np.exp(logits - logits.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
    t, e = scores.shape
    k, g = cfg.num_experts_per_tok, cfg.n_group
    weights, experts = np.zeros((t, k)), np.zeros((t, k), int)
    for i in range(t):
        s = scores[i]
        choice = s.copy()
        if cfg.topk_method in ("noaux_tc", "group_top2"):  # group_top2: Mistral 4, no bias
            if cfg.topk_method == "noaux_tc":
                choice = s + np.asarray(p["router_bias"], np.float64)
            grouped = choice.reshape(g, e // g)
            group_score = np.sort(grouped, -1)[:, -2:].sum(-1)
        elif cfg.topk_method == "group_limited_greedy":
            group_score = choice.reshape(g, e // g).max(-1)
        if cfg.topk_method != "greedy":
            keep = np.argsort(-group_score, kind="stable")[: cfg.topk_group]
            fill = 0.0 if cfg.topk_method == "group_limited_greedy" else -np.inf
            mask = np.repeat(np.isin(np.arange(g), keep), e // g)
            choice = np.where(mask, choice, fill)
        top = np.argsort(-choice, kind="stable")[:k]
        w = s[top] if cfg.topk_method in ("noaux_tc", "group_top2") else choice[top]
        if cfg.norm_topk_prob and cfg.model_type != "deepseek_v2":  # HF V2 ignores the flag
            w = w / w.sum()
        weights[i], experts[i] = w * cfg.routed_scaling_factor, top
    return weights, experts


def _np_mlp(x, w_gate, w_up, w_down):
    g, u = x @ w_gate, x @ w_up
    return (g / (1 + np.exp(-g)) * u) @ w_down


def _np_moe(p, x, cfg):
    """Naive dense loop: every token, every chosen expert, one at a time."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
    weights, experts = _np_route(p, x, cfg)
    out = np.zeros(x.shape)
    for i in range(x.shape[0]):
        for w, e in zip(weights[i], experts[i], strict=True):
            out[i] += w * _np_mlp(x[i], p["w_gate"][e], p["w_up"][e], p["w_down"][e])
        if "shared" in p:
            s = p["shared"]
            out[i] += _np_mlp(x[i], s["w_gate"], s["w_up"], s["w_down"])
    return out, experts


MOE_CASES = {
    "softmax_topk_renorm": get_preset("tiny-mixtral"),
    "softmax_topk_plain": get_preset("tiny-qwen3-moe").replace(norm_topk_prob=False),
    "deepseek_v2_greedy": get_preset("tiny-deepseek-v2").replace(topk_method="greedy"),
    # With top_k <= topk_group V2's group limit can never bite (the groups holding the global
    # top-k always survive), so keep one group here.
    "deepseek_v2_group_limited": get_preset("tiny-deepseek-v2").replace(topk_group=1),
    "deepseek_v2_norm_flag_ignored": get_preset("tiny-deepseek-v2").replace(norm_topk_prob=True),
    "deepseek_v3_noaux_tc": get_preset("tiny-deepseek-v3"),
    "mistral4_group_top2": get_preset("tiny-mistral4"),
}


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_moe_block_matches_naive_loop(case):
    cfg = MOE_CASES[case]
    layer = next(i for i in range(cfg.num_layers) if cfg.is_moe_layer(i))
    block = jax.jit(moe_block, static_argnums=2)
    router = jax.jit(route, static_argnums=2)
    for seed in range(3):
        params = random_params(cfg, seed)
        p = params["layers"][layer]["moe"]
        if "router_bias" in p:  # exercise the choice-only correction bias
            bias = np.random.default_rng(100 + seed).uniform(size=cfg.num_experts)
            p = dict(p, router_bias=jnp.asarray(bias, jnp.float32))
        x = np.random.default_rng(seed).standard_normal((13, cfg.hidden_size)).astype(np.float32)
        want, want_experts = _np_moe(p, x, cfg)
        got = np.asarray(block(p, jnp.asarray(x), cfg))
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
        _, experts = router(p, jnp.asarray(x), cfg)
        assert np.array_equal(np.sort(np.asarray(experts), -1), np.sort(want_experts, -1))


def test_a_steps_padding_tokens_read_only_the_real_tokens_experts(monkeypatch):
    """A one-token decode runs in runner.TOKEN_FLOOR rows: the padding rows reach the routed
    experts as row 0's experts at weight 0 (no expert weights read for them alone), and the
    tokens stay transformers' (tests/fixtures/qwen3_moe)."""
    import json

    from engine import LLM, SamplingParams
    from engine import step as step_mod

    calls, real = [], step_mod.routed_for

    def spy_for(cfg):
        inner = real(cfg)

        def spy(p_moe, x, weights, experts, **kw):
            record = lambda w, e: calls.append((np.asarray(w), np.asarray(e)))  # noqa: E731
            jax.debug.callback(record, weights, experts)
            return inner(p_moe, x, weights, experts, **kw)

        return spy

    fixture = pathlib.Path(__file__).parent / "fixtures" / "qwen3_moe"
    ref = json.loads((fixture / "reference.json").read_text())
    monkeypatch.setattr(step_mod, "routed_for", spy_for)
    step_mod.make_step.cache_clear()  # traced here with the spy, and not kept after
    try:
        llm = LLM(model=str(fixture), max_num_seqs=8, num_pages=8, max_model_len=64)
        (out,) = llm.generate(ref["prompts"][:1], SamplingParams(max_tokens=3, temperature=0.0))
    finally:
        step_mod.make_step.cache_clear()
    assert out.token_ids == ref["greedy_tokens"][0][:3]
    # 5 prompt tokens, then 1 per decode step, each padded to 8 rows; one call per MoE layer
    padded = [(w, e) for w, e in calls if w.shape[0] == 8]
    assert len(padded) == len(calls) > 0
    for w, e in padded:
        pad = ~(w > 0).any(axis=1)
        assert pad.sum() in (3, 7)  # (the prefill's, a decode's)
        assert (e[pad] == e[0]).all() and (w[pad] == 0).all()


def test_row_sums_are_fixed_order_unless_inside_native_row_sums():
    x = jax.random.normal(jax.random.key(0), (5, 3, 100))
    tree, native = reductions.fixed_order_sum(x), jnp.sum(x, axis=-1)
    assert not np.array_equal(tree, native)  # the two orders differ here, so the checks can
    np.testing.assert_array_equal(reductions.row_sum(x), tree)
    with reductions.native_row_sums():
        np.testing.assert_array_equal(reductions.row_sum(x), native)
        with reductions.native_row_sums(False):
            np.testing.assert_array_equal(reductions.row_mean(x), tree / 100)
        np.testing.assert_array_equal(reductions.row_mean(x), native / 100)
    with pytest.raises(RuntimeError), reductions.native_row_sums():
        raise RuntimeError
    np.testing.assert_array_equal(reductions.row_sum(x), tree)  # restored, also after a raise


def test_narrow_products_run_over_the_asked_rows_and_keep_their_values():
    x = jax.random.normal(jax.random.key(1), (5, 64))
    seen = []

    def product(a, w):
        seen.append(a.shape[0])
        return a @ w

    for w in (jnp.ones((64, 8)), jnp.ones(64), jnp.ones((64, 16))):  # 8, 1 and 16 columns
        np.testing.assert_allclose(reductions.narrow_product(product, x, w), x @ w, rtol=1e-6)
        with reductions.narrow_product_rows(128):
            got = reductions.narrow_product(product, x, w)
        assert got.shape == (x @ w).shape
        np.testing.assert_allclose(got, x @ w, rtol=1e-6)
    # padded to 128 rows only for the narrow ones, and only inside narrow_product_rows
    assert seen == [5, 128, 5, 128, 5, 5]


def test_only_the_batch_invariant_step_spells_the_models_row_sums_in_fixed_order(monkeypatch):
    """The model's row sums (norms, router softmax) take the fixed-order tree in the
    batch-invariant step only; elsewhere XLA's reduce, which compiles faster. Counted at
    trace time with a spy (tests/fixtures/llama; one prefill program per engine)."""
    from engine import LLM, SamplingParams
    from engine import step as step_mod

    traced, real = [], reductions.fixed_order_sum
    monkeypatch.setattr(reductions, "fixed_order_sum", lambda x: traced.append(x) or real(x))
    fixture = str(pathlib.Path(__file__).parent / "fixtures" / "llama")
    counts = {}
    step_mod.make_step.cache_clear()  # traced here with the spy, and not kept after
    try:
        for invariant in (False, True):
            traced.clear()
            llm = LLM(model=fixture, num_pages=8, max_model_len=64, batch_invariant=invariant)
            llm.generate([[1, 2, 3]], SamplingParams(max_tokens=1, temperature=0.0))
            counts[invariant] = [x.shape[-1] for x in traced]
    finally:
        step_mod.make_step.cache_clear()
    assert counts[False] == []
    # 2 layers x 2 norms + the final norm over the hidden size (96), and attention's softmax
    # sums over KV blocks
    assert counts[True].count(96) == 5 and len(counts[True]) > 5


def test_noaux_tc_never_picks_an_expert_outside_the_kept_groups():
    # Negative correction biases make every kept expert's choice score negative: masked
    # experts must still lose (-inf, as HF 5.24's DeepseekV3TopkRouter and DeepSeek's
    # inference code mask them; a 0.0 fill, as older HF releases had, picks them here).
    cfg = MOE_CASES["deepseek_v3_noaux_tc"]
    p = random_params(cfg, 0)["layers"][1]["moe"]
    bias = np.random.default_rng(7).uniform(-2.0, -1.0, cfg.num_experts)
    p = dict(p, router_bias=jnp.asarray(bias, jnp.float32))
    x = np.random.default_rng(1).standard_normal((13, cfg.hidden_size)).astype(np.float32)
    _, want = _np_route(p, x, cfg)
    _, got = jax.jit(route, static_argnums=2)(p, jnp.asarray(x), cfg)
    assert np.array_equal(np.sort(np.asarray(got), -1), np.sort(want, -1))


@pytest.mark.parametrize("variant", ["swiglu", "gpt_oss"])
@pytest.mark.parametrize("ragged", [False, True])  # the CPU tiles; ragged_dot (accelerators)
@pytest.mark.parametrize(
    "sizes",
    [
        [0, 3, 0, GROUP_TILE, GROUP_TILE + 1, 1, 0, 2 * GROUP_TILE + 5],  # empty, on/off tile
        [0] * 7 + [40],  # one expert takes every row
        [1] * 8,
    ],
)
def test_grouped_swiglu_matches_per_group_products(sizes, ragged, variant):
    """Written out in float64 per group: SwiGLU, or gpt-oss's biased, clamped form (HF
    GptOssExperts: gate <= limit, |up| <= limit, (up + 1) * gate * sigmoid(alpha * gate))."""
    rng = np.random.default_rng(len(sizes) + sum(sizes))
    m = sum(sizes) + 5  # rows past the groups come back as zeros (ragged_dot semantics)
    xs = rng.standard_normal((m, 24)).astype(np.float32)
    w_gate, w_up = (rng.standard_normal((len(sizes), 24, 20)).astype(np.float32) for _ in "gu")
    w_down = rng.standard_normal((len(sizes), 20, 24)).astype(np.float32)
    b_gate, b_up = (rng.standard_normal((len(sizes), 20)).astype(np.float32) for _ in "gu")
    limit, alpha = 3.0, 1.702  # |x @ w| here is ~5: both clamps bite
    if variant == "gpt_oss":
        act = expert_activation(get_preset("tiny-gpt-oss").replace(swiglu_limit=limit))
        extra = dict(act=act, b_gate=jnp.asarray(b_gate), b_up=jnp.asarray(b_up))
    else:
        extra = {}
    fn = jax.jit(functools.partial(grouped_swiglu, ragged=ragged, **extra))
    got = np.asarray(fn(xs, w_gate, w_up, w_down, jnp.asarray(sizes, jnp.int32)))
    want, start = np.zeros((m, 24)), 0
    for e, n in enumerate(sizes):
        x = xs[start : start + n].astype(np.float64)
        gate, up = x @ w_gate[e], x @ w_up[e]
        if variant == "gpt_oss":
            gate, up = np.minimum(gate + b_gate[e], limit), np.clip(up + b_up[e], -limit, limit)
            h = (up + 1) * gate / (1 + np.exp(-alpha * gate))
        else:
            h = gate / (1 + np.exp(-gate)) * up
        want[start : start + n] = h @ w_down[e]
        start += n
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-5)
    assert not got[sum(sizes) :].any()


def test_grouped_swiglu_of_a_row_does_not_depend_on_the_other_rows():
    """The batch-invariance property: one row's output is bitwise the same whatever the
    group sizes around it, its place in its group, and the total row count."""
    rng = np.random.default_rng(3)
    w_gate, w_up = (rng.standard_normal((8, 512, 256)).astype(np.float32) for _ in "gu")
    w_down = rng.standard_normal((8, 256, 512)).astype(np.float32) / 16
    fn = jax.jit(grouped_swiglu)
    probe = rng.standard_normal(512).astype(np.float32)
    seen = set()
    # Small totals too: XLA:CPU's ragged_dot, whose kernel follows the row count, gave two
    # different results for this row over these trials.
    for trial, most in enumerate([2, 3, 6, 3 * GROUP_TILE, 3 * GROUP_TILE, 3]):
        sizes = rng.integers(0, most, 8)
        sizes[5] = max(sizes[5], 1)
        xs = rng.standard_normal((int(sizes.sum()) + trial, 512)).astype(np.float32)
        row = int(sizes[:5].sum() + rng.integers(0, sizes[5]))  # somewhere in expert 5's group
        xs[row] = probe
        out = fn(xs, w_gate, w_up, w_down, jnp.asarray(sizes, jnp.int32))
        seen.add(np.asarray(out)[row].tobytes())
    assert len(seen) == 1


@pytest.mark.parametrize(
    "case", ["deepseek_v2_group_limited", "deepseek_v3_noaux_tc", "mistral4_group_top2"]
)
def test_moe_group_limit_changes_choice(case):
    # The group-limited cases above would pass vacuously if the limit never bit.
    cfg = MOE_CASES[case]
    p = random_params(cfg, 0)["layers"][1]["moe"]
    x = np.random.default_rng(0).standard_normal((64, cfg.hidden_size)).astype(np.float32)
    _, limited = _np_route(p, x, cfg)
    _, free = _np_route(p, x, cfg.replace(topk_group=cfg.n_group))
    assert (np.sort(limited, -1) != np.sort(free, -1)).any()


def test_rms_norm_casts_to_the_input_dtype_before_the_weight():
    # HF LlamaRMSNorm: weight * hidden.to(input_dtype); a bfloat16 product, not a float32 one.
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((4, 64)) * 3, jnp.bfloat16)
    w = jnp.asarray(1 + 0.3 * rng.standard_normal(64), jnp.bfloat16)
    xf = np.asarray(x, np.float32)
    normed = xf / np.sqrt(np.mean(xf * xf, -1, keepdims=True, dtype=np.float64) + 1e-6)
    want = np.asarray(w) * normed.astype(np.float32).astype(jnp.bfloat16)
    got = jax.jit(rms_norm, static_argnums=2)(x, w, 1e-6)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


# ---- MLA ----------------------------------------------------------------------------------


def test_mla_absorbed_equals_expanded():
    cfg = get_preset("tiny-deepseek-v3")
    p = random_params(cfg, 0)["layers"][0]["attn"]
    rng = np.random.default_rng(0)
    t, n = 3, 11
    x = jnp.asarray(rng.standard_normal((t, cfg.hidden_size)), jnp.float32)
    inp = jax.jit(mla_inputs, static_argnums=3)(p, x, jnp.arange(n - t, n), cfg)
    c_kv = jnp.asarray(rng.standard_normal((n, cfg.kv_lora_rank)), jnp.float32)  # [L, R]
    k_pe = jnp.asarray(rng.standard_normal((n, cfg.qk_rope_head_dim)), jnp.float32)  # [L, Dr]

    @jax.jit  # one compilation instead of one per eager op
    def both(p, inp, c_kv, k_pe):
        k_nope, v = mla_expand_kv(p, c_kv, cfg)
        s = jnp.einsum("thn,lhn->thl", inp.q_nope, k_nope)
        s = s + jnp.einsum("thr,lr->thl", inp.q_pe, k_pe)
        expanded = jnp.einsum("thl,lhv->thv", jax.nn.softmax(s * inp.scale, -1), v)

        q_lat = mla_absorb_q(p, inp.q_nope, cfg)  # [T, H, R]
        s = jnp.einsum("thr,lr->thl", q_lat, c_kv) + jnp.einsum("thr,lr->thl", inp.q_pe, k_pe)
        o_lat = jnp.einsum("thl,lr->thr", jax.nn.softmax(s * inp.scale, -1), c_kv)
        return mla_latent_to_v(p, o_lat, cfg), expanded

    absorbed, expanded = both(p, inp, c_kv, k_pe)
    np.testing.assert_allclose(np.asarray(absorbed), np.asarray(expanded), atol=1e-5)


# ---- reference forward --------------------------------------------------------------------


@pytest.mark.parametrize(
    "preset", ["tiny-llama", "tiny-qwen3-moe", "tiny-deepseek-v2", "tiny-deepseek-v3"]
)
def test_prefill_then_decode_equals_longer_prefill(preset):
    cfg = get_preset(preset)
    params = random_params(cfg, 0, std=0.2)
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, 10).astype(np.int32)
    n = len(ids) - 1
    # The N-token prefill is padded by one junk token (as greedy_generate pads) so it shares
    # the (N+1)-token compilation; the decode must overwrite the junk row before reading it.
    padded = np.concatenate([ids[:n], [7]]).astype(np.int32)
    _, cache = reference_forward(params, cfg, padded, np.int32(0), init_cache(cfg, 32))
    step, _ = reference_forward(params, cfg, ids[n:], np.int32(n), cache)
    full, _ = reference_forward(params, cfg, ids, np.int32(0), init_cache(cfg, 32))
    np.testing.assert_allclose(np.asarray(step[0]), np.asarray(full[-1]), atol=1e-5, rtol=0)
