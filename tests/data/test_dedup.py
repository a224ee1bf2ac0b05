"""Exact dedup: the first occurrence is kept, later copies name it, clusters are counted."""

from __future__ import annotations

from tokenmill.data.dedup import ExactDedup, text_digest


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
