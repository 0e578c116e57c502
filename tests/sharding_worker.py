"""Subprocess side of tests/test_sharding_mesh.py: runs on fake CPU devices, writes JSON.

The parent sets XLA_FLAGS (--xla_force_host_platform_device_count) before this process
imports jax, so the pytest process itself keeps its single CPU device. Results go to a JSON
file and the parent asserts on them.

  python -m tests.sharding_worker mesh_cases OUT.json          (8 devices)
  python -m tests.sharding_worker two_process OUT.json ADDR N I (2 devices per process)
"""

from __future__ import annotations

import json
import pathlib
import sys

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MAX_TOKENS = 16

# (arch, mesh) pairs of the acceptance list; ep=8 only where 8 divides the experts.
LAYOUTS = [
    ("deepseek_v3", "ep=4"),
    ("deepseek_v3", "ep=8"),
    ("deepseek_v3", "dp=2,ep=4"),
    # DeepSeek sparse attention, Mistral Large 4's (V3.2's MLA and MoE without a q LoRA):
    # MLA heads and their query scales over tp, the indexer (and its key pages) whole,
    # experts over ep; a layer without RoPE, one reusing another's top-k and one reading
    # another's latent pages. (V3 itself on tp=2,ep=2: the KV transfer and offloading
    # cases below.)
    ("mistral_large4", "tp=2,ep=2"),
    # Llama 4: chunked layers in a pool of their own, top-1 experts fed their scaled input
    # over ep.
    ("llama4", "tp=2,ep=2"),
    ("qwen3_moe", "ep=4"),
    ("qwen3_moe", "ep=8"),
    ("qwen3_moe", "dp=2,ep=4"),
    # Qwen3-Next: gated DeltaNet layers (their heads and recurrent states over tp) between
    # gated attention ones, Qwen3-MoE's router with a gated shared expert, experts over ep.
    ("qwen3_next", "tp=2,ep=2"),
    # DeepSeek-V4: tokens over dp, query heads (and their sinks) over tp, experts over ep,
    # its window and entry pages whole on each device.
    ("deepseek_v4", "dp=2,tp=2,ep=2"),
    ("mixtral", "dp=2,ep=4"),
    # Nemotron-H: Mamba-2 layers (groups and heads, their conv biases, D and group norms
    # over tp), attention without positions, relu2 experts (no gate) over ep with their
    # widths over tp, layers without a feed-forward block.
    ("nemotron_h", "tp=2,ep=2"),
    ("llama", "tp=2"),
    ("mistral", "tp=2"),  # a sliding window, KV heads split over tp
    # A hybrid model (its windowed layer's KV in a pool of its own, both pools' heads split
    # over tp), attention sinks split with the heads, biased experts over ep.
    ("gpt_oss", "tp=2,ep=2"),
    # Gemma 4: windowed and global layers of different head widths and KV heads (the
    # global layers' one KV head: every layer's KV heads whole on each device, query heads
    # over tp), a dense MLP over tp beside experts over ep, its router's scales whole.
    ("gemma4", "tp=2,ep=2"),
    # LongCat-Flash: MLA heads over tp, the shortcut MoE's experts over ep, the copies of
    # its zero-computation experts exchanged at weight 0 beside the routed ones.
    ("longcat_flash", "tp=2,ep=2"),
    # Falcon Mamba (no attention): Mamba-1's channels, their convs, scan states and dt_proj
    # over tp, x_proj's and out_proj's sums across the shards; no heads to split.
    ("falcon_mamba", "tp=2"),
]
# The archs also run on one device in the same process, their logprobs and expert loads the
# sharded runs' reference (the acceptance list's); the others' is the HF fixture.
SINGLE_ARCHS = ("deepseek_v3", "qwen3_moe", "mixtral", "llama")
# Skewed routing: every token's copies go to experts 0 and 1, both on device 0.
SKEWED = [("deepseek_v3", "ep=8"), ("qwen3_moe", "dp=2,ep=4")]
# fp8 KV pages on a mesh that splits the KV heads (and so the per-row scales).
FP8_LAYOUT = ("llama", "tp=2")
# fp8 weights (an fp8 checkpoint held as stored) with experts over ep and heads over tp.
FP8_WEIGHTS_LAYOUT = ("deepseek_v3_fp8", "tp=2,ep=2")
# LoRA adapters (tests/fixtures/lora) with heads and MLP widths split over tp, tokens over dp.
LORA_LAYOUT = ("llama", "dp=2,tp=2")
# KV transfer (engine/kv_transfer.py): a producer on the first layout, a consumer on the
# second ("": one device); the stored rows are whole, whatever splits the pages.
# Nemotron-H: each Mamba-2 layer's state row (its heads split over tp) stored beside the rows.
KV_TRANSFER_LAYOUTS = [
    ("deepseek_v3", "tp=2,ep=2", "dp=2,ep=4"),
    ("llama", "tp=2", ""),
    ("nemotron_h", "tp=2,ep=2", "dp=2,ep=4"),
]
# MTP drafting (engine/mtp.py) on a mesh that splits tokens, the MTP layer's heads and its
# experts: transformers' drafts (tests/test_mtp.py).
MTP_LAYOUT = "dp=2,tp=2,ep=2"
# KV offloading (engine/kv_offload.py): pages copied out gathered whole, copied back in split
# over tp (MLA's latent replicated, experts over ep).
OFFLOAD_LAYOUT = ("deepseek_v3", "tp=2,ep=2")
# LLM.load_weights on a mesh: new weights placed with the served ones' shardings.
LOAD_WEIGHTS_LAYOUT = ("qwen3_moe", "tp=2,ep=2")
# Penalized requests (a replicated count state) and token lists (logit_bias, allowed ids,
# min_tokens) on meshes that split tokens (dp) and the vocabulary's matmul (tp):
# tests/fixtures/sampler/hf_penalties.json and hf_token_lists.json.
PENALTY_LAYOUTS = [("qwen3_moe", "dp=2,ep=4"), ("llama", "tp=2")]


