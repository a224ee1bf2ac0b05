"""Non-words near the reference's words (data.classifiers.nonwords), with an LM trained on Python's
own reference topics: misspelt words are found by each kind of edit, known and far words are not,
and a held-out topic scores far below the same topic with letters changed by our own generic
corruption (no benchmark's)."""

from __future__ import annotations

import random

import pytest

from tokenmill.data.classifiers import ngram_lm
from tokenmill.data.classifiers.nonwords import MIN_WORDS, NearWords


@pytest.fixture(scope="module")
def topics() -> tuple[NearWords, list[str]]:
    import pydoc_data.topics as t

    keys = sorted(t.topics)
    lm = ngram_lm.train((ngram_lm.tokenize(t.topics[k]) for i, k in enumerate(keys) if i % 8), 3)
    held = [t.topics[k] for i, k in enumerate(keys) if i % 8 == 0 and len(t.topics[k]) > 3000]
    return NearWords(lm), held


def _misspelt(text: str, seed: int, share: float) -> str:
    """Each word of 4+ letters, with probability `share`, gets one letter replaced by another at random."""
    rng = random.Random(seed)

    def one(word: str) -> str:
        if len(word) < 4 or not word.isalpha() or rng.random() >= share:
            return word
        i = rng.randrange(len(word))
        return word[:i] + rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != word[i].lower()]) + word[i + 1 :]

    return " ".join(one(w) for w in text.split(" "))


def test_every_kind_of_one_edit_is_a_near_miss(topics):
    near, _ = topics
    assert "function" in near.common and not near.near_miss("function")  # a known word
    for typo in ("functoin", "functiom", "functio", "functionn", "fnction"):
        assert near.near_miss(typo), typo
    assert not near.near_miss("zqxvjk") and not near.near_miss("kwyjibo")  # far from every common word


def test_a_held_out_topic_scores_low_and_its_misspelling_high(topics):
    near, held = topics
    assert len(held) >= 5
    for i, text in enumerate(held):
        clean = near.frac(ngram_lm.tokenize(text))
        bad = near.frac(ngram_lm.tokenize(_misspelt(text, i, 0.5)))
        assert clean is not None and bad is not None
        assert clean < 0.1 and bad > 0.15 and bad > 4 * clean, (clean, bad)


def test_short_text_is_not_measured(topics):
    near, held = topics
    words = [w for w in ngram_lm.tokenize(held[0]) if len(w) >= 4 and w.isalpha()]
    assert near.frac(words[: MIN_WORDS - 1]) is None and near.frac(words[:MIN_WORDS]) is not None


def test_a_hostile_endless_word_costs_one_length_check(topics):
    """A million-letter "word" is never expanded into its deletions (which would be a terabyte)."""
    near, _ = topics
    giant = "function" * 125_000
    assert not near.near_miss(giant)
    assert near.frac(["functoin"] * 100 + [giant]) == 100 / 101  # counted as a word, never as a near-miss
    assert near.max_len == max(map(len, near.common)) + 1
