"""Pallas KV write against its `_ref` twin (exact): padding and out-of-pool slots dropped."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import write_kv, write_kv_ref

ON_GPU = jax.default_backend() == "gpu"
MODES = [
    pytest.param(True, id="interpret"),
    pytest.param(False, id="gpu", marks=pytest.mark.gpu),
]


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize(
    "row_shape, dtype",
    [((2, 40), jnp.float32), ((40,), jnp.bfloat16)],  # GQA [K, Dh] (width 80); MLA latent
    ids=["gqa_d40_f32", "mla_bf16"],
)
def test_write_kv_matches_ref(row_shape, dtype, interpret):
    if not interpret and not ON_GPU:
        pytest.skip("needs a GPU")
    num_pages, page_size, num_tokens = 6, 8, 12
    write = jax.jit(functools.partial(write_kv, interpret=interpret))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        pages = jnp.asarray(rng.standard_normal((num_pages, page_size, *row_shape)), dtype)
        new = jnp.asarray(rng.standard_normal((num_tokens, *row_shape)), jnp.float32)
        slots = rng.permutation(num_pages * page_size)[:num_tokens].astype(np.int32)
        slots[[1, 5]] = -1  # padding tokens
        slots[7] = num_pages * page_size + 3  # past the pool: dropped, like the XLA path
        out = write(pages, new, jnp.asarray(slots))
        ref = write_kv_ref(pages, new, jnp.asarray(slots))
        assert out.dtype == dtype
        np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32))
        keep = (slots >= 0) & (slots < num_pages * page_size)
        flat = np.asarray(out, np.float32).reshape(num_pages * page_size, *row_shape)
        np.testing.assert_array_equal(flat[slots[keep]], np.asarray(new[keep].astype(dtype)))


def test_write_kv_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="row shape"):
        write_kv(jnp.zeros((2, 8, 4)), jnp.zeros((3, 5)), jnp.zeros(3, jnp.int32))


@pytest.mark.gpu
def test_a_one_token_write_updates_the_donated_pool_in_place():
    # The kernel's twin of test_paged_attention's one-token step: it writes through a flat
    # view of the pages (input_output_aliases), and a copy of the donated pool would cost a
    # whole pool read and write per layer per step. Compiled for the GPU (copies are added
    # when XLA compiles, so interpret mode on CPU cannot show them).
    if not ON_GPU:
        pytest.skip("needs a GPU")
    num_pages, page_size = 2048, 16
    pool = jnp.zeros((num_pages, page_size, 8, 128), jnp.bfloat16)
    write = jax.jit(write_kv, donate_argnums=0)
    text = write.lower(pool, jnp.ones((1, 8, 128)), jnp.array([17], jnp.int32)).compile().as_text()
    shapes = (f"[{num_pages},", f"[{num_pages * page_size},")
    copies = [
        line for line in text.splitlines() if " copy(" in line and any(s in line for s in shapes)
    ]
    assert copies == []