def _engine(model: str, mesh: str, **options):
    """Every step 16 tokens: prompts prefill in 16-token chunks (a chunked prefill on each
    mesh) and each layout compiles one step program, not a prefill and a decode one."""
    from engine import LLM

    settings = dict(num_pages=32, max_model_len=128, max_num_batched_tokens=16)
    return LLM(model=model, mesh=mesh, **{**settings, "token_buckets": (16,), **options})


def _generate(llm, prompts) -> dict:
    import numpy as np

    from engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    before = llm.stats()
    outs = llm.generate(prompts, params)
    stats = llm.stats()
    load = np.asarray(stats["expert_load_total"])
    if before["expert_load_total"]:
        load = load - np.asarray(before["expert_load_total"])
    return {
        "tokens": [o.token_ids for o in outs],
        "logprobs": [o.logprobs for o in outs],
        "expert_load": load.tolist(),  # token copies per expert during this call
        "new_compiles": stats["num_compiles"] - before["num_compiles"],
        "num_prompt_tokens": sum(len(p) for p in prompts),
        "top_k": llm.config.num_experts_per_tok,
        "param_specs": _param_specs(llm),
    }


def _param_specs(llm) -> dict:
    """Where a few weights landed, to check that the mesh really splits them."""
    layers = [x for x in llm.params["layers"] if "attn" in x]  # (not a DeltaNet layer)
    picks = {}
    if layers:  # (none in a model without attention)
        layer = next((x for x in layers if "moe" in x), layers[0])
        wo = "wq_b" if "wq_b" in layer["attn"] and "wo" not in layer["attn"] else "wo"
        picks[f"attn.{wo}"] = layer["attn"][wo]  # (DeepSeek-V4's heads: in its wq_b)
        if "moe" in layer:
            picks["moe.w_up"] = layer["moe"]["w_up"]
    linear = [x["linear"] for x in llm.params["layers"] if "linear" in x]
    if linear:  # (a DeltaNet's or Mamba-2's value heads)
        picks["linear.wv"] = linear[0]["wv"]
    # (an fp8 weight: where its data landed)
    picks = {k: getattr(v, "data", v) for k, v in picks.items()}
    return {k: str(getattr(v.sharding, "spec", None)) for k, v in picks.items()}


