"""Garbled words: rare one-letter variants of a text's own common words (data/steps/garble.py)."""

from __future__ import annotations

import random

import pytest

from tokenmill.data.config import CurateConfig, QualityConfig
from tokenmill.data.document import Doc
from tokenmill.data.steps.garble import MIN_WORDS, near_miss_word_frac
from tokenmill.data.steps.quality import Quality, quality_signals
from tests.data.steps.test_text_kinds import EMMA_PROSE

# Python's language reference on assignment (1,709 words of technical English), from the stdlib.
ASSIGNMENT = __import__("pydoc_data.topics", fromlist=["topics"]).topics["assignment"]


def _misspell(text: str, share: float, seed: int = 3) -> str:
    """Replace one letter of `share` of the words of 3+ letters, as a scanner's look-alikes do."""
    rng, out = random.Random(seed), []
    for word in text.split(" "):
        if len(word) >= 3 and word.isalpha() and rng.random() < share:
            i = rng.randrange(len(word))
            word = word[:i] + {"e": "c", "l": "1", "o": "0", "h": "b"}.get(word[i], "x") + word[i + 1 :]
        out.append(word)
    return " ".join(out)


def test_clean_prose_spells_its_words_one_way():
    assert len(EMMA_PROSE.split()) >= MIN_WORDS
    assert near_miss_word_frac(EMMA_PROSE.split()) < 0.02


def test_misspelt_common_words_are_counted():
    assert near_miss_word_frac(ASSIGNMENT.split()) < 0.02
    rates = [near_miss_word_frac(_misspell(ASSIGNMENT, share).split()) for share in (0.1, 0.2, 0.3)]
    assert rates == sorted(rates) and rates[-1] > QualityConfig().max_near_miss_word_frac  # 0.037, 0.066, 0.081


def test_a_rare_inflection_is_not_a_variant_and_short_texts_are_not_judged():
    words = ("the file is here and the file is there " * 12 + "files filed").split()
    assert near_miss_word_frac(words) == 0.0  # 'files' adds a letter: not a substitution
    assert near_miss_word_frac(("the thc tbe " * 10).split()) == 0.0  # 30 words: too few to judge
    words = ("the cat sat on the mat and the dog " * 12 + "thc tbe").split()
    assert near_miss_word_frac(words) == pytest.approx(2 / len(words))


@pytest.mark.parametrize("kind,rule", [("prose", "max_near_miss_word_frac"), ("reference", "max_near_miss_word_frac"),
                                       ("web", "max_near_miss_word_frac"), ("code", None)])
def test_every_kind_but_code_is_judged(kind, rule):
    doc = Doc(id="d", text=_misspell(ASSIGNMENT, 0.3), source="s", url="u", bucket="b", license="l", format="text", kind=kind)
    rejection = Quality(CurateConfig(quality=QualityConfig(gopher=False, c4=False, fineweb=False))).process(doc)
    assert (rejection.rule if rejection else None) == rule
    assert "near_miss_word_frac" in quality_signals(doc.text or "")


def test_the_rule_can_be_turned_off():
    doc = Doc(id="d", text=_misspell(ASSIGNMENT, 0.3), source="s", url="u", bucket="b", license="l", format="text", kind="prose")
    off = QualityConfig(garble=False, gopher=False, c4=False, fineweb=False)
    assert Quality(CurateConfig(quality=off)).process(doc) is None


def _naive(words: list[str]) -> float:
    """The definition, word against word: one substitution apart, the common one RATIO times as frequent."""
    from collections import Counter

    from tokenmill.data.steps.garble import COMMON, RATIO, _EDGE_PUNCT

    keys = [k for k in (_EDGE_PUNCT.sub("", w).lower() for w in words) if len(k) >= 2]
    if len(keys) < MIN_WORDS:
        return 0.0
    c = Counter(keys)
    hit = {v for v in c for w in c if len(v) >= 3 and len(w) >= 3 and c[w] >= COMMON and c[w] >= RATIO * c[v]
           and len(v) == len(w) and sum(a != b for a, b in zip(v, w)) == 1}
    return sum(c[v] for v in hit) / len(keys)


@pytest.mark.parametrize("seed", range(6))
def test_the_half_index_finds_exactly_what_the_definition_says(seed):
    rng = random.Random(seed)
    vocab = ["the", "thc", "tbe", "and", "anb", "of", "0f", "river", "rivcr", "mill", "mi1l", "(the", "The,",
             "town", "t0wn", "__x", "a", "x_y", "é", "ét", "et"]
    words = [rng.choice(vocab[: rng.randrange(4, len(vocab))]) for _ in range(rng.randrange(50, 400))]
    assert near_miss_word_frac(words) == pytest.approx(_naive(words))
