"""Step shape buckets (engine/runner.Buckets): every batch the scheduler can form lands in
one of `pairs`, each pair is used, and there are few of them. Page tables carried across
steps (engine/runner.PageRows) give what converting them afresh gives."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.runner import SEQ_FLOOR, TOKEN_FLOOR, Buckets, PageRows, pack
from engine.sampling_params import SamplingParams


def _walk(buckets: Buckets, max_tokens: int, max_seqs: int) -> set[tuple[int, int]]:
    """Picks every (tokens, sequences) batch a step may hold: 1 <= sequences <= tokens."""
    seen = set()
    for n in range(1, max_tokens + 1):
        for s in range(1, min(n, max_seqs) + 1):
            t_pad, s_pad = buckets.pick(n, s)
            assert t_pad & (t_pad - 1) == 0 and s_pad & (s_pad - 1) == 0, (n, s)
            assert n <= t_pad <= buckets.max_tokens and s <= s_pad <= min(t_pad, buckets.max_seqs)
            # Padding stays under 2x, except up to the floors.
            assert t_pad < 2 * n or t_pad <= max(TOKEN_FLOOR, buckets.min_rows), (n, s)
            assert s_pad < 2 * s or s_pad <= max(SEQ_FLOOR, buckets.min_rows), (n, s)
            if n == s:  # decodes only: a bucket the step can tell as such (T <= S)
                assert t_pad <= s_pad, (n, s)
            seen.add((t_pad, s_pad))
    return seen


@pytest.mark.parametrize(
    "max_tokens, max_seqs, min_rows",
    # (16, 4, 64): engine limits below the batch-invariant floor still pad to min_rows.
    [(64, 8, 1), (64, 16, 1), (200, 64, 1), (100, 3, 1), (256, 64, 64), (32, 4, 8), (16, 4, 64)],
)
def test_every_batch_lands_in_a_bucket_and_every_bucket_is_reachable(
    max_tokens, max_seqs, min_rows
):
    buckets = Buckets(max_tokens, max_seqs, pages_per_seq=4, min_rows=min_rows)
    assert _walk(buckets, max_tokens, max_seqs) == set(buckets.pairs)
    assert len(buckets.pairs) == len(set(buckets.pairs))


def test_the_default_engine_limits_give_30_buckets():
    # T >= 8 (runner.TOKEN_FLOOR): T = 8 has S = 8, T = 16 has S in 8, 16, T = 32 three,
    # and each of T = 64 .. 2048 (6 sizes) S in 8, 16, 32, 64. Without the floors it was 63
    # pairs; with the S floor alone 33 (T = 1, 2, 4 with S = T too).
    buckets = Buckets(2048, 64, pages_per_seq=1)
    assert len(buckets.pairs) == 1 + 2 + 3 + 6 * 4
    assert buckets.pick(1, 1) == buckets.pick(5, 2) == buckets.pick(8, 8) == (8, 8)
    # A smaller budget is its own floor; given token_buckets are taken as they are.
    assert Buckets(4, 4, pages_per_seq=1).pairs == [(4, 4)]
    assert Buckets(64, 2, pages_per_seq=1).pick(2, 2) == (2, 2)  # at most the largest S
    assert Buckets(64, 8, 1, token_buckets=(1, 64)).pick(1, 1) == (1, 1)
    assert buckets.pick(100, 1) == (128, 8)
    assert buckets.pick(100, 9) == (128, 16)


@pytest.mark.parametrize(
    "sizes, max_tokens, max_seqs, min_rows",
    [((16,), 16, 4, 1), ((8, 64, 2048), 2048, 64, 1), ((64, 4), 40, 8, 1), ((16, 32), 32, 4, 16)],
)
def test_given_token_buckets_are_the_only_token_sizes(sizes, max_tokens, max_seqs, min_rows):
    """token_buckets: every batch lands in the smallest given size that holds its tokens,
    with the sequences padded as the default sizes pad them; one size, one program."""
    buckets = Buckets(max_tokens, max_seqs, 4, min_rows=min_rows, token_buckets=sizes)
    assert buckets.token_sizes == sorted(sizes) and buckets.max_tokens == max(sizes)
    seen = set()
    for n in range(1, max_tokens + 1):
        for s in range(1, min(n, max_seqs) + 1):
            t_pad, s_pad = buckets.pick(n, s)
            assert t_pad == min(t for t in sizes if t >= n), (n, s)
            assert s <= s_pad <= min(t_pad, buckets.max_seqs) and s_pad & (s_pad - 1) == 0
            seen.add((t_pad, s_pad))
    assert seen == set(buckets.pairs)
    if len(sizes) == 1 and max_seqs <= SEQ_FLOOR:
        assert buckets.pairs == [(sizes[0], max_seqs)]


@pytest.mark.parametrize(
    "sizes, match",
    [
        ((), "every entry a power of two"),
        ((16, 24), r"\(\[24\]\)"),
        ((0,), "power of two"),
        ((True, 16), "power of two"),
        ("16", "a sequence of powers of two"),
        ((8,), "the largest must be >= max_num_batched_tokens=16"),
        ((4, 16), "each must be >= 8"),
    ],
)
def test_bad_token_buckets_name_the_entry_and_the_limit(sizes, match):
    with pytest.raises(ValueError, match=f"token_buckets=.*{match}"):
        Buckets(16, 4, 4, min_rows=8 if "8" in match else 1, token_buckets=sizes)


def _item(rid: str, page_ids, start_pos: int = 0, num_tokens: int = 1):
    return SimpleNamespace(
        request_id=rid,
        token_ids=(5,) * num_tokens,
        start_pos=start_pos,
        kv_len_after=start_pos + num_tokens,
        page_ids=tuple(page_ids),
        sampling_params=SamplingParams(seed=3),
        num_generated=0,
        feed_index=-1,
    )


def test_page_rows_convert_a_table_once_and_then_only_its_new_pages():
    rows = PageRows()
    a, b = list(range(10, 20)), [3, 1]
    first = rows.rows([_item("a", a), _item("b", b)])
    assert [r.tolist() for r in first] == [a, b] and first[0].dtype == np.int32
    same = rows.rows([_item("a", a), _item("b", b + [4])])
    assert same[0] is first[0]  # unchanged: not converted again
    assert same[1].tolist() == [3, 1, 4]  # grown: the new page appended
    # Pages given back (an undone step ahead), or a preempted sequence's new table.
    assert rows.rows([_item("a", a[:4]), _item("b", [9, 1, 4])])[0].tolist() == a[:4]
    assert rows.rows([_item("b", [9, 1, 4])])[0].tolist() == [9, 1, 4]
    # "a" was not in the last step: its row is dropped and built again.
    again = rows.rows([_item("a", a[:4])])[0]
    assert again.tolist() == a[:4]


def test_pack_with_carried_page_rows_equals_pack_without():
    buckets = Buckets(64, 8, pages_per_seq=16)
    rows = PageRows()
    steps = [
        [_item("a", [7, 2], 20, 1), _item("b", [5], 0, 9)],
        [_item("a", [7, 2], 21, 1), _item("b", [5, 6], 9, 8)],
        [_item("b", [5, 6, 11], 17, 1), _item("a", [0], 0, 3)],  # "a" re-admitted
    ]
    for items in steps:
        fresh, carried = pack(items, 16, buckets), pack(items, 16, buckets, rows)
        for name, want in fresh._asdict().items():
            np.testing.assert_array_equal(getattr(carried, name), want, err_msg=name)


def test_pack_lays_out_a_mixed_step_by_hand():
    # A fed decode at position 20 (pages 7, 2 of 16 tokens) and a 3-token chunk at positions
    # 15..17 that crosses from page 4 into page 9: 4 tokens and 2 sequences, padded to 4 each
    # (a 4-token bucket given: by default T >= runner.TOKEN_FLOOR).
    decode = _item("a", [7, 2], 20, 1)
    decode.feed_index = 3
    decode.sampling_params = SamplingParams(temperature=0.5, seed=11, min_p=0.1)
    chunk = _item("b", [4, 9], 15, 3)
    chunk.token_ids, chunk.num_generated = (101, 102, 103), 2
    batch = pack([decode, chunk], 16, Buckets(64, 8, pages_per_seq=3, token_buckets=(4, 64)))
    expect = dict(
        token_ids=[5, 101, 102, 103],
        positions=[20, 15, 16, 17],
        slot_mapping=[2 * 16 + 4, 4 * 16 + 15, 9 * 16 + 0, 9 * 16 + 1],
        cu_q_lens=[0, 1, 4, 4, 4],
        kv_lens=[21, 18, 0, 0],
        page_table=[[7, 2, 0], [4, 9, 0], [0, 0, 0], [0, 0, 0]],
        sample_index=[0, 3, 0, 0],
        temperature=[0.5, 0.0, 0.0, 0.0],
        top_p=[1.0, 1.0, 1.0, 1.0],
        top_k=[0, 0, 0, 0],
        seed=[11, 3, 0, 0],
        sample_step=[0, 2, 0, 0],
        score_targets=[-1, -1, -1, -1],
        feed_index=[3, -1, -1, -1],
        min_p=np.array([0.1, 0.0, 0.0, 0.0], np.float32),  # padding rows: off
    )
    for name, want in expect.items():
        np.testing.assert_array_equal(getattr(batch, name), want, err_msg=name)
    assert batch.min_p.dtype == np.float32


def test_pack_takes_items_whose_pages_are_exactly_full():
    # kv_len_after == pages * page_size: the last token goes to the last page's last slot.
    items = [_item("a", [3], 0, 16), _item("b", [4, 6], 31, 1)]
    batch = pack(items, 16, Buckets(64, 8, 4))
    assert batch.slot_mapping[:17].tolist() == [3 * 16 + i for i in range(16)] + [6 * 16 + 15]
    assert batch.kv_lens[:2].tolist() == [16, 32]


def test_pack_refuses_an_item_whose_pages_cannot_hold_its_tokens():
    with pytest.raises(ValueError, match=r"items\[1\].page_ids: 1 pages of 16"):
        pack([_item("a", [3], 0, 1), _item("b", [4], 15, 2)], 16, Buckets(64, 8, 4))


def test_pack_lays_out_a_hybrid_models_window_table_by_hand():
    """With window tables, the windowed layers' table and slots come from window_page_ids
    (a pool of their own: ids held and given back independently of page_ids); without,
    the batch has none and window_page_ids are not read."""
    decode = _item("a", [7, 2], 20, 1)
    decode.window_page_ids = (1, 5)  # page 1 is behind its window, still in the table
    chunk = _item("b", [4, 9], 15, 3)
    chunk.window_page_ids = (0, 3)
    buckets = Buckets(64, 8, pages_per_seq=3, window_tables=True, token_buckets=(4, 64))
    rows = PageRows("window_page_ids")
    batch = pack([decode, chunk], 16, buckets, window_rows=rows)
    assert batch.slot_mapping.tolist() == [2 * 16 + 4, 4 * 16 + 15, 9 * 16 + 0, 9 * 16 + 1]
    assert batch.window_slot_mapping.tolist() == [5 * 16 + 4, 0 * 16 + 15, 3 * 16, 3 * 16 + 1]
    assert batch.page_table.tolist()[:2] == [[7, 2, 0], [4, 9, 0]]
    assert batch.window_page_table.tolist() == [[1, 5, 0], [0, 3, 0], [0, 0, 0], [0, 0, 0]]
    chunk.window_page_ids = (0,)  # position 16 and 17 have no page
    with pytest.raises(ValueError, match=r"items\[1\].window_page_ids: 1 pages of 16"):
        pack([decode, chunk], 16, buckets, window_rows=rows)
    plain = pack([decode, chunk], 16, Buckets(64, 8, pages_per_seq=3))
    assert plain.window_page_table is None and plain.window_slot_mapping is None