def _skewed(params: dict, cfg) -> dict:
    """Routing forced onto experts 0 and 1 in every MoE layer (both on ep device 0).

    DeepSeek-V3: a huge correction bias on experts 0 and 1 (it steers the choice only).
    Softmax routers: a zero router weight gives equal scores, and top-k breaks ties towards
    the lowest expert ids.
    """
    import numpy as np

    layers = []
    for layer in params["layers"]:
        if "moe" in layer:
            moe = dict(layer["moe"])
            if "router_bias" in moe:
                moe["router_bias"] = np.where(np.arange(cfg.num_experts) < 2, 1e4, 0.0).astype(
                    np.float32
                )
            else:
                moe["router"] = np.zeros(moe["router"].shape, np.float32)
            layer = {**layer, "moe": moe}
        layers.append(layer)
    return {**params, "layers": layers}


def _op_check() -> dict:
    """routed_experts_ep vs routed_experts directly: odd T, tp=2; copies spread evenly or at
    random (the bounded exchange: 61 tokens pad to 16 a device, 32 copies, 16 rows a peer
    against the worst case's 32) and all onto one device (over the bound: the worst case)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from configs.presets import get_preset
    from models.moe import routed_experts
    from models.specs import init_params
    from sharding.expert_parallel import make_routed_experts_ep
    from sharding.mesh import MeshConfig
    from sharding.placement import shard_model

    cfg = get_preset("tiny-deepseek-v3")  # 16 experts, top-2
    params = init_params(cfg, jax.random.key(1))
    layer = next(i for i in range(cfg.num_layers) if cfg.is_moe_layer(i))
    mesh, sharded = shard_model(cfg, params, MeshConfig(dp=1, tp=2, ep=4))
    p, p_sharded = params["layers"][layer]["moe"], sharded["layers"][layer]["moe"]
    rng = np.random.default_rng(0)
    t = 61  # not a multiple of dp * ep
    x = jnp.asarray(rng.standard_normal((t, cfg.hidden_size)), jnp.float32)
    weights = jnp.asarray(rng.uniform(0.1, 1.0, (t, 2)), jnp.float32)
    cases = {
        "random": rng.permuted(np.tile(np.arange(16), (t, 1)), axis=1)[:, :2],
        "even": np.stack([np.arange(t) % 16, (np.arange(t) + 8) % 16], axis=1),
        "one_device": np.tile([1, 3], (t, 1)),  # experts 0..3 live on ep device 0
    }
    routed = jax.jit(make_routed_experts_ep(cfg, mesh, min_rows=0))  # small: bound it anyway
    zeros = jnp.zeros((t, 2), jnp.int32)
    hlo = routed.lower(p_sharded, x, weights, zeros).compile().as_text()
    worst_only = jax.jit(make_routed_experts_ep(cfg, mesh, min_rows=None))
    hlo_worst = worst_only.lower(p_sharded, x, weights, zeros).compile().as_text()
    default = jax.jit(make_routed_experts_ep(cfg, mesh))  # 128 rows: below BOUNDED_MIN_ROWS
    hlo_default = default.lower(p_sharded, x, weights, zeros).compile().as_text()
    out = {
        "hlo_has_all_to_all": "all-to-all" in hlo,
        "hlo_has_conditional": "conditional(" in hlo,
        "worst_only_has_conditional": "conditional(" in hlo_worst,
        "small_default_has_conditional": "conditional(" in hlo_default,
    }
    for name, experts in cases.items():
        experts = jnp.asarray(experts, jnp.int32)
        want = np.asarray(routed_experts(p, x, weights, experts))
        got = np.asarray(routed(p_sharded, x, weights, experts))
        worst = np.asarray(worst_only(p_sharded, x, weights, experts))
        out[name] = {
            "max_abs_err": float(np.max(np.abs(got - want))),
            "max_abs": float(np.max(np.abs(want))),
            "equals_worst_case_bitwise": bool(np.array_equal(got, worst)),
        }
    return out


def mesh_cases(out_path: str) -> None:
    import jax

    from sharding.placement import put_tree
    from sharding.rules import param_shardings

    assert jax.device_count() == 8, jax.devices()
    refs = {a: json.loads((FIXTURES / a / "reference.json").read_text()) for a, _ in LAYOUTS}
    result = {"op": _op_check(), "single": {}, "sharded": {}, "skewed": {}}
    singles = {}
    for arch in SINGLE_ARCHS:  # (test_engine's 64-token budget: its programs, in the cache)
        singles[arch] = _engine(
            str(FIXTURES / arch), "", max_num_batched_tokens=64, token_buckets=None
        )
        result["single"][arch] = _generate(singles[arch], refs[arch]["prompts"])
    for arch, mesh in LAYOUTS:
        llm = _engine(str(FIXTURES / arch), mesh)
        prompts = refs[arch]["prompts"]
        result["sharded"][f"{arch}|{mesh}"] = _generate(llm, prompts)
        if (arch, mesh) in PENALTY_LAYOUTS:
            penalized, listed = _penalized_and_listed(llm, arch)
            result.setdefault("penalties", {})[f"{arch}|{mesh}"] = penalized
            result.setdefault("token_lists", {})[f"{arch}|{mesh}"] = listed
        if (arch, mesh) in SKEWED:
            # Same shapes and shardings, so both engines reuse their compiled steps (a new
            # sharded engine: the one above may have kept the penalty and list features
            # on, runner.StickyFeatures, whose programs these shapes never compiled).
            llm = _engine(str(FIXTURES / arch), mesh)
            single = singles[arch]
            skewed = _skewed(single.params, single.config)
            single.params = jax.tree.map(jax.numpy.asarray, skewed)
            llm.params = put_tree(skewed, param_shardings(llm.config, llm.mesh))
            result["skewed"][f"{arch}|{mesh}"] = {
                "single": _generate(single, prompts),
                "sharded": _generate(llm, prompts),
            }
    result["invariant"] = _invariant_across_ep(refs["deepseek_v3"]["prompts"])
    result["fp8"] = _fp8_kv(FP8_LAYOUT)
    result["fp8_weights"] = _fp8_weights(FP8_WEIGHTS_LAYOUT)
    result["lora"] = _lora_on_mesh(LORA_LAYOUT)
    result["kv_transfer"] = {"|".join(c): _kv_transfer(*c) for c in KV_TRANSFER_LAYOUTS}
    result["load_weights"] = _load_weights(*LOAD_WEIGHTS_LAYOUT)
    result["mtp"] = _mtp_on_mesh(MTP_LAYOUT)
    result["offload"] = _offload_on_mesh(*OFFLOAD_LAYOUT)
    pathlib.Path(out_path).write_text(json.dumps(result))


def _mtp_on_mesh(mesh: str) -> dict:
    from engine import LLM
    from tests.test_mtp import ENGINE, MTP_DIR, REF, SPEC, _run

    llm = LLM(str(MTP_DIR), mesh=mesh, speculative_config=SPEC, **ENGINE)
    tokens, seen = _run(llm, REF["cases"])
    return {
        "tokens": tokens,
        "seen": {
            rid: {str(n): [list(d), [float(x) for x in lp]] for n, (d, lp) in by_count.items()}
            for rid, by_count in seen.items()
        },
    }


def _offload_on_mesh(arch: str, mesh: str) -> dict:
    """The fixture's prompts, every device page taken by others, then the prompts again
    (their pages back from the host tier)."""
    import numpy as np

    from tests.test_kv_offload import TINY_GIB, _evict_all

    # (The KV transfer producer's step program on this layout.)
    llm = _engine(
        str(FIXTURES / arch), mesh, enable_prefix_caching=True, kv_offloading_size=TINY_GIB
    )
    prompts = json.loads((FIXTURES / arch / "reference.json").read_text())["prompts"]
    _generate(llm, prompts)
    _evict_all(llm, np.random.default_rng(2), 32, 120)
    out = _generate(llm, prompts)
    out["loaded_pages"] = llm.stats()["kv_offload_loaded_pages"]
    return out


def _penalized_and_listed(llm, arch: str) -> tuple[list[list[int]], list[list[int]]]:
    """Greedy tokens of the HF penalty and token-list fixtures' cases for `arch`, as recorded.

    Both sets run in one batch: one step program with both features (a compilation of each
    step shape, not two), and each case's rows beside the other kind's.
    """
    from tests.sampler_cases import cases, penalty_params, token_list_params

    penalty_cases, list_cases = cases("hf_penalties", arch), cases("hf_token_lists", arch)
    outs = llm.generate(
        [c["prompt"] for c in penalty_cases + list_cases],
        [penalty_params(c) for c in penalty_cases] + [token_list_params(c) for c in list_cases],
    )
    tokens = [o.token_ids for o in outs]
    return tokens[: len(penalty_cases)], tokens[len(penalty_cases) :]


def _fp8_kv(layout: tuple[str, str]) -> dict:
    """fp8 KV pages on a mesh: the page scales are split like the pages' rows."""
    import jax.numpy as jnp

    from engine import SamplingParams

    arch, mesh = layout
    ref = json.loads((FIXTURES / arch / "reference.json").read_text())
    n = len(json.loads((FIXTURES / arch / "reference_fp8_kv.json").read_text())["logprobs"][0])
    llm = _engine(str(FIXTURES / arch), mesh, kv_cache_dtype="fp8")
    k_pages = llm._kv[0][0]
    assert k_pages.data.dtype == jnp.uint8, k_pages.data.dtype  # e4m3 bit patterns
    outs = llm.generate(
        ref["prompts"], SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    )
    return {
        "tokens": [o.token_ids for o in outs],
        "logprobs": [o.logprobs for o in outs],
        "data_spec": str(k_pages.data.sharding.spec),
        "scale_spec": str(k_pages.scale.sharding.spec),
    }


