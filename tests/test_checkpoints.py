"""Checkpoint I/O end to end: orbax round trip, HF -> orbax conversion, load_model's inputs and
its refusals (each naming the tensor or path; nothing half-loaded)."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.presets import PRESETS, get_preset
from engine import LLM, SamplingParams
from models.load import convert_hf_to_orbax, load_model, model_config, summary
from models.orbax_io import (
    CONFIG_FILE,
    PARAMS_DIR,
    check_tree,
    config_from_dict,
    config_to_dict,
    is_orbax_dir,
    restore_params,
    save_params,
)
from models.reference import init_cache, reference_forward
from models.specs import abstract_params, init_params

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOL = 2e-3  # vs transformers' logits, as in test_hf_parity.py


def _assert_bitwise_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def test_random_weights_follow_the_key_and_the_specs():
    """Preset weights are drawn on the host (numpy) from the key's data: the same key gives
    the same bits on the host and on the device, another key others; every leaf has its
    spec's shape and dtype (bfloat16 included), N(0, 0.02) weights and ones for norms."""
    cfg = get_preset("tiny-deepseek-v3").replace(dtype="bfloat16")
    host = init_params(cfg, jax.random.key(5), host=True)
    device = init_params(cfg, jax.random.key(5))
    other = init_params(cfg, jax.random.key(6), host=True)
    assert all(type(x) is np.ndarray for x in jax.tree.leaves(host))
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(device))
    _assert_bitwise_equal(host, device)
    assert not np.array_equal(host["embed"], other["embed"])
    shapes = jax.tree.map(lambda x: (x.shape, x.dtype), host)
    assert shapes == jax.tree.map(lambda x: (x.shape, x.dtype), abstract_params(cfg))
    assert host["embed"].dtype == np.dtype(jax.numpy.bfloat16)
    embed = host["embed"].astype(np.float32)
    assert abs(float(embed.std()) - 0.02) < 0.002 and abs(float(embed.mean())) < 0.002
    assert np.all(host["final_norm"] == 1)


def _copy_fixture(tmp_path, arch: str) -> str:
    dst = str(tmp_path / arch)
    shutil.copytree(os.path.join(FIXTURES, arch), dst)
    return dst


# ---- orbax ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "preset, dtype",
    [("tiny-llama", None), ("tiny-deepseek-v3", None), ("tiny-deepseek-v3", "bfloat16"),
     ("tiny-qwen2-moe", None), ("tiny-glm4-moe", None)],
)  # fmt: skip
def test_orbax_round_trip_is_bitwise(tmp_path, preset, dtype):
    cfg = get_preset(preset)
    if dtype:
        cfg = cfg.replace(dtype=dtype)
    params = init_params(cfg, jax.random.key(7))
    save_params(tmp_path / "ckpt", params, cfg)
    got_cfg, got = restore_params(tmp_path / "ckpt")
    assert got_cfg == cfg
    _assert_bitwise_equal(got, params)
    if cfg.topk_method == "noaux_tc":
        assert got["layers"][1]["moe"]["router_bias"].dtype == np.float32


def test_orbax_refusals(tmp_path):
    cfg = get_preset("tiny-llama")
    params = init_params(cfg, jax.random.key(0))
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        restore_params(missing)
    with pytest.raises(ValueError, match="tensor 'embed'"):
        save_params(tmp_path / "bad", {**params, "embed": params["embed"][:10]}, cfg)
    assert not os.path.exists(tmp_path / "bad" / CONFIG_FILE)

    ckpt = tmp_path / "ckpt"
    save_params(ckpt, params, cfg)
    with pytest.raises(FileExistsError, match=str(ckpt)):
        save_params(ckpt, params, cfg)
    config_path = ckpt / CONFIG_FILE
    good = config_path.read_text()
    # A config that disagrees with the stored arrays: named tensor, before any data is read.
    config_path.write_text(json.dumps({**json.loads(good), "vocab_size": 256}))
    with pytest.raises(ValueError, match="'embed'.*shape \\(512, 96\\)"):
        restore_params(ckpt)
    config_path.write_text(json.dumps({**json.loads(good), "n_experts": 3}))
    with pytest.raises(ValueError, match="n_experts"):
        restore_params(ckpt)
    config_path.write_text("{not json")
    with pytest.raises(ValueError, match=CONFIG_FILE):
        restore_params(ckpt)
    config_path.unlink()
    with pytest.raises(ValueError, match=CONFIG_FILE):
        restore_params(ckpt)
    config_path.write_text(good)
    _assert_bitwise_equal(restore_params(ckpt)[1], params)


