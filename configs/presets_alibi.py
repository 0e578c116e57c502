"""The ALiBi families' presets (configs/hf_alibi.py, configs/hf_falcon.py): the tiny-<arch>
shapes of their fixtures (tests/fixtures/hf_fixture_archs_alibi.py) and the released models'
shapes, each as its reader makes it of the release's config (tests/test_alibi.py)."""

from __future__ import annotations

from configs.hf_alibi import bloom_slopes, mpt_slopes
from configs.hf_falcon import falcon_slopes
from configs.model_config import ModelConfig
from configs.preset_shapes import at_release_shapes

ALIBI: dict[str, ModelConfig] = {}


# tests/fixtures/bloom: 3 layers 48 wide, 6 heads of 8 with BLOOM's slopes, LayerNorms with
# biases (the embeddings' too), biased q/k/v per head, a 192-wide tanh-GELU MLP, tied.
ALIBI["tiny-bloom"] = ModelConfig(
    name="tiny-bloom",
    model_type="bloom",
    vocab_size=512,
    hidden_size=48,
    num_layers=3,
    num_heads=6,
    num_kv_heads=6,
    head_dim=8,
    intermediate_size=192,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_ids=(2,),
    alibi_slopes=bloom_slopes(6),
    embed_norm=True,
    nope_layers=(0, 1, 2),
    attention_bias=True,
    o_proj_bias=True,
    mlp_bias=True,
    norm_kind="layer",
    norm_bias=True,
    mlp_act="gelu",
)
# tests/fixtures/mpt: tiny-bloom's shapes with MPT's slopes, weight-only LayerNorms (none on
# the embeddings), no biases, a 192-wide erf-GELU MLP.
ALIBI["tiny-mpt"] = ALIBI["tiny-bloom"].replace(
    name="tiny-mpt",
    model_type="mpt",
    alibi_slopes=mpt_slopes(6, 8),
    embed_norm=False,
    attention_bias=False,
    o_proj_bias=False,
    mlp_bias=False,
    norm_bias=False,
    mlp_act="gelu_exact",
)
# tests/fixtures/falcon_rw: 3 layers 64 wide, 8 heads of 8 with Falcon's slopes (BLOOM's in
# bfloat16, over sqrt(8)), one block after the other, biases everywhere, a 128-wide erf-GELU
# MLP, tied.
ALIBI["tiny-falcon-rw"] = ALIBI["tiny-bloom"].replace(
    name="tiny-falcon-rw",
    model_type="falcon",
    hidden_size=64,
    num_heads=8,
    num_kv_heads=8,
    intermediate_size=128,
    alibi_slopes=falcon_slopes(8, 8),
    embed_norm=False,
    mlp_act="gelu_exact",
)

# BLOOM's releases (BigScience: 250,880 tokens; its config.json holds no position limit, 2,048
# is its training length): 560M, 1B7, 7B1 and the 176B model.
for _name, (_d, _layers, _heads) in {
    "bloom-560m": (1024, 24, 16),
    "bloom-1b7": (2048, 24, 16),
    "bloom-7b1": (4096, 30, 32),
    "bloom": (14336, 70, 112),
}.items():
    ALIBI[_name] = at_release_shapes(
        ALIBI["tiny-bloom"], _name, 250880, _d, _layers, _heads, alibi_slopes=bloom_slopes(_heads)
    )
# MosaicML's MPT-7B (2,048 positions) and MPT-30B (8,192), 50,432 tokens, eos 0.
for _name, (_d, _layers, _heads, _positions) in {
    "mpt-7b": (4096, 32, 32, 2048),
    "mpt-30b": (7168, 48, 64, 8192),
}.items():
    ALIBI[_name] = at_release_shapes(
        ALIBI["tiny-mpt"],
        _name,
        50432,
        _d,
        _layers,
        _heads,
        alibi_slopes=mpt_slopes(_heads, 8),
        max_position_embeddings=_positions,
        bos_token_id=0,
        eos_token_ids=(0,),
    )
# TII's Falcon-RW-1B (50,304 tokens) and -7B (65,024), trained on RefinedWeb alone.
for _name, (_v, _d, _layers, _heads) in {
    "falcon-rw-1b": (50304, 2048, 24, 32),
    "falcon-rw-7b": (65024, 4096, 36, 64),
}.items():
    ALIBI[_name] = at_release_shapes(
        ALIBI["tiny-falcon-rw"], _name, _v, _d, _layers, _heads,
        alibi_slopes=falcon_slopes(_heads, _d // _heads),
    )  # fmt: skip
