"""PageManager: exact page ids, FIFO reuse, reference counts, sizing helpers."""

import ast
import pathlib

import pytest

from engine.kv_pages import (
    OutOfPagesError,
    PageManager,
    pages_for_budget,
    pages_for_tokens,
    window_pool_pages,
)


def test_constructor_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_pages=0"):
        PageManager(0, 16)
    with pytest.raises(ValueError, match="page_size=0"):
        PageManager(4, 0)


def test_allocate_exact_ids_and_counts():
    pm = PageManager(num_pages=5, page_size=4)
    assert (pm.num_total, pm.num_free) == (5, 5)
    assert pm.allocate(3) == [0, 1, 2]
    assert pm.allocate(0) == []
    assert pm.allocate(1) == [3]
    assert pm.num_free == 1
    assert [pm.refcount(p) for p in range(5)] == [1, 1, 1, 1, 0]


def test_allocate_too_many_raises_and_changes_nothing():
    pm = PageManager(num_pages=3, page_size=4)
    pm.allocate(2)
    assert not pm.can_allocate(2)
    assert pm.can_allocate(1)
    with pytest.raises(OutOfPagesError, match="only 1 pages free"):
        pm.allocate(2)
    assert pm.num_free == 1
    assert pm.allocate(1) == [2]
    with pytest.raises(ValueError, match="n=-1"):
        pm.allocate(-1)


def test_free_list_is_fifo():
    pm = PageManager(num_pages=6, page_size=4)
    assert pm.allocate(3) == [0, 1, 2]
    pm.free([2, 1])
    # Never-used pages come before freed ones; freed ones in the order they were freed.
    assert pm.allocate(2) == [3, 4]
    assert pm.allocate(3) == [5, 2, 1]
    assert pm.num_free == 0


def test_shared_page_returns_only_at_refcount_zero():
    pm = PageManager(num_pages=2, page_size=4)
    (page,) = pm.allocate(1)
    pm.incref(page)
    assert pm.refcount(page) == 2
    pm.free([page])
    assert pm.refcount(page) == 1
    assert pm.num_free == 1
    assert pm.allocate(1) == [1]  # the shared page was not handed out again
    pm.free([page])
    assert pm.refcount(page) == 0
    assert pm.num_free == 1
    assert pm.allocate(1) == [0]


def test_bad_free_and_incref_rejected_atomically():
    pm = PageManager(num_pages=3, page_size=4)
    pm.allocate(2)
    with pytest.raises(ValueError, match="page=1: freed 2 time"):
        pm.free([0, 1, 1])
    assert [pm.refcount(p) for p in range(3)] == [1, 1, 0]  # page 0 not freed either
    with pytest.raises(ValueError, match="page=2: is free"):
        pm.incref(2)
    with pytest.raises(ValueError, match=r"page=3: out of range \[0, 3\)"):
        pm.free([3])
    with pytest.raises(ValueError, match="page=-1"):
        pm.incref(-1)


def test_pages_needed():
    pm = PageManager(num_pages=4, page_size=16)
    assert [pm.pages_needed(n) for n in (0, 1, 15, 16, 17, 32, 33)] == [0, 1, 1, 1, 2, 2, 3]
    assert pages_for_tokens(100, 7) == 15
    with pytest.raises(ValueError, match="num_tokens=-1"):
        pm.pages_needed(-1)


def test_ensure_capacity_returns_the_grown_table():
    pm = PageManager(num_pages=4, page_size=16)
    table = pm.ensure_capacity((), 17)
    assert table == (0, 1)
    assert pm.ensure_capacity(table, 32) is table  # fits: the same tuple, nothing allocated
    table = pm.ensure_capacity(table, 33)
    assert table == (0, 1, 2)
    assert pm.num_new_pages(table, 80) == 2
    with pytest.raises(OutOfPagesError):
        pm.ensure_capacity(table, 80)
    assert pm.num_free == 1


def test_pages_for_budget():
    # 4 bytes/token * 16 tokens = 64 bytes per page.
    assert pages_for_budget(1024, 4, 16) == 16
    assert pages_for_budget(64, 4, 16) == 1
    assert pages_for_budget(127, 4, 16) == 1
    with pytest.raises(ValueError, match="budget_bytes=63: holds no KV page; one page needs 64"):
        pages_for_budget(63, 4, 16)
    with pytest.raises(ValueError, match="kv_bytes_per_token=0"):
        pages_for_budget(1024, 0, 16)
    with pytest.raises(ValueError, match="page_size=0"):
        pages_for_budget(1024, 4, 0)


def test_host_modules_do_not_import_jax():
    engine = pathlib.Path(__file__).parent.parent / "engine"
    for name in ("kv_pages.py", "sequence.py", "scheduler.py"):
        roots = set()
        for node in ast.walk(ast.parse((engine / name).read_text())):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                roots.add(node.module.split(".")[0])
        assert not roots & {"jax", "jaxlib", "flax", "numpy"}, (name, roots)


def test_sizing_edges():
    with pytest.raises(ValueError, match="page_size=0"):
        pages_for_tokens(1, 0)
    pm = PageManager(num_pages=4, page_size=4)
    table = tuple(pm.allocate(3))
    # A table already larger than needed (a step taken back by cancel) gains nothing.
    assert pm.num_new_pages(table, 5) == 0
    assert pm.ensure_capacity(table, 5) is table and pm.num_free == 1


def test_window_pool_pages_by_hand():
    # ceil((n (2P + W - 2) + 2B) / P): gpt-oss at the engine's defaults (64 sequences, a
    # 2,048-token budget, pages of 16, a 128-key window): (64 x 158 + 4,096) / 16 = 888.
    assert window_pool_pages(128, 16, 64, 2048) == 888
    assert window_pool_pages(6, 8, 2, 16) == 9  # (2 x 20 + 32) / 8 = 9
    assert window_pool_pages(6, 8, 2, 17) == 10  # 74 / 8 rounds up
    with pytest.raises(ValueError, match="window=0: must be >= 1"):
        window_pool_pages(0, 16, 64, 2048)
    with pytest.raises(ValueError, match="max_num_batched_tokens=0"):
        window_pool_pages(128, 16, 64, 0)