def test_orbax_refusals_name_the_tensor_field_or_file(tmp_path):
    cfg = get_preset("tiny-llama")
    params = init_params(cfg, jax.random.key(0))
    # check_tree names tensors with the dotted names orbax uses (list indices as numbers).
    for tree, match in [
        (
            {k: v for k, v in params.items() if k != "lm_head"},
            r"tensors missing for config 'tiny-llama': \['lm_head'\]",
        ),
        (
            {**params, "extra": params["lm_head"]},
            r"unexpected tensors for config 'tiny-llama': \['extra'\]",
        ),
        (
            jax.tree.map(lambda x: x.astype(jax.numpy.bfloat16), params),
            r"tensor 'embed' has shape \(512, 96\) dtype bfloat16; "
            r"config 'tiny-llama' needs shape \(512, 96\) dtype float32",
        ),
    ]:
        with pytest.raises(ValueError, match=f"^what: {match}"):
            check_tree(tree, cfg, "what")
    layer1 = {
        **params["layers"][1],
        "attn": {**params["layers"][1]["attn"], "wk": params["layers"][1]["attn"]["wk"][:, :1]},
    }
    with pytest.raises(ValueError, match=r"tensor 'layers\.1\.attn\.wk' has shape \(96, 1, 40\)"):
        check_tree({**params, "layers": [params["layers"][0], layer1]}, cfg, "what")

    # config_from_dict: every unknown field listed; ill-typed ones refused as ValueErrors.
    good = config_to_dict(cfg)
    with pytest.raises(ValueError, match=r"config fields \['experts', 'n_experts'\]"):
        config_from_dict({**good, "n_experts": 3, "experts": 3})
    for field, value in [("eos_token_ids", 5), ("rope_scaling", 5), ("mlp_only_layers", None)]:
        with pytest.raises(ValueError, match="^config: "):
            config_from_dict({**good, field: value})

    # A directory is an orbax checkpoint by its config file (a plain file), and a partial
    # one (its params or its config alone) is neither overwritten nor restored.
    ckpt = tmp_path / "ckpt"
    (ckpt / CONFIG_FILE).mkdir(parents=True)
    assert not is_orbax_dir(ckpt) and not is_orbax_dir(tmp_path / "none")
    (ckpt / CONFIG_FILE).rmdir()
    (ckpt / CONFIG_FILE).write_text(json.dumps(good))
    assert is_orbax_dir(ckpt)
    with pytest.raises(FileNotFoundError, match=f"orbax params directory not found: {ckpt}"):
        restore_params(ckpt)
    with pytest.raises(FileExistsError, match=f"checkpoint already exists at {ckpt}"):
        save_params(ckpt, params, cfg)
    assert (ckpt / CONFIG_FILE).read_text() == json.dumps(good) and not (ckpt / PARAMS_DIR).exists()
    (ckpt / CONFIG_FILE).unlink()
    (ckpt / PARAMS_DIR).mkdir()
    with pytest.raises(FileExistsError, match=f"checkpoint already exists at {ckpt}"):
        save_params(ckpt, params, cfg)
    assert os.listdir(ckpt) == [PARAMS_DIR] and not os.listdir(ckpt / PARAMS_DIR)
    (ckpt / CONFIG_FILE).write_text(json.dumps([good]))
    with pytest.raises(
        ValueError, match=f"{CONFIG_FILE}: bad config \\(expected a JSON object, got list\\)"
    ):
        restore_params(ckpt)