def _fp8_weights(layout: tuple[str, str]) -> dict:
    """quantization="fp8" on a mesh: the fp8 data split like the float weight, the expert
    scales split over ep with their experts."""
    arch, mesh = layout
    ref = json.loads((FIXTURES / arch / "reference.json").read_text())
    llm = _engine(str(FIXTURES / arch), mesh, quantization="fp8")
    moe = next(x["moe"] for x in llm.params["layers"] if "moe" in x)
    out = _generate(llm, ref["prompts"])
    out["specs"] = {
        "w_gate.data": str(moe["w_gate"].data.sharding.spec),
        "w_gate.scale": str(moe["w_gate"].scale.sharding.spec),
        "wq_b.data": str(llm.params["layers"][0]["attn"]["wq_b"].data.sharding.spec),
        "data_dtype": str(moe["w_gate"].data.dtype),
    }
    return out


def _lora_on_mesh(layout: tuple[str, str]) -> dict:
    """Two adapters and the base model in one step on a mesh (the stacks replicated)."""
    from engine import LoRARequest, SamplingParams

    arch, mesh = layout
    lora = FIXTURES / "lora"
    ref = json.loads((lora / "reference.json").read_text())[arch]
    adapters = [
        LoRARequest(name, i + 1, str(lora / name))
        for i, name in enumerate(("adapter_a", "adapter_b"))
    ]
    llm = _engine(str(FIXTURES / arch), mesh, enable_lora=True, max_loras=2, max_lora_rank=8)
    n = len(ref["adapters"]["base"]["greedy_tokens"][0])
    loras = [None] * 3 + [adapters[0]] * 3 + [adapters[1]] * 3
    outs = llm.generate(ref["prompts"] * 3, SamplingParams(max_tokens=n), loras)
    return {
        "names": ["base"] * 3 + ["adapter_a"] * 3 + ["adapter_b"] * 3,
        "tokens": [o.token_ids for o in outs],
        "logprobs": [o.logprobs for o in outs],
    }


