"""The hashed uni+bigram logistic regression: features, a real separation, determinism, AUC."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pydoc_data.topics import topics

from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers.ngram_lm import tokenize

from tests.data.page_chrome import CHROME


def boilerplate_docs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["\n".join(rng.choices(CHROME, k=rng.randint(15, 40))) for _ in range(n)]


def topic_passages() -> list[str]:
    out = []
    for name in sorted(topics):
        lines = topics[name].split("\n")
        out += ["\n".join(lines[i:i + 40]) for i in range(0, len(lines), 40)]
    return [p for p in out if len(p) > 200]


@pytest.fixture(scope="module")
def data():
    pos = [lc.features(tokenize(p)) for p in topic_passages()]
    neg = [lc.features(tokenize(d)) for d in boilerplate_docs(len(pos), seed=1)]
    return pos, neg


def test_features_are_unit_norm_sublinear_and_order_sensitive():
    idx, val = lc.features(["a", "b", "a", "b", "a"])
    assert np.all(np.diff(idx) > 0) and val.dtype == np.float32
    assert float(np.sqrt((val.astype(np.float64) ** 2).sum())) == pytest.approx(1.0, abs=1e-6)
    # tf: a 3, b 2, "a b" 2, "b a" 2 -> 1 + ln tf, normalized
    raw = np.array([1 + np.log(3), 1 + np.log(2), 1 + np.log(2), 1 + np.log(2)])
    assert sorted(val.tolist()) == pytest.approx(sorted(raw / np.linalg.norm(raw)), rel=1e-6)
    assert not np.array_equal(lc.features(["a", "b"])[0], lc.features(["b", "a"])[0])
    assert lc.features([])[0].size == 0


def test_separates_reference_prose_from_boilerplate_on_held_out_examples(data):
    pos, neg = data
    train = lambda xs: [x for i, x in enumerate(xs) if i % 5]  # noqa: E731
    test = lambda xs: [x for i, x in enumerate(xs) if not i % 5]  # noqa: E731
    model = lc.fit(train(pos), train(neg), seed=0)
    metrics = lc.evaluate(model, test(pos), test(neg))
    assert metrics["auc"] > 0.99 and metrics["balanced_accuracy"] > 0.95
    new_chrome = "\n".join(["Home", "Sign in", "Share on Facebook", "Related posts"] * 5)
    assert model.score(tokenize(topics["while"])) > 0.5 > model.score(tokenize(new_chrome))


def test_training_is_deterministic_and_seeded(data):
    pos, neg = data
    a = lc.fit(pos[:60], neg[:60], seed=0)
    b = lc.fit(pos[:60], neg[:60], seed=0)
    c = lc.fit(pos[:60], neg[:60], seed=1)
    assert np.array_equal(a.weights, b.weights) and a.bias == b.bias
    assert not np.array_equal(a.weights, c.weights)  # the seed orders the batches
    arrays = a.to_arrays()
    assert all(x.dtype != object for x in arrays.values())
    again = lc.LinearClassifier.from_arrays(arrays)
    assert again.score(tokenize(topics["if"])) == a.score(tokenize(topics["if"]))


def test_class_balanced_loss_keeps_scores_centered_under_imbalance(data):
    """With 10x more negatives the balanced loss still puts P(ref) of a neutral input near 1/2."""
    pos, neg = data
    model = lc.fit(pos[:20], neg[:200], seed=0)
    assert 0.2 < model.score([]) < 0.8  # no features: the bias alone


def test_auc_equals_pairwise_count():
    model = lc.LinearClassifier(np.zeros(1 << 4, np.float32), 0.0, dim_bits=4)
    model.weights[:] = np.arange(16) - 8.0
    rng = np.random.default_rng(0)
    docs = [(np.array([i]), np.array([1.0], np.float32)) for i in rng.integers(0, 16, 30)]
    pos, neg = docs[:12], docs[12:]
    sp = [model.score_features(*x) for x in pos]
    sn = [model.score_features(*x) for x in neg]
    pairs = [(a > b) + 0.5 * (a == b) for a in sp for b in sn]
    assert lc.evaluate(model, pos, neg)["auc"] == pytest.approx(np.mean(pairs))


def test_needs_both_classes(data):
    pos, _ = data
    with pytest.raises(ValueError, match="both classes"):
        lc.fit(pos, [])