# ---- HF -> orbax with the script, then load both -----------------------------------------------
def _convert(hf_dir: str, out_dir: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "scripts.convert_hf", f"--hf_dir={hf_dir}", f"--out_dir={out_dir}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def _last_logits(params, cfg, prompt) -> np.ndarray:
    ids = np.asarray(prompt, np.int32)
    logits, _ = reference_forward(params, cfg, ids, np.int32(0), init_cache(cfg, len(prompt)))
    return np.asarray(logits[-1])


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_convert_hf_then_load(tmp_path, arch):
    hf_dir = os.path.join(FIXTURES, arch)
    out_dir = str(tmp_path / "orbax")
    run = _convert(hf_dir, out_dir)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()
    assert len(summary) == 1 and summary[0].startswith(f"converted {hf_dir} -> {out_dir}")

    hf_cfg, hf_params, hf_tok = load_model(hf_dir)
    cfg, params, tok = load_model(out_dir)
    assert cfg == hf_cfg
    assert cfg.replace(name="x") == get_preset(f"tiny-{arch.replace('_', '-')}").replace(name="x")
    _assert_bitwise_equal(params, hf_params)
    assert tok == os.path.join(out_dir, "tokenizer.json") and hf_tok.endswith("tokenizer.json")
    with open(tok, "rb") as a, open(hf_tok, "rb") as b:
        assert a.read() == b.read()

    with open(os.path.join(hf_dir, "reference.json")) as f:
        ref = json.load(f)
    prompt = ref["prompts"][0]
    got = _last_logits(params, cfg, prompt)
    assert got.tobytes() == _last_logits(hf_params, hf_cfg, prompt).tobytes()
    want = np.asarray(ref["last_prefill_logits_prompt0"], np.float32)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_convert_hf_script_refuses_missing_dir(tmp_path):
    missing = str(tmp_path / "nope")
    run = _convert(missing, str(tmp_path / "out"))
    assert run.returncode != 0
    assert f"convert_hf: hf_dir={missing!r}: no such directory" in run.stderr
    assert not os.path.exists(tmp_path / "out")


def test_convert_hf_refuses_out_dir_before_reading_the_checkpoint(tmp_path, monkeypatch):
    hf_dir = _copy_fixture(tmp_path, "llama")
    before = sorted(os.listdir(hf_dir))

    def no_load(*args, **kwargs):
        raise AssertionError("the checkpoint was read before out_dir was checked")

    monkeypatch.setattr("models.load._load_dir", no_load)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    link = tmp_path / "link"  # another name for hf_dir
    link.symlink_to(hf_dir)
    inside = (hf_dir, os.path.join(hf_dir, "orbax"), str(link), str(link / "orbax"))
    for out_dir in (*inside, str(tmp_path), str(full)):
        with pytest.raises(ValueError, match=f"out_dir={out_dir!r}"):
            convert_hf_to_orbax(hf_dir, out_dir)
    for out_dir in (*inside, str(tmp_path)):  # in hf_dir, or holding it: not "already exists"
        with pytest.raises(ValueError, match="must be a new directory outside hf_dir"):
            convert_hf_to_orbax(hf_dir, out_dir)
    assert sorted(os.listdir(hf_dir)) == before


def test_convert_hf_in_a_dtype_into_an_empty_dir_then_load_it_as_stored(tmp_path):
    hf_dir = _copy_fixture(tmp_path, "llama")
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False}, f)
    out_dir = tmp_path / "orbax"
    out_dir.mkdir()  # an empty directory is as good as a new one
    cfg, params = convert_hf_to_orbax(hf_dir, str(out_dir), dtype="bfloat16")
    _, hf_params, _ = load_model(hf_dir)  # float32
    want = jax.tree.map(lambda x: np.asarray(x).astype(jax.numpy.bfloat16), hf_params)
    assert cfg.dtype == "bfloat16"
    _assert_bitwise_equal(params, want)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        with open(os.path.join(hf_dir, name), "rb") as a, open(out_dir / name, "rb") as b:
            assert a.read() == b.read(), name
    # None and "auto" both keep the stored dtype; a dtype given casts.
    for dtype in (None, "auto"):
        assert model_config(str(out_dir), dtype) == cfg
        got_cfg, got, tok = load_model(str(out_dir), dtype=dtype)
        assert got_cfg == cfg and tok == str(out_dir / "tokenizer.json")
        _assert_bitwise_equal(got, want)
    cfg32, got32, _ = load_model(str(out_dir), dtype="float32")
    assert cfg32 == cfg.replace(dtype="float32") and got32["embed"].dtype == np.float32
    # An orbax directory is not an HF one to convert.
    with pytest.raises(ValueError, match=f"hf_dir={str(out_dir)!r}: is already an orbax"):
        convert_hf_to_orbax(str(out_dir), str(tmp_path / "again"))
    assert not (tmp_path / "again").exists()


