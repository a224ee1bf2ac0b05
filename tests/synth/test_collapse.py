"""Collapse figures: distinct-n against an independent count, the tail of a real corpus, and a
degenerate distribution's tail mass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenmill.synth import collapse


def _docs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 12, size=int(rng.integers(0, 30))) for _ in range(25)]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_distinct_n_equals_a_count_of_tuples_inside_documents(n):
    docs = _docs()
    grams = [tuple(int(t) for t in d[i:i + n]) for d in docs for i in range(len(d) - n + 1)]
    assert collapse.distinct_n(docs, n) == pytest.approx(len(set(grams)) / len(grams))


def test_distinct_n_counts_no_ngram_across_a_document_boundary():
    # [1 2] + [3 4]: bigrams 12 and 34 only (no 23)
    assert collapse.distinct_n([np.array([1, 2]), np.array([3, 4])], 2) == 1.0
    assert collapse.distinct_n([np.array([5, 5, 5, 5])], 2) == pytest.approx(1 / 3)
    assert collapse.distinct_n([np.array([1])], 3) == 0.0


def test_distinct_n_tells_ids_apart_above_one_byte():
    assert collapse.distinct_n([np.array([256, 1, 1, 256])], 2) == 1.0


def test_tail_ids_are_the_rarest_tokens_holding_at_most_the_tail_share():
    reference = np.array([500, 0, 3, 40, 7, 300, 100, 50])  # 1000 tokens
    mask = collapse.tail_ids(reference, 0.1)
    # rarest first: id1 (0), id2 (3), id4 (7), id3 (40): 50 tokens; + id7 (50) = 100 <= 100
    assert sorted(np.flatnonzero(mask)) == [1, 2, 3, 4, 7]
    assert reference[mask].sum() <= 0.1 * reference.sum()
    assert not collapse.tail_ids(reference, 0.001)[[0, 5, 6]].any()


def test_tail_mass_of_a_degenerate_distribution():
    reference = np.array([0, 600, 250, 100, 40, 10])
    tail = collapse.tail_ids(reference, 0.05)  # ids 0, 5 and 4 (0 + 10 + 40 = 50 <= 50)
    head_only = collapse.collapse_metrics([np.full(200, 1)], 6, tail)  # one token, the most common
    assert head_only["tail_mass"] == 0.0 and head_only["vocab_used"] == 1 and head_only["entropy_bits"] == 0.0
    assert head_only["distinct_1"] == pytest.approx(1 / 200)
    tail_only = collapse.collapse_metrics([np.full(50, 5)], 6, tail)
    assert tail_only["tail_mass"] == 1.0
    as_real = collapse.collapse_metrics([np.repeat(np.arange(6), reference)], 6, tail)  # the reference itself
    assert as_real["tail_mass"] == pytest.approx(0.05)
    assert as_real["entropy_bits"] == pytest.approx(-sum(p * math.log2(p) for p in reference[1:] / 1000))


def test_cap_tokens_keeps_order_and_cuts_the_last_document():
    docs = [np.arange(5), np.arange(5, 12), np.arange(12, 20)]
    capped = collapse.cap_tokens(docs, 9)
    assert [d.tolist() for d in capped] == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]


def test_real_windows_match_the_lengths_asked_for_and_leave_out_eos(tmp_path):
    from tests.conftest import TINY_EOS, write_tiny_store
    from tokenmill.tokens.store import TokenStore

    write_tiny_store(tmp_path / "tokens")
    store = TokenStore(tmp_path / "tokens")
    windows = collapse.real_windows(store, ["a"], [5, 8, 8, 3], seed=1)
    assert [len(w) for w in windows] == [5, 8, 8, 3]
    assert all(TINY_EOS not in w for w in windows)
    assert [w.tolist() for w in windows] == [w.tolist() for w in collapse.real_windows(store, ["a"], [5, 8, 8, 3], 1)]
    counts = collapse.real_counts(store, ["a", "b"], skip=[TINY_EOS])
    assert counts[TINY_EOS] == 0 and counts.sum() == sum(store.n_tokens(b, "train") for b in "ab") - sum(
        s.n_docs for b in "ab" for s in store.shards(b, "train"))
