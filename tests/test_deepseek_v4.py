"""DeepSeek-V4 (models/deepseek_v4.py) in the engine, anchored to transformers' deepseek_v4
(tests/fixtures/deepseek_v4, made by tests/fixtures/make_hf_fixtures.py; its greedy run
goes through transformers' own cache and was checked there against a no-cache forward).
The contiguous reference's parity is in test_hf_parity.py."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf, read_hf_config
from configs.presets import get_preset
from engine import LLM, SamplingParams
from models.hf_loader import load_hf_params
from models.reference import init_cache, reference_forward
from tests.scheduler_cases import oracle_drafts
from tests.test_batch_invariance import _decoding_equals_prefilling, _scenario

FIXTURE = Path(__file__).parent / "fixtures" / "deepseek_v4"
REF = json.loads((FIXTURE / "reference.json").read_text())
# A page holds half an hca window (8 tokens) and one csa window (4): the entries of the hca
# layer go to every other page, the window's keys span pages. Every step padded to 16
# tokens: one program per step variant to compile.
ENGINE = dict(
    page_size=4, num_pages=64, max_num_batched_tokens=16, max_num_seqs=3, token_buckets=(16,)
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


def _prompts():
    return [{"prompt_token_ids": p} for p in REF["prompts"]]


def test_engine_matches_transformers_and_its_prefix_hits():
    """Three prompts at once in chunks of 16 tokens over 4-token pages: transformers'
    greedy tokens and logprobs. Again on the filled prefix cache: hits, the same tokens;
    the per-token rows' pool (as many pages as the main one: swa_full_tokens_ratio=1)
    still holds each prompt's last window, the places before it released in the new
    tables. Scored: transformers' logprob at every prompt position."""
    llm = LLM(str(FIXTURE), enable_prefix_caching=True, swa_full_tokens_ratio=1.0, **ENGINE)
    assert llm.config.v4_window_pool and llm.stats()["num_window_pages_total"] == 64
    cold = llm.generate(_prompts(), GREEDY)
    for out, tokens, logprobs in zip(cold, REF["greedy_tokens"], REF["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=1e-4, rtol=0)
    warm = llm.generate(_prompts(), GREEDY)
    assert [o.num_cached_tokens for o in warm] == [4, 16, 32]
    assert llm.stats()["prefix_cache_window_pages"] > 0
    for a, b in zip(cold, warm, strict=True):
        assert b.token_ids == a.token_ids
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-5, rtol=0)
    # Every prompt position's next-token logprob: transformers' float32 forward's
    # (reference_bf16.json, made by tests/fixtures/make_hf_bf16_reference.py).
    ref32 = json.loads((FIXTURE / "reference_bf16.json").read_text())["float32_prompt_logprobs"]
    for got, want in zip(llm.score(REF["prompts"]), ref32, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_rejected_drafts_leave_no_trace(monkeypatch):
    """Speculative decoding with drafts from an oracle (transformers' greedy continuation,
    one draft spoiled at a place that rotates call by call): a rejected draft's rows and
    the entries its windows closed are written again by the next step, so the tokens and
    logprobs stay transformers', in fewer steps. Its per-token rows live in a pool of their
    own that gives back the pages behind the rows it still reads (ModelConfig.v4_window_pool:
    here fewer pages than the three sequences' 49 tokens fill)."""
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    llm = LLM(str(FIXTURE), speculative_config=ngram, **ENGINE)
    fulls = {tuple(p): p + t for p, t in zip(REF["prompts"], REF["greedy_tokens"], strict=True)}
    drafts = oracle_drafts(fulls, llm.config.vocab_size)
    monkeypatch.setattr(type(llm._scheduler.speculative), "drafts", drafts)
    got = llm.generate(_prompts(), GREEDY)
    for out, tokens, logprobs in zip(got, REF["greedy_tokens"], REF["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=1e-4, rtol=0)
    stats = llm.stats()
    assert 0 < stats["num_accepted_tokens"] < stats["num_draft_tokens"]
    assert stats["num_steps"] < 16
    assert stats["num_window_pages_total"] < 3 * -(-49 // ENGINE["page_size"])


def test_batch_invariant_mode_keeps_the_probe_bitwise():
    """Batch-invariant: the probe's tokens and logprob bits alone are those it gets among
    co-requests (chunked under two token budgets, preempted), and decoding a position
    equals prefilling up to it. Alone, transformers' tokens, over 16-token pages (4 csa
    and 2 hca entries each)."""
    alone, mixed, preemptions = _scenario("deepseek_v4", batch_invariant=True, budgets=(16, 80))
    n = len(alone[0])
    assert alone[0] == REF["greedy_tokens"][1][:n]
    got = np.asarray(alone[1], np.uint32).view(np.float32)
    np.testing.assert_allclose(got, REF["logprobs"][1][:n], atol=1e-4, rtol=0)
    assert preemptions > 0
    for tokens, bits in mixed:
        assert (tokens, bits) == alone
    _decoding_equals_prefilling("deepseek_v4", alone, at=(3, 10))


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(kv_cache_dtype="fp8"), "kv_cache_dtype"),
        (dict(enable_lora=True), "enable_lora"),
        (dict(page_size=12), "page_size=12"),
    ],
)
def test_options_it_cannot_take_are_refused_first(option, message):
    with pytest.raises(ValueError, match=message):
        LLM(str(FIXTURE), **{**ENGINE, **option})


def test_release_spellings_read_to_the_same_config():
    """The release's config.json names (compress_ratios, num_hash_layers,
    qk_rope_head_dim, compress_rate_*, a flat rope_scaling for the compressed layers) give
    the fixture's config, as transformers' __post_init__ folds them."""
    hf = read_hf_config(FIXTURE)
    legacy = {
        k: v
        for k, v in hf.items()
        if k not in ("layer_types", "mlp_layer_types", "partial_rotary_factor", "compress_rates")
    }
    compress = dict(hf["rope_parameters"]["compress"])
    legacy.update(
        compress_ratios=[0, 4, 8, 4],
        num_hash_layers=1,
        qk_rope_head_dim=8,
        compress_rate_csa=4,
        compress_rate_hca=8,
        rope_parameters=None,
        rope_scaling={k: v for k, v in compress.items() if k != "rope_theta"},
        compress_rope_theta=compress["rope_theta"],
    )
    want = config_from_hf(FIXTURE).replace(name="x")
    assert config_from_hf(legacy, name="x") == want
    with pytest.raises(ValueError, match="compress_ratios"):
        config_from_hf({**legacy, "compress_ratios": [0, 4, 16, 4]})


def test_bad_shapes_are_named():
    cfg = get_preset("tiny-deepseek-v4")
    with pytest.raises(ValueError, match="v4_layer_kinds"):
        cfg.replace(v4_layer_kinds=("sliding", "csa"))
    with pytest.raises(ValueError, match="o_groups=3"):
        cfg.replace(o_groups=3)
    with pytest.raises(ValueError, match="hash_moe_layers"):
        cfg.replace(hash_moe_layers=(7,))


def test_the_release_fp8_and_fp4_checkpoint_format(tmp_path):
    """tests/fixtures/deepseek_v4_fp8 (make_deepseek_v4_release_fixture.py): V4-Flash's
    release format, fp8 Linears with ue8m0 `.scale` blocks and FP4 experts (transformers'
    parity on it: test_hf_parity.py). quantization="fp8" holds every Linear it would hold
    for a float checkpoint quantized, the FP4 experts requantized from their values; a
    config without expert_dtype "fp4" leaves the int8 experts unreadable, said by name."""
    from models import quantization as quant
    from models.hf_loader import unquantized_leaves
    from models.load import model_config

    release = FIXTURE.parent / "deepseek_v4_fp8"
    cfg = model_config(str(release))
    assert unquantized_leaves(release, cfg) == ()
    floats = load_hf_params(release, cfg)["layers"][0]["moe"]["w_gate"]
    held = load_hf_params(release, model_config(str(release), quantization="fp8"))
    w_gate = held["layers"][0]["moe"]["w_gate"]
    assert quant.is_quantized(w_gate)
    back = np.asarray(quant.dequantize_tree({"w": w_gate}, jnp.float32)["w"])
    np.testing.assert_allclose(back, floats, atol=np.abs(floats).max() / 16, rtol=0)
    for f in ("model.safetensors", "tokenizer.json"):
        (tmp_path / f).symlink_to(release / f)
    config = json.loads((release / "config.json").read_text())
    del config["expert_dtype"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="experts.0.w1.weight': dtype I8 .* expert_dtype 'fp4'"):
        load_hf_params(tmp_path, model_config(str(tmp_path)))


def test_the_release_names_load_like_transformers_save(tmp_path):
    """The release's names (no "model." prefix; embed, norm, hc_head_fn ...) load to the
    same weights as the fixture's (transformers' save)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(FIXTURE / "model.safetensors")
    renames = (
        ("model.embed_tokens.", "embed."),
        ("model.norm.", "norm."),
        ("model.hc_head.hc_", "hc_head_"),
        ("model.layers.", "layers."),
    )
    released = {}
    for name, x in tensors.items():
        for old, new in renames:
            name = name.replace(old, new)
        released[name] = x
    assert "embed.weight" in released and "hc_head_fn" in released
    for f in ("config.json", "tokenizer.json"):
        (tmp_path / f).write_bytes((FIXTURE / f).read_bytes())
    save_file(released, tmp_path / "model.safetensors")
    cfg = get_preset("tiny-deepseek-v4")
    want = jax.tree.leaves(load_hf_params(FIXTURE, cfg))
    got = jax.tree.leaves(load_hf_params(tmp_path, cfg))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layer", [1, 2])  # csa, hca
def test_entry_blocks_do_not_change_the_output(monkeypatch, layer):
    """The hca attention's online softmax and the csa indexer's running top-k over blocks of
    2 entries (many blocks) give the output of one block for all (the fixture's prompts are
    shorter than one ENTRY_BLOCK), and so does the batch-invariant mode's reading of each
    row's blocks for it alone."""
    from models import deepseek_v4 as v4

    cfg = get_preset("tiny-deepseek-v4")
    params = load_hf_params(FIXTURE, cfg)
    p = jax.tree.map(jnp.asarray, params["layers"][layer]["attn"])
    n, page_size = 40, 4
    positions = jnp.arange(n, dtype=jnp.int32)
    rows = v4.Rows(positions, jnp.zeros(n, jnp.int32), jnp.arange(12, dtype=jnp.int32)[None])
    h = jax.random.normal(jax.random.key(0), (n, cfg.hidden_size))
    x = v4.attn_inputs(p, h, positions, cfg, layer)
    zeros = lambda shape: jnp.zeros(shape, jnp.float32)  # noqa: E731
    cache = v4.init_layer_cache(cfg, layer, 12, page_size, zeros)
    outs = []
    for block, invariant in ((2, False), (256, False), (2, True)):
        monkeypatch.setattr(v4, "ENTRY_BLOCK", block)
        monkeypatch.setattr(v4, "INDEX_BLOCK", block)
        # (A fresh function each time: traced with this block size.)
        run = jax.jit(
            functools.partial(v4.attention, cfg=cfg, layer=layer, meta=rows, rows_meta=rows),
            static_argnames="invariant",
        )
        outs.append(run(p, x=x, cache=cache, slots=positions, invariant=invariant))
    # (The batch-invariant mode reads each row's blocks for it alone, 8 rows at a time; the
    # others one block for the whole chunk, its rows being of one sequence.)
    for other in (outs[0], outs[2]):
        np.testing.assert_allclose(other[0], outs[1][0], atol=1e-6, rtol=0)
        for a, b in zip(other[1], outs[1][1], strict=True):
            np.testing.assert_array_equal(a, b)


def test_weights_held_fp8_compute_what_the_float_model_does():
    """quantization="fp8" on the float fixture: wq_a, wq_b, the experts and the shared
    expert held fp8 (the rest float); a prompt's logits bitwise those of the float model
    given the dequantized weights (the engine runs the same forward)."""
    from models import quantization as quant

    cfg = get_preset("tiny-deepseek-v4")
    held = load_hf_params(FIXTURE, cfg.replace(quantization="fp8"))
    layer = held["layers"][1]
    assert quant.is_quantized(layer["attn"]["wq_b"]) and quant.is_quantized(layer["moe"]["w_gate"])
    assert not quant.is_quantized(layer["attn"]["wkv"])
    prompt = jnp.asarray(REF["prompts"][2], jnp.int32)
    logits = []
    for c, params in (
        (cfg.replace(quantization="fp8"), held),
        (cfg, quant.dequantize_tree(held, jnp.float32)),
    ):
        params = jax.tree.map(jnp.asarray, params)
        logits.append(
            np.asarray(reference_forward(params, c, prompt, jnp.int32(0), init_cache(c, 64))[0])
        )
    np.testing.assert_array_equal(logits[0], logits[1])