# ---- load_model ------------------------------------------------------------------------------
def test_load_preset():
    cfg, params, tok = load_model("tiny-deepseek-v3", seed=3)
    assert cfg == get_preset("tiny-deepseek-v3") and tok is None
    _assert_bitwise_equal(params, init_params(cfg, jax.random.key(3)))
    cfg16, params16, _ = load_model("tiny-deepseek-v3", dtype="bfloat16", seed=3)
    assert cfg16.dtype == "bfloat16" and params16["embed"].dtype == jax.numpy.bfloat16
    moe16 = params16["layers"][1]["moe"]
    assert moe16["router_bias"].dtype == moe16["router"].dtype == np.float32  # specs say f32


def test_load_dtype_override(tmp_path):
    hf_dir = os.path.join(FIXTURES, "deepseek_v3")
    cfg, params = convert_hf_to_orbax(hf_dir, str(tmp_path / "o"))
    assert cfg.dtype == "float32"
    for source in (hf_dir, str(tmp_path / "o")):
        cfg16, p16, _ = load_model(source, dtype="bfloat16")
        assert cfg16 == cfg.replace(dtype="bfloat16")
        assert p16["layers"][1]["attn"]["wkv_b"].dtype == jax.numpy.bfloat16
        assert p16["layers"][1]["moe"]["router_bias"].dtype == np.float32
        # transformers keeps DeepSeek-V3's gate.weight in float32: the fixture's f32 values.
        router = np.asarray(p16["layers"][1]["moe"]["router"])
        assert router.dtype == np.float32
        assert router.tobytes() == np.asarray(params["layers"][1]["moe"]["router"]).tobytes()
        want = np.asarray(params["embed"]).astype(jax.numpy.bfloat16)
        assert np.asarray(p16["embed"]).tobytes() == want.tobytes()


def test_host_load_keeps_every_array_on_the_host(tmp_path):
    """host=True (what LLM asks for on a mesh): numpy leaves, equal to the placed load."""
    hf_dir = os.path.join(FIXTURES, "deepseek_v3")
    convert_hf_to_orbax(hf_dir, str(tmp_path / "o"))
    for source in (hf_dir, str(tmp_path / "o"), "tiny-deepseek-v3"):
        _, host, _ = load_model(source, host=True)
        _, placed, _ = load_model(source)
        assert all(type(x) is np.ndarray for x in jax.tree.leaves(host)), source
        assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(placed)), source
        _assert_bitwise_equal(host, placed)


@pytest.mark.parametrize("model", ["tiny-lama", "deepseek_v3"])
def test_unknown_preset_lists_presets(model):
    with pytest.raises(ValueError, match="unknown preset") as e:
        load_model(model)
    assert model in str(e.value) and all(name in str(e.value) for name in PRESETS)


def test_load_preset_config_and_dtype_auto():
    cfg = get_preset("tiny-llama")
    assert model_config("tiny-llama") == model_config("tiny-llama", "auto") == cfg
    assert model_config("tiny-llama", "bfloat16") == cfg.replace(dtype="bfloat16")
    _, params, _ = load_model("tiny-llama", dtype="auto")
    assert params["embed"].dtype == np.float32


