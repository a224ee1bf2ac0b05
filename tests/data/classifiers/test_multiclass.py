"""Softmax regression over hashed features: separable classes, calibration sums, exact AUC, round trip."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers import multiclass as mc
from tokenmill.data.classifiers.ngram_lm import tokenize

VOCAB = {
    "code": "def return import class self lambda yield print none true".split(),
    "cooking": "flour butter oven bake sugar salt whisk simmer garlic onion".split(),
    "sport": "goal match team score league coach referee season striker pitch".split(),
}


def _texts(label: str, n: int, offset: int = 0) -> list[str]:
    words = VOCAB[label]
    return [" ".join(words[(i * 7 + j * 3 + offset) % len(words)] for j in range(12)) for i in range(n)]


def _dataset(n: int = 20, offset: int = 0) -> tuple[list[mc.Features], list[str]]:
    xs, ys = [], []
    for label in VOCAB:
        for t in _texts(label, n, offset):
            xs.append(lc.features(tokenize(t), mc.DIM_BITS))
            ys.append(label)
    return xs, ys


def test_separable_classes_are_learned_exactly():
    model = mc.fit(*_dataset())
    report = mc.evaluate(model, *_dataset(10, offset=5))
    assert model.labels == sorted(VOCAB)
    assert report["accuracy"] == 1.0 and report["macro_auc"] == 1.0
    assert np.trace(np.array(report["confusion"])) == report["examples"] == 30


def test_probabilities_sum_to_one_and_training_repeats_bit_for_bit():
    xs, ys = _dataset()
    a, b = mc.fit(xs, ys, seed=3), mc.fit(xs, ys, seed=3)
    assert np.array_equal(a.weights, b.weights) and np.array_equal(a.bias, b.bias)
    p = a.predict_proba(tokenize("bake the flour in the oven, then score a goal"))
    assert p.shape == (3,) and abs(p.sum() - 1.0) < 1e-12 and (p > 0).all()


def test_auc_equals_pairwise_count():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 30).astype(float)  # many ties
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p, q in itertools.product(pos, neg))
    assert mc.rank_auc(pos, neg) == pytest.approx(wins / (pos.size * neg.size), abs=1e-12)
    assert mc.rank_auc(pos, np.array([])) is None


def test_confusion_rows_are_true_labels_and_unknown_labels_are_errors():
    model = mc.fit(*_dataset())
    xs = [lc.features(tokenize(t), mc.DIM_BITS) for t in _texts("code", 3) + _texts("sport", 2)]
    report = mc.evaluate(model, xs, ["code"] * 3 + ["poetry"] * 2)
    assert report["labels"] == [*sorted(VOCAB), "poetry"]
    conf = np.array(report["confusion"])
    assert conf[0, 0] == 3 and conf[3].sum() == 2 and conf[3, 2] == 2
    assert report["accuracy"] == pytest.approx(0.6)
    assert report["auc"]["cooking"] is None


def test_arrays_round_trip_without_pickle(tmp_path):
    model = mc.fit(*_dataset())
    np.savez(tmp_path / "m.npz", **model.to_arrays())
    with np.load(tmp_path / "m.npz", allow_pickle=False) as npz:
        back = mc.MulticlassClassifier.from_arrays({k: npz[k] for k in npz.files})
    tokens = tokenize(_texts("sport", 1)[0])
    assert back.labels == model.labels and np.array_equal(back.predict_proba(tokens), model.predict_proba(tokens))


def test_one_class_is_refused():
    xs, _ = _dataset(3)
    with pytest.raises(ValueError, match="two or more classes"):
        mc.fit(xs, ["a"] * len(xs))


def test_held_out_split_depends_on_text_only():
    texts = [f"passage number {i}" for i in range(2000)]
    chosen = [t for t in texts if mc.held_out(t, 10)]
    assert 150 < len(chosen) < 250 and chosen == [t for t in reversed(texts) if mc.held_out(t, 10)][::-1]