def _kv_transfer(arch: str, producer_mesh: str, consumer_mesh: str) -> dict:
    """Prompts prefilled on one mesh, decoded on another from the stored KV."""
    import tempfile

    from engine import SamplingParams

    prompts = json.loads((FIXTURES / arch / "reference.json").read_text())["prompts"]
    with tempfile.TemporaryDirectory() as store:
        config = {"kv_role": "kv_producer", "kv_connector_extra_config": {}}
        config["kv_connector_extra_config"]["shared_storage_path"] = store
        producer = _engine(str(FIXTURES / arch), producer_mesh, kv_transfer_config=config)
        producer.generate(prompts, SamplingParams(max_tokens=1))
        config["kv_role"] = "kv_consumer"
        consumer = _engine(str(FIXTURES / arch), consumer_mesh, kv_transfer_config=config)
        out = _generate(consumer, prompts)
    out["num_loaded_kv_tokens"] = consumer.stats()["num_loaded_kv_tokens"]
    return out


def _load_weights(arch: str, mesh: str) -> dict:
    """Other weights (a params tree, on the host), then the fixture's folder again, then a
    sleep and a wake_up."""
    import jax
    import numpy as np

    prompts = json.loads((FIXTURES / arch / "reference.json").read_text())["prompts"]
    llm = _engine(str(FIXTURES / arch), mesh)
    specs = jax.tree.map(lambda x: str(x.sharding.spec), llm.params)
    rng = np.random.default_rng(0)
    other = jax.tree.map(
        lambda x: np.asarray(x) + rng.normal(0, 0.05, x.shape).astype(x.dtype), llm.params
    )
    llm.load_weights(other)
    out = {"other": _generate(llm, prompts)}
    out["same_specs"] = jax.tree.map(lambda x: str(x.sharding.spec), llm.params) == specs
    llm.load_weights(str(FIXTURES / arch))
    out["fixture"] = _generate(llm, prompts)
    llm.sleep()  # the weights' shards to the host and back, the cache made again
    llm.wake_up()
    out["after_sleep"] = _generate(llm, prompts)
    out["same_specs"] &= jax.tree.map(lambda x: str(x.sharding.spec), llm.params) == specs
    single = _engine(str(FIXTURES / arch), "")
    single.load_weights(other)
    out["single_other"] = _generate(single, prompts)
    return out