def test_a_preset_name_wins_over_a_same_named_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-llama").mkdir()  # an empty directory: not a model
    assert model_config("tiny-llama") == get_preset("tiny-llama")
    with pytest.raises(ValueError, match="neither config.json"):
        model_config("./tiny-llama")


def test_home_relative_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # a path taken literally lands here, not in the repo
    hf_dir = _copy_fixture(tmp_path, "llama")
    assert model_config("~/llama") == model_config(hf_dir)
    cfg, params = convert_hf_to_orbax("~/llama", "~/orbax")
    assert (tmp_path / "orbax" / CONFIG_FILE).is_file() and load_model("~/orbax")[0] == cfg
    got_cfg, got = restore_params("~/orbax")
    assert got_cfg == cfg
    _assert_bitwise_equal(got, params)


def test_load_model_takes_the_config_read_before(monkeypatch):
    hf_dir = os.path.join(FIXTURES, "llama")
    loads = {m: (model_config(m), load_model(m)) for m in ("tiny-llama", hf_dir)}

    def no_reading(*args, **kwargs):
        raise AssertionError("the config was read again")

    monkeypatch.setattr("models.load.model_config", no_reading)
    monkeypatch.setattr("models.load._dir_config", no_reading)
    for model, (cfg, (want_cfg, want, _)) in loads.items():
        got_cfg, got, _ = load_model(model, cfg=cfg)
        assert got_cfg == want_cfg
        _assert_bitwise_equal(got, want)


def test_summary():
    cfg = get_preset("tiny-llama")
    params = init_params(cfg, jax.random.key(0))
    total = sum(x.size for x in jax.tree.leaves(params))  # dense: every param is active
    want = f"({total / 1e6:.2f}M active), float32, {4 * total / 1e6:.1f} MB"
    assert summary(cfg, params) == f"llama, 2 layers, {total / 1e6:.2f}M params {want}"
    # 294,096 params; each of the 2 MoE layers leaves 14 of its 16 experts (3 * 64 * 24 params
    # each) idle: 165,072 active. bfloat16 but the two router biases (16 float32 each).
    cfg, params, _ = load_model("tiny-deepseek-v3", dtype="bfloat16")
    assert summary(cfg, params) == (
        "deepseek_v3, 3 layers, 0.29M params (0.17M active), bfloat16, 0.6 MB"
    )


@pytest.mark.parametrize(
    "model", ["./no/such/dir", "~/no_such_model_dir", "no/such", ".no_such_dir", "~no_such_user"]
)
def test_missing_path_names_it(model):
    with pytest.raises(FileNotFoundError, match=model):
        load_model(model)


def test_not_a_model_dir(tmp_path):
    with pytest.raises(ValueError, match="neither config.json"):
        load_model(str(tmp_path))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        load_model(str(tmp_path / "f.txt"))


# ---- bad HF checkpoints: each refusal names the tensor or path, then a good load still works --
def _drop_tensor(d: str) -> str:
    name = "model.layers.1.mlp.down_proj.weight"
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    del tensors[name]
    save_file(tensors, path)
    return name


def _reshape_tensor(d: str) -> str:
    name = "model.layers.0.self_attn.k_proj.weight"
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    tensors[name] = tensors[name][:-8]
    save_file(tensors, path)
    return name


def _truncate_file(d: str) -> str:
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return path


def _unknown_model_type(d: str) -> str:
    path = os.path.join(d, "config.json")
    with open(path) as f:
        hf = json.load(f)
    with open(path, "w") as f:
        json.dump({**hf, "model_type": "t5"}, f)
    return "t5"


def _drop_shard(d: str) -> str:
    path = os.path.join(d, "model-00002-of-00002.safetensors")
    os.remove(path)
    return path


def _index_weight_map_list(d: str) -> str:
    path = os.path.join(d, "model.safetensors.index.json")
    with open(path) as f:
        index = json.load(f)
    with open(path, "w") as f:
        json.dump({**index, "weight_map": sorted(index["weight_map"])}, f)
    return "model.safetensors.index.json"


