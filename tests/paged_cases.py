"""Ragged paged steps for the paged-attention tests (tests/test_paged_attention.py): a random
step's sequences, pages and page table (make_batch), its cache rows and new rows (fill_step)."""

import numpy as np

NUM_PAGES = 48
NUM_TOKENS = 40  # padded T
NUM_SEQS = 6  # padded S
MAX_LEN = 72
GARBAGE = 1e4  # stale rows: large but finite, like a previous request's K/V


def make_batch(rng, page_size):
    """A random ragged step: decodes, prefill chunks, empty spans and padding, shuffled pages.

    Returns host arrays plus, per real sequence, (q_len, kv_len, page ids).
    """
    # An odd number of columns (9 or 5), so a block of 2 pages overhangs the table's end.
    max_pages = -(-MAX_LEN // page_size)
    # Lengths on, just before and just after page boundaries, plus random ones.
    boundary = [page_size * m + d for m in range(1, 5) for d in (-1, 0, 1)]
    seqs = []
    tokens_left, pages_left = NUM_TOKENS - 3, NUM_PAGES  # keep a few padding tokens
    for _ in range(rng.integers(3, NUM_SEQS + 1)):
        kind = rng.choice(["decode", "prefill", "empty"], p=[0.4, 0.45, 0.15])
        kv_len = int(rng.choice(boundary) if rng.random() < 0.5 else rng.integers(1, MAX_LEN + 1))
        if not seqs:
            kv_len = MAX_LEN  # reaches the table's last column
        if kind == "decode":
            q_len = 1
        elif kind == "prefill":
            q_len = int(rng.integers(1, min(kv_len, 14) + 1))
        else:
            q_len = 0
        q_len = min(q_len, tokens_left)
        if -(-kv_len // page_size) > pages_left:
            kv_len, q_len = 0, 0
        n_pages = -(-kv_len // page_size)
        tokens_left -= q_len
        pages_left -= n_pages
        seqs.append((q_len, kv_len, n_pages))
    perm = rng.permutation(NUM_PAGES)
    # Unused columns hold garbage, including out-of-range ids, which must be harmless.
    page_table = rng.integers(-2, NUM_PAGES + 3, size=(NUM_SEQS, max_pages)).astype(np.int32)
    kv_lens = np.zeros(NUM_SEQS, np.int32)
    cu = [0]
    used = 0
    seq_pages = []
    for s, (q_len, kv_len, n_pages) in enumerate(seqs):
        pages = perm[used : used + n_pages]
        used += n_pages
        page_table[s, :n_pages] = pages
        kv_lens[s] = kv_len
        cu.append(cu[-1] + q_len)
        seq_pages.append(pages)
    cu += [cu[-1]] * (NUM_SEQS - len(seqs))  # padding sequences: no tokens, kv_len 0
    return seqs, seq_pages, np.array(cu, np.int32), kv_lens, page_table


def fill_step(rng, page_size, row_shape, seqs, seq_pages):
    """Contiguous per-sequence cache rows; context rows pre-written, step rows left to write_kv.

    Returns (pages with garbage everywhere else, new rows [T, ...], slot_mapping, positions,
    contiguous rows per sequence).
    """
    pages = rng.uniform(-GARBAGE, GARBAGE, size=(NUM_PAGES, page_size, *row_shape))
    new = rng.uniform(-GARBAGE, GARBAGE, size=(NUM_TOKENS, *row_shape))  # padding rows: garbage
    slots = np.full(NUM_TOKENS, -1, np.int32)
    positions = rng.integers(0, MAX_LEN, NUM_TOKENS).astype(np.int32)  # padding: garbage
    rows = []
    t = 0
    for (q_len, kv_len, _), pg in zip(seqs, seq_pages, strict=True):
        seq_rows = rng.standard_normal((kv_len, *row_shape))
        rows.append(seq_rows)
        ctx = kv_len - q_len
        for j in range(ctx):
            pages[pg[j // page_size], j % page_size] = seq_rows[j]
        for j in range(ctx, kv_len):
            new[t] = seq_rows[j]
            slots[t] = pg[j // page_size] * page_size + j % page_size
            positions[t] = j
            t += 1
    return pages.astype(np.float32), new.astype(np.float32), slots, positions, rows
