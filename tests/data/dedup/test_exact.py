"""Exact dedup: the first occurrence is kept, later copies name it, clusters are counted; the
reducer form (keys in canonical order) decides exactly as the streaming form."""

from __future__ import annotations

import numpy as np

from tokenmill.data.dedup.exact import ExactDedup, duplicate_rejection, exact_key, first_occurrence, text_digest


def test_keeps_first_and_names_it():
    d = ExactDedup()
    assert d.check("a", "same text") is None
    assert d.check("b", "other text") is None
    r = d.check("c", "same text")
    assert r is not None and r.step == "exact_dedup" and r.rule == "duplicate_of" and r.value == "a"
    assert d.check("d", "same text").value == "a"
    assert d.duplicates == {"a": 2}
    assert d.n_kept == 2 and d.n_removed == 2
    assert d.cluster_of("a") == "a" and d.cluster_of("b") is None


def test_order_decides_who_is_kept():
    first, second = ExactDedup(), ExactDedup()
    first.check("x", "t"), first.check("y", "t")
    second.check("y", "t"), second.check("x", "t")
    assert first.cluster_of("x") == "x" and second.cluster_of("y") == "y"


def test_exact_means_exact():
    d = ExactDedup()
    assert d.check("a", "Hello world") is None
    assert d.check("b", "Hello world.") is None
    assert d.check("c", "hello world") is None


def test_same_input_listed_twice_is_still_a_duplicate():
    d = ExactDedup()
    assert d.check("a", "t") is None
    assert d.check("a", "t").value == "a"


def test_digest_is_128_bit_and_stable():
    assert len(text_digest("x")) == 16
    assert text_digest("x") == text_digest("x") != text_digest("y")


def test_exact_key_is_the_digest_of_the_text():
    assert exact_key("x") == text_digest("x") and len(exact_key("")) == 16
    assert exact_key("a\ud800") != exact_key("a")  # a lone surrogate hashes instead of raising


def test_first_occurrence_keeps_the_first_in_canonical_order():
    texts = ["a", "b", "a", "c", "b", "a", "a "]
    keys = [exact_key(t) for t in texts]
    expected = [texts.index(t) for t in texts]  # independent: first index of an equal text
    assert first_occurrence(keys).tolist() == expected == [0, 1, 0, 3, 1, 0, 6]
    as_array = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, 16)
    assert first_occurrence(as_array).tolist() == expected
    assert first_occurrence([]).tolist() == []


def test_streaming_and_reducer_forms_agree():
    texts = ["x", "y", "x", "z", "y", "x"]
    d = ExactDedup()
    kept = [d.check(str(i), t) is None for i, t in enumerate(texts)]
    roots = first_occurrence([exact_key(t) for t in texts])
    assert kept == (roots == np.arange(len(texts))).tolist()
    assert duplicate_rejection("0") == d.check("9", "x")