def _tensor_in_two_shards(d: str) -> str:
    """A tensor of shard 1 also stored (zeroed) in shard 2: which one holds the weights?"""
    first = os.path.join(d, "model-00001-of-00002.safetensors")
    second = os.path.join(d, "model-00002-of-00002.safetensors")
    name = sorted(load_file(first))[0]
    tensors = load_file(second)
    tensors[name] = np.zeros_like(load_file(first)[name])
    save_file(tensors, second)
    return name


BAD = {
    "missing_tensor": ("llama", _drop_tensor, ValueError),
    "wrong_shape": ("llama", _reshape_tensor, ValueError),
    "truncated_file": ("llama", _truncate_file, ValueError),
    "unknown_model_type": ("llama", _unknown_model_type, ValueError),
    "missing_shard": ("deepseek_v3", _drop_shard, FileNotFoundError),
    "malformed_index": ("deepseek_v3", _index_weight_map_list, ValueError),
    "tensor_in_two_shards": ("deepseek_v3", _tensor_in_two_shards, ValueError),
}


@pytest.fixture(scope="module")
def good_llama():
    return load_model(os.path.join(FIXTURES, "llama"))


@pytest.mark.parametrize("case", list(BAD))
def test_bad_checkpoint_is_refused_whole(tmp_path, case, good_llama):
    arch, corrupt, error = BAD[case]
    bad_dir = _copy_fixture(tmp_path, arch)
    named = corrupt(bad_dir)
    with pytest.raises(error) as e:
        load_model(bad_dir)
    assert named in str(e.value)
    # The converter refuses the same way and leaves no half-written output behind.
    out_dir = tmp_path / "out"
    with pytest.raises(error, match=named):
        convert_hf_to_orbax(bad_dir, str(out_dir))
    assert not out_dir.exists()
    # Nothing was half-loaded: a good load right after gives the full, correct params.
    cfg, params, _ = load_model(os.path.join(FIXTURES, "llama"))
    assert cfg == good_llama[0]
    _assert_bitwise_equal(params, good_llama[1])


def test_an_engine_from_an_orbax_checkpoint_compiles_each_step_shape_once(tmp_path):
    """Restored params used to be committed device arrays: the KV the first step returned was
    committed too, and the next call of the same shape compiled again (3 against 2, and
    scripts/generate timed that compile as generation)."""
    out_dir = str(tmp_path / "orbax")
    convert_hf_to_orbax(os.path.join(FIXTURES, "llama"), out_dir)
    llm = LLM(model=out_dir, page_size=8, num_pages=32, max_model_len=64)
    counts = []
    for _ in range(3):
        llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=4))
        counts.append(llm.stats()["num_compiles"])
    assert counts[0] == counts[1] == counts[2], counts


def test_every_preset_config_survives_the_orbax_json_round_trip():
    """An orbax checkpoint stores its ModelConfig as JSON (tuples as lists): every field of
    every preset, the sliding-window ones included, comes back equal."""
    for name in PRESETS:
        cfg = get_preset(name)
        stored = json.loads(json.dumps(config_to_dict(cfg)))
        assert config_from_dict(stored) == cfg, name
    windowed = get_preset("tiny-qwen2-sliding")
    assert windowed.full_attention_layers and windowed.sliding_window


