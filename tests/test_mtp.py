"""Speculative decoding with the model's MTP module (engine/mtp.py).

Anchored to transformers' own MTP implementation (`MtpModel`, which its `generate(...,
use_mtp=True)` drafts with): tests/fixtures/make_mtp_fixture.py gives the DeepSeek-V3
fixture an MTP layer under the release's tensor names and records, for three prompts and
every point of their greedy decoding, the three drafts the layer chains from there and
their logprobs. The engine drafts them in its steps: exactly those tokens, whatever the
batch, the prefill chunking or how many of the previous drafts were kept.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine import LLM, SamplingParams
from engine.eplb import balancer_for
from engine.mtp import MtpProposer
from models import quantization as quant
from models.load import load_model, model_config
from models.orbax_io import save_params
from sharding.mesh import parse_mesh

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# MLA; GQA, partial rotary; GLM-4.7-Flash; DeepSeek-V3.2 and GLM-5 (sparse attention, the MTP
# layer's too)
ARCHS = ("deepseek_v3", "glm4_moe", "glm4_moe_lite", "deepseek_v32", "glm_moe_dsa")
REFS = {a: json.loads((FIXTURES / f"{a}_mtp" / "mtp_reference.json").read_text()) for a in ARCHS}
MTP_DIR, REF = FIXTURES / "deepseek_v3_mtp", REFS["deepseek_v3"]
K = REF["num_speculative_tokens"]
SPEC = {"method": "mtp", "num_speculative_tokens": K}
# 35 prompt tokens in steps of 16: the two longer prompts are chunked, beside decodes.
# Sequences of at most 128 tokens: a page table one KV block wide, whose attention compiles
# without loops (the steps compile ~20% faster than at the fixtures' 2,048). Every step
# padded to 16 tokens (token_buckets): one program to compile, not two (8, 16).
ENGINE = dict(
    max_num_seqs=4,
    max_num_batched_tokens=16,
    num_pages=48,
    page_size=8,
    max_model_len=128,
    token_buckets=(16,),
)


def _run(llm: LLM, cases, drafts=None) -> tuple[dict, dict]:
    """Serve `cases` (the reference's) greedily in one batch; with `drafts(seq, cap)` in
    place of the proposer's. Returns each request's tokens and the drafts its steps gave,
    by the token count they follow."""
    proposer = llm._scheduler.speculative
    if drafts is not None:
        proposer.drafts = drafts
    tokens = {}
    for i, case in enumerate(cases):
        params = SamplingParams(temperature=0.0, max_tokens=len(case["tokens"]), ignore_eos=True)
        tokens[llm.add_request(case["prompt"], params, request_id=str(i))] = []
    seen = {rid: {} for rid in tokens}
    while llm.has_unfinished():
        for delta in llm.step():
            tokens[delta.request_id] += delta.token_ids
        for rid in tokens:
            last = proposer.last(rid)
            if last is not None:
                seen[rid][last[0]] = last[1:]
    return tokens, seen


def _check_drafts(cases, tokens, seen) -> int:
    """Tokens greedy, drafts transformers'; returns how many chains were cut short."""
    short = 0
    for i, case in enumerate(cases):
        assert tokens[str(i)] == case["tokens"]
        # After each step that sampled for it, at n + 1 tokens: the drafts after token n,
        # all K of them, or those whose positions its pages hold (engine/mtp.py).
        for count, (drafts, logprobs) in seen[str(i)].items():
            n = len(drafts)
            assert n and list(drafts) == case["drafts"][str(count - 1)][:n], (i, count)
            want = case["draft_logprobs"][str(count - 1)][:n]
            np.testing.assert_allclose(logprobs, want, atol=1e-4, rtol=0)
            short += n < K
        assert len(seen[str(i)]) >= len(case["tokens"]) // (K + 1)
    return short


_ENGINES: dict[str, LLM] = {}


def mtp_engine(arch: str) -> LLM:
    """One MTP engine per fixture for the module (its steps compile once)."""
    if arch not in _ENGINES:
        _ENGINES[arch] = LLM(str(FIXTURES / f"{arch}_mtp"), speculative_config=SPEC, **ENGINE)
    return _ENGINES[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_drafts_are_transformers_mtp_drafts_and_tokens_are_greedy(arch):
    mtp_llm, ref = mtp_engine(arch), REFS[arch]
    before = mtp_llm.stats()
    tokens, seen = _run(mtp_llm, ref["cases"])
    assert _check_drafts(ref["cases"], tokens, seen) == 0  # pages for the drafts fed: room
    # Every step that sampled for a request left drafts; those it kept (random weights:
    # few or none) are the tokens it gained beyond one a step.
    stats = mtp_llm.stats()
    kept = 0
    for i, case in enumerate(ref["cases"]):
        assert max(seen[str(i)]) == len(case["prompt"]) + len(case["tokens"])
        kept += len(case["tokens"]) - len(seen[str(i)])
    assert stats["num_accepted_tokens"] - before["num_accepted_tokens"] == kept
    assert stats["num_draft_tokens"] - before["num_draft_tokens"] >= 3 * K
    assert stats["num_pages_free"] == ENGINE["num_pages"]
    # One program per step bucket, whether a step carried drafts or not and however many
    # (speculative.scored_rows).
    assert stats["num_compiles"] == stats["num_step_shapes"] <= stats["num_buckets"]
    # New weights of the served model come with their MTP module (LLM.load_weights).
    served = jax.tree.map(np.asarray, mtp_llm.params["mtp"])
    mtp_llm.params = {**mtp_llm.params, "mtp": jax.tree.map(np.zeros_like, served)}
    mtp_llm.load_weights(str(FIXTURES / f"{arch}_mtp"))
    jax.tree.map(np.testing.assert_array_equal, mtp_llm.params["mtp"], served)


def test_the_pallas_kernels_draft_the_same():
    """attention_impl="pallas" (interpret mode here; the GPU's route): the MTP layer's pass
    and its chain over the Pallas MLA kernels give transformers' drafts too."""
    llm = LLM(str(MTP_DIR), speculative_config=SPEC, attention_impl="pallas", **ENGINE)
    cases = REF["cases"][:2]
    tokens, seen = _run(llm, cases)
    assert _check_drafts(cases, tokens, seen) == 0


def _oracle(ref: dict, vocab: int):
    """drafts(seq, cap) for the proposer's: the reference's own continuation, one draft
    spoiled at a place that rotates call by call (or none: 0 to K kept a step)."""
    fulls = {tuple(c["prompt"]): c["prompt"] + c["tokens"] for c in ref["cases"]}
    calls = iter(range(10**6))

    def drafts(seq, cap):
        got = list(fulls[tuple(seq.prompt_token_ids)][seq.num_tokens : seq.num_tokens + cap])
        spoil = next(calls) % (K + 1)  # K: none spoiled
        if spoil < len(got):
            got[spoil] = (got[spoil] + 1) % vocab
        return tuple(got)

    return drafts


@pytest.mark.parametrize("arch", ARCHS[:2])  # MLA and GQA (GLM-4.7-Flash: MLA too)
def test_after_drafts_kept_the_mtp_layer_drafts_from_the_last_kept_row(arch):
    """Drafts from an oracle (the reference's own continuation with one token spoiled at
    a rotating place): 0 to K are kept a step; the MTP layer's next drafts must start from
    the row after the last kept one, as transformers' drafts after that many tokens."""
    mtp_llm, ref = mtp_engine(arch), REFS[arch]
    proposer = mtp_llm._scheduler.speculative
    before = mtp_llm.stats()
    try:
        tokens, seen = _run(mtp_llm, ref["cases"], _oracle(ref, mtp_llm.config.vocab_size))
    finally:
        del proposer.drafts  # the class's method again
    short = _check_drafts(ref["cases"], tokens, seen)
    assert short <= sum(len(v) for v in seen.values()) // 2
    stats = mtp_llm.stats()
    kept = stats["num_accepted_tokens"] - before["num_accepted_tokens"]
    assert kept >= 6
    assert stats["num_steps"] - before["num_steps"] < 10 + 2  # fewer steps than tokens + prefill
    # Kept per draft position (vLLM's num_accepted_tokens_per_pos), from the tokens each
    # step gave: a step of n tokens kept drafts 1 .. n - 1.
    per_pos = [0] * K
    for by_count in seen.values():
        counts = sorted(by_count)
        for a, b in zip(counts, counts[1:], strict=False):
            for j in range(b - a - 1):
                per_pos[j] += 1
    pos_before, pos_after = (
        before["num_accepted_tokens_per_pos"],
        stats["num_accepted_tokens_per_pos"],
    )
    assert [a - b for a, b in zip(pos_after, pos_before, strict=True)] == per_pos
    assert sum(per_pos) == kept and per_pos[0] > per_pos[-1] > 0


def test_proposer_configs_are_checked_by_key():
    for config, message in [
        ({"method": "mtp"}, "num_speculative_tokens: missing"),
        ({"method": "mtp", "num_speculative_tokens": 0}, r"num_speculative_tokens=0: must be in"),
        ({"method": "deepseek_mtp", "num_speculative_tokens": True}, "=True: must be in"),
        ({"method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_max": 2}, "unknown keys"),
    ]:
        with pytest.raises(ValueError, match=f"speculative_config.*{message}"):
            LLM(str(MTP_DIR), speculative_config=config)
    assert MtpProposer(2).drafts(type("S", (), {"request_id": "x", "num_tokens": 3}), 2) == ()


def test_models_without_an_mtp_module_are_refused_before_loading(tmp_path):
    with pytest.raises(ValueError, match="num_nextn_predict_layers=0"):
        LLM(str(FIXTURES / "deepseek_v3"), speculative_config=SPEC)
    with pytest.raises(ValueError, match="model_type='llama' has no MTP module"):
        LLM(str(FIXTURES / "llama"), speculative_config=SPEC)
    # A config that names an MTP layer the files do not hold.
    ckpt = tmp_path / "no_mtp_weights"
    shutil.copytree(FIXTURES / "deepseek_v3", ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    missing = r"'model\.layers\.3\.enorm\.weight': missing \(the MTP module's"
    with pytest.raises(ValueError, match=missing):
        LLM(str(ckpt), speculative_config=SPEC)
    assert LLM(str(ckpt), num_pages=8).config.mtp_drafts == 0  # served without it
    cfg, params, _ = load_model("tiny-deepseek-v3")
    save_params(tmp_path / "orbax", params, cfg)
    with pytest.raises(ValueError, match="orbax checkpoint, which holds no MTP module"):
        LLM(str(tmp_path / "orbax"), speculative_config=SPEC)
    # With EPLB the MTP module's MoE layer is one more placed layer (tests/test_eplb.py).
    mtp_cfg = model_config(str(MTP_DIR)).replace(mtp_drafts=K)
    plain = balancer_for(True, None, mtp_cfg.replace(mtp_drafts=0), parse_mesh("ep=2"))
    assert (
        len(balancer_for(True, None, mtp_cfg, parse_mesh("ep=2")).placement)
        == len(plain.placement) + 1
    )


def _fp8_mtp_checkpoint(dst: pathlib.Path) -> dict[str, np.ndarray]:
    """The MTP fixture with its MTP layer's projections and experts stored as DeepSeek-V3's
    release stores them: e4m3, a float32 `weight_scale_inv` per block (s = max|w| / 448, as
    tests/fixtures/make_fp8_weight_fixtures.py; its deepseek_v3_fp8 block), the rest float
    (as `modules_to_not_convert` leaves them). Returns the tensors stored in fp8."""
    shutil.copytree(MTP_DIR, dst)
    block = json.loads((FIXTURES / "deepseek_v3_fp8" / "config.json").read_text())[
        "quantization_config"
    ]["weight_block_size"]
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": block,
    }
    (dst / "config.json").write_text(json.dumps(config))
    shard = dst / "model-mtp.safetensors"
    tensors = load_file(shard)
    layer = f"model.layers.{config['num_hidden_layers']}"
    linear = re.compile(
        rf"{layer}\.(self_attn|mlp\.experts\.\d+|mlp\.shared_experts)\.\w+_proj\.weight"
    )
    names = sorted(n for n in tensors if linear.fullmatch(n))
    (bm, bn) = block
    for name in names:
        w = tensors[name].astype(np.float32)
        blocks = w.reshape(w.shape[0] // bm, bm, w.shape[1] // bn, bn)
        scale = np.abs(blocks).max(axis=(1, 3)) / 448
        scale[scale == 0] = 1
        stored = (blocks / scale[:, None, :, None]).reshape(w.shape)
        tensors[name] = stored.astype(ml_dtypes.float8_e4m3fn)
        tensors[f"{name}_scale_inv"] = scale.astype(np.float32)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"].update({f"{n}_scale_inv": shard.name for n in names})
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    return {n: tensors[n] for n in names}


def test_a_float_mtp_layer_is_quantized_on_load_as_the_others():
    """quantization="fp8" | "int4" on a float checkpoint: the MTP layer's projections and
    experts are quantized on load as the decoder layers' are (models/tree.decoder_layers),
    block by block as quantization.quantize does."""
    held = {}
    for method in (None, "int4", "fp8"):
        cfg = model_config(str(MTP_DIR), quantization=method).replace(mtp_drafts=K)
        held[method] = load_model(str(MTP_DIR), cfg=cfg, host=True)[1]["mtp"]["layer"]
        for group, name in (("attn", "wo"), ("moe", "w_gate"), ("moe", "w_down")):
            assert quant.is_quantized(held[method][group][name]) == bool(method), (method, name)
    lead, k_dims = quant.layout_of("moe", "w_gate")
    want = quant.quantize(held[None]["moe"]["w_gate"], lead, k_dims, (128, 128))
    got = np.asarray(held["fp8"]["moe"]["w_gate"].data)
    np.testing.assert_array_equal(got.view(np.uint8), want.data.view(np.uint8))


def test_an_fp8_checkpoints_mtp_layer_is_held_as_stored(tmp_path):
    """quantization="fp8" on an fp8 checkpoint holds the MTP layer's stored bytes (its
    decoder layers, stored float, stay float; DeepSeek-V3's MTP layer is a ~12 B-parameter
    MoE layer); tokens and drafts are bitwise those of the float engine given the
    dequantized weights."""
    stored = _fp8_mtp_checkpoint(tmp_path / "fp8")
    assert len(stored) > 40  # 16 experts x 3, the shared expert's 3, attention's 5
    llm = LLM(str(tmp_path / "fp8"), quantization="fp8", speculative_config=SPEC, **ENGINE)
    layer = llm.params["mtp"]["layer"]
    for group, name in (("attn", "wo"), ("moe", "w_gate"), ("moe", "w_down")):
        assert quant.is_quantized(layer[group][name]), (group, name)
    o_proj = stored["model.layers.3.self_attn.o_proj.weight"]  # [out, in]; held [in, out]
    held = np.asarray(layer["attn"]["wo"].data).reshape(o_proj.T.shape)
    np.testing.assert_array_equal(held.view(np.uint8), o_proj.T.view(np.uint8))
    assert not quant.is_quantized(llm.params["layers"][1]["attn"]["wo"])
    got = _run(llm, REF["cases"])
    plain = mtp_engine("deepseek_v3")
    served = plain.params
    plain.params = jax.tree.map(
        jnp.asarray, quant.dequantize_tree(jax.tree.map(jnp.asarray, llm.params), jnp.float32)
    )
    try:
        assert _run(plain, REF["cases"]) == got
    finally:
        plain.params = served


@pytest.mark.parametrize("temperature", [0.0, 0.8], ids=["greedy", "sampled"])
def test_batch_invariant_tokens_keep_their_bits_with_drafts_kept_or_not(temperature):
    """batch_invariant=True: tokens and logprob bits equal the engine's without drafts, in
    steps of 1 to K + 1 tokens (greedy: oracle drafts spoiled at a rotating place; sampled:
    a draft is kept where it equals the request's own draw) with the MTP pass in each."""
    kw = dict(batch_invariant=True, max_num_seqs=4, max_num_batched_tokens=32, num_pages=48)
    plain = LLM(str(MTP_DIR), **kw)
    spec = LLM(str(MTP_DIR), speculative_config=SPEC, **kw)
    spec._scheduler.speculative.drafts = _oracle(REF, spec.config.vocab_size)
    prompts = [c["prompt"] for c in REF["cases"]]
    params = SamplingParams(
        temperature=temperature, top_k=8, seed=5, max_tokens=10, ignore_eos=True
    )
    bits = lambda x: np.asarray(x, np.float32).view(np.uint32).tolist()  # noqa: E731
    for w, g in zip(plain.generate(prompts, params), spec.generate(prompts, params), strict=True):
        assert g.token_ids == w.token_ids
        assert bits(g.logprobs) == bits(w.logprobs)
    stats = spec.stats()
    assert stats["num_draft_tokens"] >= 3 * 9
    if not temperature:
        assert stats["num_accepted_tokens"] >= 6
