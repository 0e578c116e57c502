"""The scheduler tests' fake model and drivers (tests/test_scheduler.py and the files that
schedule on it): a fake device keeps a paged "KV cache" of (request, life, position, token)
slots and produces the next token from the tokens it reads back through the page table, so
a wrong page table, position, or a reused page that still belongs to someone else changes
the output or fails an assertion; `reference` is what plain greedy generation gives.
"""

import collections
import dataclasses
from dataclasses import dataclass

from engine.kv_pages import PageManager
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence

VOCAB = 50
EOS = 0


@dataclass(frozen=True)
class Params:
    max_tokens: int | None = 16
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    min_tokens: int = 0


def make_seq(rid: str, n_prompt: int, base: int = 1, **params) -> Sequence:
    """A request whose step-by-step schedule does not depend on the fake model's tokens."""
    params.setdefault("ignore_eos", True)
    return Sequence(rid, tuple(range(base, base + n_prompt)), Params(**params))


def next_token(context: list[int]) -> int:
    """The fake model: a deterministic function of the whole context."""
    return (sum((i + 1) * t for i, t in enumerate(context)) * 40503 + len(context)) % VOCAB


def reference(
    seq: Sequence, max_model_len: int, eos=(EOS,), window: int | None = None, hybrid=False
) -> tuple[list[int], str]:
    """What the sequence must produce: plain greedy generation, no batching or paging (with
    a sliding window, the fake model sees the last `window` tokens; `hybrid`: it has a
    full-attention layer and a windowed one, and adds what each makes of its keys)."""
    params = seq.sampling_params
    tokens, out = list(seq.prompt_token_ids), []
    while True:
        tok = next_token(tokens if window is None else tokens[-window:])
        if hybrid:
            tok = (tok + next_token(tokens)) % VOCAB
        tokens.append(tok)
        out.append(tok)
        if (tok in eos and not params.ignore_eos) or tok in params.stop_token_ids:
            return out, "stop"
        if len(out) == params.max_tokens or len(tokens) >= max_model_len:
            return out, "length"


