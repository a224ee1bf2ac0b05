"""Radix selection of the top p% of 128-bit keys equals sorting every key, for any split into
parts, with ties in score broken by the id's hash; score keys sort like the floats."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.data.classifiers import top_percent as tp


def _brute(scores, lo, k):
    order = sorted(range(len(scores)), key=lambda i: (scores[i], int(lo[i])), reverse=True)
    return set(order[:k])


@pytest.mark.parametrize("kind", ["uniform", "rounded", "constant", "normal", "tiny"])
def test_selection_equals_sorting_every_key(kind):
    rng = np.random.default_rng(["uniform", "rounded", "constant", "normal", "tiny"].index(kind))
    n = 1500
    scores = {"uniform": rng.random(n), "rounded": np.round(rng.random(n), 2), "constant": np.full(n, 0.5),
              "normal": rng.normal(size=n), "tiny": rng.random(n) * 1e-6}[kind]
    hi, lo = tp.score_keys(scores), tp.id_keys([f"doc-{i}" for i in range(n)])
    for parts in (1, 3, 7):
        split = np.array_split(np.arange(n), parts)
        for percent in (0.05, 10, 33.3, 50, 99.99, 100):
            cut, k, passes = tp.select(lambda pre: sum(tp.histogram(hi[ix], lo[ix], pre) for ix in split), n, percent)
            assert k == tp.keep_count(n, percent) and 1 <= passes <= tp.LEVELS
            assert set(np.nonzero(tp.kept(hi, lo, cut))[0]) == _brute(scores, lo, k)


def test_score_keys_sort_like_the_floats_and_invert():
    from tokenmill.data.classifiers.classifier_cut import _score_of

    xs = np.array([-3.5, -1e-300, -0.0, 0.0, 1e-300, 0.25, 0.5, 1.0, 7e10])
    keys = tp.score_keys(xs)
    assert list(np.argsort(keys, kind="stable")) == list(range(len(xs)))
    assert [_score_of(int(k)) for k in keys] == list(xs)


def test_keep_count_and_empty_sets():
    assert tp.keep_count(1000, 10) == 100 and tp.keep_count(101, 25) == 26 and tp.keep_count(3, 0.001) == 1
    assert tp.select(lambda pre: np.zeros(tp.DIGITS, dtype=np.int64), 0, 10) == (None, 0, 0)
    assert tp.kept(np.zeros(2, dtype=np.uint64), np.zeros(2, dtype=np.uint64), None).all()