def _invariant_across_ep(prompts) -> dict:
    """batch_invariant=True on ep=1 (one device), 2 and 4: tokens and logprob float bits."""
    import numpy as np

    from engine import LLM, SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    out = {}
    for mesh in ("", "ep=2", "ep=4"):
        llm = LLM(
            model=str(FIXTURES / "deepseek_v3"),
            mesh=mesh,
            batch_invariant=True,
            num_pages=32,
            max_model_len=128,
            max_num_batched_tokens=64,
        )
        outs = llm.generate(prompts, params)
        out[mesh or "ep=1"] = {
            "tokens": [o.token_ids for o in outs],
            "bits": [np.asarray(o.logprobs, np.float32).view(np.uint32).tolist() for o in outs],
        }
    return out


def two_process(out_path: str, coordinator: str, num_processes: str, process_id: str) -> None:
    from sharding import distributed

    distributed.initialize(coordinator, int(num_processes), int(process_id))
    import jax
    from jax.experimental import multihost_utils

    from engine import SamplingParams

    ref = json.loads((FIXTURES / "mixtral" / "reference.json").read_text())
    res = _generate(_engine(str(FIXTURES / "mixtral"), "ep=4"), ref["prompts"])
    # KV transfer over the 2-process mesh: process 0 writes the store (a folder both see);
    # every process reads it, once its files are there for all (the proxy's order).
    store = str(pathlib.Path(out_path).parent / "kv_store")
    config = {"kv_role": "kv_producer", "kv_connector_extra_config": {}}
    config["kv_connector_extra_config"]["shared_storage_path"] = store
    producer = _engine(str(FIXTURES / "mixtral"), "ep=4", kv_transfer_config=config)
    producer.generate(ref["prompts"], SamplingParams(max_tokens=1))
    multihost_utils.sync_global_devices("kv stored")
    consumer = _engine(
        str(FIXTURES / "mixtral"), "ep=4", kv_transfer_config={**config, "kv_role": "kv_consumer"}
    )
    res["kv_transfer"] = _generate(consumer, ref["prompts"])
    res["kv_transfer"]["num_loaded_kv_tokens"] = consumer.stats()["num_loaded_kv_tokens"]
    res["kv_transfer"]["saved"] = producer.stats()["kv_transfer_saved_prompts"]
    # Expert-parallel load balancing: rebalanced every 3 steps, experts moved between the
    # processes' devices (ppermute over gloo); each process places from the loads it reads.
    eplb = {"num_redundant_experts": 4, "step_interval": 3, "window_size": 8}
    balanced = _engine(str(FIXTURES / "mixtral"), "ep=4", enable_eplb=True, eplb_config=eplb)
    first = balanced.stats()["eplb"]["placement"]
    res["eplb"] = _generate(balanced, ref["prompts"])
    res["eplb"].update(first_placement=first, **balanced.stats()["eplb"])
    res.update(
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        device_count=jax.device_count(),
        local_device_count=jax.local_device_count(),
    )
    pathlib.Path(out_path).write_text(json.dumps(res))


if __name__ == "__main__":
    {"mesh_cases": mesh_cases, "two_process": two_process}[sys.argv[1]](*sys.argv[2:])
