"""The word-order test (data.classifiers.word_order) on an LM trained on Python's own reference
topics, which every Python ships: natural text shows its order, the same words shuffled do not,
and the level it is cut at holds roughly on shuffles of many passages."""

from __future__ import annotations

import random
from statistics import NormalDist

import numpy as np
import pytest

from tokenmill.data.classifiers import ngram_lm
from tokenmill.data.classifiers import word_order as wo


@pytest.fixture(scope="module")
def topics() -> tuple[ngram_lm.NgramLM, list[str]]:
    """An LM of 7 in 8 topics, and the prose paragraphs (>= 400 characters) of the topics left out."""
    import pydoc_data.topics as t

    keys = sorted(t.topics)
    lm = ngram_lm.train((ngram_lm.tokenize(t.topics[k]) for i, k in enumerate(keys) if i % 8), 3)
    held = [p for i, k in enumerate(keys) if i % 8 == 0 for p in t.topics[k].split("\n\n")]
    return lm, [" ".join(p.split()) for p in held if len(p) >= 400 and p.count(". ") >= 2]


def _shuffled(text: str, seed: int) -> str:
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


def test_judged_words_are_the_most_probable_tokens_with_a_letter(topics):
    lm, _ = topics
    judged = wo.judged_words(lm, 50)
    assert judged.sum() == 50
    words = [w for w, j in zip(lm.vocab, judged) if j]
    assert all(any(c.isalpha() for c in w) for w in words) and "the" in words
    assert not judged[[ngram_lm.UNK_ID, ngram_lm.BOS_ID, ngram_lm.EOS_ID]].any()
    ids = lm.encode([",", ".", "(", "0"])
    assert not judged[ids].any()
    cut = min(lm.uni_logp[i] for i, j in enumerate(judged) if j)
    assert all(lm.uni_logp[i] <= cut for i, w in enumerate(lm.vocab) if not judged[i] and w.isalpha() and i > 2)


def test_prose_shows_its_order_and_its_shuffles_do_not(topics):
    lm, paragraphs = topics
    judged = wo.judged_words(lm, 1000)
    crit = wo.critical_z(0.01)
    assert crit == pytest.approx(NormalDist().inv_cdf(0.99))
    clean = [wo.order_test(lm, ngram_lm.tokenize(p), judged, 20) for p in paragraphs]
    clean_z = [t.z for t in clean if t is not None]
    salad = [wo.order_test(lm, ngram_lm.tokenize(_shuffled(p, seed)), judged, 20) for p in paragraphs for seed in range(10)]
    salad_z = [t.z for t in salad if t is not None]
    assert len(clean_z) >= 15 and len(salad_z) >= 150
    assert np.mean([z >= crit for z in clean_z]) >= 0.9, clean_z  # held-out topics of the same manual pass
    # Shuffled words: z centred near 0 and above the 0.01 cut about as rarely as the level says
    assert abs(float(np.median(salad_z))) < 0.75 and np.mean([z >= crit for z in salad_z]) <= 0.05, sorted(salad_z)
    assert all(t.gain > 0 for t in clean if t is not None and t.z >= crit)


def test_same_text_same_answer_and_too_few_pairs_is_no_answer(topics):
    lm, paragraphs = topics
    judged = wo.judged_words(lm, 1000)
    a = wo.order_test(lm, ngram_lm.tokenize(paragraphs[0]), judged, 20)
    b = wo.order_test(lm, ngram_lm.tokenize(paragraphs[0]), judged, 20)
    assert a == b and a is not None and a.pairs >= 20
    assert wo.order_test(lm, ngram_lm.tokenize("the object is"), judged, 20) is None
    # One word a line: pairs never cross a line end, so there is nothing to test
    one_per_line = "\n".join(paragraphs[0].split())
    assert wo.order_test(lm, ngram_lm.tokenize(one_per_line), judged, 1) is None


def test_punctuation_is_not_paired(topics):
    """A word followed by a comma, over and over: the pairs are word-comma, which say nothing."""
    lm, _ = topics
    judged = wo.judged_words(lm, 1000)
    text = ", ".join(["the", "object", "is", "a", "value"] * 20)
    assert wo.order_test(lm, ngram_lm.tokenize(text), judged, 1) is None


def test_null_sources_stay_near_and_never_pick_the_pair_itself():
    rng = np.random.default_rng(0)
    j = wo._null_sources(500, rng)
    i = np.arange(500)
    assert j.shape == (wo.DRAWS, 500)
    assert (np.abs(j - i) >= 1).all() and (np.abs(j - i) <= wo.WINDOW).all()
    assert ((j >= 0) & (j < 500)).all()


def test_one_pair_is_no_test(topics):
    lm, _ = topics
    judged = wo.judged_words(lm, 1000)
    assert wo.order_test(lm, ngram_lm.tokenize("the object"), judged, 1) is None