class FakeDevice:
    """Writes each step's tokens into the slots its page table names, then reads back every
    key its queries see (all earlier ones, or a sliding window's) and checks that this
    sequence wrote each of them in its current life."""

    def __init__(self, page_size: int, window: int | None = None):
        self.page_size = page_size
        self.window = window
        self.cache: dict[int, tuple[str, int, int, int]] = {}
        self.life: collections.Counter[str] = collections.Counter()

    def _slot(self, page_ids: tuple[int, ...], pos: int) -> int:
        return page_ids[pos // self.page_size] * self.page_size + pos % self.page_size

    def run(self, out: SchedulerOutput) -> dict[str, tuple[int, float]]:
        for rid in out.preempted:  # its old KV is dead: reads must see the recompute
            self.life[rid] += 1
        sampled = {}
        for it in out.items:
            rid, life = it.request_id, self.life[it.request_id]
            for i, tok in enumerate(it.token_ids):
                pos = it.start_pos + i
                self.cache[self._slot(it.page_ids, pos)] = (rid, life, pos, tok)
            context = []
            first = 0 if self.window is None else max(0, it.start_pos + 1 - self.window)
            for pos in range(first, it.kv_len_after):
                owner, owner_life, written_pos, tok = self.cache[self._slot(it.page_ids, pos)]
                assert (owner, owner_life, written_pos) == (rid, life, pos), "KV leak"
                context.append(tok)
            if self.window is not None:  # the last query's keys
                context = context[-self.window :]
            if it.sample:
                tok = next_token(context)
                sampled[rid] = (tok, -tok / 100)
        return sampled


class HybridDevice:
    """A fake hybrid model: a full-attention layer reads every key through each item's
    page_ids and a windowed layer the last `window` through its window_page_ids (a pool of
    their own); each checks that the sequence wrote those keys in its current life."""

    def __init__(self, page_size: int, window: int):
        self.full, self.windowed = FakeDevice(page_size), FakeDevice(page_size, window)

    def run(self, out: SchedulerOutput) -> dict[str, tuple[int, float]]:
        full = self.full.run(out)
        items = tuple(it._replace(page_ids=it.window_page_ids) for it in out.items)
        windowed = self.windowed.run(dataclasses.replace(out, items=items))
        return {
            rid: ((tok + windowed[rid][0]) % VOCAB, -((tok + windowed[rid][0]) % VOCAB) / 100)
            for rid, (tok, _) in full.items()
        }


def workload_scheduler(window, page_size=4):
    """The random workloads' scheduler and device: full attention in a pool of 12 pages (a
    40-token sequence needs 10), a 6-token sliding window on every layer in a pool of 6 (a
    16-token chunk and the 5 keys before it span 21 positions: 1 + ceil(20 / 4) = 6 pages),
    or "hybrid": a full-attention layer in 40 pages (never short: 4 sequences of 10) and a
    windowed one in 6 of its own, which alone then makes every preemption."""
    hybrid = window == "hybrid"
    num_pages = {None: 12, 6: 6, "hybrid": 40}[window]
    sched = Scheduler(
        PageManager(num_pages, page_size),
        16,
        4,
        40,
        eos_token_ids=(EOS,),
        sliding_window=6 if hybrid else window,
        window_pages=PageManager(6, page_size) if hybrid else None,
    )
    dev = HybridDevice(page_size, 6) if hybrid else FakeDevice(page_size, window)
    return sched, dev


def step(sched: Scheduler, dev: FakeDevice):
    out = sched.schedule()
    return out, sched.update(out, dev.run(out)) if out.items else []


def summary(out: SchedulerOutput):
    """(request_id, start_pos, n_tokens, page_ids, sample) per item."""
    return [(i.request_id, i.start_pos, len(i.token_ids), i.page_ids, i.sample) for i in out.items]


def detokenize(ids) -> str:
    """A stand-in tokenizer's text: token t reads "<t>"."""
    return "".join(f"<{t}>" for t in ids)


def new_scheduler(num_pages, page_size, *seqs, budget=64, max_num_seqs=8, max_model_len=64):
    """A scheduler with `seqs` added in order."""
    pm = PageManager(num_pages, page_size)
    sched = Scheduler(
        pm, budget, max_num_seqs, max_model_len, eos_token_ids=(EOS,), detokenize=detokenize
    )
    for seq in seqs:
        sched.add(seq)
    return sched


def run_fed(dev: FakeDevice, out: SchedulerOutput, prev) -> dict[str, tuple[int, float]]:
    """Run a step whose placeholders read the tokens `prev` = (step, sampled) produced,
    as the device does (steps execute in order, so `prev` already ran)."""
    items = []
    for it in out.items:
        if it.feed_index >= 0:
            assert it.token_ids == (0,) and it.sample
            prev_out, prev_sampled = prev
            tok = prev_sampled[prev_out.items[it.feed_index].request_id][0]
            it = it._replace(token_ids=(tok,))
        items.append(it)
    return dev.run(dataclasses.replace(out, items=tuple(items)))


def run_async(sched: Scheduler, dev: FakeDevice, on_step=None) -> int:
    """Drive `sched` like the async engine: dispatch N+1 before updating N."""
    in_flight, num_steps = None, 0
    while sched.has_unfinished():
        if in_flight is None:
            out = sched.schedule()
            if not out.items:
                continue
            in_flight = (out, run_fed(dev, out, None))
        prev, in_flight = in_flight, None
        nxt = sched.schedule_ahead()
        if nxt is not None:
            in_flight = (nxt, run_fed(dev, nxt, prev))
        sched.update(*prev)
        num_steps += 1
        if on_step is not None:
            on_step(num_steps)
        assert num_steps < 3000, "no progress"
    return num_steps


def run_to_the_end(sched: Scheduler, dev: FakeDevice, seqs, ahead: bool, max_model_len: int):
    """Add `seqs`, run them all (step by step, or with each step built ahead) and check each
    one's output against the plain reference."""
    for seq in seqs:
        sched.add(seq)
    if ahead:
        run_async(sched, dev)
    else:
        while sched.has_unfinished():
            step(sched, dev)
    for seq in seqs:
        assert (seq.output_token_ids, "length") == reference(seq, max_model_len)


def oracle_drafts(fulls: dict, vocab_size: int):
    """An NgramProposer.drafts stand-in (monkeypatched onto its class) that drafts each
    sequence's known greedy continuation (`fulls`: prompt tuple -> prompt + tokens) with one
    draft spoiled at a place that rotates call by call (0 to 3 kept a step)."""
    calls = iter(range(10**6))

    def drafts(self, seq, cap):
        got = list(fulls[tuple(seq.prompt_token_ids)][seq.num_tokens : seq.num_tokens + cap])
        spoil = next(calls) % 4  # (3: none spoiled)
        if spoil < len(got):
            got[spoil] = (got[spoil] + 1) % vocab_size
        return tuple(got)

    return drafts