def test_load_weights_serves_other_weights_of_the_model_in_place(tmp_path):
    """LLM.load_weights (an RL trainer's weight sync): an orbax checkpoint of other weights
    for the same config, the original directory again, a params tree: each time the tokens
    and logprobs are bitwise those of an engine built on those weights, and the prefix cache
    starts empty. Refused while requests are unfinished, or for another config (naming its
    fields) or a tree of other tensors, before anything changes."""
    llama = os.path.join(FIXTURES, "llama")
    with open(os.path.join(llama, "reference.json")) as f:
        ref = json.load(f)
    shape = dict(page_size=8, num_pages=32, max_model_len=64)  # the test above's programs
    llm = LLM(model=llama, enable_prefix_caching=True, **shape)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    first = llm.generate(ref["prompts"], params)
    assert [o.token_ids for o in first] == [t[:8] for t in ref["greedy_tokens"]]
    rng = np.random.default_rng(0)
    other = jax.tree.map(
        lambda x: np.asarray(x) + rng.normal(0, 0.05, x.shape).astype(x.dtype), llm.params
    )
    save_params(tmp_path / "other", other, llm.config)
    want = LLM(model=str(tmp_path / "other"), **shape).generate(ref["prompts"], params)
    assert [o.token_ids for o in want] != [o.token_ids for o in first]

    def same(outs, expected):
        for out, exp in zip(outs, expected, strict=True):
            assert out.token_ids == exp.token_ids
            assert np.asarray(out.logprobs).tobytes() == np.asarray(exp.logprobs).tobytes()

    assert llm.stats()["prefix_cache_pages"] > 0
    compiles = llm.stats()["num_compiles"]
    llm.load_weights(str(tmp_path / "other"))
    assert llm.stats()["prefix_cache_pages"] == 0  # pages of the old weights' KV
    same(llm.generate(ref["prompts"], params), want)
    llm.load_weights(llama)
    same(llm.generate(ref["prompts"], params), first)
    llm.load_weights(other)
    same(llm.generate(ref["prompts"], params), want)
    assert llm.stats()["num_compiles"] == compiles  # the same programs serve new weights

    llm.add_request(ref["prompts"][0], params, request_id="busy")
    with pytest.raises(ValueError, match="load_weights: requests are unfinished"):
        llm.load_weights(llama)
    llm.abort("busy")
    llm.step()
    with pytest.raises(ValueError, match="its config differs from the served .* in model_type="):
        llm.load_weights("tiny-qwen3")
    with pytest.raises(ValueError, match="weights: tensors missing"):
        llm.load_weights({"embed": other["embed"]})
    llm.reset_prefix_cache()  # (a hit computes less of a prompt: other bits, same weights)
    same(llm.generate(ref["prompts"], params), want)  # nothing changed


def test_sleep_frees_the_weights_and_cache_and_wake_up_brings_them_back():
    """LLM.sleep / wake_up (vLLM's sleep mode): level 1 frees the device buffers of the
    weights and the KV cache (the bytes of live arrays fall by theirs) and wake_up restores
    the same answers bitwise with the compiled steps; level 2 needs load_weights after."""
    llama = os.path.join(FIXTURES, "llama")
    with open(os.path.join(llama, "reference.json")) as f:
        prompts = json.load(f)["prompts"]
    llm = LLM(model=llama, page_size=8, num_pages=32, max_model_len=64)  # the programs above
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    want = llm.generate(prompts, params)
    compiles = llm.stats()["num_compiles"]
    held = jax.tree.leaves(llm.params) + jax.tree.leaves(llm._kv)
    live = sum(x.nbytes for x in jax.live_arrays())
    llm.sleep()
    assert llm.is_sleeping() and all(x.is_deleted() for x in held)
    assert live - sum(x.nbytes for x in jax.live_arrays()) >= sum(x.nbytes for x in held)
    for call, match in (
        (lambda: llm.generate(prompts, params), "the engine is asleep"),
        (llm.sleep, "asleep already"),
        (lambda: llm.load_weights(llama), "asleep"),
    ):
        with pytest.raises(ValueError, match=match):
            call()

    def check(outs):
        for out, exp in zip(outs, want, strict=True):
            assert out.token_ids == exp.token_ids
            assert np.asarray(out.logprobs).tobytes() == np.asarray(exp.logprobs).tobytes()

    llm.wake_up()
    check(llm.generate(prompts, params))
    assert llm.stats()["num_compiles"] == compiles
    llm.sleep(level=2)
    llm.wake_up()
    with pytest.raises(ValueError, match="load_weights first"):
        llm.generate(prompts, params)
    llm.load_weights(llama)
    check(llm.generate(prompts, params))
    llm.add_request(prompts[0], params)
    with pytest.raises(ValueError, match="sleep: requests are unfinished"):
        llm.sleep()
    with pytest.raises(ValueError, match="level=3: must be 1 or 2"):
        llm.sleep(level=3)
