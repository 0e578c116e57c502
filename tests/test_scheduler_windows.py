"""Scheduler with sliding windows: pages given back behind a window, admission by the pages
a window spans, and a hybrid model's second pool (the fake device of test_scheduler.py
checks every KV read)."""

import pytest
from test_scheduler import EOS, FakeDevice, make_seq, reference, run_async, step

from engine.kv_pages import PageManager
from engine.scheduler import Scheduler


class PeakPages(PageManager):
    """A PageManager that records the most pages it ever had allocated at once."""

    peak = 0

    def allocate(self, n: int) -> list[int]:
        pages = super().allocate(n)
        self.peak = max(self.peak, self.num_total - self.num_free)
        return pages


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_sliding_window_request_runs_in_the_pages_its_window_needs(asynchronous):
    """Pages of 4, a 6-token window, a 16-token budget: a step's chunk and the 5 keys before
    it span at most 21 positions, so 1 + ceil(20 / 4) = 6 pages (by hand). A pool of 6 runs
    40-token requests alone to their reference output, whatever their prompt's alignment,
    and some step holds all 6; a pool of 5 refuses them up front."""
    peak = 0
    for n_prompt in range(1, 31):
        seq = make_seq(f"p{n_prompt}", n_prompt, max_tokens=40 - n_prompt + 1)
        pm = PeakPages(6, 4)
        sched = Scheduler(pm, 16, 4, 41, eos_token_ids=(EOS,), sliding_window=6)
        dev = FakeDevice(4, window=6)
        sched.add(seq)
        if asynchronous:
            run_async(sched, dev)
        else:
            for _ in range(100):
                if not sched.has_unfinished():
                    break
                step(sched, dev)
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 41, window=6)
        assert seq.num_preemptions == 0 and pm.num_free == 6
        peak = max(peak, pm.peak)
    assert peak == 6
    small = Scheduler(PageManager(5, 4), 16, 4, 41, sliding_window=6)
    with pytest.raises(ValueError, match=r"\(sliding window 6\) = 6 pages, but num_pages=5"):
        small.check_fits(30, 11)
    small.check_fits(4, 1)  # 4 KV tokens: one page, window or not


def test_a_hybrid_models_window_pool_is_checked_like_the_main_one():
    """A request must fit both pools: the full-attention layers' (all its pages) and the
    windowed layers' (the pages under a chunk and its window: 6 here, as above)."""
    sched = Scheduler(
        PageManager(10, 4), 16, 4, 41, sliding_window=6, window_pages=PageManager(5, 4)
    )
    with pytest.raises(ValueError, match=r"\(sliding window 6\) = 6 pages, but window pool's"):
        sched.check_fits(30, 10)  # 39 KV tokens: 10 pages in the main pool fit
    with pytest.raises(ValueError, match=r"= 11 pages, but num_pages=10"):
        sched.check_fits(41, 1)  # the main pool holds every page
    sched.check_fits(20, 1)  # 20 KV tokens: 5 pages in each
    with pytest.raises(ValueError, match="window_pages: a pool for windowed layers needs"):
        Scheduler(PageManager(10, 4), 16, 4, 41, window_pages=PageManager(5, 4))
    with pytest.raises(ValueError, match=r"window_pages.page_size=8: must equal .* 4"):
        Scheduler(PageManager(10, 4), 16, 4, 41, sliding_window=6, window_pages=PageManager(5, 8))
